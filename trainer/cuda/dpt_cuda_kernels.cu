// dpt_cuda_kernels.cu — the few kernels cuDNN/cuBLAS do not provide.
//
//   layout casts   fp32 NCHW <-> fp16 NHWC with zero channel padding and a
//                  scale (input images, loss-scaled output gradient, conv/FC
//                  weights KCRS -> KRSC, and back for weight gradients: this
//                  is the gradient packing into the fp32 slab, with 1/scale)
//   flat casts     fp32 <-> fp16
//   nonfinite      sets *flag when any element is inf/NaN (loss scaling)
//   loss scaler    dpt_loss_scaler_update on the device (dpt_loss_scale.h: the host's code)
//   loss totals    adds a batch's loss sum, top-1, top-5 and valid rows to device totals
//   softmax xent   one block per image, PyTorch semantics (label smoothing,
//                  ignored labels outside [0, k)), loss and label rank per row
//   BN eval        the fused step's eval-mode BN scale/bias from the running statistics
//   scalar         one float written on the stream (the learning rate of a captured step)
// (momentum SGD is the fused optimizer's, dpt_cuda_optim.cu: one launch with the weight copies)
//
// All are grid-stride loops launched on the caller's stream; each returns
// cudaGetLastError() so the host reports the launch with its layer and shape.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "dpt_cuda_elem.cuh" // ld, st: typed element access
#include "dpt_cuda_kernels.h"
#include "../dpt_loss_scale.h" /* trainer/: the host's rules, compiled for the device */

static unsigned blocks_for(size_t n)
{
  size_t b = (n + 255) / 256;
  return (unsigned)(b > 8192 ? 8192 : (b ? b : 1));
}

#define GRID_LOOP(i, n)                                                                           \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                         \
       i += (size_t)gridDim.x * blockDim.x)

// The loss scale, when it is read on the device: scale * (*ds or 1 / *ds); ds NULL: scale.
__device__ static inline float dev_factor(float scale, const float *ds, int inv)
{
  return ds ? scale * (inv ? 1.0f / *ds : *ds) : scale;
}

template <typename T>
__global__ static void k_to_nhwc(const float *x, T *y, int c, size_t hw, int cp, float scale, const float *ds,
                                 int inv, size_t total)
{
  scale = dev_factor(scale, ds, inv);
  GRID_LOOP(i, total) {
    int ch = (int)(i % cp);
    size_t pix = i / cp, n = pix / hw, s = pix % hw;
    st(y, i, ch < c ? scale * x[(n * c + ch) * hw + s] : 0.0f);
  }
}

template <typename T>
__global__ static void k_to_nchw(const T *x, float *y, int c, size_t hw, int cp, float scale, const float *ds,
                                 int inv, size_t total)
{
  scale = dev_factor(scale, ds, inv);
  GRID_LOOP(i, total) {
    size_t s = i % hw, nc = i / hw, n = nc / c;
    int ch = (int)(nc % c);
    y[i] = scale * ld(x, (n * hw + s) * cp + ch);
  }
}

template <typename T>
__global__ static void k_from32(const float *x, T *y, float scale, const float *ds, int inv, size_t n)
{
  scale = dev_factor(scale, ds, inv);
  GRID_LOOP(i, n) st(y, i, scale * x[i]);
}

