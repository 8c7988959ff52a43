/* dpt_wino_s2_tf.c — the transforms of the stride-2 Winograd convolution (dpt_wino.h,
 * dpt_wino_init_s2), compiled once for any x86-64 and once with -mavx2 -mfma like
 * dpt_wino_tf.c (DPT_WINO_AVX2 picks the table's name).
 *
 * Output tile (ty, tx) is 4x4 at (4 ty, 4 tx); it reads the 9x9 input patch at
 * (8 ty - 1, 8 tx - 1) (pad 1).  Patch rows 0, 2, .., 8 are the odd phase (input rows
 * 2i - 1: the kernel's rows 0 and 2), rows 1, 3, 5, 7 the even phase (rows 2i: kernel row 1);
 * the same for columns.  Slots (dpt_wino_tf.h): 0 even-even, 1 + a odd-even (a: the row
 * point), 6 + b even-odd (b: the column point), 11 + 5a + b odd-odd.  Neighbouring patches
 * share one row or column (patch row 8 of ty is row 0 of ty + 1). */
#include <string.h>

#include "dpt_wino_pass.h"

#ifdef DPT_WINO_AVX2
#define NAME dpt_wino_s2_tf_avx2
#else
#define NAME dpt_wino_s2_tf_base
#endif

/* F(4,2), points 0, 1, -1, 2, infinity (dpt_wino.h) */
PASS(bt5, 5, 5, o0[l] = 2 * (x0[l] - x2[l]) - x1[l] + x3[l]; o1[l] = 2 * x1[l] + x2[l] - x3[l];
     o2[l] = 3 * x2[l] - 2 * x1[l] - x3[l]; o3[l] = x3[l] - x1[l]; o4[l] = 2 * (x1[l] - x3[l]) - x2[l] + x4[l];)
PASS(b5, 5, 5, o0[l] = 2 * x0[l]; o1[l] = 2 * (x1[l] - x2[l] + x4[l]) - x0[l] - x3[l];
     o2[l] = x1[l] - 2 * x0[l] + 3 * x2[l] - x4[l]; o3[l] = x0[l] - x1[l] - x2[l] + x3[l] - 2 * x4[l]; o4[l] = x4[l];)
PASS(g5, 2, 5, o0[l] = .5f * x0[l]; o1[l] = .5f * (x0[l] + x1[l]); o2[l] = (1.f / 6) * (x0[l] - x1[l]);
     o3[l] = (1.f / 6) * x0[l] + (1.f / 3) * x1[l]; o4[l] = x1[l];)
PASS(gt5, 5, 2, o0[l] = .5f * (x0[l] + x1[l]) + (1.f / 6) * (x2[l] + x3[l]);
     o1[l] = .5f * x1[l] - (1.f / 6) * x2[l] + (1.f / 3) * x3[l] + x4[l];)
PASS(at5, 5, 4, o0[l] = x0[l] + x1[l] + x2[l] + x3[l]; o1[l] = x1[l] - x2[l] + 2 * x3[l];
     o2[l] = x1[l] + x2[l] + 4 * x3[l]; o3[l] = x1[l] - x2[l] + 8 * x3[l] + x4[l];)
PASS(a5, 4, 5, o0[l] = x0[l]; o1[l] = x0[l] + x1[l] + x2[l] + x3[l]; o2[l] = x0[l] - x1[l] + x2[l] - x3[l];
     o3[l] = x0[l] + 2 * x1[l] + 4 * x2[l] + 8 * x3[l]; o4[l] = x3[l];)

#define SLOT(base, s, T, ch, row) ((base) + dpt_wino_s2_off((s), (T), (ch)) + (size_t)(row) * (ch))

