/* test_wino: the F(2x2,3x3) Winograd convolution (trainer/dpt_wino.c) against a float64
 * direct convolution (forward, input gradient, weight gradient), on shapes with odd sizes
 * (clipped edge tiles), 1x1 images, both channel blocks (8, 16), several chunks of images
 * of unequal sizes; the chunk plan (every image once, in chunks within one image of each
 * other, none above the budget's); bad shapes are refused with a message.
 *
 * Tolerance, derived: every value the algorithm computes is a sum of products of inputs
 * with the transforms' entries (0, +-1, +-1/2), so with u = 2^-24 its float32 result is
 * within gamma(n) * S of the exact one (Higham, Accuracy and Stability, ch. 3), where S
 * is the same computation on absolute values (|matrices|, |x|, |g|, |dy|) and n is the
 * longest chain of roundings: forward, C (the product's sum) + 6 (input transform: 2
 * stages of <= 3 adds) + 4 (weights: 2 x 2) + 6 (output: 2 x 3) = C + 16; weight gradient,
 * tiles + 6 + 2 + 6 + 2 (products) = tiles + 16; input gradient, K + 2 + 4 + 6 + 3
 * (up to 4 overlapping patches) + 1 = K + 16.  S is computed here in float64.  Stride 2
 * (one_case_s2): the same with F(4,2)'s matrices, +3 for the four parts' sum (forward) and
 * 16 x tiles for the longest weight-gradient sum (the even-even part's 16 rows per tile). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_wino.h"

#include "dpt_check.h"

/* Lavin & Gray's matrices, written out here from the paper: F(2x2,3x3) and F(4x4,3x3) */
static const double BT2[16] = {1, 0, -1, 0, 0, 1, 1, 0, 0, -1, 1, 0, 0, 1, 0, -1};
static const double G2[12] = {1, 0, 0, .5, .5, .5, .5, -.5, .5, 0, 0, 1};
static const double AT2[8] = {1, 1, 1, 0, 0, 1, -1, -1};
static const double BT4[36] = {4, 0, -5, 0, 1, 0, 0, -4, -4, 1, 1, 0, 0, 4, -4, -1, 1, 0,
                               0, -2, -1, 2, 1, 0, 0, 2, -1, -2, 1, 0, 0, 4, 0, -5, 0, 1};
static const double G4[18] = {1. / 4, 0, 0, -1. / 6, -1. / 6, -1. / 6, -1. / 6, 1. / 6, -1. / 6,
                              1. / 24, 1. / 12, 1. / 6, 1. / 24, -1. / 12, 1. / 6, 0, 0, 1};
static const double AT4[24] = {1, 1, 1, 1, 1, 0, 0, 1, -1, 2, -2, 0, 0, 1, 1, 4, 4, 0, 0, 1, -1, 8, -8, 1};

/* Roundings of one 1-D pass of M (rows x cols) or its transpose: at most nz products (the
 * inexact coefficients such as 1/6 count one more each) and nz - 1 additions per output. */
static int pass_roundings(const double *M, int rows, int cols, int tr)
{
  int worst = 0;
  for (int r = 0; r < (tr ? cols : rows); r++) {
    int nz = 0;
    for (int i = 0; i < (tr ? rows : cols); i++) nz += (tr ? M[i * cols + r] : M[r * cols + i]) != 0;
    if (nz > worst) worst = nz;
  }
  return 2 * worst + 1;
}

static double gamma_n(int n) { double u = ldexp(1, -24); return n * u / (1 - n * u); }

/* out (ra x rc) = |L| in |R|^T, L ra x n, R rc x m, in n x m */
static void abs_sandwich(const double *L, int ra, int n, const double *R, int rc, int m, const double *in, double *out)
{
  for (int a = 0; a < ra; a++)
    for (int c = 0; c < rc; c++) {
      double s = 0;
      for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) s += fabs(L[a * n + i]) * fabs(in[i * m + j]) * fabs(R[c * m + j]);
      out[a * rc + c] = s;
    }
}

