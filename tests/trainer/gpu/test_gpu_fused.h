/* test_gpu_fused.h — what test_gpu_fused.c (the cuDNN graph patterns one by one, the support
 * matrix, the engine cache) shares with test_gpu_fused_block.c (one bottleneck block through the
 * fused chain): the float64 reference's convolutions, device buffers in the storage type (with
 * cu_buf.h's copies), the random inputs, the graph descriptions and the test's cuDNN context.  One executable; its
 * CHECKs share one count (DPT_CHECK_SHARED, defined in test_gpu_fused.c). */
#ifndef TEST_GPU_FUSED_H
#define TEST_GPU_FUSED_H

#include <stddef.h>

#include "cu_buf.h"
#include "dpt_cudnn_graph.h"
#include "dpt_engine_cache.h"

#define U32 0x1p-24 /* the fp32 unit roundoff */

double unit(int io);     /* the storage / TF32 input rounding unit: 2^-11 fp16, TF32; 2^-8 bf16 */
const char *tname(int io);
float frand(void);       /* in [-1, 1), one sequence for the whole run */
float *host_rand(size_t n, float scale, int io); /* values the type io holds */
void *dev(size_t n, int io);                     /* n zeroed elements of type io (+ 256 bytes) */
/* as_type, put, get: cu_buf.h */

/* A convolution's geometry: input [n, h, w, c] NHWC, k filters r x r (KRSC), output [n, p, q, k]. */
struct geo {
  int n, c, h, w, k, r, stride, pad, p, q;
};
struct geo geo_of(int n, int c, int h, int w, int k, int r, int stride, int pad);
/* float64 convolutions (abs_: the sums of |products| for the bounds, may be NULL) */
void conv_ref(const struct geo *g, const double *x, const float *wt, double *y, double *abs_);
void dgrad_ref(const struct geo *g, const double *dy, const float *wt, double *dx, double *abs_);
void wgrad_ref(const struct geo *g, const double *x, const double *dy, double *dw, double *abs_);
double *to_d(const float *f, size_t n);

struct env {
  struct dpt_cg_ctx ctx;
  struct dpt_engine_cache cache;
  int probe;            /* 1: "no engine" is an answer, not a failure (the caller judges) */
  int n_unsupported;
  char matrix[8192];
};
/* A pattern's description as the backend gives it (dpt_cuda_fstep.c). */
struct dpt_cg_desc desc(int pattern, int io, const struct geo *g, int relu, const char *layer);

/* test_gpu_fused_block.c: the identity bottleneck block, fused vs unfused float64. */
void bottleneck(struct env *e);

#endif /* TEST_GPU_FUSED_H */