/* V of the tiles of row ty of image n (of the chunk n0 .. n0+ni-1) */
static inline __attribute__((always_inline)) void in_row(const struct dpt_wino *w, const float *x, int n0, int ni,
                                                         int n, int ty, float *V, const int bl)
{
  const int nb = w->C / bl, C = w->C;
  const size_t T = (size_t)ni * w->th * w->tw, plane = (size_t)w->H * w->W * bl;
  float d[81 * MAXB], t5[25 * MAXB], v[25 * MAXB];
  for (int tx = 0; tx < w->tw; tx++) {
    size_t t = ((size_t)n * w->th + ty) * w->tw + tx;
    for (int cb = 0; cb < nb; cb++) {
      const float *xp = x + ((size_t)(n0 + n) * nb + cb) * plane;
      float *Vc = V + cb * bl;
      for (int i = 0; i < 9; i++)
        for (int j = 0; j < 9; j++) {
          int r = 8 * ty - 1 + i, c = 8 * tx - 1 + j;
          if (r >= 0 && r < w->H && c >= 0 && c < w->W) cp(d + (i * 9 + j) * bl, xp + ((size_t)r * w->W + c) * bl, bl);
          else zero(d + (i * 9 + j) * bl, bl);
        }
      /* odd-odd: BT d BT^T on the 5x5 odd rows and columns */
      for (int b = 0; b < 5; b++) bt5(d + 2 * b * bl, 18, t5 + b * bl, 5, bl);
      for (int a = 0; a < 5; a++) bt5(t5 + a * 5 * bl, 1, v + a * 5 * bl, 1, bl);
      for (int p = 0; p < 25; p++) cp(SLOT(Vc, 11 + p, T, C, t), v + p * bl, bl);
      /* odd rows, even columns: BT down the columns */
      for (int j = 0; j < 4; j++) bt5(d + (2 * j + 1) * bl, 18, t5 + j * bl, 4, bl);
      for (int a = 0; a < 5; a++)
        for (int j = 0; j < 4; j++) cp(SLOT(Vc, 1 + a, T, C, t * 4 + j), t5 + (a * 4 + j) * bl, bl);
      /* even rows, odd columns: BT along the rows */
      for (int i = 0; i < 4; i++) bt5(d + (2 * i + 1) * 9 * bl, 2, t5 + i * 5 * bl, 1, bl);
      for (int i = 0; i < 4; i++)
        for (int b = 0; b < 5; b++) cp(SLOT(Vc, 6 + b, T, C, t * 4 + i), t5 + (i * 5 + b) * bl, bl);
      /* even-even: as it is */
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) cp(SLOT(Vc, 0, T, C, t * 16 + i * 4 + j), d + ((2 * i + 1) * 9 + 2 * j + 1) * bl, bl);
    }
  }
}

/* dx += the adjoint of in_row for the tiles of row ty of image n (in_tf_adj clears dx and
 * orders the rows) */
static inline __attribute__((always_inline)) void in_adj_row(const struct dpt_wino *w, const float *dV, int n0,
                                                             int ni, int n, int ty, float *dx, const int bl)
{
  const int nb = w->C / bl, C = w->C;
  const size_t T = (size_t)ni * w->th * w->tw, plane = (size_t)w->H * w->W * bl;
  float e[81 * MAXB], v[25 * MAXB], t5[25 * MAXB];
  for (int tx = 0; tx < w->tw; tx++) {
    size_t t = ((size_t)n * w->th + ty) * w->tw + tx;
    for (int cb = 0; cb < nb; cb++) {
      float *xp = dx + ((size_t)(n0 + n) * nb + cb) * plane;
      const float *Vc = dV + cb * bl;
      /* odd-odd: BT^T dV BT onto patch (2a, 2b) */
      for (int p = 0; p < 25; p++) cp(v + p * bl, SLOT(Vc, 11 + p, T, C, t), bl);
      for (int b = 0; b < 5; b++) b5(v + b * bl, 5, t5 + b * bl, 5, bl);
      for (int a = 0; a < 5; a++) b5(t5 + a * 5 * bl, 1, e + 2 * a * 9 * bl, 2, bl);
      /* odd rows, even columns: onto (2a, 2j + 1) */
      for (int a = 0; a < 5; a++)
        for (int j = 0; j < 4; j++) cp(v + (a * 4 + j) * bl, SLOT(Vc, 1 + a, T, C, t * 4 + j), bl);
      for (int j = 0; j < 4; j++) b5(v + j * bl, 4, e + (2 * j + 1) * bl, 18, bl);
      /* even rows, odd columns: onto (2i + 1, 2b) */
      for (int i = 0; i < 4; i++)
        for (int b = 0; b < 5; b++) cp(v + (i * 5 + b) * bl, SLOT(Vc, 6 + b, T, C, t * 4 + i), bl);
      for (int i = 0; i < 4; i++) b5(v + i * 5 * bl, 1, e + (2 * i + 1) * 9 * bl, 2, bl);
      /* even-even */
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) cp(e + ((2 * i + 1) * 9 + 2 * j + 1) * bl, SLOT(Vc, 0, T, C, t * 16 + i * 4 + j), bl);
      for (int i = 0; i < 9; i++)
        for (int j = 0; j < 9; j++) {
          int r = 8 * ty - 1 + i, c = 8 * tx - 1 + j, nl = bl;
          if (r < 0 || r >= w->H || c < 0 || c >= w->W) continue;
          float *o = xp + ((size_t)r * w->W + c) * bl;
          const float *s = e + (i * 9 + j) * bl;
          LANES o[l] += s[l];
        }
    }
  }
}