/* |L|^T in |R|: the adjoint direction (L ra x n: out n x m from in ra x rc) */
static void abs_sandwich_t(const double *L, int ra, int n, const double *R, int rc, int m, const double *in, double *out)
{
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++) {
      double s = 0;
      for (int a = 0; a < ra; a++)
        for (int c = 0; c < rc; c++) s += fabs(L[a * n + i]) * fabs(in[a * rc + c]) * fabs(R[c * m + j]);
      out[i * m + j] = s;
    }
}

static double urand(unsigned *s) { *s = *s * 1664525u + 1013904223u; return ((*s >> 8) / 16777216.0) * 2 - 1; }

#define AT4(a, n, ch, NC, r, q) a[(((size_t)(n) * (NC) + (ch)) * H + (r)) * W + (q)]

static void pack(const double *p, float *b, int N, int C, int H, int W, int blk)
{
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int r = 0; r < H; r++)
        for (int q = 0; q < W; q++)
          b[(((size_t)n * (C / blk) + c / blk) * H * W + (size_t)r * W + q) * blk + c % blk] =
              (float)p[(((size_t)n * C + c) * H + r) * W + q];
}

static double unpacked(const float *b, int n, int c, int r, int q, int C, int H, int W, int blk)
{
  return b[(((size_t)n * (C / blk) + c / blk) * H * W + (size_t)r * W + q) * blk + c % blk];
}

/* One value against the oracle: its error over the bound into *worst, a failure (the first
 * few per case) naming the array and index */
static void judge(const char *what, const char *arr, const int *ix, int nix, double got, double want, double bound,
                  double *worst, int *bad)
{
  double e = fabs(got - want), b = bound + 1e-300;
  if (e / b > *worst) *worst = e / b;
  if (e > b && (*bad)++ < 9) {
    char at[64] = "";
    for (int i = 0, o = 0; i < nix && o < (int)sizeof at; i++) o += snprintf(at + o, sizeof at - o, "[%d]", ix[i]);
    CHECK(0, "%s: %s%s off by %g > bound %g", what, arr, at, e, b);
  }
}

/* Random inputs (x, g scaled by 0.3, dy; g also in float) from seed, in that order */
static void inputs(unsigned seed, double *x, size_t nx, double *g, float *gf, size_t ng, double *dy, size_t ny)
{
  unsigned s = seed;
  for (size_t i = 0; i < nx; i++) x[i] = (float)urand(&s);
  for (size_t i = 0; i < ng; i++) g[i] = (float)(urand(&s) * 0.3);
  for (size_t i = 0; i < ny; i++) dy[i] = (float)urand(&s);
  for (size_t i = 0; i < ng; i++) gf[i] = (float)g[i];
}

/* The oracle: the 3x3, pad-1 convolution at stride st, directly in float64 (y, dx and dg zeroed
 * by the caller); output (H - 1) / st + 1 x (W - 1) / st + 1 */
static void direct(const double *x, const double *g, const double *dy, double *y, double *dx, double *dg, int N,
                   int C, int K, int H, int W, int st)
{
  const int Ho = (H - 1) / st + 1, Wo = (W - 1) / st + 1;
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++)
      for (int c = 0; c < C; c++)
        for (int r = 0; r < Ho; r++)
          for (int q = 0; q < Wo; q++)
            for (int i = 0; i < 3; i++)
              for (int j = 0; j < 3; j++) {
                int rr = st * r + i - 1, qq = st * q + j - 1;
                if (rr < 0 || rr >= H || qq < 0 || qq >= W) continue;
                size_t yo = (((size_t)n * K + k) * Ho + r) * Wo + q, xo = (((size_t)n * C + c) * H + rr) * W + qq;
                double gv = g[((size_t)k * C + c) * 9 + i * 3 + j];
                y[yo] += x[xo] * gv;
                dx[xo] += dy[yo] * gv;
                dg[((size_t)k * C + c) * 9 + i * 3 + j] += dy[yo] * x[xo];
              }
}

static int isa_avx2; /* the transforms' build under test (dpt_wino_tf.h) */

