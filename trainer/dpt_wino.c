/* dpt_wino.c — F(2x2 or 4x4, 3x3) Winograd convolution: tile transforms here, the products
 * per chunk of images in oneDNN's sgemm (see dpt_wino.h for the algebra). */
#include "dpt_wino.h"

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <string.h>

#include "dpt_wino_tf.h"

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
  w->th = (H + m - 1) / m;
  w->tw = (W + m - 1) / m;
  size_t per_img = (size_t)w->a * w->a * w->th * w->tw * (C + K) * sizeof(float);
  size_t nc = DPT_WINO_WS_CHUNK_BYTES / per_img, chunks;
  nc = nc < 1 ? 1 : nc > (size_t)N ? (size_t)N : nc;
  chunks = ((size_t)N + nc - 1) / nc;
  w->nc = (int)(((size_t)N + chunks - 1) / chunks); /* the largest of dpt_wino_chunk's */
  __builtin_cpu_init();
  w->avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
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

/* U [P][K][C], dU [P][K][C], V [P][T][C], M [P][T][K] with P = alpha^2 points, T tiles of one chunk */
static size_t tiles(const struct dpt_wino *w) { return (size_t)w->nc * w->th * w->tw; }
#define PAD DPT_WINO_PAD
#define sU dpt_wino_su
#define npts dpt_wino_points

size_t dpt_wino_workspace(const struct dpt_wino *w)
{
  return (npts(w) * (2 * sU(w) + tiles(w) * (w->C + w->K) + 2 * PAD)) * sizeof(float);
}

static const struct dpt_wino_tf *tf(const struct dpt_wino *w) { return w->avx2 ? &dpt_wino_tf_avx2 : &dpt_wino_tf_base; }

/* The P products of a chunk, one per thread at a time (oneDNN's sgemm runs single-threaded
 * inside a parallel region): c[p] = beta c[p] + op(a[p]) op(b[p]), row-major. */
static int gemms(const struct dpt_wino *w, const char *what, char ta, char tb, int m, int n, int k,
                  const float *a, size_t sa, int lda, const float *b, size_t sb, int ldb, float beta, float *c,
                  size_t sc, int ldc, struct dpt_err *err)
{
  dnnl_status_t bad = dnnl_success;
#pragma omp parallel for schedule(static)
  for (int p = 0; p < npts(w); p++) {
    dnnl_status_t st = dnnl_sgemm(ta, tb, m, n, k, 1.f, a + p * sa, lda, b + p * sb, ldb, beta, c + p * sc, ldc);
    if (st != dnnl_success) {
#pragma omp critical(dpt_wino_gemm)
      bad = st;
    }
  }
  if (bad == dnnl_success) return 0;
  return dpt_err_set(err, DPT_E_RUNTIME,
                     "winograd convolution %d -> %d channels at %dx%d: oneDNN sgemm for the %s failed (%s): "
                     "set DPT_CPU_CONV=direct to use oneDNN's direct convolutions instead",
                     w->C, w->K, w->H, w->W, what, dnnl_status2str(bad));
}

int dpt_wino_forward(const struct dpt_wino *w, const float *x, const float *g, float *y, void *ws,
                     struct dpt_err *err)
{
  float *U = ws, *V = U + 2 * npts(w) * sU(w);
  tf(w)->wt(w, g, U);
  for (int i = 0, n0, ni; i < dpt_wino_chunks(w); i++) {
    dpt_wino_chunk(w, i, &n0, &ni);
    int T = ni * w->th * w->tw, rc;
    size_t sV = (size_t)T * w->C + PAD, sM = (size_t)T * w->K + PAD;
    float *M = V + npts(w) * sV;
    tf(w)->in(w, x, n0, ni, V);
    /* M[p] (T x K) = V[p] (T x C) U[p]^T */
    if ((rc = gemms(w, "forward product", 'N', 'T', T, w->K, w->C, V, sV, w->C, U, sU(w), w->C, 0.f, M, sM,
                     w->K, err)))
      return rc;
    tf(w)->out(w, M, n0, ni, y);
  }
  return 0;
}

int dpt_wino_backward(const struct dpt_wino *w, const float *x, const float *g, const float *dy, float *dx,
                      float *dg, void *ws, struct dpt_err *err)
{
  float *U = ws, *dU = U + npts(w) * sU(w), *V = dU + npts(w) * sU(w);
  if (dx) tf(w)->wt(w, g, U); /* again: a layer's own U would cost 131 MB for ResNet-50 */
  for (int i = 0, n0, ni; i < dpt_wino_chunks(w); i++) {
    dpt_wino_chunk(w, i, &n0, &ni);
    int T = ni * w->th * w->tw, rc;
    size_t sV = (size_t)T * w->C + PAD, sM = (size_t)T * w->K + PAD;
    float *dM = V + npts(w) * sV;
    tf(w)->in(w, x, n0, ni, V);
    tf(w)->out_adj(w, dy, n0, ni, dM);
    /* dU[p] (K x C) (+)= dM[p]^T (K x T) V[p] (T x C) */
    if ((rc = gemms(w, "weight-gradient product", 'T', 'N', w->K, w->C, T, dM, sM, w->K, V, sV, w->C,
                     i ? 1.f : 0.f, dU, sU(w), w->C, err)))
      return rc;
    if (!dx) continue;
    /* dV[p] (T x C) = dM[p] (T x K) U[p] (K x C), over V */
    if ((rc = gemms(w, "input-gradient product", 'N', 'N', T, w->C, w->K, dM, sM, w->K, U, sU(w), w->C, 0.f,
                     V, sV, w->C, err)))
      return rc;
    tf(w)->in_adj(w, V, n0, ni, dx);
  }
  tf(w)->wt_adj(w, dU, dg);
  return 0;
}