// ---- the element-wise ops of the residual blocks ------------------------------------------------
// One element's rule each (the same in the scalar and the vector kernels, so both give the same bits):
//   add       y = a + b, with relu: 0 unless > 0 (a NaN passes, as cuDNN's CUDNN_PROPAGATE_NAN)
//   relu      y = x, 0 unless > 0 (NaN passes)
//   relu_bwd  dx (+)= (y > 0) dy (a NaN in dy passes)
//   acc       y += x
// The vector kernels move 16 bytes per load and store (8 fp16/bf16, 4 fp32): at 2 bytes per access the
// third visit's H200 ran them at about half its memory bandwidth, 8.6 ms of a 49.6-ms mixed step.
// They run where every pointer is 16-byte aligned; the last n % V elements, and misaligned tensors,
// go to the scalar kernels.
struct op_add {
  int relu;
  __device__ float operator()(float a, float b, float) const
  {
    float v = a + b;
    return relu && !(v > 0.0f) && !isnan(v) ? 0.0f : v;
  }
};
struct op_relu {
  __device__ float operator()(float x, float, float) const { return !(x > 0.0f) && !isnan(x) ? 0.0f : x; }
};
struct op_relu_bwd { // a = y, b = dy, c = dx before (acc)
  int acc;
  __device__ float operator()(float y, float dy, float dx) const
  {
    float g = y > 0.0f ? dy : 0.0f;
    return acc ? dx + g : g;
  }
};
struct op_acc {
  __device__ float operator()(float y, float x, float) const { return y + x; }
};

// out[i] = op(a[i], b[i], out[i]) over n elements; b may be NULL (unary), out may alias a or b
template <typename T, typename Op> __global__ static void k_ew(const T *a, const T *b, T *out, int rd_out, Op op, size_t n)
{
  GRID_LOOP(i, n) st(out, i, op(ld(a, i), b ? ld(b, i) : 0.0f, rd_out ? ld(out, i) : 0.0f));
}

template <typename T> struct __align__(16) pack16 {
  T v[16 / sizeof(T)];
};