static void one_case(int N, int C, int K, int H, int W, int blk, int mt, int nc)
{
  const int a = mt + 2, P = a * a;
  const double *BT = mt == 2 ? BT2 : BT4, *G = mt == 2 ? G2 : G4, *AT = mt == 2 ? AT2 : AT4;
  /* two passes per 2-D transform */
  const int r_in = 2 * pass_roundings(BT, a, a, 0), r_in_adj = 2 * pass_roundings(BT, a, a, 1);
  const int r_w = 2 * pass_roundings(G, a, 3, 0), r_w_adj = 2 * pass_roundings(G, a, 3, 1);
  const int r_out = 2 * pass_roundings(AT, mt, a, 0), r_out_adj = 2 * pass_roundings(AT, mt, a, 1);
  struct dpt_err err = {0};
  struct dpt_wino w;
  char what[96];
  snprintf(what, sizeof what, "%s F(%d,3) N%d C%d K%d %dx%d blk%d chunk%d", isa_avx2 ? "avx2" : "base", mt, N, C, K,
           H, W, blk, nc);
  if (dpt_wino_init(&w, N, C, K, H, W, blk, mt, &err)) {
    CHECK(0, "%s: init: %s", what, err.msg);
    return;
  }
  if (nc) w.nc = nc;
  w.avx2 = isa_avx2;
  size_t nx = (size_t)N * C * H * W, ny = (size_t)N * K * H * W, ng = (size_t)K * C * 9;
  double *x = malloc(nx * 8), *g = malloc(ng * 8), *dy = malloc(ny * 8);
  double *y = calloc(ny, 8), *dx = calloc(nx, 8), *dg = calloc(ng, 8);
  double *yb = calloc(ny, 8), *dxb = calloc(nx, 8), *dgb = calloc(ng / 9 * P, 8);
  float *xf = malloc(nx * 4), *gf = malloc(ng * 4), *dyf = malloc(ny * 4), *yf = malloc(ny * 4);
  float *dxf = malloc(nx * 4), *dgf = malloc(ng * 4), *dgf2 = malloc(ng * 4);
  void *ws = malloc(dpt_wino_workspace(&w));
  inputs(12345u + (unsigned)(N * 7 + C * 13 + K * 17 + H * 19 + W * 23), x, nx, g, gf, ng, dy, ny);
  pack(x, xf, N, C, H, W, blk);
  pack(dy, dyf, N, K, H, W, blk);
  direct(x, g, dy, y, dx, dg, N, C, K, H, W, 1);
  /* S: the computation on absolute values, tile by tile */
  int th = (H + mt - 1) / mt, tw = (W + mt - 1) / mt;
  double *Ua = malloc(ng / 9 * P * 8), *Va = malloc((size_t)C * P * 8), *Ma = malloc((size_t)K * P * 8);
  for (size_t kc = 0; kc < ng / 9; kc++) abs_sandwich(G, a, 3, G, a, 3, g + kc * 9, Ua + kc * P);
  for (int n = 0; n < N; n++)
    for (int ty = 0; ty < th; ty++)
      for (int tx = 0; tx < tw; tx++) {
        for (int c = 0; c < C; c++) {
          double d[36];
          for (int i = 0; i < a; i++)
            for (int j = 0; j < a; j++) {
              int r = mt * ty - 1 + i, q = mt * tx - 1 + j;
              d[i * a + j] = r >= 0 && r < H && q >= 0 && q < W ? AT4(x, n, c, C, r, q) : 0;
            }
          abs_sandwich(BT, a, a, BT, a, a, d, Va + c * P);
        }
        for (int k = 0; k < K; k++) {
          double o[16], m[36];
          for (int i = 0; i < mt; i++)
            for (int j = 0; j < mt; j++) {
              int r = mt * ty + i, q = mt * tx + j;
              o[i * mt + j] = r < H && q < W ? AT4(dy, n, k, K, r, q) : 0;
            }
          abs_sandwich_t(AT, mt, a, AT, mt, a, o, Ma + k * P);
          for (int p = 0; p < P; p++) m[p] = 0;
          for (int c = 0; c < C; c++)
            for (int p = 0; p < P; p++) {
              m[p] += Ua[((size_t)k * C + c) * P + p] * Va[c * P + p];
              dgb[((size_t)k * C + c) * P + p] += Va[c * P + p] * Ma[k * P + p];
            }
          abs_sandwich(AT, mt, a, AT, mt, a, m, o);
          for (int i = 0; i < mt; i++)
            for (int j = 0; j < mt; j++)
              if (mt * ty + i < H && mt * tx + j < W) AT4(yb, n, k, K, mt * ty + i, mt * tx + j) = o[i * mt + j];
        }
        for (int c = 0; c < C; c++) {
          double v[36] = {0}, e[36];
          for (int k = 0; k < K; k++)
            for (int p = 0; p < P; p++) v[p] += Ua[((size_t)k * C + c) * P + p] * Ma[k * P + p];
          abs_sandwich_t(BT, a, a, BT, a, a, v, e);
          for (int i = 0; i < a; i++)
            for (int j = 0; j < a; j++) {
              int r = mt * ty - 1 + i, q = mt * tx - 1 + j;
              if (r >= 0 && r < H && q >= 0 && q < W) AT4(dxb, n, c, C, r, q) += e[i * a + j];
            }
        }
      }
  CHECK(dpt_wino_forward(&w, xf, gf, yf, ws, &err) == 0, "%s: forward: %s", what, err.msg);
  CHECK(dpt_wino_backward(&w, xf, gf, dyf, dxf, dgf, ws, &err) == 0, "%s: backward: %s", what, err.msg);
  CHECK(dpt_wino_backward(&w, xf, gf, dyf, NULL, dgf2, ws, &err) == 0, "%s: backward without dx: %s", what,
        err.msg);
  double worst[3] = {0, 0, 0}; /* error / bound */
  int bad = 0;
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++)
      for (int r = 0; r < H; r++)
        for (int q = 0; q < W; q++) {
          judge(what, "y", (int[]){n, k, r, q}, 4, unpacked(yf, n, k, r, q, K, H, W, blk), AT4(y, n, k, K, r, q),
                gamma_n(C + 1 + r_in + r_w + r_out) * AT4(yb, n, k, K, r, q), &worst[0], &bad);
        }
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int r = 0; r < H; r++)
        for (int q = 0; q < W; q++) {
          judge(what, "dx", (int[]){n, c, r, q}, 4, unpacked(dxf, n, c, r, q, C, H, W, blk), AT4(dx, n, c, C, r, q),
                gamma_n(K + 1 + r_out_adj + r_w + r_in_adj + 3) * AT4(dxb, n, c, C, r, q), &worst[1], &bad);
        }
  for (size_t kc = 0; kc < ng / 9; kc++) {
    double gb[9];
    abs_sandwich_t(G, a, 3, G, a, 3, dgb + kc * P, gb);
    for (int i = 0; i < 9; i++)
      judge(what, "dg", (int[]){(int)kc, i}, 2, dgf[kc * 9 + i], dg[kc * 9 + i],
            gamma_n(N * th * tw + 1 + r_in + r_out_adj + r_w_adj) * gb[i], &worst[2], &bad);
  }
  CHECK(!memcmp(dgf, dgf2, ng * 4), "%s: the weight gradient differs when the input gradient is skipped", what);
  printf("%-44s error/bound: y %.3f  dx %.3f  dg %.3f  (%d chunk(s))\n", what, worst[0], worst[1], worst[2],
         dpt_wino_chunks(&w));
  free(x), free(g), free(dy), free(y), free(dx), free(dg), free(yb), free(dxb), free(dgb);
  free(xf), free(gf), free(dyf), free(yf), free(dxf), free(dgf), free(dgf2), free(ws), free(Ua), free(Va), free(Ma);
}

