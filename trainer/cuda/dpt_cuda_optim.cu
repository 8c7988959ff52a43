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

extern "C" {

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
