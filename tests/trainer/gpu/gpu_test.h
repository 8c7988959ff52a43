/* gpu_test.h — shared by the GPU tests: CHECK, the visible skip, small helpers. */
#ifndef GPU_TEST_H
#define GPU_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dpt_backend.h"
#include "dpt_backend_cuda.h"

#define SKIP_CODE 77 /* ctest SKIP_RETURN_CODE */

#include "dpt_check.h"

/* Exit 77 (ctest: SKIPPED) with the reason when no CUDA device works. */
static inline void gpu_or_skip(const char *test)
{
  char why[256];
  if (!dpt_cuda_device_usable(why, sizeof why)) {
    printf("SKIPPED %s: no usable CUDA device (%s)\n", test, why);
    fflush(stdout);
    exit(SKIP_CODE);
  }
}

static inline void die_on(int rc, const struct dpt_err *err, const char *what)
{
  if (rc) {
    fprintf(stderr, "%s: %s\n", what, err->msg);
    exit(1);
  }
}

/* max |a - b| / max |b| */
static inline double nerr(const float *a, const float *b, size_t n)
{
  double e = 0, mb = 0;
  for (size_t i = 0; i < n; i++) {
    e = fmax(e, fabs((double)a[i] - b[i]));
    mb = fmax(mb, fabs((double)b[i]));
  }
  return mb > 0 ? e / mb : e;
}

/* worst per-parameter-block normalised error */
static inline double blocks_err(const struct dpt_model *m, const float *g, const float *ref,
                                const char **worst)
{
  double w = 0;
  for (int i = 0; i < m->n_layers; i++) {
    const struct dpt_layer_desc *l = &m->layers[i];
    if (!l->w_len) continue;
    double e = nerr(g + l->w_off, ref + l->w_off, l->w_len);
    if (l->b_len) e = fmax(e, nerr(g + l->b_off, ref + l->b_off, l->b_len));
    if (e > w) {
      w = e;
      *worst = l->name;
    }
  }
  return w;
}

/* fp32 oracle options: FMA math (TF32 off), deterministic algorithms. */
static inline void oracle_opts(struct dpt_cuda_opts *co)
{
  dpt_cuda_opts_default(co);
  co->precision = DPT_CUDA_FP32;
  co->deterministic = 1;
}

#endif /* GPU_TEST_H */
