/* dpt_wino.c — F(2x2 or 4x4, 3x3) Winograd convolution: tile transforms here, the products
 * per chunk of images in oneDNN's sgemm (see dpt_wino.h for the algebra). */
#include "dpt_wino.h"

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <string.h>

#include "dpt_wino_tf.h"

/* Tiles and chunks: rows_per_tile rows of V (C wide) and M (K wide) per output tile, the
 * products against P matrices of U (K x C).  A chunk's V and M fill the workspace budget, or
 * U's size where that is larger: each product streams its U once per chunk, so where U is the
 * larger operand (ResNet-50's 512-channel stride-2 layer: 38 MB of U, 0.3 MB of V and M per
 * image) fewer, fuller chunks pay (measured: one chunk of 32 images 80 ms forward + backward,
 * two of 16 88 ms).  Stride 1 keeps the budget (P = 0): its 256-channel layer, the one plan
 * this would change, showed no difference within this host's noise. */
static void plan(struct dpt_wino *w, size_t rows_per_tile, size_t P)
{
  w->th = (w->Ho + w->m - 1) / w->m;
  w->tw = (w->Wo + w->m - 1) / w->m;
  size_t per_img = rows_per_tile * w->th * w->tw * (w->C + w->K) * sizeof(float);
  size_t budget = P * w->K * w->C * sizeof(float);
  if (budget < DPT_WINO_WS_CHUNK_BYTES) budget = DPT_WINO_WS_CHUNK_BYTES;
  size_t nc = budget / per_img, chunks;
  nc = nc < 1 ? 1 : nc > (size_t)w->N ? (size_t)w->N : nc;
  chunks = ((size_t)w->N + nc - 1) / nc;
  w->nc = (int)(((size_t)w->N + chunks - 1) / chunks); /* the largest of dpt_wino_chunk's */
  __builtin_cpu_init();
  w->avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

int dpt_wino_init(struct dpt_wino *w, int N, int C, int K, int H, int W, int blk, int m, struct dpt_err *err)
{
  memset(w, 0, sizeof *w);
  if ((blk != 8 && blk != 16) || (m != 2 && m != 4) || N < 1 || C < 1 || K < 1 || H < 1 || W < 1 || C % blk ||
      K % blk)
    return dpt_err_set(err, DPT_E_UNSUPPORTED,
                       "winograd convolution F(%dx%d,3x3): batch %d, %d -> %d channels, %dx%d in blocks of %d: "
                       "needs tiles of 2 or 4, channel counts that are multiples of the block (8 or 16) and "
                       "non-empty sizes",
                       m, m, N, C, K, H, W, blk);
  w->N = N, w->C = C, w->K = K, w->H = H, w->W = W, w->blk = blk, w->m = m, w->a = m + 2;
  w->stride = 1, w->Ho = H, w->Wo = W;
  plan(w, (size_t)w->a * w->a, 0);
  return 0;
}

int dpt_wino_init_s2(struct dpt_wino *w, int N, int C, int K, int H, int W, int blk, struct dpt_err *err)
{
  int rc = dpt_wino_init(w, N, C, K, H, W, blk, 4, err);
  if (rc) {
    dpt_err_prefix(err, "stride 2");
    return rc;
  }
  w->stride = 2, w->Ho = (H + 1) / 2, w->Wo = (W + 1) / 2;
  plan(w, 81, DPT_WINO_S2_SLOTS);
  return 0;
}

int dpt_wino_chunks(const struct dpt_wino *w) { return (w->N + w->nc - 1) / w->nc; }

/* Chunk i of dpt_wino_chunks(w): images n0 .. n0+ni-1, the sizes within one of each other
 * (32 images at most 28 per chunk: 16 + 16, not 28 + 4, whose products of a few rows of
 * tiles would run at a fraction of the others' speed) and none above w->nc */
void dpt_wino_chunk(const struct dpt_wino *w, int i, int *n0, int *ni)
{
  int c = dpt_wino_chunks(w);
  *n0 = (int)((long long)i * w->N / c);
  *ni = (int)((long long)(i + 1) * w->N / c) - *n0;
}

/* U [P][K][C], dU [P][K][C], V [P][T][C], M [P][T][K] with P = alpha^2 points, T tiles of one
 * chunk; at stride 2, P = 36 slots of U and dU, V and M by dpt_wino_s2_off (81 T rows) */
static size_t tiles(const struct dpt_wino *w) { return (size_t)w->nc * w->th * w->tw; }
#define PAD DPT_WINO_PAD
#define sU dpt_wino_su
#define S2 DPT_WINO_S2_SLOTS

static int npts(const struct dpt_wino *w) { return w->stride == 2 ? S2 : dpt_wino_points(w); }

/* Where product p's V (ch = C) or M (ch = K) starts, its rows */
static size_t off(const struct dpt_wino *w, int p, size_t T, size_t ch)
{
  return w->stride == 2 ? dpt_wino_s2_off(p, T, ch) : (size_t)p * (T * ch + PAD);
}
static int rows(const struct dpt_wino *w, int p, size_t T) { return (int)(w->stride == 2 ? dpt_wino_s2_rows(p) * T : T); }

size_t dpt_wino_workspace(const struct dpt_wino *w)
{
  return (2 * (size_t)npts(w) * sU(w) + off(w, npts(w), tiles(w), w->C) + off(w, npts(w), tiles(w), w->K)) *
         sizeof(float);
}

static const struct dpt_wino_tf *tf(const struct dpt_wino *w)
{
  if (w->stride == 2) return w->avx2 ? &dpt_wino_s2_tf_avx2 : &dpt_wino_s2_tf_base;
  return w->avx2 ? &dpt_wino_tf_avx2 : &dpt_wino_tf_base;
}

enum prod { FWD, DW, DX };

/* The chunk's P products, one per thread at a time (oneDNN's sgemm runs single-threaded
 * inside a parallel region), the largest first (stride 2: 16, 4 and 1 rows per tile):
 *   FWD M[p] (rows x K) = V[p] (rows x C) U[p]^T
 *   DW  dU[p] (K x C) (+)= dM[p]^T V[p]      (beta 0 or 1)
 *   DX  dV[p] (rows x C) = dM[p] U[p], over V */
static int products(const struct dpt_wino *w, enum prod what, size_t T, float *U, float *V, float *M, float beta,
                    struct dpt_err *err)
{
  static const char *name[] = {"forward product", "weight-gradient product", "input-gradient product"};
  dnnl_status_t bad = dnnl_success;
  const int C = w->C, K = w->K;
#pragma omp parallel for schedule(dynamic, 1)
  for (int p = 0; p < npts(w); p++) {
    float *v = V + off(w, p, T, C), *m = M + off(w, p, T, K), *u = U + p * sU(w);
    int r = rows(w, p, T);
    dnnl_status_t st = what == FWD ? dnnl_sgemm('N', 'T', r, K, C, 1.f, v, C, u, C, 0.f, m, K)
                       : what == DW ? dnnl_sgemm('T', 'N', K, C, r, 1.f, m, K, v, C, beta, u, C)
                                    : dnnl_sgemm('N', 'N', r, C, K, 1.f, m, K, u, C, 0.f, v, C);
    if (st != dnnl_success) {
#pragma omp critical(dpt_wino_gemm)
      bad = st;
    }
  }
  if (bad == dnnl_success) return 0;
  return dpt_err_set(err, DPT_E_RUNTIME,
                     "winograd convolution %d -> %d channels at %dx%d, stride %d: oneDNN sgemm for the %s failed "
                     "(%s): set DPT_CPU_CONV=direct to use oneDNN's direct convolutions instead",
                     w->C, w->K, w->H, w->W, w->stride, name[what], dnnl_status2str(bad));
}

int dpt_wino_forward(const struct dpt_wino *w, const float *x, const float *g, float *y, void *ws,
                     struct dpt_err *err)
{
  float *U = ws, *V = U + 2 * (size_t)npts(w) * sU(w);
  tf(w)->wt(w, g, U);
  for (int i = 0, n0, ni; i < dpt_wino_chunks(w); i++) {
    dpt_wino_chunk(w, i, &n0, &ni);
    size_t T = (size_t)ni * w->th * w->tw;
    float *M = V + off(w, npts(w), T, w->C);
    int rc;
    tf(w)->in(w, x, n0, ni, V);
    if ((rc = products(w, FWD, T, U, V, M, 0.f, err))) return rc;
    tf(w)->out(w, M, n0, ni, y);
  }
  return 0;
}

int dpt_wino_backward(const struct dpt_wino *w, const float *x, const float *g, const float *dy, float *dx,
                      float *dg, void *ws, struct dpt_err *err)
{
  float *U = ws, *dU = U + (size_t)npts(w) * sU(w), *V = dU + (size_t)npts(w) * sU(w);
  if (dx) tf(w)->wt(w, g, U); /* again: a layer's own U would cost 131 MB for ResNet-50 */
  for (int i = 0, n0, ni; i < dpt_wino_chunks(w); i++) {
    dpt_wino_chunk(w, i, &n0, &ni);
    size_t T = (size_t)ni * w->th * w->tw;
    float *dM = V + off(w, npts(w), T, w->C);
    int rc;
    tf(w)->in(w, x, n0, ni, V);
    tf(w)->out_adj(w, dy, n0, ni, dM);
    if ((rc = products(w, DW, T, dU, V, dM, i ? 1.f : 0.f, err))) return rc;
    if (!dx) continue;
    if ((rc = products(w, DX, T, U, V, dM, 0.f, err))) return rc;
    tf(w)->in_adj(w, V, n0, ni, dx);
  }
  tf(w)->wt_adj(w, dU, dg);
  return 0;
}