template <typename T, typename Op>
__global__ static void k_ew16(const pack16<T> *a, const pack16<T> *b, pack16<T> *out, int rd_out, Op op, size_t nv)
{
  constexpr int V = 16 / sizeof(T);
  GRID_LOOP(i, nv) {
    pack16<T> pa = a[i], pb, po;
    if (b) pb = b[i];
    if (rd_out) po = out[i];
#pragma unroll
    for (int k = 0; k < V; k++)
      st(po.v, k, op(ld(pa.v, k), b ? ld(pb.v, k) : 0.0f, rd_out ? ld(po.v, k) : 0.0f));
    out[i] = po;
  }
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

// the launch: the vector kernel over the 16-byte packs where every pointer allows it, the scalar one
// over the rest
template <typename T, typename Op>
static int ew_launch(const void *a_, const void *b_, void *out_, int rd_out, Op op, size_t n, cudaStream_t s)
{
  const T *a = (const T *)a_, *b = (const T *)b_;
  T *out = (T *)out_;
  constexpr size_t V = 16 / sizeof(T);
  size_t nv = aligned16(a) && (!b || aligned16(b)) && aligned16(out) ? n / V : 0, done = nv * V;
  if (nv)
    k_ew16<T, Op><<<blocks_for(nv), 256, 0, s>>>((const pack16<T> *)a, (const pack16<T> *)b, (pack16<T> *)out,
                                                 rd_out, op, nv);
  if (done < n)
    k_ew<T, Op><<<blocks_for(n - done), 256, 0, s>>>(a + done, b ? b + done : NULL, out + done, rd_out, op, n - done);
  return (int)cudaGetLastError();
}

// The residual add's backward in one pass: g = dy, masked by y > 0 when the add had a ReLU (y non-NULL;
// the relu_bwd rule), written to (acc: added to) each input's gradient that exists (d0, d1 non-NULL).
// It replaces relu_bwd into a scratch tensor and a copy (or an accumulate) per input: 7 tensor passes
// for 4 (the third visit: 5.1 ms of relu_bwd and 2.7 ms of copies per mixed step).  d0 != d1.
template <typename T> __device__ static inline float add_bwd_g(const T *y, const T *dy, size_t i)
{
  return !y || ld(y, i) > 0.0f ? ld(dy, i) : 0.0f;
}
template <typename T>
__global__ static void k_add_bwd(const T *y, const T *dy, T *d0, int acc0, T *d1, int acc1, size_t n)
{
  GRID_LOOP(i, n) {
    float g = add_bwd_g(y, dy, i);
    if (d0) st(d0, i, acc0 ? ld(d0, i) + g : g);
    if (d1) st(d1, i, acc1 ? ld(d1, i) + g : g);
  }
}
template <typename T>
__global__ static void k_add_bwd16(const pack16<T> *y, const pack16<T> *dy, pack16<T> *d0, int acc0, pack16<T> *d1,
                                   int acc1, size_t nv)
{
  constexpr int V = 16 / sizeof(T);
  GRID_LOOP(i, nv) {
    pack16<T> py, pd = dy[i], o0, o1;
    if (y) py = y[i];
    if (d0 && acc0) o0 = d0[i];
    if (d1 && acc1) o1 = d1[i];
#pragma unroll
    for (int k = 0; k < V; k++) {
      float g = add_bwd_g(y ? py.v : (const T *)NULL, pd.v, k);
      st(o0.v, k, acc0 ? ld(o0.v, k) + g : g);
      st(o1.v, k, acc1 ? ld(o1.v, k) + g : g);
    }
    if (d0) d0[i] = o0;
    if (d1) d1[i] = o1;
  }
}
template <typename T>
static int add_bwd_launch(const void *y_, const void *dy_, void *d0_, int acc0, void *d1_, int acc1, size_t n,
                          cudaStream_t s)
{
  const T *y = (const T *)y_, *dy = (const T *)dy_;
  T *d0 = (T *)d0_, *d1 = (T *)d1_;
  constexpr size_t V = 16 / sizeof(T);
  bool al = (!y || aligned16(y)) && aligned16(dy) && (!d0 || aligned16(d0)) && (!d1 || aligned16(d1));
  size_t nv = al ? n / V : 0, done = nv * V;
  if (nv)
    k_add_bwd16<T><<<blocks_for(nv), 256, 0, s>>>((const pack16<T> *)y, (const pack16<T> *)dy, (pack16<T> *)d0, acc0,
                                                  (pack16<T> *)d1, acc1, nv);
  if (done < n)
    k_add_bwd<T><<<blocks_for(n - done), 256, 0, s>>>(y ? y + done : NULL, dy + done, d0 ? d0 + done : NULL, acc0,
                                                      d1 ? d1 + done : NULL, acc1, n - done);
  return (int)cudaGetLastError();
}

template <typename Op>
static int ew_dtype(const void *a, const void *b, void *out, int rd_out, Op op, int dtype, size_t n, cudaStream_t s)
{
  if (dtype == DPT_DT_F16) return ew_launch<__half>(a, b, out, rd_out, op, n, s);
  if (dtype == DPT_DT_BF16) return ew_launch<__nv_bfloat16>(a, b, out, rd_out, op, n, s);
  return ew_launch<float>(a, b, out, rd_out, op, n, s);
}

// y[n][hw][cp] = scale * x[n][c][hw]  (cp >= c; padding channels 0)
__global__ static void k_nchw32_to_nhwc16(const float *x, __half *y, int c, size_t hw, int cp,
                                          float scale, size_t total)
{
  GRID_LOOP(i, total) {
    int ch = (int)(i % cp);
    size_t pix = i / cp, n = pix / hw, s = pix % hw;
    y[i] = __float2half_rn(ch < c ? scale * x[(n * c + ch) * hw + s] : 0.0f);
  }
}

// y[n][c][hw] = scale * x[n][hw][cp]
__global__ static void k_nhwc16_to_nchw32(const __half *x, float *y, int c, size_t hw, int cp,
                                          float scale, size_t total)
{
  GRID_LOOP(i, total) {
    size_t s = i % hw, nc = i / hw, n = nc / c;
    int ch = (int)(nc % c);
    y[i] = scale * __half2float(x[(n * hw + s) * cp + ch]);
  }
}

__global__ static void k_f32_to_f16(const float *x, __half *y, float scale, size_t n)
{
  GRID_LOOP(i, n) y[i] = __float2half_rn(scale * x[i]);
}

__global__ static void k_f16_to_f32(const __half *x, float *y, float scale, size_t n)
{
  GRID_LOOP(i, n) y[i] = scale * __half2float(x[i]);
}

__global__ static void k_nonfinite(const float *x, size_t n, int *flag)
{
  GRID_LOOP(i, n) if (!isfinite(x[i])) *flag = 1;
}

// One block per row.  loss[r] = -sum_j t_j log softmax_j; d[r][j] = grad_scale * (p_j - t_j);
// rank[r] = number of logits strictly above the label's (-1 for ignored rows).
__global__ static void k_xent(const float *z, const int *labels, int k, float smoothing,
                              float grad_scale, float *d, float *loss, int *rank)
{
  __shared__ float red[256];
  int r = blockIdx.x, t = threadIdx.x, label = labels[r];
  const float *row = z + (size_t)r * k;
  float m = -INFINITY;
  for (int j = t; j < k; j += blockDim.x) m = fmaxf(m, row[j]);
  red[t] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) red[t] = fmaxf(red[t], red[t + s]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float sum = 0.0f;
  for (int j = t; j < k; j += blockDim.x) sum += expf(row[j] - m);
  red[t] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) red[t] += red[t + s];
    __syncthreads();
  }
  float lse = m + logf(red[0]);
  __syncthreads();
  int valid = label >= 0 && label < k;
  float off = smoothing / k, on = 1.0f - smoothing + off;
  float part = 0.0f, above = 0.0f;
  for (int j = t; j < k; j += blockDim.x) {
    float lp = row[j] - lse, tgt = valid ? (j == label ? on : off) : 0.0f;
    part -= tgt * lp;
    if (valid && row[j] > row[label]) above += 1.0f;
    if (d) d[(size_t)r * k + j] = valid ? grad_scale * (expf(lp) - tgt) : 0.0f;
  }
  red[t] = part;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) red[t] += red[t + s];
    __syncthreads();
  }
  if (t == 0) loss[r] = red[0];
  __syncthreads();
  red[t] = above;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) red[t] += red[t + s];
    __syncthreads();
  }
  if (t == 0) rank[r] = valid ? (int)red[0] : -1;
}