/* y = the four parts' output transforms, added, for the tiles of row ty of image n (4x4
 * tiles clipped to Ho x Wo) */
static inline __attribute__((always_inline)) void out_row(const struct dpt_wino *w, const float *M, int n0, int ni,
                                                          int n, int ty, float *y, const int bl)
{
  const int nb = w->K / bl, K = w->K;
  const size_t T = (size_t)ni * w->th * w->tw, plane = (size_t)w->Ho * w->Wo * bl;
  float mm[25 * MAXB], t5[25 * MAXB], o[16 * MAXB], e[16 * MAXB];
  for (int tx = 0; tx < w->tw; tx++) {
    size_t t = ((size_t)n * w->th + ty) * w->tw + tx;
    for (int kb = 0; kb < nb; kb++) {
      float *yp = y + ((size_t)(n0 + n) * nb + kb) * plane;
      const float *Mc = M + kb * bl;
      int nl = bl;
      for (int p = 0; p < 25; p++) cp(mm + p * bl, SLOT(Mc, 11 + p, T, K, t), bl);
      for (int b = 0; b < 5; b++) at5(mm + b * bl, 5, t5 + b * bl, 5, bl);
      for (int i = 0; i < 4; i++) at5(t5 + i * 5 * bl, 1, o + i * 4 * bl, 1, bl);
      for (int a = 0; a < 5; a++)
        for (int j = 0; j < 4; j++) cp(mm + (a * 4 + j) * bl, SLOT(Mc, 1 + a, T, K, t * 4 + j), bl);
      for (int j = 0; j < 4; j++) at5(mm + j * bl, 4, e + j * bl, 4, bl);
      for (int q = 0; q < 16; q++) {
        float *oq = o + q * bl;
        const float *eq = e + q * bl;
        LANES oq[l] += eq[l];
      }
      for (int i = 0; i < 4; i++)
        for (int b = 0; b < 5; b++) cp(mm + (i * 5 + b) * bl, SLOT(Mc, 6 + b, T, K, t * 4 + i), bl);
      for (int i = 0; i < 4; i++) at5(mm + i * 5 * bl, 1, e + i * 4 * bl, 1, bl);
      for (int q = 0; q < 16; q++) {
        float *oq = o + q * bl;
        const float *eq = e + q * bl, *mq = SLOT(Mc, 0, T, K, t * 16 + q);
        LANES oq[l] += eq[l] + mq[l];
      }
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
          int r = 4 * ty + i, c = 4 * tx + j;
          if (r < w->Ho && c < w->Wo) cp(yp + ((size_t)r * w->Wo + c) * bl, o + (i * 4 + j) * bl, bl);
        }
    }
  }
}

/* dM = the adjoint of out_row (dy outside Ho x Wo taken as 0) */
static inline __attribute__((always_inline)) void out_adj_row(const struct dpt_wino *w, const float *dy, int n0,
                                                              int ni, int n, int ty, float *dM, const int bl)
{
  const int nb = w->K / bl, K = w->K;
  const size_t T = (size_t)ni * w->th * w->tw, plane = (size_t)w->Ho * w->Wo * bl;
  float o[16 * MAXB], t5[20 * MAXB], mm[25 * MAXB];
  for (int tx = 0; tx < w->tw; tx++) {
    size_t t = ((size_t)n * w->th + ty) * w->tw + tx;
    for (int kb = 0; kb < nb; kb++) {
      const float *yp = dy + ((size_t)(n0 + n) * nb + kb) * plane;
      float *Mc = dM + kb * bl;
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
          int r = 4 * ty + i, c = 4 * tx + j;
          if (r < w->Ho && c < w->Wo) cp(o + (i * 4 + j) * bl, yp + ((size_t)r * w->Wo + c) * bl, bl);
          else zero(o + (i * 4 + j) * bl, bl);
        }
      /* AT^T down the columns: the odd-even part, and the first half of the odd-odd one */
      for (int j = 0; j < 4; j++) a5(o + j * bl, 4, t5 + j * bl, 4, bl);
      for (int a = 0; a < 5; a++)
        for (int j = 0; j < 4; j++) cp(SLOT(Mc, 1 + a, T, K, t * 4 + j), t5 + (a * 4 + j) * bl, bl);
      for (int a = 0; a < 5; a++) a5(t5 + a * 4 * bl, 1, mm + a * 5 * bl, 1, bl);
      for (int p = 0; p < 25; p++) cp(SLOT(Mc, 11 + p, T, K, t), mm + p * bl, bl);
      /* AT^T along the rows: even-odd */
      for (int i = 0; i < 4; i++) a5(o + i * 4 * bl, 1, mm + i * 5 * bl, 1, bl);
      for (int i = 0; i < 4; i++)
        for (int b = 0; b < 5; b++) cp(SLOT(Mc, 6 + b, T, K, t * 4 + i), mm + (i * 5 + b) * bl, bl);
      for (int q = 0; q < 16; q++) cp(SLOT(Mc, 0, T, K, t * 16 + q), o + q * bl, bl);
    }
  }
}