/* Stride 2 (dpt_wino_init_s2): F(4,2) on the odd phase of each dimension, nothing on the even
 * one, written out here from dpt_wino.h; the even phase as a 4-point "transform" with
 * BT = AT = I and G = [1 1 1 1]^T (the 4 rows that share one U) */
static const double BT5[25] = {2, -1, -2, 1, 0, 0, 2, 1, -1, 0, 0, -2, 3, -1, 0, 0, -1, 0, 1, 0, 0, 2, -1, -2, 1};
static const double G5[10] = {.5, 0, .5, .5, 1. / 6, -1. / 6, 1. / 6, 1. / 3, 0, 1};
static const double AT5[20] = {1, 1, 1, 1, 0, 0, 1, -1, 2, 0, 0, 1, 1, 4, 0, 0, 1, -1, 8, 1};
static const double I4[16] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
static const double ONE4[4] = {1, 1, 1, 1};

/* Per dimension, phase 0 (odd: patch rows 0, 2, .., 8, kernel taps 0 and 2) or 1 (even:
 * patch rows 1, 3, 5, 7, tap 1): points a, patch samples, taps, BT (a x a), G (a x taps),
 * AT (4 x a) */
struct phase { int a, taps; const double *BT, *G, *AT; };
static const struct phase PH[2] = {{5, 2, BT5, G5, AT5}, {4, 1, I4, ONE4, I4}};

