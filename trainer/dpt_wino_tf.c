/* dpt_wino_tf.c — the Winograd transforms of dpt_wino.c, compiled once for any x86-64 and
 * once with -mavx2 -mfma (trainer/CMakeLists.txt, DPT_WINO_AVX2), DPT_WINO_TF_NAME naming the table. */
#include "dpt_wino_tf.h"

#include <string.h>

#include "dpt_wino_pass.h"

#ifdef DPT_WINO_AVX2 /* the AVX2 build (trainer/CMakeLists.txt) */
#define DPT_WINO_TF_NAME dpt_wino_tf_avx2
#else
#define DPT_WINO_TF_NAME dpt_wino_tf_base
#endif

/* The transforms of Lavin & Gray's F(m x m, 3 x 3), alpha = m + 2 points per side:
 *   input   V = BT d BT^T     its adjoint  dd = BT^T dV BT
 *   weights U = G g G^T       its adjoint  dg = G^T dU G
 *   output  y = AT M AT^T     its adjoint  dM = AT^T dy AT
 * F(2x2,3x3) (points 0, +-1): every entry 0, +-1, +-1/2.  F(4x4,3x3) (points 0, +-1, +-2, the
 * paper's): entries up to 8 and 1/24, a larger rounding error for 1.8x fewer products per
 * output (2.25 against 4; direct: 9).  Each 2-D transform is two 1-D passes
 * (columns, then rows) over the lanes of a channel block. */
/* F(2x2,3x3) */
PASS(bt2, 4, 4, o0[l] = x0[l] - x2[l]; o1[l] = x1[l] + x2[l]; o2[l] = x2[l] - x1[l]; o3[l] = x1[l] - x3[l];)
PASS(b2, 4, 4, o0[l] = x0[l]; o1[l] = x1[l] - x2[l] + x3[l]; o2[l] = x1[l] + x2[l] - x0[l]; o3[l] = -x3[l];)
PASS(at2, 4, 2, o0[l] = x0[l] + x1[l] + x2[l]; o1[l] = x1[l] - x2[l] - x3[l];)
PASS(a2, 2, 4, o0[l] = x0[l]; o1[l] = x0[l] + x1[l]; o2[l] = x0[l] - x1[l]; o3[l] = -x1[l];)
PASS(g2, 3, 4, o0[l] = x0[l]; o1[l] = .5f * (x0[l] + x1[l] + x2[l]); o2[l] = .5f * (x0[l] - x1[l] + x2[l]);
     o3[l] = x2[l];)
PASS(gt2, 4, 3, o0[l] = x0[l] + .5f * (x1[l] + x2[l]); o1[l] = .5f * (x1[l] - x2[l]);
     o2[l] = .5f * (x1[l] + x2[l]) + x3[l];)
/* F(4x4,3x3) */
PASS(bt4, 6, 6, float a = x4[l] - 4 * x2[l], b = x3[l] - 4 * x1[l], c = x4[l] - x2[l], d = 2 * (x3[l] - x1[l]);
     o0[l] = 4 * x0[l] - 5 * x2[l] + x4[l]; o1[l] = a + b; o2[l] = a - b; o3[l] = c + d; o4[l] = c - d;
     o5[l] = 4 * x1[l] - 5 * x3[l] + x5[l];)
PASS(b4, 6, 6, o0[l] = 4 * x0[l]; o1[l] = 4 * (x2[l] - x1[l] + x5[l]) + 2 * (x4[l] - x3[l]);
     o2[l] = -5 * x0[l] - 4 * (x1[l] + x2[l]) - x3[l] - x4[l]; o3[l] = x1[l] - x2[l] + 2 * (x3[l] - x4[l]) - 5 * x5[l];
     o4[l] = x0[l] + x1[l] + x2[l] + x3[l] + x4[l]; o5[l] = x5[l];)
PASS(at4, 6, 4, float a = x1[l] + x2[l], b = x1[l] - x2[l], c = x3[l] + x4[l], d = x3[l] - x4[l];
     o0[l] = x0[l] + a + c; o1[l] = b + 2 * d; o2[l] = a + 4 * c; o3[l] = b + 8 * d + x5[l];)
