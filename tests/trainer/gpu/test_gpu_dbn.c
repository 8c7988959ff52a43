/* test_gpu_dbn: the fused step's own dBN-weight kernel (trainer/cuda/dpt_cuda_dbn.cu), what the
 * executor runs where cuDNN has no engine for the dbn_weight graph, against a float64 host
 * reference of the rules in dpt_cuda_dbn.h, at fp32, fp16 and bf16, with the ReLU's mask and the
 * fork (g written), the mask alone, and neither (the dual shortcut's second BN).
 *
 * 1. Exact inputs: dy and the mask's y are multiples of 1/4 in [-1/2, 1/2], x = mean + k/16
 *    (|k| <= 4) with mean a multiple of 1/4 and istd 2 or 4, so every g * xhat is a multiple of
 *    1/32 of magnitude <= 1/2 and every partial sum, at up to 300,000 rows, is a multiple of
 *    1/32 below 2^18: fp32 holds each exactly, in any order of summation.  dgamma and dbeta
 *    must then equal the reference bit for bit, g too (a select), and a g not asked for
 *    (NULL) leaves its buffer as it was.  The coefficients are one double expression of those
 *    rounded to fp32: within 2 fp32 units of the reference (the device may contract into FMAs).
 *    Shapes: 18 rows x 8 channels (fewer rows than one block's), 1,000 x 40 (a part warp),
 *    50,176 x 64 (ResNet-50's layer2 at batch 64), 300,000 x 16 (more rows than the slices'
 *    cap times 512: threads sum more than 64 rows each).
 * 2. Random inputs in the storage type at 50,176 x 64: dgamma and dbeta within the recursive
 *    summation bound (M + 8) 2^-24 sum |term| + 2^-24 |ref|, derived for any order.
 * 3. Determinism: two runs at 300,000 x 16 give the same bits.
 * 4. Bad input (host side, run without a device too): a missing operand, c < 1, rows < 1, an
 *    unknown type and a workspace one byte short are refused with cudaErrorInvalidValue before
 *    any launch; the workspace is 8 c bytes per 512-row slice, at least one and at most 256.
 * SKIPPED (77) after part 4 without a usable CUDA device. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "dpt_cuda_dbn.h"
#include "dpt_cuda_kernels.h"

#include "cu_buf.h"
#include "cu_check.h"
#include "dpt_check.h"

static const double U32 = 0x1p-24;
static const char *const TNAME[3] = {"fp32", "fp16", "bf16"};

static unsigned rng_state = 2024;
static unsigned rnd(void)
{
  rng_state = rng_state * 1664525u + 1013904223u;
  return rng_state >> 8;
}
static float frand(void) { return (float)(rnd() * (1.0 / 16777216.0)) * 2.0f - 1.0f; }

static size_t esize(int dt) { return dt == DPT_DT_F32 ? 4 : 2; }

static void *dev(size_t bytes)
{
  void *p;
  CU(cudaMalloc(&p, bytes ? bytes : 1));
  return p;
}

/* ---- one case ------------------------------------------------------------------------------ */

enum { MASK_FORK, MASK, PLAIN };
static const char *const VNAME[3] = {"relu + fork", "relu", "no relu"};

struct tcase {
  int dt, c, variant, exact;
  size_t rows;
};

