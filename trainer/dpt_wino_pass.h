/* dpt_wino_pass.h — the building blocks of the Winograd transforms (dpt_wino_tf.c for
 * stride 1, dpt_wino_s2_tf.c for stride 2): 1-D passes written out over the lanes of a
 * channel block, and inline moves of whole blocks.  Private to those two files. */
#ifndef DPT_WINO_PASS_H
#define DPT_WINO_PASS_H

#include <string.h>

#include "dpt_wino_tf.h"

#define MAXB 16
#define PAD DPT_WINO_PAD

/* Each 2-D transform is two 1-D passes (columns, then rows) over the lanes of a channel block. */
#define LANES                                            \
  for (int l8 = 0; l8 < nl; l8 += 8) /* nl: 8 or 16 */ \
    for (int l = l8; l < l8 + 8; l++) /* a constant count: vector code, no memcpy calls */

/* The 1-D passes, written out: x rows are s * nl floats apart, o rows so * nl. */
#define IN_ROWS(n) const float *x0 = x, *x1 = x + s * nl, *x2 = n > 2 ? x + 2 * s * nl : x; \
  const float *x3 = n > 3 ? x + 3 * s * nl : x, *x4 = n > 4 ? x + 4 * s * nl : x, *x5 = n > 5 ? x + 5 * s * nl : x; \
  (void)x2, (void)x3, (void)x4, (void)x5
#define OUT_ROWS(n) float *o0 = o, *o1 = o + so * nl, *o2 = n > 2 ? o + 2 * so * nl : o, *o3 = n > 3 ? o + 3 * so * nl : o; \
  float *o4 = n > 4 ? o + 4 * so * nl : o, *o5 = n > 5 ? o + 5 * so * nl : o; (void)o2, (void)o3, (void)o4, (void)o5
#define PASS(name, nin, nout, ...)                                                                       \
  static inline __attribute__((always_inline)) void name(const float *x, int s, float *o, int so, int nl) \
  {                                                                                                      \
    IN_ROWS(nin);                                                                                        \
    OUT_ROWS(nout);                                                                                      \
    LANES { __VA_ARGS__ }                                                                                       \
  }

/* 8 floats at a time, a constant size: inline moves (a loop over nl floats becomes a call to
 * memcpy, measured at 5% of a training step) */
static inline __attribute__((always_inline)) void cp(float *d, const float *s, int nl)
{
  for (int l8 = 0; l8 < nl; l8 += 8) memcpy(d + l8, s + l8, 8 * sizeof(float));
}
static inline __attribute__((always_inline)) void zero(float *d, int nl)
{
  for (int l8 = 0; l8 < nl; l8 += 8) memset(d + l8, 0, 8 * sizeof(float));
}

/* The four tile transforms' OpenMP bodies, over the chunk's images n0 .. n0+ni-1 and tile
 * rows, each row by a row function through the file's ROWS (its block size, and tile, as
 * compile-time constants).  The adjoint of the input transform clears dx and runs the even
 * tile rows, then the odd ones: patches of rows ty and ty + 2 never overlap. */
#define DPT_WINO_ROW_DISPATCHERS                                                                     \
  static void in_tf(const struct dpt_wino *w, const float *x, int n0, int ni, float *V)              \
  {                                                                                                  \
    _Pragma("omp parallel for collapse(2) schedule(static)") for (int n = 0; n < ni; n++)            \
      for (int ty = 0; ty < w->th; ty++) ROWS(in_row, x, n0, ni, n, ty, V);                           \
  }                                                                                                  \
  static void in_tf_adj(const struct dpt_wino *w, const float *dV, int n0, int ni, float *dx)        \
  {                                                                                                  \
    const size_t img = (size_t)w->C * w->H * w->W;                                                   \
    memset(dx + (size_t)n0 * img, 0, (size_t)ni * img * sizeof(float));                              \
    for (int odd = 0; odd < 2; odd++) {                                                              \
      _Pragma("omp parallel for collapse(2) schedule(static)") for (int n = 0; n < ni; n++)          \
        for (int ty = odd; ty < w->th; ty += 2) ROWS(in_adj_row, dV, n0, ni, n, ty, dx);              \
    }                                                                                                \
  }                                                                                                  \
  static void out_tf(const struct dpt_wino *w, const float *M, int n0, int ni, float *y)             \
  {                                                                                                  \
    _Pragma("omp parallel for collapse(2) schedule(static)") for (int n = 0; n < ni; n++)            \
      for (int ty = 0; ty < w->th; ty++) ROWS(out_row, M, n0, ni, n, ty, y);                          \
  }                                                                                                  \
  static void out_tf_adj(const struct dpt_wino *w, const float *dy, int n0, int ni, float *dM)       \
  {                                                                                                  \
    _Pragma("omp parallel for collapse(2) schedule(static)") for (int n = 0; n < ni; n++)            \
      for (int ty = 0; ty < w->th; ty++) ROWS(out_adj_row, dy, n0, ni, n, ty, dM);                    \
  }

#endif