PASS(a4, 4, 6, float a = x0[l] + x2[l], b = x1[l] + x3[l], c = x0[l] + 4 * x2[l], d = 2 * x1[l] + 8 * x3[l];
     o0[l] = x0[l]; o1[l] = a + b; o2[l] = a - b; o3[l] = c + d; o4[l] = c - d; o5[l] = x3[l];)
PASS(g4, 3, 6, o0[l] = .25f * x0[l]; o1[l] = (-1.f / 6) * (x0[l] + x1[l] + x2[l]);
     o2[l] = (-1.f / 6) * (x0[l] - x1[l] + x2[l]); o3[l] = (1.f / 24) * x0[l] + (1.f / 12) * x1[l] + (1.f / 6) * x2[l];
     o4[l] = (1.f / 24) * x0[l] - (1.f / 12) * x1[l] + (1.f / 6) * x2[l]; o5[l] = x2[l];)
PASS(gt4, 6, 3, o0[l] = .25f * x0[l] - (1.f / 6) * (x1[l] + x2[l]) + (1.f / 24) * (x3[l] + x4[l]);
     o1[l] = (1.f / 6) * (x2[l] - x1[l]) + (1.f / 12) * (x3[l] - x4[l]);
     o2[l] = (1.f / 6) * (x3[l] + x4[l] - x1[l] - x2[l]) + x5[l];)

/* A 2-D transform out (no x no) = P in P^T of in (ni x ni) by the 1-D pass P: columns, then rows. */
#define TF2D(name, pass_, ni, no)                                                                  \
  static inline __attribute__((always_inline)) void name(const float *in, float *out, int nl)      \
  {                                                                                                \
    float t[6 * 6 * MAXB];                                                                         \
    for (int j = 0; j < ni; j++) pass_(in + j * nl, ni, t + j * nl, ni, nl);                       \
    for (int r = 0; r < no; r++) pass_(t + r * ni * nl, 1, out + r * no * nl, 1, nl);              \
  }
TF2D(tf_bt2, bt2, 4, 4)
TF2D(tf_b2, b2, 4, 4)
TF2D(tf_at2, at2, 4, 2)
TF2D(tf_a2, a2, 2, 4)
TF2D(tf_g2, g2, 3, 4)
TF2D(tf_gt2, gt2, 4, 3)
TF2D(tf_bt4, bt4, 6, 6)
TF2D(tf_b4, b4, 6, 6)
TF2D(tf_at4, at4, 6, 4)
TF2D(tf_a4, a4, 4, 6)
TF2D(tf_g4, g4, 3, 6)
TF2D(tf_gt4, gt4, 6, 3)



/* V[p][t][c] = (BT d_t BT^T)[p] for tile row ty of image n of the chunk (images n0 ..
 * n0+ni-1); the channel blocks innermost, so that each of the P streams of V is written
 * contiguously.  The row functions below are inlined into the OpenMP bodies with bl and m
 * as compile-time constants (ROWS): a body outlined from a function that takes them as
 * arguments reads them at run time, and its 1-D passes are neither unrolled nor kept in
 * registers. */
static inline __attribute__((always_inline)) void in_row(const struct dpt_wino *w, const float *x, int n0, int ni,
                                                         int n, int ty, float *V, const int bl, const int m)
{
  const int nb = w->C / bl, a = m + 2;
  const size_t sV = (size_t)ni * w->th * w->tw * w->C + PAD, plane = (size_t)w->H * w->W * bl;
  float d[36 * MAXB], v[36 * MAXB];
  for (int tx = 0; tx < w->tw; tx++) {
    size_t t = ((size_t)n * w->th + ty) * w->tw + tx;
    for (int cb = 0; cb < nb; cb++) {
      const float *xp = x + ((size_t)(n0 + n) * nb + cb) * plane;
      for (int i = 0; i < a; i++)
        for (int j = 0; j < a; j++) {
          int r = m * ty - 1 + i, c = m * tx - 1 + j;
          if (r >= 0 && r < w->H && c >= 0 && c < w->W) cp(d + (i * a + j) * bl, xp + ((size_t)r * w->W + c) * bl, bl);
          else zero(d + (i * a + j) * bl, bl);
        }
      if (m == 2) tf_bt2(d, v, bl);
      else tf_bt4(d, v, bl);
      for (int p = 0; p < a * a; p++) cp(V + p * sV + t * w->C + cb * bl, v + p * bl, bl);
    }
  }
}