/* the host's inputs: exact (part 1) or random in the type (part 2) */
static void inputs(const struct tcase *t, float *dy, float *y, float *x, float *mean, float *istd, float *gamma)
{
  size_t n = t->rows * (size_t)t->c;
  for (int ch = 0; ch < t->c; ch++) {
    mean[ch] = t->exact ? 0.25f * (float)(ch % 3 - 1) : 0.2f * frand();
    istd[ch] = t->exact ? (ch % 2 ? 2.0f : 4.0f) : 1.0f + 0.5f * frand();
    gamma[ch] = 1.0f + 0.3f * frand();
  }
  for (size_t i = 0; i < n; i++) {
    int ch = (int)(i % (size_t)t->c);
    if (t->exact) {
      dy[i] = 0.25f * (float)((int)(rnd() % 5) - 2);
      y[i] = 0.5f * (float)((int)(rnd() % 3) - 1);
      if (y[i] == 0.0f && rnd() % 2) y[i] = -0.0f;
      x[i] = mean[ch] + (float)((int)(rnd() % 9) - 4) / 16.0f;
    } else {
      dy[i] = as_type(frand(), t->dt);
      y[i] = as_type(frand(), t->dt);
      x[i] = as_type(mean[ch] + 1.5f * frand(), t->dt);
    }
  }
}

struct ref {
  double *g, *dg, *db, *sdg, *sdb; /* sdg, sdb: sums of |term| */
};

static void reference(const struct tcase *t, const float *dy, const float *y, const float *x, const float *mean,
                      const float *istd, struct ref *r)
{
  size_t n = t->rows * (size_t)t->c;
  for (size_t i = 0; i < n; i++) {
    int ch = (int)(i % (size_t)t->c);
    double g = t->variant == PLAIN || y[i] > 0 ? dy[i] : 0.0;
    double xh = ((double)x[i] - mean[ch]) * istd[ch];
    r->g[i] = g;
    r->dg[ch] += g * xh, r->db[ch] += g;
    r->sdg[ch] += fabs(g * xh), r->sdb[ch] += fabs(g);
  }
}

/* count channels of got outside |got - want| <= bound, print the worst */
static size_t cmp(const char *what, const struct tcase *t, const float *got, const double *want, const double *bound,
                  size_t n)
{
  size_t bad = 0, worst = 0;
  double wr = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - want[i]), r = bound[i] > 0 ? e / bound[i] : (e > 0 ? INFINITY : 0);
    if (r > wr) wr = r, worst = i;
    bad += !(e <= bound[i]);
  }
  CHECK(bad == 0, "%s %s %s %zux%d: %s: %zu of %zu outside the bound (worst [%zu]: got %.9g, want %.9g, bound %.3g)",
        TNAME[t->dt], VNAME[t->variant], t->exact ? "exact" : "random", t->rows, t->c, what, bad, n, worst,
        got[worst], want[worst], bound[worst]);
  return bad;
}

struct bufs {
  void *dy, *y, *x, *g, *ws;
  float *mean, *istd, *gamma, *out[5]; /* dgamma, dbeta, c_dy, c_x, c_b */
  size_t ws_bytes;
};

static int launch(const struct tcase *t, const struct bufs *b)
{
  struct dpt_cuda_dbn_args a = {.dy = b->dy, .y = t->variant == PLAIN ? NULL : b->y, .x = b->x,
                                .g = t->variant == MASK_FORK ? b->g : NULL, .dtype = t->dt, .c = t->c,
                                .rows = t->rows, .mean = b->mean, .istd = b->istd, .gamma = b->gamma,
                                .dgamma = b->out[0], .dbeta = b->out[1], .c_dy = b->out[2], .c_x = b->out[3],
                                .c_b = b->out[4]};
  return dpt_cuda_dbn_weight(&a, b->ws, b->ws_bytes, 0);
}

