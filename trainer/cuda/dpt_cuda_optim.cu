// dpt_cuda_optim.cu — the fused optimizer kernel (see dpt_cuda_optim.h).
//
// One block per chunk of dpt_optim_layout (a chunk never crosses a segment, so the block
// reads its copy rule once).  Each element: g' = g + wd*w (mask), v = m*v + g',
// w -= lr*(nesterov ? g' + m*v : v) with explicitly rounded multiplies and adds
// (__fmul_rn / __fadd_rn: no FMA contraction, the host reference's rounding), then the
// copy element written in the compute type.  The learning rate may come from device memory
// and the whole step is skipped when the overflow flag is set, so a captured CUDA graph
// replays it unchanged every step.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <string.h>

#include "dpt_cuda_optim.h"

template <int DT> __device__ static inline void store_copy(void *copy, unsigned long long d, float x);
template <> __device__ inline void store_copy<DPT_OPT_F32>(void *copy, unsigned long long d, float x)
{
  static_cast<float *>(copy)[d] = x;
}
template <> __device__ inline void store_copy<DPT_OPT_F16>(void *copy, unsigned long long d, float x)
{
  static_cast<__half *>(copy)[d] = __float2half_rn(x);
}
template <> __device__ inline void store_copy<DPT_OPT_BF16>(void *copy, unsigned long long d, float x)
{
  static_cast<__nv_bfloat16 *>(copy)[d] = __float2bfloat16_rn(x);
}

template <int DT>
__global__ static void dpt_k_optim_step(const struct dpt_optim_seg *segs, const struct dpt_optim_chunk *chunks,
                                        struct dpt_cuda_optim_args a)
{
  if (!a.copy_only && a.skip && *a.skip) return;
  const float lr = a.lr_dev ? *a.lr_dev : a.lr;
  const struct dpt_optim_chunk ch = chunks[blockIdx.x];
  const struct dpt_optim_seg sg = segs[ch.seg];
  for (unsigned int j = threadIdx.x; j < ch.len; j += blockDim.x) {
    const unsigned long long i = ch.start + j;
    const float wi = a.w[i];
    if (a.copy_only) {
      if (sg.kind != DPT_OSEG_NONE && a.copy) store_copy<DT>(a.copy, dpt_optim_dst(&sg, i), wi);
      continue;
    }
    const float dec = (!a.mask || a.mask[i]) ? __fmul_rn(a.weight_decay, wi) : 0.0f;
    const float gi = __fadd_rn(a.g[i], dec);
    const float vi = __fadd_rn(__fmul_rn(a.momentum, a.v[i]), gi);
    a.v[i] = vi;
    const float step = a.nesterov ? __fadd_rn(gi, __fmul_rn(a.momentum, vi)) : vi;
    const float wn = __fsub_rn(wi, __fmul_rn(lr, step));
    a.w[i] = wn;
    if (sg.kind != DPT_OSEG_NONE && a.copy) store_copy<DT>(a.copy, dpt_optim_dst(&sg, i), wn);
  }
}

// ---- LARS ----------------------------------------------------------------------------------

#define DPT_LARS_THREADS 256

