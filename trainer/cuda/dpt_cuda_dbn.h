/* dpt_cuda_dbn.h — the fused step's dBN weight on an own kernel, where cuDNN has no engine for it.
 *
 * The dbn_weight pattern (dpt_cudnn_graph.h: ReLU backward, fork, CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS)
 * is a graph cuDNN runs only after a data-gradient convolution: the one sample and the one engine
 * family that take BN_BWD_WEIGHTS are DgradDreluBNBwdWeight (cudnn-frontend's samples/cpp/convolution/
 * dgrads.cpp).  Alone, heuristics offer no config for it (the first H200 visit on cuDNN 9.19 at every
 * precision, the third on 9.14 at tf32), and before this kernel every layer whose backward needed it went back
 * on the legacy calls, dragging its neighbours with it: 0 of 250 ops fused.  The legacy
 * cudnnBatchNormalizationBackward computes dx itself, not the coefficients the fused step's dbn_apply
 * graph reads, and on NHWC it runs cuDNN's generic kernels (92% of a mixed step on the first visit).
 *
 * So the executor (dpt_cuda_fstep.c) runs this where the graph has no engine, with the graph's
 * outputs and rules:
 *   g      = y > 0 ? dy : 0 (dy when y is NULL: no ReLU), written to g when it is not NULL (the fork)
 *   dgamma = sum over rows of g * (x - mean) * istd,  dbeta = sum over rows of g
 *   c_dy   = gamma * istd,  c_x = -gamma * istd^2 * dgamma / M,
 *   c_b    = -gamma * istd * dbeta / M + gamma * istd^2 * dgamma * mean / M   (M = rows)
 * so that dbn_apply's dx = c_dy g + c_x x + c_b is BN's backward.  Tensors are NHWC [rows][c] of
 * dtype (DPT_DT_*), the vectors fp32 [c].  Deterministic: each of R row slices sums into its own
 * partial [R][2][c] in the workspace, and one thread per channel adds the R partials in order, in
 * double; the same inputs give the same bits every run. */
#ifndef DPT_CUDA_DBN_H
#define DPT_CUDA_DBN_H

#include <stddef.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

struct dpt_cuda_dbn_args {
  const void *dy;     /* dtype [rows][c]: the output's gradient */
  const void *y;      /* dtype [rows][c]: the ReLU's output (its mask), NULL: no ReLU */
  const void *x;      /* dtype [rows][c]: the BN's input */
  void *g;            /* dtype [rows][c]: g written (the fork), NULL: not written */
  int dtype;          /* DPT_DT_F32 / F16 / BF16 */
  int c;              /* channels */
  size_t rows;        /* N * H * W */
  const float *mean, *istd, *gamma;                 /* fp32 [c]: the forward's saved statistics, gamma */
  float *dgamma, *dbeta, *c_dy, *c_x, *c_b;         /* fp32 [c] each, written */
};

/* Bytes of workspace dpt_cuda_dbn_weight needs for c channels over rows (0 for an empty shape). */
size_t dpt_cuda_dbn_weight_ws(int c, size_t rows);
/* The reductions and coefficients above, two launches on s; ws: device memory of at least
 * dpt_cuda_dbn_weight_ws(c, rows) bytes.  cudaErrorInvalidValue for c < 1, rows < 1, an unknown
 * dtype, a missing operand or a smaller workspace (nothing launched); else cudaGetLastError(). */
int dpt_cuda_dbn_weight(const struct dpt_cuda_dbn_args *a, void *ws, size_t ws_bytes, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif /* DPT_CUDA_DBN_H */