/* The float64 oracle (direct convolution at stride 2, pad 1) and S, the algorithm on
 * absolute values phase by phase (see the tolerance above: same derivation, the four parts'
 * sum adds 3 roundings to the forward, and the dx patches of neighbouring tiles share one row
 * or column: up to 4 contributions, 3 more) */
static void one_case_s2(int N, int C, int K, int H, int W, int blk, int nc)
{
  const int r_in = 2 * pass_roundings(BT5, 5, 5, 0), r_in_adj = 2 * pass_roundings(BT5, 5, 5, 1);
  const int r_w = 2 * pass_roundings(G5, 5, 2, 0), r_w_adj = 2 * pass_roundings(G5, 5, 2, 1);
  const int r_out = 2 * pass_roundings(AT5, 4, 5, 0), r_out_adj = 2 * pass_roundings(AT5, 4, 5, 1);
  struct dpt_err err = {0};
  struct dpt_wino w;
  char what[96];
  snprintf(what, sizeof what, "%s stride 2 N%d C%d K%d %dx%d blk%d chunk%d", isa_avx2 ? "avx2" : "base", N, C, K,
           H, W, blk, nc);
  if (dpt_wino_init_s2(&w, N, C, K, H, W, blk, &err)) {
    CHECK(0, "%s: init: %s", what, err.msg);
    return;
  }
  if (nc) w.nc = nc;
  w.avx2 = isa_avx2;
  const int Ho = w.Ho, Wo = w.Wo;
  CHECK(Ho == (H + 1) / 2 && Wo == (W + 1) / 2, "%s: output %dx%d", what, Ho, Wo);
  size_t nx = (size_t)N * C * H * W, ny = (size_t)N * K * Ho * Wo, ng = (size_t)K * C * 9;
  double *x = malloc(nx * 8), *g = malloc(ng * 8), *dy = malloc(ny * 8);
  double *y = calloc(ny, 8), *dx = calloc(nx, 8), *dg = calloc(ng, 8);
  double *yb = calloc(ny, 8), *dxb = calloc(nx, 8), *dgb = calloc(ng, 8);
  float *xf = malloc(nx * 4), *gf = malloc(ng * 4), *dyf = malloc(ny * 4), *yf = malloc(ny * 4);
  float *dxf = malloc(nx * 4), *dgf = malloc(ng * 4), *dgf2 = malloc(ng * 4);
  void *ws = malloc(dpt_wino_workspace(&w));
  inputs(777u + (unsigned)(N * 7 + C * 13 + K * 17 + H * 19 + W * 23), x, nx, g, gf, ng, dy, ny);
  pack(x, xf, N, C, H, W, blk);
  pack(dy, dyf, N, K, Ho, Wo, blk);
#define Y4(a, n, k, r, q) a[(((size_t)(n) * K + (k)) * Ho + (r)) * Wo + (q)]
  direct(x, g, dy, y, dx, dg, N, C, K, H, W, 2);
  /* S, per phase pair (py, px) */
  const int th = (Ho + 3) / 4, tw = (Wo + 3) / 4;
  for (int py = 0; py < 2; py++)
    for (int px = 0; px < 2; px++) {
      const struct phase *Y = &PH[py], *X = &PH[px];
      const int P = Y->a * X->a;
      double *Ua = malloc(ng / 9 * P * 8), *Va = malloc((size_t)C * P * 8), *Ma = malloc((size_t)K * P * 8);
      double *dUa = calloc(ng / 9 * P, 8);
      for (size_t kc = 0; kc < ng / 9; kc++) {
        double h[4];
        for (int i = 0; i < Y->taps; i++)
          for (int j = 0; j < X->taps; j++) h[i * X->taps + j] = g[kc * 9 + (py ? 1 : 2 * i) * 3 + (px ? 1 : 2 * j)];
        abs_sandwich(Y->G, Y->a, Y->taps, X->G, X->a, X->taps, h, Ua + kc * P);
      }
      for (int n = 0; n < N; n++)
        for (int ty = 0; ty < th; ty++)
          for (int tx = 0; tx < tw; tx++) {
            for (int c = 0; c < C; c++) {
              double d[25];
              for (int i = 0; i < Y->a; i++)
                for (int j = 0; j < X->a; j++) {
                  int r = 8 * ty - 1 + 2 * i + py, q = 8 * tx - 1 + 2 * j + px;
                  d[i * X->a + j] = r >= 0 && r < H && q >= 0 && q < W ? AT4(x, n, c, C, r, q) : 0;
                }
              abs_sandwich(Y->BT, Y->a, Y->a, X->BT, X->a, X->a, d, Va + c * P);
            }
            for (int k = 0; k < K; k++) {
              double o[16], m[25];
              for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) {
                  int r = 4 * ty + i, q = 4 * tx + j;
                  o[i * 4 + j] = r < Ho && q < Wo ? Y4(dy, n, k, r, q) : 0;
                }
              abs_sandwich_t(Y->AT, 4, Y->a, X->AT, 4, X->a, o, Ma + k * P);
              for (int p = 0; p < P; p++) m[p] = 0;
              for (int c = 0; c < C; c++)
                for (int p = 0; p < P; p++) {
                  m[p] += Ua[((size_t)k * C + c) * P + p] * Va[c * P + p];
                  dUa[((size_t)k * C + c) * P + p] += Va[c * P + p] * Ma[k * P + p];
                }
              abs_sandwich(Y->AT, 4, Y->a, X->AT, 4, X->a, m, o);
              for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                  if (4 * ty + i < Ho && 4 * tx + j < Wo) Y4(yb, n, k, 4 * ty + i, 4 * tx + j) += o[i * 4 + j];
            }
            for (int c = 0; c < C; c++) {
              double v[25] = {0}, e[25];
              for (int k = 0; k < K; k++)
                for (int p = 0; p < P; p++) v[p] += Ua[((size_t)k * C + c) * P + p] * Ma[k * P + p];
              abs_sandwich_t(Y->BT, Y->a, Y->a, X->BT, X->a, X->a, v, e);
              for (int i = 0; i < Y->a; i++)
                for (int j = 0; j < X->a; j++) {
                  int r = 8 * ty - 1 + 2 * i + py, q = 8 * tx - 1 + 2 * j + px;
                  if (r >= 0 && r < H && q >= 0 && q < W) AT4(dxb, n, c, C, r, q) += e[i * X->a + j];
                }
            }
          }
      for (size_t kc = 0; kc < ng / 9; kc++) {
        double h[4];
        abs_sandwich_t(Y->G, Y->a, Y->taps, X->G, X->a, X->taps, dUa + kc * P, h);
        for (int i = 0; i < Y->taps; i++)
          for (int j = 0; j < X->taps; j++) dgb[kc * 9 + (py ? 1 : 2 * i) * 3 + (px ? 1 : 2 * j)] = h[i * X->taps + j];
      }
      free(Ua), free(Va), free(Ma), free(dUa);
    }
  CHECK(dpt_wino_forward(&w, xf, gf, yf, ws, &err) == 0, "%s: forward: %s", what, err.msg);
  CHECK(dpt_wino_backward(&w, xf, gf, dyf, dxf, dgf, ws, &err) == 0, "%s: backward: %s", what, err.msg);
  CHECK(dpt_wino_backward(&w, xf, gf, dyf, NULL, dgf2, ws, &err) == 0, "%s: backward without dx: %s", what,
        err.msg);
  double worst[3] = {0, 0, 0};
  int bad = 0;
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++)
      for (int r = 0; r < Ho; r++)
        for (int q = 0; q < Wo; q++) {
          judge(what, "y", (int[]){n, k, r, q}, 4, unpacked(yf, n, k, r, q, K, Ho, Wo, blk), Y4(y, n, k, r, q),
                gamma_n(C + 1 + r_in + r_w + r_out + 3) * Y4(yb, n, k, r, q), &worst[0], &bad);
        }
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int r = 0; r < H; r++)
        for (int q = 0; q < W; q++) {
          judge(what, "dx", (int[]){n, c, r, q}, 4, unpacked(dxf, n, c, r, q, C, H, W, blk), AT4(dx, n, c, C, r, q),
                gamma_n(K + 1 + r_out_adj + r_w + r_in_adj + 3) * AT4(dxb, n, c, C, r, q), &worst[1], &bad);
        }
  for (size_t i = 0; i < ng; i++)
    judge(what, "dg", (int[]){(int)(i / 9), (int)(i % 9)}, 2, dgf[i], dg[i],
          gamma_n(16 * N * th * tw + 1 + r_in + r_out_adj + r_w_adj) * dgb[i], &worst[2], &bad);