#define ROWS(fn, ...)                          \
  do {                                         \
    if (w->blk == 8) fn(w, __VA_ARGS__, 8);    \
    else fn(w, __VA_ARGS__, 16);               \
  } while (0)

DPT_WINO_ROW_DISPATCHERS

/* U[s][k][c] for output channel k, 8 input channels at a time: the corners g[0|2][0|2]
 * through G on both sides, g[0|2][1] and g[1][0|2] through G once, the centre as it is */
static void w_row(const struct dpt_wino *w, const float *g, int k, float *U)
{
  const size_t su = dpt_wino_su(w);
  for (int c = 0; c < w->C; c += 8) {
    float gl[9 * 8], t[10 * 8], u[25 * 8];
    const float *gk = g + ((size_t)k * w->C + c) * 9;
    float *Uk = U + (size_t)k * w->C + c;
    for (int l = 0; l < 8; l++)
      for (int j = 0; j < 9; j++) gl[j * 8 + l] = gk[l * 9 + j];
    for (int q = 0; q < 2; q++) g5(gl + 2 * q * 8, 6, t + q * 8, 2, 8);
    for (int a = 0; a < 5; a++) g5(t + a * 2 * 8, 1, u + a * 5 * 8, 1, 8);
    for (int p = 0; p < 25; p++) cp(Uk + (11 + p) * su, u + p * 8, 8);
    g5(gl + 1 * 8, 6, u, 1, 8);
    for (int a = 0; a < 5; a++) cp(Uk + (1 + a) * su, u + a * 8, 8);
    g5(gl + 3 * 8, 2, u, 1, 8);
    for (int b = 0; b < 5; b++) cp(Uk + (6 + b) * su, u + b * 8, 8);
    cp(Uk, gl + 4 * 8, 8);
  }
}

/* dg[k][c] = the adjoint of w_row */
static void w_adj_row(const struct dpt_wino *w, const float *dU, int k, float *dg)
{
  const size_t su = dpt_wino_su(w);
  for (int c = 0; c < w->C; c += 8) {
    float u[25 * 8], t[10 * 8], gl[9 * 8];
    float *gk = dg + ((size_t)k * w->C + c) * 9;
    const float *Uk = dU + (size_t)k * w->C + c;
    for (int p = 0; p < 25; p++) cp(u + p * 8, Uk + (11 + p) * su, 8);
    for (int b = 0; b < 5; b++) gt5(u + b * 8, 5, t + b * 8, 5, 8);
    for (int a = 0; a < 2; a++) gt5(t + a * 5 * 8, 1, gl + 6 * a * 8, 2, 8);
    for (int a = 0; a < 5; a++) cp(u + a * 8, Uk + (1 + a) * su, 8);
    gt5(u, 1, gl + 1 * 8, 6, 8);
    for (int b = 0; b < 5; b++) cp(u + b * 8, Uk + (6 + b) * su, 8);
    gt5(u, 1, gl + 3 * 8, 2, 8);
    cp(gl + 4 * 8, Uk, 8);
    for (int l = 0; l < 8; l++)
      for (int j = 0; j < 9; j++) gk[l * 9 + j] = gl[j * 8 + l];
  }
}

static void w_tf(const struct dpt_wino *w, const float *g, float *U)
{
#pragma omp parallel for schedule(static)
  for (int k = 0; k < w->K; k++) w_row(w, g, k, U);
}

static void w_tf_adj(const struct dpt_wino *w, const float *dU, float *dg)
{
#pragma omp parallel for schedule(static)
  for (int k = 0; k < w->K; k++) w_adj_row(w, dU, k, dg);
}

const struct dpt_wino_tf NAME = {in_tf, in_tf_adj, out_tf, out_tf_adj, w_tf, w_tf_adj};