// Per chunk: sum w^2 and g^2 in double (a fixed-order tree over the block); 0 for skipped tensors.
__global__ static void dpt_k_lars_partials(const struct dpt_optim_lars_chunk *chunks,
                                           const struct dpt_optim_lars_tensor *tensors, double *partial,
                                           struct dpt_cuda_optim_args a)
{
  __shared__ double sw[DPT_LARS_THREADS], sg[DPT_LARS_THREADS];
  if (a.skip && *a.skip) return;
  const struct dpt_optim_lars_chunk ch = chunks[blockIdx.x];
  double ww = 0.0, gg = 0.0;
  if (!tensors[ch.tensor].skip)
    for (unsigned int j = threadIdx.x; j < ch.len; j += blockDim.x) {
      const double w = a.w[ch.start + j], g = a.g[ch.start + j];
      ww += w * w;
      gg += g * g;
    }
  sw[threadIdx.x] = ww;
  sg[threadIdx.x] = gg;
  __syncthreads();
  for (unsigned int h = blockDim.x / 2; h > 0; h /= 2) {
    if (threadIdx.x < h) {
      sw[threadIdx.x] += sw[threadIdx.x + h];
      sg[threadIdx.x] += sg[threadIdx.x + h];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    partial[2 * blockIdx.x] = sw[0];
    partial[2 * blockIdx.x + 1] = sg[0];
  }
}

// Per tensor: its chunks' partials in chunk order, the trust ratio as dpt_lars_step computes it.
__global__ static void dpt_k_lars_ratios(const struct dpt_optim_lars_tensor *tensors, int n_tensor,
                                         const double *partial, float *ratio, float eta, float eps,
                                         struct dpt_cuda_optim_args a)
{
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n_tensor || (a.skip && *a.skip)) return;
  const struct dpt_optim_lars_tensor T = tensors[t];
  float r = 1.0f;
  if (!T.skip) {
    double ww = 0.0, gg = 0.0;
    for (int c = T.first_chunk; c < T.first_chunk + T.n_chunk; c++) {
      ww += partial[2 * c];
      gg += partial[2 * c + 1];
    }
    const double wn = sqrt(ww), gn = sqrt(gg);
    if (wn > 0 && gn > 0) r = (float)((double)eta * wn / (gn + (double)a.weight_decay * wn + (double)eps));
  }
  ratio[t] = r;
}

// Per chunk: g' = g + wd w (not skipped), v = m v - lr r g', w += v (nesterov: m v - lr r g'),
// explicitly rounded (no FMA contraction), then the weight copy.
template <int DT>
__global__ static void dpt_k_lars_update(const struct dpt_optim_seg *segs, const struct dpt_optim_lars_chunk *chunks,
                                         const struct dpt_optim_lars_tensor *tensors, const float *ratio,
                                         struct dpt_cuda_optim_args a)
{
  if (a.skip && *a.skip) return;
  const float lr = a.lr_dev ? *a.lr_dev : a.lr;
  const struct dpt_optim_lars_chunk ch = chunks[blockIdx.x];
  const struct dpt_optim_seg sg = segs[ch.seg];
  const float lt = __fmul_rn(lr, ratio[ch.tensor]), dec = tensors[ch.tensor].skip ? 0.0f : a.weight_decay;
  for (unsigned int j = threadIdx.x; j < ch.len; j += blockDim.x) {
    const unsigned long long i = ch.start + j;
    const float wi = a.w[i];
    const float gi = __fadd_rn(a.g[i], __fmul_rn(dec, wi));
    const float vi = __fsub_rn(__fmul_rn(a.momentum, a.v[i]), __fmul_rn(lt, gi));
    a.v[i] = vi;
    const float step = a.nesterov ? __fsub_rn(__fmul_rn(a.momentum, vi), __fmul_rn(lt, gi)) : vi;
    const float wn = __fadd_rn(wi, step);
    a.w[i] = wn;
    if (sg.kind != DPT_OSEG_NONE && a.copy) store_copy<DT>(a.copy, dpt_optim_dst(&sg, i), wn);
  }
}

// ---- RMSprop warm-up -----------------------------------------------------------------------

template <int DT>
__global__ static void dpt_k_rmsw_step(const struct dpt_optim_seg *segs, const struct dpt_optim_chunk *chunks,
                                       struct dpt_cuda_optim_args a, float *m, float alpha, float alpha_rms, float mu2,
                                       float eps)
{
  if (a.skip && *a.skip) return;
  const struct dpt_optim_chunk ch = chunks[blockIdx.x];
  const struct dpt_optim_seg sg = segs[ch.seg];
  const float om = __fsub_rn(1.0f, mu2);
  for (unsigned int j = threadIdx.x; j < ch.len; j += blockDim.x) {
    const unsigned long long i = ch.start + j;
    const float wi = a.w[i];
    const float dec = (!a.mask || a.mask[i]) ? __fmul_rn(a.weight_decay, wi) : 0.0f;
    const float gi = __fadd_rn(a.g[i], dec);
    const float mi = __fadd_rn(__fmul_rn(mu2, m[i]), __fmul_rn(om, __fmul_rn(gi, gi)));
    m[i] = mi;
    const float scale = __fadd_rn(alpha, __fdiv_rn(alpha_rms, __fadd_rn(__fsqrt_rn(mi), eps)));
    const float di = __fsub_rn(__fmul_rn(a.momentum, a.v[i]), __fmul_rn(gi, scale));
    a.v[i] = di;
    const float wn = __fadd_rn(wi, __fmul_rn(a.lr, di));
    a.w[i] = wn;
    if (sg.kind != DPT_OSEG_NONE && a.copy) store_copy<DT>(a.copy, dpt_optim_dst(&sg, i), wn);
  }
}