#undef Y4
  CHECK(!memcmp(dgf, dgf2, ng * 4), "%s: the weight gradient differs when the input gradient is skipped", what);
  printf("%-44s error/bound: y %.3f  dx %.3f  dg %.3f  (%d chunk(s))\n", what, worst[0], worst[1], worst[2],
         dpt_wino_chunks(&w));
  free(x), free(g), free(dy), free(y), free(dx), free(dg), free(yb), free(dxb), free(dgb);
  free(xf), free(gf), free(dyf), free(yf), free(dxf), free(dgf), free(dgf2), free(ws);
}

/* Chunks of images n0 .. n0+ni-1 cover 0 .. N-1 once, in order, ceil(N / nc) of them, sizes
 * within one of each other and none above nc */
static void chunk_plan(void)
{
  struct dpt_err err = {0};
  struct dpt_wino w;
  int bad = 0;
  for (int N = 1; N <= 130; N++)
    for (int nc = 1; nc <= N; nc++) {
      if (dpt_wino_init(&w, N, 8, 8, 4, 4, 8, 4, &err)) {
        CHECK(0, "init N %d: %s", N, err.msg);
        return;
      }
      w.nc = nc;
      int c = dpt_wino_chunks(&w), next = 0, lo = N, hi = 0;
      for (int i = 0; i < c; i++) {
        int n0, ni;
        dpt_wino_chunk(&w, i, &n0, &ni);
        if (n0 != next || ni < 1) bad++;
        next = n0 + ni, lo = ni < lo ? ni : lo, hi = ni > hi ? ni : hi;
      }
      if ((next != N || c != (N + nc - 1) / nc || hi > nc || hi - lo > 1) && bad++ < 5)
        CHECK(0, "chunk plan of %d images at most %d per chunk: %d chunks, %d..%d images, up to image %d", N, nc,
              c, lo, hi, next);
    }
  CHECK(!bad, "%d chunk plans wrong", bad);
  /* ResNet-50's Winograd layers at 32 px, batch 32: the budget's chunks, evened out */
  static const int rn[][2] = {{64, 32}, {128, 16}, {256, 8}, {512, 4}};
  for (int i = 0; i < 4; i++) {
    CHECK(!dpt_wino_init(&w, 32, rn[i][0], rn[i][0], rn[i][1], rn[i][1], 8, 4, &err), "%s", err.msg);
    int c = dpt_wino_chunks(&w), lo = 32, hi = 0;
    for (int k = 0, n0, ni; k < c; k++) {
      dpt_wino_chunk(&w, k, &n0, &ni);
      lo = ni < lo ? ni : lo, hi = ni > hi ? ni : hi;
    }
    printf("ResNet-50 32 px, %d channels at %dx%d, batch 32: %d chunk(s) of %d..%d images\n", rn[i][0], rn[i][1],
           rn[i][1], c, lo, hi);
    CHECK(hi - lo <= 1 && hi <= w.nc, "%d channels: chunks of %d..%d images, at most %d", rn[i][0], lo, hi, w.nc);
  }
  /* its stride-2 layers: the 512-channel one in one chunk (U, 38 MB, sets the budget there) */
  static const int s2[][3] = {{128, 32, 6}, {256, 16, 3}, {512, 8, 1}};
  for (int i = 0; i < 3; i++) {
    CHECK(!dpt_wino_init_s2(&w, 32, s2[i][0], s2[i][0], s2[i][1], s2[i][1], 8, &err), "%s", err.msg);
    printf("ResNet-50 32 px, stride 2, %d channels at %dx%d: %d chunk(s), workspace %.1f MB\n", s2[i][0], s2[i][1],
           s2[i][1], dpt_wino_chunks(&w), dpt_wino_workspace(&w) / 1e6);
    CHECK(dpt_wino_chunks(&w) == s2[i][2], "stride 2, %d channels: %d chunks, expected %d", s2[i][0],
          dpt_wino_chunks(&w), s2[i][2]);
  }
}

