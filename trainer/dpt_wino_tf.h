/* dpt_wino_tf.h — the Winograd transforms (dpt_wino_tf.c), built twice: for any x86-64
 * (dpt_wino_tf_base) and for AVX2 + FMA (dpt_wino_tf_avx2, used where the CPU has them; the
 * transforms are a third of a Winograd convolution's time and twice as fast in 256-bit
 * vectors).  Private to dpt_wino.c. */
#ifndef DPT_WINO_TF_H
#define DPT_WINO_TF_H

#include <stddef.h>

#include "dpt_wino.h"

#define DPT_WINO_WS_CHUNK_BYTES (8u << 20) /* transformed tiles (V and M) of one chunk: ~L2/L3-sized */
/* The matrices of U, V and M lie this many floats (64 bytes) further apart than their
 * size: at a size that is a multiple of 4 KiB the streams a transform writes would all
 * map to one set of the L1 cache (measured: 5x slower transforms). */
#define DPT_WINO_PAD 16

/* U[p] to U[p+1] in floats */
static inline size_t dpt_wino_su(const struct dpt_wino *w) { return (size_t)w->K * w->C + DPT_WINO_PAD; }

/* alpha^2: the transformed matrices per chunk */
static inline int dpt_wino_points(const struct dpt_wino *w) { return w->a * w->a; }

struct dpt_wino_tf {
  /* V = input transform of images n0 .. n0+ni-1 of x (a chunk), and its adjoint into dx */
  void (*in)(const struct dpt_wino *w, const float *x, int n0, int ni, float *V);
  void (*in_adj)(const struct dpt_wino *w, const float *dV, int n0, int ni, float *dx);
  /* y = output transform of M, and its adjoint dM from dy */
  void (*out)(const struct dpt_wino *w, const float *M, int n0, int ni, float *y);
  void (*out_adj)(const struct dpt_wino *w, const float *dy, int n0, int ni, float *dM);
  /* U = weight transform of g [K][C][3][3], and its adjoint dg from dU */
  void (*wt)(const struct dpt_wino *w, const float *g, float *U);
  void (*wt_adj)(const struct dpt_wino *w, const float *dU, float *dg);
};

extern const struct dpt_wino_tf dpt_wino_tf_base, dpt_wino_tf_avx2;

/* Stride 2 (dpt_wino_s2_tf.c, the same six transforms): 36 products ("slots") per chunk, slot s
 * a (rows(s) T) x C matrix of V against U[s] (K x C): 0 the even-even phase (16 rows per tile),
 * 1..5 odd rows / even columns (4), 6..10 even rows / odd columns (4), 11..35 odd-odd (1). */
#define DPT_WINO_S2_SLOTS 36
static inline int dpt_wino_s2_rows(int s) { return s == 0 ? 16 : s <= 10 ? 4 : 1; }

/* Floats from the start of V (ch = C) or M (ch = K) to slot s for T tiles; s = 36: the size */
static inline size_t dpt_wino_s2_off(int s, size_t T, size_t ch)
{
  size_t rows = s == 0 ? 0 : s <= 11 ? 16 + 4 * (size_t)(s - 1) : 56 + (size_t)(s - 11);
  return rows * T * ch + (size_t)s * DPT_WINO_PAD;
}

extern const struct dpt_wino_tf dpt_wino_s2_tf_base, dpt_wino_s2_tf_avx2;

#endif