/* dx (the chunk's images) += BT^T dV_t BT placed on each tile's patch, for the tiles of row
 * ty of image n (in_tf_adj clears dx and orders the rows) */
static inline __attribute__((always_inline)) void in_adj_row(const struct dpt_wino *w, const float *dV, int n0,
                                                             int ni, int n, int ty, float *dx, const int bl,
                                                             const int m)
{
  const int nb = w->C / bl, a = m + 2;
  const size_t sV = (size_t)ni * w->th * w->tw * w->C + PAD, plane = (size_t)w->H * w->W * bl;
  float v[36 * MAXB], e[36 * MAXB];
  for (int tx = 0; tx < w->tw; tx++) {
    size_t t = ((size_t)n * w->th + ty) * w->tw + tx;
    for (int cb = 0; cb < nb; cb++) {
      float *xp = dx + ((size_t)(n0 + n) * nb + cb) * plane;
      for (int p = 0; p < a * a; p++) cp(v + p * bl, dV + p * sV + t * w->C + cb * bl, bl);
      if (m == 2) tf_b2(v, e, bl);
      else tf_b4(v, e, bl);
      for (int i = 0; i < a; i++)
        for (int j = 0; j < a; j++) {
          int r = m * ty - 1 + i, c = m * tx - 1 + j, nl = bl;
          if (r < 0 || r >= w->H || c < 0 || c >= w->W) continue;
          float *o = xp + ((size_t)r * w->W + c) * bl;
          const float *s = e + (i * a + j) * bl;
          LANES o[l] += s[l];
        }
    }
  }
}

/* y (the chunk's images) = AT M_t AT^T for the tiles of row ty of image n, the m x m tiles
 * clipped to H x W */
static inline __attribute__((always_inline)) void out_row(const struct dpt_wino *w, const float *M, int n0, int ni,
                                                          int n, int ty, float *y, const int bl, const int m)
{
  const int nb = w->K / bl, a = m + 2;
  const size_t sM = (size_t)ni * w->th * w->tw * w->K + PAD, plane = (size_t)w->H * w->W * bl;
  float mm[36 * MAXB], o[16 * MAXB];
  for (int tx = 0; tx < w->tw; tx++) {
    size_t t = ((size_t)n * w->th + ty) * w->tw + tx;
    for (int kb = 0; kb < nb; kb++) {
      float *yp = y + ((size_t)(n0 + n) * nb + kb) * plane;
      for (int p = 0; p < a * a; p++) cp(mm + p * bl, M + p * sM + t * w->K + kb * bl, bl);
      if (m == 2) tf_at2(mm, o, bl);
      else tf_at4(mm, o, bl);
      for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) {
          int r = m * ty + i, c = m * tx + j;
          if (r < w->H && c < w->W) cp(yp + ((size_t)r * w->W + c) * bl, o + (i * m + j) * bl, bl);
        }
    }
  }
}

/* dM[p][t][k] = (AT^T dy_t AT)[p] for the tiles of row ty of image n, dy outside H x W taken
 * as 0 */