// One block: tot[0..3] += loss sum, top-1, top-5, valid rows of a batch (rank -1: ignored row).
__global__ static void k_loss_acc(const float *loss, const int *rank, int n, double *tot)
{
  __shared__ double red[4][256];
  int t = threadIdx.x;
  double v[4] = {0, 0, 0, 0};
  for (int r = t; r < n; r += blockDim.x)
    if (rank[r] >= 0) {
      v[0] += loss[r];
      v[1] += rank[r] == 0;
      v[2] += rank[r] < 5;
      v[3] += 1;
    }
  for (int k = 0; k < 4; k++) red[k][t] = v[k];
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s)
      for (int k = 0; k < 4; k++) red[k][t] += red[k][t + s];
    __syncthreads();
  }
  if (t == 0)
    for (int k = 0; k < 4; k++) tot[k] += red[k][0];
}

__global__ static void k_scaler_update(struct dpt_loss_scaler *s, const int *flag)
{
  if (blockIdx.x == 0 && threadIdx.x == 0) dpt_loss_scaler_update(s, *flag != 0);
}

/* eval-mode BN as a per-channel scale and bias: s = gamma / sqrt(var + eps), b = beta - mean * s
 * (cudnnBatchNormalizationForwardInference's arithmetic, in float with the eps in double) */
__global__ static void k_bn_eq_infer(const float *gamma, const float *beta, const float *rmean, const float *rvar,
                                     double eps, int c, float *scale, float *bias)
{
  GRID_LOOP(i, (size_t)c) {
    float s = gamma[i] / sqrtf((float)((double)rvar[i] + eps));
    scale[i] = s;
    bias[i] = beta[i] - rmean[i] * s;
  }
}

__global__ static void k_set_f32(float *p, float v)
{
  if (blockIdx.x == 0 && threadIdx.x == 0) *p = v;
}

