// dpt_cuda_dbn.cu — the fused step's dBN weight where cuDNN has no engine for it (dpt_cuda_dbn.h).
//
// Two launches:
//   k_bn_bwd_weight_partial  blocks (ceil(c / 32), R) of 32 x 8 threads: a thread owns one channel
//                            (a warp reads 32 adjacent channels of one row) and every (R * 8)-th row
//                            from its own; it applies the ReLU's mask, writes g (the fork), sums g and
//                            g * xhat, and the block's 8 rows of threads add up in shared memory into
//                            partial [R][2][c]
//   k_bn_bwd_weight_final    one thread per channel: the R partials in order, in double; dgamma, dbeta
//                            and the three coefficients of dbn_apply
// No atomics: the sums' order depends on the shape alone, so the bits do not change run to run.
// The names hold "bn_bw": the kernel breakdown (bench/gpu/kernel-classes.tsv) counts them as norm.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stddef.h>

#include "dpt_cuda_dbn.h"
#include "dpt_cuda_elem.cuh" // ld: typed element access
#include "dpt_cuda_kernels.h" // DPT_DT_*

enum { DBN_CH = 32, DBN_ROWS = 8, DBN_MAX_SLICES = 256, DBN_ROWS_PER_SLICE = 512 };

// Row slices R: about DBN_ROWS_PER_SLICE rows each (64 per thread), at most DBN_MAX_SLICES.
static size_t slices(size_t rows)
{
  size_t r = (rows + DBN_ROWS_PER_SLICE - 1) / DBN_ROWS_PER_SLICE;
  return r < 1 ? 1 : r > DBN_MAX_SLICES ? DBN_MAX_SLICES : r;
}

// g is a select of dy's own value: stored back in dy's type, it is exact
template <typename T>
__global__ static void k_bn_bwd_weight_partial(const T *dy, const T *y, const T *x, T *g, const float *mean,
                                               const float *istd, int c, size_t rows, float *part)
{
  __shared__ float s_dg[DBN_ROWS][DBN_CH + 1], s_db[DBN_ROWS][DBN_CH + 1];
  int ch = blockIdx.x * DBN_CH + threadIdx.x;
  float dg = 0.0f, db = 0.0f;
  if (ch < c) {
    float m = mean[ch], is = istd[ch];
    for (size_t r = (size_t)blockIdx.y * DBN_ROWS + threadIdx.y; r < rows; r += (size_t)gridDim.y * DBN_ROWS) {
      size_t i = r * (size_t)c + ch;
      T v = dy[i];
      if (y && !(ld(y, i) > 0.0f)) v = T(0.0f);
      if (g) g[i] = v;
      float gv = ld(&v, 0);
      db += gv;
      dg += gv * ((ld(x, i) - m) * is);
    }
  }
  s_dg[threadIdx.y][threadIdx.x] = dg;
  s_db[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && ch < c) {
    for (int k = 1; k < DBN_ROWS; k++) dg += s_dg[k][threadIdx.x], db += s_db[k][threadIdx.x];
    part[(2 * (size_t)blockIdx.y) * c + ch] = dg;
    part[(2 * (size_t)blockIdx.y + 1) * c + ch] = db;
  }
}

__global__ static void k_bn_bwd_weight_final(const float *part, int nslices, int c, double rows, const float *mean,
                                             const float *istd, const float *gamma, float *dgamma, float *dbeta,
                                             float *c_dy, float *c_x, float *c_b)
{
  for (int ch = blockIdx.x * blockDim.x + threadIdx.x; ch < c; ch += gridDim.x * blockDim.x) {
    double dg = 0.0, db = 0.0;
    for (int r = 0; r < nslices; r++) dg += part[(2 * (size_t)r) * c + ch], db += part[(2 * (size_t)r + 1) * c + ch];
    float fdg = (float)dg, fdb = (float)db; // the coefficients from the gradients as written
    double gi = (double)gamma[ch] * istd[ch], gi2 = gi * istd[ch];
    dgamma[ch] = fdg;
    dbeta[ch] = fdb;
    c_dy[ch] = (float)gi;
    c_x[ch] = (float)(-gi2 * fdg / rows);
    c_b[ch] = (float)(-gi * fdb / rows + gi2 * fdg * mean[ch] / rows);
  }
}

template <typename T> static void launch(const struct dpt_cuda_dbn_args *a, float *part, size_t ns, cudaStream_t s)
{
  dim3 grid((unsigned)((a->c + DBN_CH - 1) / DBN_CH), (unsigned)ns), block(DBN_CH, DBN_ROWS);
  k_bn_bwd_weight_partial<T><<<grid, block, 0, s>>>((const T *)a->dy, (const T *)a->y, (const T *)a->x, (T *)a->g,
                                                    a->mean, a->istd, a->c, a->rows, part);
}

extern "C" {

size_t dpt_cuda_dbn_weight_ws(int c, size_t rows)
{
  return c < 1 || rows < 1 ? 0 : slices(rows) * 2 * (size_t)c * sizeof(float);
}

int dpt_cuda_dbn_weight(const struct dpt_cuda_dbn_args *a, void *ws, size_t ws_bytes, cudaStream_t s)
{
  if (!a || a->c < 1 || a->rows < 1 || !a->dy || !a->x || !a->mean || !a->istd || !a->gamma || !a->dgamma ||
      !a->dbeta || !a->c_dy || !a->c_x || !a->c_b || !ws || ws_bytes < dpt_cuda_dbn_weight_ws(a->c, a->rows))
    return (int)cudaErrorInvalidValue;
  size_t ns = slices(a->rows);
  float *part = (float *)ws;
  switch (a->dtype) {
  case DPT_DT_F32: launch<float>(a, part, ns, s); break;
  case DPT_DT_F16: launch<__half>(a, part, ns, s); break;
  case DPT_DT_BF16: launch<__nv_bfloat16>(a, part, ns, s); break;
  default: return (int)cudaErrorInvalidValue;
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return (int)e;
  unsigned fb = (unsigned)((a->c + 255) / 256);
  k_bn_bwd_weight_final<<<fb, 256, 0, s>>>(part, (int)ns, a->c, (double)a->rows, a->mean, a->istd, a->gamma,
                                           a->dgamma, a->dbeta, a->c_dy, a->c_x, a->c_b);
  return (int)cudaGetLastError();
}

} // extern "C"