static inline __attribute__((always_inline)) void out_adj_row(const struct dpt_wino *w, const float *dy, int n0,
                                                              int ni, int n, int ty, float *dM, const int bl,
                                                              const int m)
{
  const int nb = w->K / bl, a = m + 2;
  const size_t sM = (size_t)ni * w->th * w->tw * w->K + PAD, plane = (size_t)w->H * w->W * bl;
  float o[16 * MAXB], mm[36 * MAXB];
  for (int tx = 0; tx < w->tw; tx++) {
    size_t t = ((size_t)n * w->th + ty) * w->tw + tx;
    for (int kb = 0; kb < nb; kb++) {
      const float *yp = dy + ((size_t)(n0 + n) * nb + kb) * plane;
      for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) {
          int r = m * ty + i, c = m * tx + j;
          if (r < w->H && c < w->W) cp(o + (i * m + j) * bl, yp + ((size_t)r * w->W + c) * bl, bl);
          else zero(o + (i * m + j) * bl, bl);
        }
      if (m == 2) tf_a2(o, mm, bl);
      else tf_a4(o, mm, bl);
      for (int p = 0; p < a * a; p++) cp(dM + p * sM + t * w->K + kb * bl, mm + p * bl, bl);
    }
  }
}

/* One call of the row function fn with the block (8, 16) and the tile (2, 4) as
 * compile-time constants, inside the caller's OpenMP body */
#define ROWS(fn, ...)                                          \
  do {                                                         \
    if (w->blk == 8 && w->m == 2) fn(w, __VA_ARGS__, 8, 2);    \
    else if (w->blk == 8) fn(w, __VA_ARGS__, 8, 4);            \
    else if (w->m == 2) fn(w, __VA_ARGS__, 16, 2);             \
    else fn(w, __VA_ARGS__, 16, 4);                            \
  } while (0)

DPT_WINO_ROW_DISPATCHERS

/* U[p][k][c] = (G g_kc G^T)[p] for output channel k, 8 input channels at a time (C is a
 * multiple of 8) */
static inline __attribute__((always_inline)) void w_row(const struct dpt_wino *w, const float *g, int k, float *U,
                                                        const int m)
{
  const size_t su = dpt_wino_su(w);
  const int P = (m + 2) * (m + 2);
  for (int c = 0; c < w->C; c += 8) {
    float gl[9 * 8], u[36 * 8];
    const float *gk = g + ((size_t)k * w->C + c) * 9;
    for (int l = 0; l < 8; l++)
      for (int j = 0; j < 9; j++) gl[j * 8 + l] = gk[l * 9 + j];
    if (m == 2) tf_g2(gl, u, 8);
    else tf_g4(gl, u, 8);
    for (int p = 0; p < P; p++) cp(U + p * su + (size_t)k * w->C + c, u + p * 8, 8);
  }
}

/* dg[k][c] = G^T dU_kc G for output channel k */
static inline __attribute__((always_inline)) void w_adj_row(const struct dpt_wino *w, const float *dU, int k,
                                                            float *dg, const int m)
{
  const size_t su = dpt_wino_su(w);
  const int P = (m + 2) * (m + 2);
  for (int c = 0; c < w->C; c += 8) {
    float u[36 * 8], gl[9 * 8];
    float *gk = dg + ((size_t)k * w->C + c) * 9;
    for (int p = 0; p < P; p++) cp(u + p * 8, dU + p * su + (size_t)k * w->C + c, 8);
    if (m == 2) tf_gt2(u, gl, 8);
    else tf_gt4(u, gl, 8);
    for (int l = 0; l < 8; l++)
      for (int j = 0; j < 3 * 3; j++) gk[l * 9 + j] = gl[j * 8 + l];
  }
}

static void w_tf(const struct dpt_wino *w, const float *g, float *U)
{
#pragma omp parallel for schedule(static)
  for (int k = 0; k < w->K; k++) {
    if (w->m == 2) w_row(w, g, k, U, 2);
    else w_row(w, g, k, U, 4);
  }
}

static void w_tf_adj(const struct dpt_wino *w, const float *dU, float *dg)
{
#pragma omp parallel for schedule(static)
  for (int k = 0; k < w->K; k++) {
    if (w->m == 2) w_adj_row(w, dU, k, dg, 2);
    else w_adj_row(w, dU, k, dg, 4);
  }
}

const struct dpt_wino_tf DPT_WINO_TF_NAME = {in_tf, in_tf_adj, out_tf, out_tf_adj, w_tf, w_tf_adj};