extern "C" {

int dpt_cuda_bn_eq_infer(const float *gamma, const float *beta, const float *rmean, const float *rvar, double eps,
                         int c, float *scale, float *bias, cudaStream_t s)
{
  if (c > 0) k_bn_eq_infer<<<blocks_for((size_t)c), 256, 0, s>>>(gamma, beta, rmean, rvar, eps, c, scale, bias);
  return (int)cudaGetLastError();
}

int dpt_cuda_set_f32(float *p, float v, cudaStream_t s)
{
  k_set_f32<<<1, 32, 0, s>>>(p, v);
  return (int)cudaGetLastError();
}

int dpt_cuda_nchw32_to_nhwc16(const float *x, void *y, int n, int c, size_t hw, int c_stored,
                              float scale, cudaStream_t s)
{
  size_t total = (size_t)n * hw * c_stored;
  k_nchw32_to_nhwc16<<<blocks_for(total), 256, 0, s>>>(x, (__half *)y, c, hw, c_stored, scale, total);
  return (int)cudaGetLastError();
}

int dpt_cuda_nhwc16_to_nchw32(const void *x, float *y, int n, int c, size_t hw, int c_stored,
                              float scale, cudaStream_t s)
{
  size_t total = (size_t)n * c * hw;
  k_nhwc16_to_nchw32<<<blocks_for(total), 256, 0, s>>>((const __half *)x, y, c, hw, c_stored, scale, total);
  return (int)cudaGetLastError();
}

int dpt_cuda_f32_to_f16(const float *x, void *y, float scale, size_t n, cudaStream_t s)
{
  k_f32_to_f16<<<blocks_for(n), 256, 0, s>>>(x, (__half *)y, scale, n);
  return (int)cudaGetLastError();
}

int dpt_cuda_f16_to_f32(const void *x, float *y, float scale, size_t n, cudaStream_t s)
{
  k_f16_to_f32<<<blocks_for(n), 256, 0, s>>>((const __half *)x, y, scale, n);
  return (int)cudaGetLastError();
}

int dpt_cuda_nonfinite(const float *x, size_t n, int *flag, cudaStream_t s)
{
  k_nonfinite<<<blocks_for(n), 256, 0, s>>>(x, n, flag);
  return (int)cudaGetLastError();
}

int dpt_cuda_softmax_xent(const float *logits, const int *labels, int n, int k, float smoothing,
                          float grad_scale, float *dlogits, float *loss, int *rank, cudaStream_t s)
{
  if (n > 0) k_xent<<<n, 256, 0, s>>>(logits, labels, k, smoothing, grad_scale, dlogits, loss, rank);
  return (int)cudaGetLastError();
}

int dpt_cuda_nchw32_to_nhwc_ds(const float *x, void *y, int dtype, int n, int c, size_t hw, int c_stored,
                               float scale, const float *dscale, int inverse, cudaStream_t s)
{
  size_t total = (size_t)n * hw * c_stored;
  unsigned b = blocks_for(total);
  if (dtype == DPT_DT_F16)
    k_to_nhwc<__half><<<b, 256, 0, s>>>(x, (__half *)y, c, hw, c_stored, scale, dscale, inverse, total);
  else if (dtype == DPT_DT_BF16)
    k_to_nhwc<__nv_bfloat16><<<b, 256, 0, s>>>(x, (__nv_bfloat16 *)y, c, hw, c_stored, scale, dscale, inverse, total);
  else k_to_nhwc<float><<<b, 256, 0, s>>>(x, (float *)y, c, hw, c_stored, scale, dscale, inverse, total);
  return (int)cudaGetLastError();
}

int dpt_cuda_nchw32_to_nhwc(const float *x, void *y, int dtype, int n, int c, size_t hw, int c_stored,
                            float scale, cudaStream_t s)
{
  return dpt_cuda_nchw32_to_nhwc_ds(x, y, dtype, n, c, hw, c_stored, scale, NULL, 0, s);
}

int dpt_cuda_nhwc_to_nchw32_ds(const void *x, int dtype, float *y, int n, int c, size_t hw, int c_stored,
                               float scale, const float *dscale, int inverse, cudaStream_t s)
{
  size_t total = (size_t)n * c * hw;
  unsigned b = blocks_for(total);
  if (dtype == DPT_DT_F16)
    k_to_nchw<__half><<<b, 256, 0, s>>>((const __half *)x, y, c, hw, c_stored, scale, dscale, inverse, total);
  else if (dtype == DPT_DT_BF16)
    k_to_nchw<__nv_bfloat16><<<b, 256, 0, s>>>((const __nv_bfloat16 *)x, y, c, hw, c_stored, scale, dscale,
                                                inverse, total);
  else k_to_nchw<float><<<b, 256, 0, s>>>((const float *)x, y, c, hw, c_stored, scale, dscale, inverse, total);
  return (int)cudaGetLastError();
}

int dpt_cuda_nhwc_to_nchw32(const void *x, int dtype, float *y, int n, int c, size_t hw, int c_stored,
                            float scale, cudaStream_t s)
{
  return dpt_cuda_nhwc_to_nchw32_ds(x, dtype, y, n, c, hw, c_stored, scale, NULL, 0, s);
}

int dpt_cuda_f32_to_ds(const float *x, void *y, int dtype, float scale, const float *dscale, int inverse, size_t n,
                       cudaStream_t s)
{
  unsigned b = blocks_for(n);
  if (dtype == DPT_DT_F16) k_from32<__half><<<b, 256, 0, s>>>(x, (__half *)y, scale, dscale, inverse, n);
  else if (dtype == DPT_DT_BF16)
    k_from32<__nv_bfloat16><<<b, 256, 0, s>>>(x, (__nv_bfloat16 *)y, scale, dscale, inverse, n);
  else k_from32<float><<<b, 256, 0, s>>>(x, (float *)y, scale, dscale, inverse, n);
  return (int)cudaGetLastError();
}

int dpt_cuda_f32_to(const float *x, void *y, int dtype, float scale, size_t n, cudaStream_t s)
{
  return dpt_cuda_f32_to_ds(x, y, dtype, scale, NULL, 0, n, s);
}

int dpt_cuda_loss_accumulate(const float *loss, const int *rank, int n, double *totals, cudaStream_t s)
{
  k_loss_acc<<<1, 256, 0, s>>>(loss, rank, n, totals);
  return (int)cudaGetLastError();
}

int dpt_cuda_scaler_update(struct dpt_loss_scaler *scaler, const int *flag, cudaStream_t s)
{
  k_scaler_update<<<1, 1, 0, s>>>(scaler, flag);
  return (int)cudaGetLastError();
}

int dpt_cuda_add(const void *a, const void *b, void *y, int dtype, int relu, size_t n, cudaStream_t s)
{
  return ew_dtype(a, b, y, 0, op_add{relu}, dtype, n, s);
}

int dpt_cuda_relu(const void *x, void *y, int dtype, size_t n, cudaStream_t s)
{
  return ew_dtype(x, NULL, y, 0, op_relu{}, dtype, n, s);
}

int dpt_cuda_relu_bwd(const void *y, const void *dy, void *dx, int dtype, int accumulate, size_t n,
                      cudaStream_t s)
{
  return ew_dtype(y, dy, dx, accumulate, op_relu_bwd{accumulate}, dtype, n, s);
}

int dpt_cuda_add_bwd(const void *y, const void *dy, void *dx0, int acc0, void *dx1, int acc1, int dtype, size_t n,
                     cudaStream_t s)
{
  if (dx0 && dx0 == dx1) return (int)cudaErrorInvalidValue;
  acc0 = dx0 && acc0, acc1 = dx1 && acc1;
  if (dtype == DPT_DT_F16) return add_bwd_launch<__half>(y, dy, dx0, acc0, dx1, acc1, n, s);
  if (dtype == DPT_DT_BF16) return add_bwd_launch<__nv_bfloat16>(y, dy, dx0, acc0, dx1, acc1, n, s);
  return add_bwd_launch<float>(y, dy, dx0, acc0, dx1, acc1, n, s);
}

int dpt_cuda_acc(void *y, const void *x, int dtype, size_t n, cudaStream_t s)
{
  return ew_dtype(y, x, y, 0, op_acc{}, dtype, n, s);
}

} // extern "C"
