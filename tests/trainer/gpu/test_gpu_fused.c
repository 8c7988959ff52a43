/* test_gpu_fused: the fused step's cuDNN graphs (trainer/cuda/dpt_cudnn_graph.c) on a device,
 * against a float64 host reference of the same arithmetic.  SKIPPED (77) without a device.
 *
 *   trainer_gpu_test_gpu_fused ERRATA.json
 *
 * 1. Every pattern at fp16, bf16 and fp32 (TF32 allowed) on small NHWC shapes (n 4, c 32,
 *    8x8, 64 filters 3x3 pad 1, and a 1x1 stride-2 convolution): built (the engines timed),
 *    run, each output compared with the reference element by element against a DERIVED
 *    bound, not a measured one: the inputs are values the storage type holds, so the error
 *    sources are the rounding of the prologue's result and of TF32 inputs to the compute
 *    format (u = 2^-11 fp16 / TF32, 2^-8 bf16), fp32 accumulation over K terms (K 2^-24) and
 *    the rounding of the stored output (u): |err| <= (3u + K 2^-24) sum|a b| + u |y| per
 *    convolution output, the sum of those bounds (+ M 2^-24 sum|y|) for the statistics,
 *    8 fp32 roundings (+ the rsqrt) for BN finalize (its running-statistics update read from
 *    RMEAN_NEXT / RVAR_NEXT, and the RMEAN / RVAR it read unchanged bit for bit after the
 *    timing runs and two executions: not in place), and the dBN coefficients checked against
 *    the GPU's own dgamma / dbeta.  ReLU-backward masks are not compared where the recomputed
 *    BN output is within its bound of zero (its sign is not defined by the arithmetic).
 *    Required engines: convolution + statistics, BN finalize, dgrad, wgrad at every type,
 *    the ConvBNfprop prologue and the residual scale-bias-add-ReLUs at fp16 (MLPerf's set);
 *    the others may answer "no engine" (DPT_E_UNSUPPORTED, the legacy fallback): the support
 *    matrix is printed.
 * 2. The engine cache: a second build of each graph takes the cached engine (no timing).
 * 3. One identity bottleneck block through the fused chain (test_gpu_fused_block.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "dpt_cudnn_graph.h"
#include "dpt_fp16.h"
#include "dpt_optim_layout.h"

#define DPT_CHECK_SHARED
#include "cu_check.h"
#include "dpt_check.h"
#include "test_gpu_fused.h"

int failures; /* the count of both files' CHECKs */

double unit(int io) { return io == DPT_CG_BF16 ? 0x1p-8 : 0x1p-11; } /* fp16, TF32: 10-bit fraction */
const char *tname(int io) { return io == DPT_CG_F16 ? "fp16" : io == DPT_CG_BF16 ? "bf16" : "tf32"; }