extern "C" {

int dpt_cuda_rmsw_step(const struct dpt_cuda_optim_tables *t, const struct dpt_cuda_optim_args *a, float *m, float alpha,
                       float alpha_rms, float mu2, float eps, cudaStream_t s)
{
  if (!t->n_chunk) return (int)cudaGetLastError();
  dim3 grid((unsigned)t->n_chunk), block(256);
  switch (t->dtype) {
  case DPT_OPT_F16: dpt_k_rmsw_step<DPT_OPT_F16><<<grid, block, 0, s>>>(t->seg, t->chunk, *a, m, alpha, alpha_rms, mu2, eps); break;
  case DPT_OPT_BF16: dpt_k_rmsw_step<DPT_OPT_BF16><<<grid, block, 0, s>>>(t->seg, t->chunk, *a, m, alpha, alpha_rms, mu2, eps); break;
  default: dpt_k_rmsw_step<DPT_OPT_F32><<<grid, block, 0, s>>>(t->seg, t->chunk, *a, m, alpha, alpha_rms, mu2, eps); break;
  }
  return (int)cudaGetLastError();
}


int dpt_cuda_lars_upload(const struct dpt_optim_lars *l, float eta, float eps, struct dpt_cuda_lars_tables *t,
                         cudaStream_t s)
{
  const size_t tb = (size_t)l->n_tensor * sizeof *l->tensor, cb = (size_t)l->n_chunk * sizeof *l->chunk;
  const size_t o_chunk = (tb + 255) / 256 * 256, o_part = o_chunk + (cb + 255) / 256 * 256;
  const size_t o_ratio = o_part + ((size_t)l->n_chunk * 2 * sizeof(double) + 255) / 256 * 256;
  const size_t total = o_ratio + (size_t)l->n_tensor * sizeof(float) + 1;
  cudaError_t e;
  memset(t, 0, sizeof *t);
  if ((e = cudaMalloc(&t->mem, total)) != cudaSuccess) {
    t->mem = NULL;
    return (int)e;
  }
  char *base = (char *)t->mem;
  t->tensor = (struct dpt_optim_lars_tensor *)base;
  t->chunk = (struct dpt_optim_lars_chunk *)(base + o_chunk);
  t->partial = (double *)(base + o_part);
  t->ratio = (float *)(base + o_ratio);
  if ((tb && (e = cudaMemcpyAsync(t->tensor, l->tensor, tb, cudaMemcpyHostToDevice, s)) != cudaSuccess) ||
      (cb && (e = cudaMemcpyAsync(t->chunk, l->chunk, cb, cudaMemcpyHostToDevice, s)) != cudaSuccess) ||
      (e = cudaStreamSynchronize(s)) != cudaSuccess) { /* the host tables may go once this returns */
    cudaFree(t->mem);
    memset(t, 0, sizeof *t);
    return (int)e;
  }
  t->n_tensor = l->n_tensor;
  t->n_chunk = l->n_chunk;
  t->eta = eta;
  t->eps = eps;
  return 0;
}

void dpt_cuda_lars_tables_free(struct dpt_cuda_lars_tables *t)
{
  if (t && t->mem) cudaFree(t->mem);
  if (t) memset(t, 0, sizeof *t);
}

int dpt_cuda_lars_step(const struct dpt_cuda_optim_tables *t, const struct dpt_cuda_lars_tables *lt,
                       const struct dpt_cuda_optim_args *a, cudaStream_t s)
{
  if (!lt->n_chunk) return (int)cudaGetLastError();
  dim3 grid((unsigned)lt->n_chunk), block(DPT_LARS_THREADS);
  dpt_k_lars_partials<<<grid, block, 0, s>>>(lt->chunk, lt->tensor, lt->partial, *a);
  dpt_k_lars_ratios<<<(lt->n_tensor + 127) / 128, 128, 0, s>>>(lt->tensor, lt->n_tensor, lt->partial, lt->ratio, lt->eta,
                                                                 lt->eps, *a);
  switch (t->dtype) {
  case DPT_OPT_F16: dpt_k_lars_update<DPT_OPT_F16><<<grid, block, 0, s>>>(t->seg, lt->chunk, lt->tensor, lt->ratio, *a); break;
  case DPT_OPT_BF16: dpt_k_lars_update<DPT_OPT_BF16><<<grid, block, 0, s>>>(t->seg, lt->chunk, lt->tensor, lt->ratio, *a); break;
  default: dpt_k_lars_update<DPT_OPT_F32><<<grid, block, 0, s>>>(t->seg, lt->chunk, lt->tensor, lt->ratio, *a); break;
  }
  return (int)cudaGetLastError();
}


int dpt_cuda_optim_upload(const struct dpt_optim_layout *lay, struct dpt_cuda_optim_tables *t, cudaStream_t s)
{
  size_t sb = (size_t)lay->n_seg * sizeof(struct dpt_optim_seg), cb = (size_t)lay->n_chunk * sizeof(struct dpt_optim_chunk);
  size_t off = (sb + 255) / 256 * 256;
  cudaError_t e;
  t->mem = NULL;
  t->seg = NULL;
  t->chunk = NULL;
  t->n_seg = t->n_chunk = 0;
  if ((e = cudaMalloc(&t->mem, off + (cb ? cb : 1))) != cudaSuccess) {
    t->mem = NULL;
    return (int)e;
  }
  t->seg = (struct dpt_optim_seg *)t->mem;
  t->chunk = (struct dpt_optim_chunk *)((char *)t->mem + off);
  if ((sb && (e = cudaMemcpyAsync(t->seg, lay->seg, sb, cudaMemcpyHostToDevice, s)) != cudaSuccess) ||
      (cb && (e = cudaMemcpyAsync(t->chunk, lay->chunk, cb, cudaMemcpyHostToDevice, s)) != cudaSuccess) ||
      (e = cudaStreamSynchronize(s)) != cudaSuccess) { /* the host tables may go once this returns */
    cudaFree(t->mem);
    t->mem = NULL;
    return (int)e;
  }
  t->n_seg = lay->n_seg;
  t->n_chunk = lay->n_chunk;
  t->dtype = lay->dtype;
  return 0;
}

void dpt_cuda_optim_tables_free(struct dpt_cuda_optim_tables *t)
{
  if (t && t->mem) cudaFree(t->mem);
  if (t) t->mem = NULL, t->seg = NULL, t->chunk = NULL, t->n_seg = t->n_chunk = 0;
}

int dpt_cuda_optim_step(const struct dpt_cuda_optim_tables *t, const struct dpt_cuda_optim_args *a, cudaStream_t s)
{
  if (!t->n_chunk) return (int)cudaGetLastError();
  dim3 grid((unsigned)t->n_chunk), block(256);
  switch (t->dtype) {
  case DPT_OPT_F16: dpt_k_optim_step<DPT_OPT_F16><<<grid, block, 0, s>>>(t->seg, t->chunk, *a); break;
  case DPT_OPT_BF16: dpt_k_optim_step<DPT_OPT_BF16><<<grid, block, 0, s>>>(t->seg, t->chunk, *a); break;
  default: dpt_k_optim_step<DPT_OPT_F32><<<grid, block, 0, s>>>(t->seg, t->chunk, *a); break;
  }
  return (int)cudaGetLastError();
}

} // extern "C"