/* run t once; *bits (when not NULL) gets dgamma and dbeta's bits for the determinism check */
static void one(const struct tcase *t, uint32_t *bits)
{
  size_t n = t->rows * (size_t)t->c, C = (size_t)t->c;
  float *dy = malloc(n * 4), *y = malloc(n * 4), *x = malloc(n * 4), mean[64], istd[64], gamma[64];
  struct ref r = {calloc(n, 8), calloc(C, 8), calloc(C, 8), calloc(C, 8), calloc(C, 8)};
  inputs(t, dy, y, x, mean, istd, gamma);
  reference(t, dy, y, x, mean, istd, &r);
  struct bufs b = {dev(n * esize(t->dt)), dev(n * esize(t->dt)), dev(n * esize(t->dt)), dev(n * esize(t->dt)),
                   NULL, dev(C * 4), dev(C * 4), dev(C * 4), {0}, dpt_cuda_dbn_weight_ws(t->c, t->rows)};
  b.ws = dev(b.ws_bytes);
  for (int k = 0; k < 5; k++) b.out[k] = dev(C * 4);
  put(b.dy, dy, n, t->dt), put(b.y, y, n, t->dt), put(b.x, x, n, t->dt);
  put(b.mean, mean, C, DPT_DT_F32), put(b.istd, istd, C, DPT_DT_F32), put(b.gamma, gamma, C, DPT_DT_F32);
  CU(cudaMemset(b.g, 0x7b, n * esize(t->dt))); /* a g not written keeps this */
  CU((cudaError_t)launch(t, &b));
  float *got[5];
  for (int k = 0; k < 5; k++) got[k] = get(b.out[k], C, DPT_DT_F32);
  double bd[64] = {0}, want[3][64] = {{0}};
  for (size_t ch = 0; ch < C; ch++) /* exact: bit for bit; random: the summation bound */
    bd[ch] = t->exact ? 0.0 : (double)(t->rows + 8) * U32 * r.sdg[ch] + U32 * fabs(r.dg[ch]);
  cmp("dgamma", t, got[0], r.dg, bd, C);
  for (size_t ch = 0; ch < C; ch++) bd[ch] = t->exact ? 0.0 : (double)(t->rows + 8) * U32 * r.sdb[ch] + U32 * fabs(r.db[ch]);
  cmp("dbeta", t, got[1], r.db, bd, C);
  /* the coefficients from the dgamma, dbeta written (dpt_cuda_dbn.h), one rounding to fp32 */
  double cb_terms[64] = {0}, M = (double)t->rows;
  for (size_t ch = 0; ch < C; ch++) {
    double gi = (double)gamma[ch] * istd[ch], gi2 = gi * istd[ch], t1 = -gi * got[1][ch] / M,
           t2 = gi2 * got[0][ch] * mean[ch] / M;
    want[0][ch] = gi, want[1][ch] = -gi2 * got[0][ch] / M, want[2][ch] = t1 + t2;
    cb_terms[ch] = fabs(t1) + fabs(t2);
  }
  static const char *const cname[3] = {"c_dy", "c_x", "c_b"};
  for (int k = 0; k < 3; k++) {
    for (size_t ch = 0; ch < C; ch++) bd[ch] = 2 * U32 * fabs(want[k][ch]) + (k == 2 ? 1e-12 * cb_terms[ch] : 0.0);
    cmp(cname[k], t, got[2 + k], want[k], bd, C);
  }
  /* g: the select, exact; not written: the buffer as it was */
  float *gg = get(b.g, n, t->dt);
  size_t gbad = 0;
  uint8_t *raw = malloc(n * esize(t->dt));
  CU(cudaMemcpy(raw, b.g, n * esize(t->dt), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) gbad += t->variant == MASK_FORK ? (double)gg[i] != r.g[i] : 0;
  for (size_t i = 0; t->variant != MASK_FORK && i < n * esize(t->dt); i++) gbad += raw[i] != 0x7b;
  CHECK(gbad == 0, "%s %s %zux%d: g %s at %zu element(s)", TNAME[t->dt], VNAME[t->variant], t->rows, t->c,
        t->variant == MASK_FORK ? "differs from relu'(y) dy" : "was written though not asked for", gbad);
  if (bits) {
    memcpy(bits, got[0], C * 4);
    memcpy(bits + C, got[1], C * 4);
  }
  void *all[] = {b.dy, b.y, b.x, b.g, b.ws, b.mean, b.istd, b.gamma, b.out[0], b.out[1], b.out[2], b.out[3], b.out[4]};
  for (size_t k = 0; k < sizeof all / sizeof *all; k++) cudaFree(all[k]);
  for (int k = 0; k < 5; k++) free(got[k]);
  free(gg), free(raw), free(dy), free(y), free(x), free(r.g), free(r.dg), free(r.db), free(r.sdg), free(r.sdb);
}

/* ---- part 4: refused before any launch (no device needed) ------------------------------------ */

static void bad_input(void)
{
  char buf[64];
  float v[8];
  struct dpt_cuda_dbn_args ok = {buf, NULL, buf, NULL, DPT_DT_F16, 8, 4, v, v, v, v, v, v, v, v};
  size_t ws = dpt_cuda_dbn_weight_ws(8, 4);
  CHECK(ws == 8 * 8, "workspace for 8 channels over 4 rows: %zu bytes, want one slice of 64", ws);
  CHECK(dpt_cuda_dbn_weight_ws(8, 512 * 3 + 1) == 4 * 64, "1,537 rows: 4 slices");
  CHECK(dpt_cuda_dbn_weight_ws(8, (size_t)1 << 40) == 256 * 64, "slices capped at 256");
  CHECK(dpt_cuda_dbn_weight_ws(0, 4) == 0 && dpt_cuda_dbn_weight_ws(8, 0) == 0, "an empty shape needs no workspace");
  struct dpt_cuda_dbn_args a;
  const int inval = (int)cudaErrorInvalidValue;
  CHECK(dpt_cuda_dbn_weight(NULL, buf, ws, 0) == inval, "no arguments");
  a = ok, a.dy = NULL;
  CHECK(dpt_cuda_dbn_weight(&a, buf, ws, 0) == inval, "no dy");
  a = ok, a.x = NULL;
  CHECK(dpt_cuda_dbn_weight(&a, buf, ws, 0) == inval, "no x");
  a = ok, a.c_b = NULL;
  CHECK(dpt_cuda_dbn_weight(&a, buf, ws, 0) == inval, "no c_b");
  a = ok, a.c = 0;
  CHECK(dpt_cuda_dbn_weight(&a, buf, ws, 0) == inval, "0 channels");
  a = ok, a.rows = 0;
  CHECK(dpt_cuda_dbn_weight(&a, buf, ws, 0) == inval, "0 rows");
  a = ok, a.dtype = 7;
  CHECK(dpt_cuda_dbn_weight(&a, buf, ws, 0) == inval, "an unknown type");
  CHECK(dpt_cuda_dbn_weight(&ok, buf, ws - 1, 0) == inval, "a workspace one byte short");
  CHECK(dpt_cuda_dbn_weight(&ok, NULL, ws, 0) == inval, "no workspace");
}

int main(void)
{
  bad_input();
  if (failures) return 1;
  device_or_skip("test_gpu_dbn (the host-side refusals passed)");
  static const size_t rows[4] = {18, 1000, 50176, 300000};
  static const int chans[4] = {8, 40, 64, 16};
  int cases = 0;
  for (int dt = 0; dt < 3; dt++)
    for (int s = 0; s < 4; s++)
      for (int v = 0; v < 3; v++, cases++) one(&(struct tcase){dt, chans[s], v, 1, rows[s]}, NULL);
  for (int dt = 0; dt < 3; dt++, cases++) one(&(struct tcase){dt, 64, MASK_FORK, 0, 50176}, NULL);
  uint32_t b1[32], b2[32];
  unsigned seed = rng_state;
  one(&(struct tcase){DPT_DT_F16, 16, MASK_FORK, 0, 300000}, b1);
  rng_state = seed;
  one(&(struct tcase){DPT_DT_F16, 16, MASK_FORK, 0, 300000}, b2);
  cases += 2;
  CHECK(!memcmp(b1, b2, sizeof b1), "two runs on the same inputs gave different dgamma / dbeta bits");
  printf("test_gpu_dbn: %d cases, %d failure(s)\n", cases, failures);
  return failures ? 1 : 0;
}