static unsigned rng_state = 12345;
float frand(void)
{
  rng_state = rng_state * 1664525u + 1013904223u;
  return (float)((rng_state >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

float *host_rand(size_t n, float scale, int io)
{
  float *x = malloc(n * sizeof *x);
  if (!x) exit(1);
  for (size_t i = 0; i < n; i++) x[i] = as_type(scale * frand(), io);
  return x;
}

/* ---- device buffers in the storage type ------------------------------------------ */

void *dev(size_t n, int io)
{
  void *p;
  CU(cudaMalloc(&p, n * (io == DPT_CG_F32 ? 4 : 2) + 256));
  CU(cudaMemset(p, 0, n * (io == DPT_CG_F32 ? 4 : 2) + 256));
  return p;
}

/* ---- float64 reference (NHWC activations, KRSC filters) ---------------------------------- */

struct geo geo_of(int n, int c, int h, int w, int k, int r, int stride, int pad)
{
  struct geo g = {n, c, h, w, k, r, stride, pad, (h + 2 * pad - r) / stride + 1, (w + 2 * pad - r) / stride + 1};
  return g;
}

/* One loop nest for the three convolutions, abs_ (may be NULL) the sums of |products| (for
 * the bounds): y[n,p,q,k] = sum x[n,h,w,c] w[k,r,s,c]; dx[n,h,w,c] = sum dy[n,p,q,k] w[k,r,s,c];
 * dw[k,r,s,c] = sum dy[n,p,q,k] x[n,h,w,c]. */
enum { REF_FWD, REF_DGRAD, REF_WGRAD };
static void conv_any(const struct geo *g, int mode, const double *x, const float *wt, const double *dy, double *out,
                     double *abs_)
{
  size_t no = mode == REF_FWD     ? (size_t)g->n * g->p * g->q * g->k
              : mode == REF_DGRAD ? (size_t)g->n * g->h * g->w * g->c
                                  : (size_t)g->k * g->r * g->r * g->c;
  memset(out, 0, no * sizeof *out);
  if (abs_) memset(abs_, 0, no * sizeof *abs_);
  for (int n = 0; n < g->n; n++)
    for (int p = 0; p < g->p; p++)
      for (int q = 0; q < g->q; q++)
        for (int r = 0; r < g->r; r++)
          for (int t = 0; t < g->r; t++) {
            int ih = p * g->stride - g->pad + r, iw = q * g->stride - g->pad + t;
            if (ih < 0 || iw < 0 || ih >= g->h || iw >= g->w) continue;
            size_t xb = (((size_t)n * g->h + ih) * g->w + iw) * g->c, yb = (((size_t)n * g->p + p) * g->q + q) * g->k;
            for (int k = 0; k < g->k; k++) {
              size_t wb = (((size_t)k * g->r + r) * g->r + t) * g->c;
              for (int c = 0; c < g->c; c++) {
                double prod = mode == REF_FWD ? x[xb + c] * wt[wb + c]
                              : mode == REF_DGRAD ? dy[yb + k] * wt[wb + c] : dy[yb + k] * x[xb + c];
                size_t o = mode == REF_FWD ? yb + k : mode == REF_DGRAD ? xb + c : wb + c;
                out[o] += prod;
                if (abs_) abs_[o] += fabs(prod);
              }
            }
          }
}

void conv_ref(const struct geo *g, const double *x, const float *wt, double *y, double *abs_)
{
  conv_any(g, REF_FWD, x, wt, NULL, y, abs_);
}

void dgrad_ref(const struct geo *g, const double *dy, const float *wt, double *dx, double *abs_)
{
  conv_any(g, REF_DGRAD, NULL, wt, dy, dx, abs_);
}

void wgrad_ref(const struct geo *g, const double *x, const double *dy, double *dw, double *abs_)
{
  conv_any(g, REF_WGRAD, x, NULL, dy, dw, abs_);
}

double *to_d(const float *f, size_t n)
{
  double *d = malloc(n * sizeof *d);
  for (size_t i = 0; i < n; i++) d[i] = f[i];
  return d;
}

/* count elements outside |got - ref| <= bound; print the worst */
static int compare(const char *what, const float *got, const double *ref, const double *bound, size_t n,
                   const unsigned char *skip)
{
  size_t bad = 0, worst = 0;
  double wr = 0;
  for (size_t i = 0; i < n; i++) {
    if (skip && skip[i]) continue;
    double e = fabs((double)got[i] - ref[i]), r = bound[i] > 0 ? e / bound[i] : (e > 0 ? INFINITY : 0);
    if (r > wr) wr = r, worst = i;
    bad += e > bound[i];
  }
  CHECK(bad == 0, "%s: %zu of %zu elements outside the derived bound (worst %zu: got %.8g, reference %.8g, bound %.3g)",
        what, bad, n, worst, got[worst], ref[worst], bound[worst]);
  printf("  %-44s error / bound: max %.3f over %zu elements\n", what, wr, n);
  return bad == 0;
}

/* ---- the patterns one by one -------------------------------------------------------------- */


static int required(int pattern, int io)
{
  if (pattern == DPT_CG_CONV_STATS || pattern == DPT_CG_BN_FINALIZE || pattern == DPT_CG_DGRAD || pattern == DPT_CG_WGRAD)
    return 1;
  return io == DPT_CG_F16 && (pattern == DPT_CG_SBR_CONV_STATS || pattern == DPT_CG_SBAR || pattern == DPT_CG_DSBAR);
}

/* build + run; 0 ran, 1 unsupported (reported), -1 failure (counted) */
static int run_op(struct env *e, const struct dpt_cg_desc *d, void **ptrs, struct dpt_cg_op *op)
{
  struct dpt_err err;
  int rc = dpt_cg_build(&e->ctx, d, ptrs, op, &err);
  size_t ml = strlen(e->matrix);
  snprintf(e->matrix + ml, sizeof e->matrix - ml, "  %-16s %-5s s/b %-4s %s\n", dpt_cg_pattern_name(d->pattern),
           tname(d->io), d->sb == DPT_CG_F32 ? "fp32" : tname(d->sb),
           rc == 0 ? (op->from_cache ? "engine from the cache" : "fused engine")
                   : rc == DPT_E_UNSUPPORTED ? "no engine: legacy fallback" : "ERROR");
  if (rc == DPT_E_UNSUPPORTED && (e->probe || !required(d->pattern, d->io))) {
    printf("  %s %s: %s\n", dpt_cg_pattern_name(d->pattern), tname(d->io), err.msg);
    e->n_unsupported++;
    return 1;
  }
  CHECK(rc == 0, "%s %s: %s", dpt_cg_pattern_name(d->pattern), tname(d->io), err.msg);
  if (rc) return -1;
  rc = dpt_cg_execute(&e->ctx, op, ptrs, &err);
  CHECK(rc == 0, "%s %s: execute: %s", dpt_cg_pattern_name(d->pattern), tname(d->io), err.msg);
  CU(cudaDeviceSynchronize());
  return rc ? -1 : 0;
}

struct dpt_cg_desc desc(int pattern, int io, const struct geo *g, int relu, const char *layer)
{
  struct dpt_cg_desc d;
  memset(&d, 0, sizeof d);
  d.pattern = pattern;
  d.n = g->n, d.c = g->c, d.h = g->h, d.w = g->w, d.k = g->k, d.r = g->r, d.stride = g->stride, d.pad = g->pad;
  /* as the backend describes them (dpt_cuda_fstep.c): only a convolution has a geometry; the others'
   * stride 0 once reached a division (SIGFPE in every fused dpt-train on the first GPU visit) */
  if (pattern != DPT_CG_CONV_STATS && pattern != DPT_CG_SBR_CONV_STATS && pattern != DPT_CG_DGRAD_DRELU_DBN &&
      pattern != DPT_CG_DGRAD && pattern != DPT_CG_WGRAD && pattern != DPT_CG_SBR_WGRAD)
    d.k = d.r = d.stride = d.pad = 0;
  d.io = io;
  d.sb = DPT_CG_F32;
  d.relu = relu;
  d.tf32 = 1;
  d.eps = 1e-5;
  d.momentum = 0.1;
  d.layer = layer;
  return d;
}

/* conv (+ scale-bias-relu prologue) + statistics */
/* A prologue's scale / bias [C] in type sb, as the device gets them (the reference uses these values), on
 * the device in ptrs[S], ptrs[B]. */
static void scale_bias(void **ptrs, float *s, float *b, int C, int sb)
{
  for (int c = 0; c < C; c++) s[c] = as_type(0.5f + 0.5f * fabsf(frand()), sb), b[c] = as_type(0.3f * frand(), sb);
  ptrs[DPT_CG_S] = dev(C, sb), ptrs[DPT_CG_B] = dev(C, sb);
  put(ptrs[DPT_CG_S], s, C, sb), put(ptrs[DPT_CG_B], b, C, sb);
}

/* sb: the type of the prologue's scale / bias (DPT_CG_F32, or the I/O type as NVIDIA's samples keep
 * them, issue 22 suspect 6).  Returns run_op's answer: 0 ran, 1 no engine, -1 failed. */
static int t_conv_stats(struct env *e, int io, const struct geo *g, int prologue, int sb)
{
  size_t nx = (size_t)g->n * g->h * g->w * g->c, nw = (size_t)g->k * g->r * g->r * g->c, ny = (size_t)g->n * g->p * g->q * g->k;
  float *x = host_rand(nx, 1.0f, io), *w = host_rand(nw, 0.2f, io), s[512], b[512];
  void *ptrs[DPT_CG_NSLOTS] = {0};
  ptrs[DPT_CG_X] = dev(nx, io), ptrs[DPT_CG_W] = dev(nw, io), ptrs[DPT_CG_Y] = dev(ny, io);
  ptrs[DPT_CG_SUM] = dev(g->k, DPT_CG_F32), ptrs[DPT_CG_SQSUM] = dev(g->k, DPT_CG_F32);
  put(ptrs[DPT_CG_X], x, nx, io), put(ptrs[DPT_CG_W], w, nw, io);
  scale_bias(ptrs, s, b, g->c, sb);
  struct dpt_cg_desc d = desc(prologue ? DPT_CG_SBR_CONV_STATS : DPT_CG_CONV_STATS, io, g, prologue, "test.conv");
  d.sb = sb;
  struct dpt_cg_op op;
  int ran = run_op(e, &d, ptrs, &op);
  if (ran == 0) {
    double *z = malloc(nx * sizeof *z), *y = malloc(ny * sizeof *y), *a = malloc(ny * sizeof *a), *bd = malloc(ny * sizeof *bd);
    for (size_t i = 0; i < nx; i++) {
      int c = (int)(i % g->c);
      z[i] = prologue ? fmax(0.0, (double)x[i] * s[c] + b[c]) : x[i];
    }
    conv_ref(g, z, w, y, a);
    int K = g->r * g->r * g->c;
    for (size_t i = 0; i < ny; i++) bd[i] = (3 * unit(io) + K * U32) * a[i] + unit(io) * fabs(y[i]) + 1e-30;
    float *gy = get(ptrs[DPT_CG_Y], ny, io), *gs = get(ptrs[DPT_CG_SUM], g->k, DPT_CG_F32),
          *gq = get(ptrs[DPT_CG_SQSUM], g->k, DPT_CG_F32);
    char what[96];
    snprintf(what, sizeof what, "%s %s%s y", dpt_cg_pattern_name(d.pattern), tname(io), sb != DPT_CG_F32 ? " (s/b 16-bit)" : "");
    compare(what, gy, y, bd, ny, NULL);
    double rs[512] = {0}, rq[512] = {0}, bs[512] = {0}, bq[512] = {0};
    size_t M = ny / g->k;
    for (size_t i = 0; i < ny; i++) {
      int k = (int)(i % g->k);
      rs[k] += y[i], rq[k] += y[i] * y[i];
      bs[k] += bd[i] + M * U32 * fabs(y[i]);
      bq[k] += 2 * fabs(y[i]) * bd[i] + bd[i] * bd[i] + M * U32 * y[i] * y[i];
    }
    snprintf(what, sizeof what, "%s %s sum", dpt_cg_pattern_name(d.pattern), tname(io));
    compare(what, gs, rs, bs, g->k, NULL);
    snprintf(what, sizeof what, "%s %s sum of squares", dpt_cg_pattern_name(d.pattern), tname(io));
    compare(what, gq, rq, bq, g->k, NULL);
    /* the engine cache: a second build takes the stored choice */
    struct dpt_cg_op again;
    struct dpt_err err;
    if (!dpt_cg_build(&e->ctx, &d, ptrs, &again, &err)) {
      CHECK(again.from_cache && again.choice.engine == op.choice.engine, "%s %s: second build not from the cache",
            dpt_cg_pattern_name(d.pattern), tname(io));
      dpt_cg_destroy(&again);
    }
    free(z), free(y), free(a), free(bd), free(gy), free(gs), free(gq);
    dpt_cg_destroy(&op);
  }
  for (int i = 0; i < DPT_CG_NSLOTS; i++) cudaFree(ptrs[i]);
  free(x), free(w);
  return ran;
}

/* A prologue pattern with its scale / bias in the I/O type first (NVIDIA's samples), then FLOAT:
 * both answers go to the support matrix; a pattern the plan needs must run with one of them. */
static void sb_both(struct env *e, int io, int pattern, int (*run)(struct env *, int, const struct geo *, int, int),
                    const struct geo *g)
{
  if (io == DPT_CG_F32) {
    run(e, io, g, 1, DPT_CG_F32);
    return;
  }
  e->probe = 1;
  int a = run(e, io, g, 1, io), b = run(e, io, g, 1, DPT_CG_F32);
  e->probe = 0;
  if (required(pattern, io))
    CHECK(a == 0 || b == 0, "%s %s: no engine with the scale / bias in %s or in fp32", dpt_cg_pattern_name(pattern),
          tname(io), tname(io));
}

/* BN statistics of the reference and its finalize outputs */
struct bnref {
  double mean[512], var[512], istd[512], eqs[512], eqb[512], rm[512], rv[512];
};

static void finalize_ref(int C, size_t M, const double *sum, const double *sq, const float *gamma, const float *beta,
                         const float *rm0, const float *rv0, double eps, double mom, struct bnref *o)
{
  for (int c = 0; c < C; c++) {
    o->mean[c] = sum[c] / M;
    o->var[c] = sq[c] / M - o->mean[c] * o->mean[c];
    o->istd[c] = 1.0 / sqrt(o->var[c] + eps);
    o->eqs[c] = gamma[c] * o->istd[c];
    o->eqb[c] = beta[c] - o->mean[c] * o->eqs[c];
    o->rm[c] = (1 - mom) * rm0[c] + mom * o->mean[c];
    o->rv[c] = (1 - mom) * rv0[c] + mom * o->var[c] * M / (M - 1.0); /* unbiased, as PyTorch */
  }
}

static void t_finalize(struct env *e, int io, int C, int M)
{
  float sum[512], sq[512], gamma[512], beta[512], rm[512], rv[512];
  double ds[512], dq[512];
  for (int c = 0; c < C; c++) {
    double mean = 0.5 * frand(), var = 0.2 + fabs(frand());
    sum[c] = (float)(mean * M), sq[c] = (float)((var + mean * mean) * M);
    ds[c] = sum[c], dq[c] = sq[c];
    gamma[c] = 1 + 0.3f * frand(), beta[c] = 0.2f * frand(), rm[c] = 0.1f * frand(), rv[c] = 1 + 0.1f * frand();
  }
  void *ptrs[DPT_CG_NSLOTS] = {0};
  int slots[] = {DPT_CG_SUM,       DPT_CG_SQSUM,     DPT_CG_GAMMA,    DPT_CG_BETA,    DPT_CG_RMEAN, DPT_CG_RVAR,
                 DPT_CG_RMEAN_NEXT, DPT_CG_RVAR_NEXT, DPT_CG_EQ_SCALE, DPT_CG_EQ_BIAS, DPT_CG_MEAN,  DPT_CG_ISTD};
  for (size_t i = 0; i < sizeof slots / sizeof *slots; i++) ptrs[slots[i]] = dev(C, DPT_CG_F32);
  put(ptrs[DPT_CG_SUM], sum, C, DPT_CG_F32), put(ptrs[DPT_CG_SQSUM], sq, C, DPT_CG_F32);
  put(ptrs[DPT_CG_GAMMA], gamma, C, DPT_CG_F32), put(ptrs[DPT_CG_BETA], beta, C, DPT_CG_F32);
  put(ptrs[DPT_CG_RMEAN], rm, C, DPT_CG_F32), put(ptrs[DPT_CG_RVAR], rv, C, DPT_CG_F32);
  struct geo g = geo_of(1, C, 1, M, 1, 1, 1, 0); /* count = n h w = M */
  struct dpt_cg_desc d = desc(DPT_CG_BN_FINALIZE, io, &g, 0, "test.bn");
  struct dpt_cg_op op;
  /* the build times the op (several runs) and run_op runs it once more: the running statistics
   * it reads stay as they were, bit for bit (the update goes to RMEAN_NEXT / RVAR_NEXT) */
  if (run_op(e, &d, ptrs, &op) == 0) {
    struct dpt_err err;
    CHECK(!dpt_cg_execute(&e->ctx, &op, ptrs, &err), "finalize execute: %s", err.msg);
    float *m0 = get(ptrs[DPT_CG_RMEAN], C, DPT_CG_F32), *v0 = get(ptrs[DPT_CG_RVAR], C, DPT_CG_F32);
    CHECK(!memcmp(m0, rm, (size_t)C * 4) && !memcmp(v0, rv, (size_t)C * 4),
          "bn_finalize %s: the running statistics it reads changed (the update must go to the NEXT buffers)", tname(io));
    free(m0), free(v0);
    struct bnref r;
    finalize_ref(C, (size_t)M, ds, dq, gamma, beta, rm, rv, d.eps, d.momentum, &r);
    const double *want[] = {r.eqs, r.eqb, r.mean, r.istd, r.rm, r.rv};
    int out[] = {DPT_CG_EQ_SCALE, DPT_CG_EQ_BIAS, DPT_CG_MEAN, DPT_CG_ISTD, DPT_CG_RMEAN_NEXT, DPT_CG_RVAR_NEXT};
    /* error propagation through fp32 (u = 2^-24 per rounding): mean = sum/M; var = sq/M - mean^2
     * cancels (4u of sq/M + mean^2); istd = rsqrt(var + eps) (half the relative error of var,
     * + 4u for the rsqrt); eq_scale = gamma istd; eq_bias = beta - mean eq_scale; the running
     * statistics one multiply-add each */
    double bd[6][512];
    for (int c = 0; c < C; c++) {
      double dvar = 4 * U32 * (dq[c] / M + r.mean[c] * r.mean[c]);
      double distd = r.istd[c] * (0.5 * dvar / (r.var[c] + d.eps) + 4 * U32);
      double deqs = fabs(gamma[c]) * distd + U32 * fabs(r.eqs[c]);
      bd[0][c] = deqs;
      bd[1][c] = fabs(r.mean[c]) * deqs + 4 * U32 * (fabs(beta[c]) + fabs(r.mean[c] * r.eqs[c]));
      bd[2][c] = 2 * U32 * fabs(r.mean[c]);
      bd[3][c] = distd;
      bd[4][c] = 4 * U32 * (fabs(rm[c]) + fabs(r.mean[c]));
      bd[5][c] = d.momentum * M / (M - 1.0) * dvar + 4 * U32 * (fabs(rv[c]) + fabs(r.rv[c]));
    }
    for (int k = 0; k < 6; k++) {
      float *got = get(ptrs[out[k]], C, DPT_CG_F32);
      char what[64];
      snprintf(what, sizeof what, "bn_finalize %s %s", tname(io), dpt_cg_slot_name(out[k]));
      compare(what, got, want[k], bd[k], C, NULL);
      free(got);
    }
    dpt_cg_destroy(&op);
  }
  for (int i = 0; i < DPT_CG_NSLOTS; i++) cudaFree(ptrs[i]);
}

/* scale-bias(-add)(-relu) applies: y = relu?(s x + b [+ r | + s2 x2 + b2]) */
static void t_apply(struct env *e, int io, int pattern, int N, int C, int H)
{
  size_t n = (size_t)N * H * H * C;
  float *x = host_rand(n, 2.0f, io), *x2 = host_rand(n, 2.0f, io), s[512], b[512], s2[512], b2[512];
  for (int c = 0; c < C; c++) s[c] = frand(), b[c] = 0.5f * frand(), s2[c] = frand(), b2[c] = 0.5f * frand();
  void *ptrs[DPT_CG_NSLOTS] = {0};
  ptrs[DPT_CG_X] = dev(n, io), ptrs[DPT_CG_Y] = dev(n, io), ptrs[DPT_CG_S] = dev(C, DPT_CG_F32), ptrs[DPT_CG_B] = dev(C, DPT_CG_F32);
  put(ptrs[DPT_CG_X], x, n, io), put(ptrs[DPT_CG_S], s, C, DPT_CG_F32), put(ptrs[DPT_CG_B], b, C, DPT_CG_F32);
  if (pattern == DPT_CG_SBAR) ptrs[DPT_CG_R] = dev(n, io), put(ptrs[DPT_CG_R], x2, n, io);
  if (pattern == DPT_CG_DSBAR) {
    ptrs[DPT_CG_X2] = dev(n, io), ptrs[DPT_CG_S2] = dev(C, DPT_CG_F32), ptrs[DPT_CG_B2] = dev(C, DPT_CG_F32);
    put(ptrs[DPT_CG_X2], x2, n, io), put(ptrs[DPT_CG_S2], s2, C, DPT_CG_F32), put(ptrs[DPT_CG_B2], b2, C, DPT_CG_F32);
  }
  struct geo g = geo_of(N, C, H, H, 1, 1, 1, 0);
  struct dpt_cg_desc d = desc(pattern, io, &g, 1, "test.apply");
  struct dpt_cg_op op;
  if (run_op(e, &d, ptrs, &op) == 0) {
    double *y = malloc(n * sizeof *y), *bd = malloc(n * sizeof *bd);
    for (size_t i = 0; i < n; i++) {
      int c = (int)(i % C);
      int dual = pattern == DPT_CG_DSBAR;
      double a = (double)s[c] * x[i] + b[c], o = pattern == DPT_CG_SBAR ? x2[i] : dual ? (double)s2[c] * x2[i] + b2[c] : 0;
      y[i] = fmax(0.0, a + o);
      /* fp32: s x, + b, (s2 x2, + b2), the add: one rounding each; then the stored y */
      bd[i] = unit(io) * fabs(y[i]) +
              2 * U32 * (fabs(a) + fabs(o) + fabs((double)s[c] * x[i]) + (dual ? fabs((double)s2[c] * x2[i]) : 0)) + 1e-30;
    }
    float *gy = get(ptrs[DPT_CG_Y], n, io);
    char what[64];
    snprintf(what, sizeof what, "%s %s y", dpt_cg_pattern_name(pattern), tname(io));
    compare(what, gy, y, bd, n, NULL);
    free(y), free(bd), free(gy);
    dpt_cg_destroy(&op);
  }
  for (int i = 0; i < DPT_CG_NSLOTS; i++) cudaFree(ptrs[i]);
  free(x), free(x2);
}

/* dgrad (with accumulation) and wgrad (with and without the prologue) */
static void t_grads(struct env *e, int io, const struct geo *g)
{
  size_t nx = (size_t)g->n * g->h * g->w * g->c, nw = (size_t)g->k * g->r * g->r * g->c, ny = (size_t)g->n * g->p * g->q * g->k;
  float *x = host_rand(nx, 1.0f, io), *w = host_rand(nw, 0.2f, io), *dy = host_rand(ny, 1.0f, io), *dx0 = host_rand(nx, 1.0f, io);
  void *ptrs[DPT_CG_NSLOTS] = {0};
  ptrs[DPT_CG_X] = dev(nx, io), ptrs[DPT_CG_W] = dev(nw, io), ptrs[DPT_CG_DY] = dev(ny, io), ptrs[DPT_CG_DX] = dev(nx, io);
  put(ptrs[DPT_CG_X], x, nx, io), put(ptrs[DPT_CG_W], w, nw, io), put(ptrs[DPT_CG_DY], dy, ny, io);
  double *ddy = to_d(dy, ny), *ref = malloc((nx > nw ? nx : nw) * sizeof *ref), *a = malloc((nx > nw ? nx : nw) * sizeof *a);
  double *bd = malloc((nx > nw ? nx : nw) * sizeof *bd);
  char what[96];
  for (int acc = 0; acc < 2; acc++) {
    struct dpt_cg_desc d = desc(DPT_CG_DGRAD, io, g, 0, "test.dgrad");
    d.accumulate = acc;
    struct dpt_cg_op op;
    if (run_op(e, &d, ptrs, &op) != 0) continue;
    put(ptrs[DPT_CG_DX], dx0, nx, io); /* the build's timing runs wrote it: set again, run once */
    struct dpt_err err;
    CHECK(!dpt_cg_execute(&e->ctx, &op, ptrs, &err), "dgrad: %s", err.msg);
    dgrad_ref(g, ddy, w, ref, a);
    int K = g->k * g->r * g->r;
    for (size_t i = 0; i < nx; i++) {
      if (acc) ref[i] += dx0[i], a[i] += fabs(dx0[i]);
      bd[i] = (3 * unit(io) + K * U32) * a[i] + unit(io) * fabs(ref[i]) + 1e-30;
    }
    float *got = get(ptrs[DPT_CG_DX], nx, io);
    snprintf(what, sizeof what, "dgrad %s%s dx", tname(io), acc ? " (+= dx)" : "");
    compare(what, got, ref, bd, nx, NULL);
    free(got);
    dpt_cg_destroy(&op);
  }
  for (int i = 0; i < DPT_CG_NSLOTS; i++) cudaFree(ptrs[i]);
  free(x), free(w), free(dy), free(dx0), free(ddy), free(ref), free(a), free(bd);
}

/* wgrad, or (prologue) scale-bias-ReLU + wgrad with the scale / bias in type sb; run_op's answer */
static int t_wgrad(struct env *e, int io, const struct geo *g, int pro, int sb)
{
  size_t nx = (size_t)g->n * g->h * g->w * g->c, nw = (size_t)g->k * g->r * g->r * g->c, ny = (size_t)g->n * g->p * g->q * g->k;
  float *x = host_rand(nx, 1.0f, io), *dy = host_rand(ny, 1.0f, io), s[512], b[512];
  void *ptrs[DPT_CG_NSLOTS] = {0};
  ptrs[DPT_CG_X] = dev(nx, io), ptrs[DPT_CG_DY] = dev(ny, io), ptrs[DPT_CG_DW] = dev(nw, io);
  put(ptrs[DPT_CG_X], x, nx, io), put(ptrs[DPT_CG_DY], dy, ny, io);
  scale_bias(ptrs, s, b, g->c, sb);
  struct dpt_cg_desc d = desc(pro ? DPT_CG_SBR_WGRAD : DPT_CG_WGRAD, io, g, pro, "test.wgrad");
  d.sb = sb;
  struct dpt_cg_op op;
  int ran = run_op(e, &d, ptrs, &op);
  if (ran == 0) {
    double *ddy = to_d(dy, ny), *ref = malloc(nw * sizeof *ref), *a = malloc(nw * sizeof *a), *bd = malloc(nw * sizeof *bd);
    double *z = malloc(nx * sizeof *z);
    for (size_t i = 0; i < nx; i++) z[i] = pro ? fmax(0.0, (double)x[i] * s[i % g->c] + b[i % g->c]) : x[i];
    wgrad_ref(g, z, ddy, ref, a);
    int K = g->n * g->p * g->q;
    for (size_t i = 0; i < nw; i++) bd[i] = (3 * unit(io) + K * U32) * a[i] + unit(io) * fabs(ref[i]) + 1e-30;
    float *got = get(ptrs[DPT_CG_DW], nw, io);
    char what[96];
    snprintf(what, sizeof what, "%s %s%s dw", dpt_cg_pattern_name(d.pattern), tname(io),
             sb != DPT_CG_F32 ? " (s/b 16-bit)" : "");
    compare(what, got, ref, bd, nw, NULL);
    free(got), free(z), free(ddy), free(ref), free(a), free(bd);
    dpt_cg_destroy(&op);
  }
  for (int i = 0; i < DPT_CG_NSLOTS; i++) cudaFree(ptrs[i]);
  free(x), free(dy);
  return ran;
}

/* dBN coefficients from (dgamma, dbeta): dx = c_dy g + c_x x + c_b */
static void coeffs(int C, size_t M, const double *mean, const double *istd, const float *gamma, const double *dg,
                   const double *db, double *cdy, double *cx, double *cb)
{
  for (int c = 0; c < C; c++) {
    cdy[c] = gamma[c] * istd[c];
    cx[c] = -gamma[c] * istd[c] * istd[c] * dg[c] / M;
    cb[c] = -gamma[c] * istd[c] * db[c] / M + gamma[c] * istd[c] * istd[c] * dg[c] * mean[c] / M;
  }
}

/* dBN weight (ReLU backward + fork) and dBN apply */
static void t_dbn(struct env *e, int io, int N, int C, int H)
{
  size_t n = (size_t)N * H * H * C, M = n / C;
  float *x = host_rand(n, 1.5f, io), *dy = host_rand(n, 1.0f, io), *y = host_rand(n, 1.0f, io), mean[512], istd[512], gamma[512];
  for (int c = 0; c < C; c++) mean[c] = 0.1f * frand(), istd[c] = 1.0f + 0.2f * frand(), gamma[c] = 1.0f + 0.3f * frand();
  void *ptrs[DPT_CG_NSLOTS] = {0};
  ptrs[DPT_CG_X] = dev(n, io), ptrs[DPT_CG_DY] = dev(n, io), ptrs[DPT_CG_Y] = dev(n, io), ptrs[DPT_CG_G] = dev(n, io);
  ptrs[DPT_CG_DX] = dev(n, io);
  int vs[] = {DPT_CG_MEAN, DPT_CG_ISTD, DPT_CG_GAMMA, DPT_CG_DGAMMA, DPT_CG_DBETA, DPT_CG_C_DY, DPT_CG_C_X, DPT_CG_C_B};
  for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) ptrs[vs[i]] = dev(C, DPT_CG_F32);
  put(ptrs[DPT_CG_X], x, n, io), put(ptrs[DPT_CG_DY], dy, n, io), put(ptrs[DPT_CG_Y], y, n, io);
  put(ptrs[DPT_CG_MEAN], mean, C, DPT_CG_F32), put(ptrs[DPT_CG_ISTD], istd, C, DPT_CG_F32), put(ptrs[DPT_CG_GAMMA], gamma, C, DPT_CG_F32);
  struct geo g = geo_of(N, C, H, H, 1, 1, 1, 0);
  struct dpt_cg_desc d = desc(DPT_CG_DBN_WEIGHT, io, &g, 1, "test.dbn");
  d.fork = 1;
  struct dpt_cg_op op;
  double *gr = malloc(n * sizeof *gr);
  double rdg[512] = {0}, rdb[512] = {0}, bdg[512] = {0}, bdb[512] = {0};
  for (size_t i = 0; i < n; i++) {
    int c = (int)(i % C);
    gr[i] = y[i] > 0 ? dy[i] : 0.0;
    double xh = ((double)x[i] - mean[c]) * istd[c];
    rdg[c] += gr[i] * xh, rdb[c] += gr[i];
    bdg[c] += (M + 4) * U32 * fabs(gr[i] * xh), bdb[c] += M * U32 * fabs(gr[i]);
  }
  if (run_op(e, &d, ptrs, &op) == 0) {
    float *gg = get(ptrs[DPT_CG_G], n, io), *gdg = get(ptrs[DPT_CG_DGAMMA], C, DPT_CG_F32), *gdb = get(ptrs[DPT_CG_DBETA], C, DPT_CG_F32);
    double *zero = calloc(n, sizeof *zero);
    char what[64];
    snprintf(what, sizeof what, "dbn_weight %s g (relu backward, forked)", tname(io));
    compare(what, gg, gr, zero, n, NULL); /* a select: exact */
    for (int c = 0; c < C; c++) bdg[c] += 1e-30, bdb[c] += 1e-30;
    snprintf(what, sizeof what, "dbn_weight %s dgamma", tname(io));
    compare(what, gdg, rdg, bdg, C, NULL);
    snprintf(what, sizeof what, "dbn_weight %s dbeta", tname(io));
    compare(what, gdb, rdb, bdb, C, NULL);
    /* the coefficients: from the GPU's own dgamma / dbeta, a few fp32 roundings */
    double dg[512], db[512], cdy[512], cx[512], cb[512], dmean[512], distd[512];
    for (int c = 0; c < C; c++) dg[c] = gdg[c], db[c] = gdb[c], dmean[c] = mean[c], distd[c] = istd[c];
    coeffs(C, M, dmean, distd, gamma, dg, db, cdy, cx, cb);
    const double *want[3] = {cdy, cx, cb};
    int sl[3] = {DPT_CG_C_DY, DPT_CG_C_X, DPT_CG_C_B};
    for (int k = 0; k < 3; k++) {
      float *got = get(ptrs[sl[k]], C, DPT_CG_F32);
      double bd[512];
      for (int c = 0; c < C; c++) bd[c] = 16 * U32 * (fabs(want[k][c]) + (k == 2 ? fabs(cx[c] * mean[c]) : 0)) + 1e-30;
      snprintf(what, sizeof what, "dbn_weight %s %s", tname(io), dpt_cg_slot_name(sl[k]));
      compare(what, got, want[k], bd, C, NULL);
      free(got);
    }
    free(gg), free(gdg), free(gdb), free(zero);
    dpt_cg_destroy(&op);
  }
  /* dBN apply from G and host coefficients */
  float fcdy[512], fcx[512], fcb[512];
  for (int c = 0; c < C; c++) fcdy[c] = frand(), fcx[c] = 0.1f * frand(), fcb[c] = 0.1f * frand();
  put(ptrs[DPT_CG_C_DY], fcdy, C, DPT_CG_F32), put(ptrs[DPT_CG_C_X], fcx, C, DPT_CG_F32), put(ptrs[DPT_CG_C_B], fcb, C, DPT_CG_F32);
  float *gin = host_rand(n, 1.0f, io);
  put(ptrs[DPT_CG_G], gin, n, io);
  for (int relu = 0; relu < 2; relu++) {
    struct dpt_cg_desc a = desc(DPT_CG_DBN_APPLY, io, &g, relu, "test.dbn_apply");
    if (run_op(e, &a, ptrs, &op) != 0) continue;
    double *ref = malloc(n * sizeof *ref), *bd = malloc(n * sizeof *bd);
    for (size_t i = 0; i < n; i++) {
      int c = (int)(i % C);
      double gi = relu ? (y[i] > 0 ? dy[i] : 0.0) : gin[i];
      double t1 = fcdy[c] * gi, t2 = (double)fcx[c] * x[i];
      ref[i] = t1 + t2 + fcb[c];
      bd[i] = unit(io) * fabs(ref[i]) + 4 * U32 * (fabs(t1) + fabs(t2) + fabs(fcb[c])) + 1e-30;
    }
    float *got = get(ptrs[DPT_CG_DX], n, io);
    char what[64];
    snprintf(what, sizeof what, "dbn_apply %s%s dx", tname(io), relu ? " (relu backward inside)" : "");
    compare(what, got, ref, bd, n, NULL);
    free(ref), free(bd), free(got);
    dpt_cg_destroy(&op);
  }
  for (int i = 0; i < DPT_CG_NSLOTS; i++) cudaFree(ptrs[i]);
  free(x), free(dy), free(y), free(gr), free(gin);
}

/* dgrad + ReLU backward on the recomputed BN output + dBN weight */
static void t_dgrad_drelu_dbn(struct env *e, int io, const struct geo *g)
{
  size_t nx = (size_t)g->n * g->h * g->w * g->c, nw = (size_t)g->k * g->r * g->r * g->c, ny = (size_t)g->n * g->p * g->q * g->k;
  float *x = host_rand(nx, 1.5f, io), *w = host_rand(nw, 0.2f, io), *dy = host_rand(ny, 1.0f, io);
  float mean[512], istd[512], gamma[512], beta[512];
  for (int c = 0; c < g->c; c++)
    mean[c] = 0.1f * frand(), istd[c] = 1.0f + 0.2f * frand(), gamma[c] = 1.0f + 0.3f * frand(), beta[c] = 0.2f * frand();
  void *ptrs[DPT_CG_NSLOTS] = {0};
  ptrs[DPT_CG_X] = dev(nx, io), ptrs[DPT_CG_W] = dev(nw, io), ptrs[DPT_CG_DY] = dev(ny, io), ptrs[DPT_CG_G] = dev(nx, io);
  int vs[] = {DPT_CG_MEAN, DPT_CG_ISTD, DPT_CG_GAMMA, DPT_CG_BETA, DPT_CG_DGAMMA, DPT_CG_DBETA, DPT_CG_C_DY, DPT_CG_C_X, DPT_CG_C_B};
  for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) ptrs[vs[i]] = dev(g->c, DPT_CG_F32);
  put(ptrs[DPT_CG_X], x, nx, io), put(ptrs[DPT_CG_W], w, nw, io), put(ptrs[DPT_CG_DY], dy, ny, io);
  put(ptrs[DPT_CG_MEAN], mean, g->c, DPT_CG_F32), put(ptrs[DPT_CG_ISTD], istd, g->c, DPT_CG_F32);
  put(ptrs[DPT_CG_GAMMA], gamma, g->c, DPT_CG_F32), put(ptrs[DPT_CG_BETA], beta, g->c, DPT_CG_F32);
  struct dpt_cg_desc d = desc(DPT_CG_DGRAD_DRELU_DBN, io, g, 1, "test.dgrad_drelu_dbn");
  struct dpt_cg_op op;
  if (run_op(e, &d, ptrs, &op) == 0) {
    double *ddy = to_d(dy, ny), *dz = malloc(nx * sizeof *dz), *a = malloc(nx * sizeof *a), *gr = malloc(nx * sizeof *gr);
    double *bd = malloc(nx * sizeof *bd);
    unsigned char *skip = calloc(nx, 1);
    dgrad_ref(g, ddy, w, dz, a);
    int K = g->k * g->r * g->r;
    double rdg[512] = {0}, rdb[512] = {0}, bdg[512] = {0}, bdb[512] = {0};
    size_t M = nx / g->c, skipped = 0;
    for (size_t i = 0; i < nx; i++) {
      int c = (int)(i % g->c);
      double xh = ((double)x[i] - mean[c]) * istd[c], bn = xh * gamma[c] + beta[c];
      /* the mask's sign is the arithmetic's only where bn is clear of its fp32 rounding */
      skip[i] = fabs(bn) <= 8 * U32 * (fabs(xh * gamma[c]) + fabs(beta[c]) + fabs((double)x[i] * istd[c] * gamma[c]));
      skipped += skip[i];
      gr[i] = bn > 0 ? dz[i] : 0.0;
      double eb = (3 * unit(io) + K * U32) * a[i];
      bd[i] = bn > 0 ? eb + unit(io) * fabs(gr[i]) + 1e-30 : 1e-30;
      rdg[c] += gr[i] * xh, rdb[c] += gr[i];
      bdg[c] += (bd[i] + M * U32 * fabs(gr[i])) * fabs(xh) + 1e-30;
      bdb[c] += bd[i] + M * U32 * fabs(gr[i]) + 1e-30;
    }
    float *gg = get(ptrs[DPT_CG_G], nx, io), *gdg = get(ptrs[DPT_CG_DGAMMA], g->c, DPT_CG_F32),
          *gdb = get(ptrs[DPT_CG_DBETA], g->c, DPT_CG_F32);
    char what[80];
    snprintf(what, sizeof what, "dgrad_drelu_dbn %s g (%zu masks at 0 skipped)", tname(io), skipped);
    compare(what, gg, gr, bd, nx, skip);
    if (!skipped) {
      snprintf(what, sizeof what, "dgrad_drelu_dbn %s dgamma", tname(io));
      compare(what, gdg, rdg, bdg, g->c, NULL);
      snprintf(what, sizeof what, "dgrad_drelu_dbn %s dbeta", tname(io));
      compare(what, gdb, rdb, bdb, g->c, NULL);
    }
    free(ddy), free(dz), free(a), free(gr), free(bd), free(skip), free(gg), free(gdg), free(gdb);
    dpt_cg_destroy(&op);
  }
  for (int i = 0; i < DPT_CG_NSLOTS; i++) cudaFree(ptrs[i]);
  free(x), free(w), free(dy);
}

int main(int argc, char **argv)
{
  device_or_skip("test_gpu_fused");
  struct env e;
  struct dpt_err err;
  struct dpt_cudnn_errata errata;
  memset(&e, 0, sizeof e);
  if (argc < 2 || dpt_cudnn_errata_load(&errata, argv[1], &err)) {
    fprintf(stderr, "usage: test_gpu_fused trainer/cuda/cudnn-errata.json (%s)\n", argc < 2 ? "missing" : err.msg);
    return 2;
  }
  cudnnHandle_t dnn;
  cudaStream_t stream;
  CU(cudaStreamCreate(&stream));
  if (cudnnCreate(&dnn) != CUDNN_STATUS_SUCCESS || cudnnSetStream(dnn, stream) != CUDNN_STATUS_SUCCESS) {
    fprintf(stderr, "cudnnCreate failed\n");
    return 1;
  }
  /* a fresh engine cache in a temporary directory: the second builds must come from it */
  char dir[] = "/tmp/dpt-gpu-fused-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  struct cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, 0));
  struct dpt_engine_ident id;
  memset(&id, 0, sizeof id);
  snprintf(id.gpu, sizeof id.gpu, "%.127s", prop.name);
  id.cc_major = prop.major, id.cc_minor = prop.minor;
  CU(cudaDriverGetVersion(&id.driver));
  id.cudnn = (long)cudnnGetVersion();
  if (dpt_engine_cache_open(&e.cache, &id, dir, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
  e.ctx.dnn = dnn;
  e.ctx.device = 0;
  e.ctx.cudnn_version = id.cudnn;
  e.ctx.cache = &e.cache;
  e.ctx.errata = &errata;
  e.ctx.workspace_limit = (size_t)256 << 20;
  CU(cudaMalloc(&e.ctx.workspace, e.ctx.workspace_limit));
  e.ctx.max_candidates = 4;
  printf("%s (sm %d.%d), driver %d, cuDNN %ld, errata %s (%d rules)\n", prop.name, prop.major, prop.minor, id.driver,
         id.cudnn, argv[1], errata.n);
  struct geo g3 = geo_of(4, 32, 8, 8, 64, 3, 1, 1), g1s2 = geo_of(4, 32, 8, 8, 64, 1, 2, 0);
  int types[3] = {DPT_CG_F16, DPT_CG_BF16, DPT_CG_F32};
  for (int t = 0; t < 3; t++) {
    int io = types[t];
    printf("%s:\n", tname(io));
    t_conv_stats(&e, io, &g3, 0, DPT_CG_F32);
    t_conv_stats(&e, io, &g1s2, 0, DPT_CG_F32);
    sb_both(&e, io, DPT_CG_SBR_CONV_STATS, t_conv_stats, &g3);
    t_finalize(&e, io, 64, 4 * 8 * 8);
    t_apply(&e, io, DPT_CG_SBR_APPLY, 4, 32, 8);
    t_apply(&e, io, DPT_CG_SBAR, 4, 32, 8);
    t_apply(&e, io, DPT_CG_DSBAR, 4, 32, 8);
    t_grads(&e, io, &g3);
    t_grads(&e, io, &g1s2);
    t_wgrad(&e, io, &g3, 0, DPT_CG_F32);
    t_wgrad(&e, io, &g1s2, 0, DPT_CG_F32);
    sb_both(&e, io, DPT_CG_SBR_WGRAD, t_wgrad, &g3);
    sb_both(&e, io, DPT_CG_SBR_WGRAD, t_wgrad, &g1s2);
    t_dbn(&e, io, 4, 32, 8);
    t_dgrad_drelu_dbn(&e, io, &g3);
  }
  bottleneck(&e);
  CHECK(!dpt_engine_cache_store(&e.cache, &err), "engine cache store: %s", err.msg);
  printf("support matrix (this GPU, this cuDNN):\n%s%d pattern/type pairs answered 'no engine' (legacy fallback)\n",
         e.matrix, e.n_unsupported);
  dpt_engine_cache_close(&e.cache);
  dpt_cudnn_errata_free(&errata);
  cudaFree(e.ctx.workspace);
  cudnnDestroy(dnn);
  cudaStreamDestroy(stream);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  if (!failures) printf("test_gpu_fused: all checks passed\n");
  return failures != 0;
}
