// dpt_cuda_kernels.cu — the few kernels cuDNN/cuBLAS do not provide.
//
//   layout casts   fp32 NCHW <-> fp16 NHWC with zero channel padding and a
//                  scale (input images, loss-scaled output gradient, conv/FC
//                  weights KCRS -> KRSC, and back for weight gradients: this
//                  is the gradient packing into the fp32 slab, with 1/scale)
//   flat casts     fp32 <-> fp16
//   nonfinite      sets *flag when any element is inf/NaN (loss scaling)
//   softmax xent   one block per image, PyTorch semantics (label smoothing,
//                  ignored labels outside [0, k)), loss and label rank per row
//   sgd            torch.optim.SGD momentum / weight decay (mask) / nesterov
//
// All are grid-stride loops launched on the caller's stream; each returns
// cudaGetLastError() so the host reports the launch with its layer and shape.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>

#include "dpt_cuda_kernels.h"

static unsigned blocks_for(size_t n)
{
  size_t b = (n + 255) / 256;
  return (unsigned)(b > 8192 ? 8192 : (b ? b : 1));
}

#define GRID_LOOP(i, n)                                                                           \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                         \
       i += (size_t)gridDim.x * blockDim.x)

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

__global__ static void k_sgd(float *w, float *v, const float *g, const unsigned char *mask,
                             float lr, float mom, float wd, int nesterov, size_t n)
{
  GRID_LOOP(i, n) {
    float gi = g[i] + ((!mask || mask[i]) ? wd * w[i] : 0.0f);
    float vi = mom * v[i] + gi;
    v[i] = vi;
    w[i] -= lr * (nesterov ? gi + mom * vi : vi);
  }
}

extern "C" {

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

int dpt_cuda_sgd(float *w, float *v, const float *g, const unsigned char *mask, float lr,
                 float momentum, float weight_decay, int nesterov, size_t n, cudaStream_t s)
{
  k_sgd<<<blocks_for(n), 256, 0, s>>>(w, v, g, mask, lr, momentum, weight_decay, nesterov, n);
  return (int)cudaGetLastError();
}

} // extern "C"