int main(void)
{
  chunk_plan();
  __builtin_cpu_init();
  int have_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (!have_avx2) printf("SKIP the AVX2 + FMA build of the transforms: this CPU lacks AVX2 or FMA\n");
  for (int v = 0; v < 2 + have_avx2 * 2; v++) {
    int mt = v % 2 ? 4 : 2;
    isa_avx2 = v >= 2;
    one_case(1, 8, 8, 1, 1, 8, mt, 0);     /* one pixel: the tile is all padding but its centre */
    one_case(2, 8, 16, 3, 5, 8, mt, 0);    /* odd sizes: clipped edge tiles */
    one_case(3, 16, 8, 7, 7, 8, mt, 1);    /* ResNet's 7x7 at 224 px; one image per chunk */
    one_case(7, 8, 8, 4, 4, 8, mt, 3);     /* chunks of 2, 2 and 3 images */
    one_case(2, 16, 32, 8, 8, 16, mt, 0);  /* AVX-512's block */
    one_case(3, 32, 16, 5, 4, 16, mt, 2);
    one_case(2, 64, 64, 8, 8, 8, mt, 0);   /* ResNet-like widths */
    one_case(1, 8, 8, 2, 9, 8, mt, 0);
    one_case(2, 8, 8, 13, 10, 8, mt, 0);   /* several tiles with clipped rows and columns */
    if (mt == 2) continue;
    one_case_s2(1, 8, 8, 1, 1, 8, 0);      /* one pixel */
    one_case_s2(2, 8, 16, 4, 4, 8, 0);     /* one tile of 2x2 outputs */
    one_case_s2(2, 16, 8, 7, 9, 8, 0);     /* odd sizes: 4x5 outputs, clipped tiles */
    one_case_s2(3, 8, 8, 16, 16, 8, 1);    /* 8x8 outputs: 2x2 tiles, shared patch rows; an image per chunk */
    one_case_s2(7, 8, 8, 8, 8, 8, 3);      /* chunks of 2, 2 and 3 images */
    one_case_s2(2, 16, 32, 18, 12, 16, 0); /* AVX-512's block, 3x2 tiles */
    one_case_s2(2, 64, 64, 8, 8, 8, 0);    /* ResNet's layer4 at 32 px, narrower */
  }
  /* bad shapes are refused, saying what was asked */
  struct dpt_err err = {0};
  struct dpt_wino w;
  CHECK(dpt_wino_init(&w, 2, 12, 16, 8, 8, 8, 4, &err) == DPT_E_UNSUPPORTED && strstr(err.msg, "12"),
        "12 channels in blocks of 8: %s", err.msg);
  CHECK(dpt_wino_init(&w, 2, 16, 16, 8, 8, 4, 4, &err) == DPT_E_UNSUPPORTED, "block 4 accepted");
  CHECK(dpt_wino_init(&w, 2, 16, 16, 8, 8, 8, 3, &err) == DPT_E_UNSUPPORTED, "tile 3 accepted");
  CHECK(dpt_wino_init(&w, 0, 16, 16, 8, 8, 8, 4, &err) == DPT_E_UNSUPPORTED, "batch 0 accepted");
  CHECK(dpt_wino_init(&w, 1, 16, 16, 0, 8, 8, 4, &err) == DPT_E_UNSUPPORTED, "height 0 accepted");
  CHECK(dpt_wino_init_s2(&w, 2, 12, 16, 8, 8, 8, &err) == DPT_E_UNSUPPORTED && strstr(err.msg, "stride 2"),
        "stride 2, 12 channels in blocks of 8: %s", err.msg);
  return failures != 0;
}
