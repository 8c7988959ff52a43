/* dpt_cuda_optim.h — the fused optimizer kernel (issue 15): momentum SGD on the fp32
 * master slab, weight-decay mask, Nesterov, the conv / FC weight copies in the compute
 * type written in the same pass (KCRS -> KRSC), skipped on the device when the overflow
 * flag is set.  The tables and the arithmetic are dpt_optim_layout.h's; its host
 * reference (dpt_optim_ref_step) gives the same bits (tests/trainer/gpu/test_gpu_optim.c). */
#ifndef DPT_CUDA_OPTIM_H
#define DPT_CUDA_OPTIM_H

#include <stddef.h>

#include <cuda_runtime.h>

#include "dpt_optim_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The layout's tables on the device (one cudaMalloc, uploaded once, on stream s). */
struct dpt_cuda_optim_tables {
  struct dpt_optim_seg *seg;     /* device [n_seg] */
  struct dpt_optim_chunk *chunk; /* device [n_chunk] */
  int n_seg, n_chunk, dtype;
  void *mem;                     /* the allocation */
};
/* Returns a cudaError_t (0 on success); nothing allocated on failure. */
int dpt_cuda_optim_upload(const struct dpt_optim_layout *lay, struct dpt_cuda_optim_tables *t, cudaStream_t s);
void dpt_cuda_optim_tables_free(struct dpt_cuda_optim_tables *t);

struct dpt_cuda_optim_args {
  float *w;                    /* [n_params] fp32 master weights (device) */
  float *v;                    /* [n_params] momentum */
  const float *g;              /* [n_params] averaged gradient */
  const unsigned char *mask;   /* [n_params] 1 = weight decay, or NULL = everywhere */
  void *copy;                  /* the weight-copy region (dpt_cuda_plan's DPT_CUDA_R_WEIGHTS) */
  float lr;                    /* used when lr_dev is NULL */
  const float *lr_dev;         /* device float: the learning rate a captured graph reads each replay */
  float momentum, weight_decay;
  int nesterov;
  const int *skip;             /* device int: non-zero = overflow, leave everything (NULL: never) */
  int copy_only;               /* 1: only write the copies of w as it is (w, v untouched): after the
                                  host put the parameters in the slab (start, resume, broadcast) */
};
/* One launch: n_chunk blocks of 256 threads.  Returns cudaGetLastError(). */
int dpt_cuda_optim_step(const struct dpt_cuda_optim_tables *t, const struct dpt_cuda_optim_args *a, cudaStream_t s);

/* LARS (issue 23): dpt_optim.h's dpt_lars_step on the device, the MLPerf reference's rule.
 * Tables of dpt_optim_lars (one cudaMalloc: tensors, chunks, per-chunk partial sums of w^2 and
 * g^2 in double, per-tensor trust ratios), uploaded once. */
struct dpt_cuda_lars_tables {
  struct dpt_optim_lars_tensor *tensor; /* device [n_tensor] */
  struct dpt_optim_lars_chunk *chunk;   /* device [n_chunk] */
  double *partial;                      /* device [n_chunk][2]: sum w^2, sum g^2 of the chunk */
  float *ratio;                         /* device [n_tensor]: the last step's trust ratios */
  int n_tensor, n_chunk;
  float eta, eps;                       /* eps > 0 (0 was already taken as 1e-7) */
  void *mem;
};
/* Returns a cudaError_t (0 on success); nothing allocated on failure. */
int dpt_cuda_lars_upload(const struct dpt_optim_lars *l, float eta, float eps, struct dpt_cuda_lars_tables *t,
                         cudaStream_t s);
void dpt_cuda_lars_tables_free(struct dpt_cuda_lars_tables *t);
/* Three launches on s: the partial sums per chunk (a block each, a fixed-order tree), the trust
 * ratio per tensor (the tensor's partials summed in chunk order: the same bits every run), the
 * update per chunk with its weight copies by the layout t's rule.  a: w, v, g, copy, lr / lr_dev,
 * momentum, weight_decay, nesterov, skip (the overflow flag skips all three); mask and copy_only
 * are not used (a copy-only launch is dpt_cuda_optim_step's).  Returns cudaGetLastError(). */
int dpt_cuda_lars_step(const struct dpt_cuda_optim_tables *t, const struct dpt_cuda_lars_tables *lt,
                       const struct dpt_cuda_optim_args *a, cudaStream_t s);

/* RMSprop warm-up (issue 23): dpt_optim.h's dpt_rmsw_step on the device, one launch over the
 * layout's chunks with the weight copies: g' = g + wd w (mask), m = mu2 m + (1 - mu2) g'^2,
 * d = mu1 d - g' (a + ar / (sqrt(m) + eps)), w += lr d, explicitly rounded.  a: the SGD share at
 * this step's epoch (dpt_rmsw_alpha_sgd, computed on the host), ar = (1 - a) rms_lr / lr (0 when
 * lr is 0).  a->v is d, a->lr_dev is not used (eager steps only), a->skip is honoured. */
int dpt_cuda_rmsw_step(const struct dpt_cuda_optim_tables *t, const struct dpt_cuda_optim_args *a, float *m, float alpha,
                       float alpha_rms, float mu2, float eps, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif /* DPT_CUDA_OPTIM_H */
