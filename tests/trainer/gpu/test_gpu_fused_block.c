/* test_gpu_fused_block.c — part 3 of trainer.gpu.fused (test_gpu_fused.c runs it after the
 * patterns one by one).
 *
 * One identity bottleneck block (64 -> 16 -> 16 -> 64 channels, 8x8, batch 4) at fp16, forward
 * and backward through the fused chain of dpt_cuda_fuse's plan: conv_stats, bn_finalize,
 * sbr_conv_stats x2, sbar; dbn_weight with fork (where no engine takes it, the executor's own
 * kernel, dpt_cuda_dbn.h), dbn_apply, sbr_wgrad, dgrad_drelu_dbn, wgrad, dgrad accumulating onto
 * the shortcut's g.  Against the unfused float64 block (conv, training BN, ReLU, add): the
 * output, the input gradient, every weight and BN parameter gradient, normalised by the largest
 * reference value, within 16 u for the forward and 64 u for the backward (derived: <= 4 u per
 * conv + BN stage, 3 stages + the add; the backward doubles the stages and sums over the batch).
 * The measured errors are printed: the first GPU run is what sets them in stone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "dpt_cuda_dbn.h"
#include "dpt_cuda_kernels.h"
#include "dpt_cudnn_graph.h"

#define DPT_CHECK_SHARED
#include "cu_check.h"
#include "dpt_check.h"
#include "test_gpu_fused.h"

#define BN_EPS 1e-5

struct bn_f64 {
  int C;
  size_t M;
  double mean[64], istd[64];
};

static void bn_fwd(const double *x, size_t n, int C, const float *gamma, const float *beta, int relu, double *y,
                   struct bn_f64 *s)
{
  double sum[64] = {0}, sq[64] = {0};
  size_t M = n / C;
  for (size_t i = 0; i < n; i++) sum[i % C] += x[i], sq[i % C] += x[i] * x[i];
  s->C = C, s->M = M;
  for (int c = 0; c < C; c++) {
    s->mean[c] = sum[c] / M;
    s->istd[c] = 1.0 / sqrt(sq[c] / M - s->mean[c] * s->mean[c] + BN_EPS);
  }
  for (size_t i = 0; i < n; i++) {
    int c = (int)(i % C);
    double v = (x[i] - s->mean[c]) * s->istd[c] * gamma[c] + beta[c];
    y[i] = relu ? fmax(0.0, v) : v;
  }
}

/* given dz (gradient of the BN's affine output, after the ReLU mask), x: dx, dgamma, dbeta */
static void bn_bwd(const double *dz, const double *x, size_t n, const float *gamma, const struct bn_f64 *s, double *dx,
                   double *dg, double *db)
{
  int C = s->C;
  for (int c = 0; c < C; c++) dg[c] = db[c] = 0;
  for (size_t i = 0; i < n; i++) {
    int c = (int)(i % C);
    dg[c] += dz[i] * (x[i] - s->mean[c]) * s->istd[c];
    db[c] += dz[i];
  }
  for (size_t i = 0; i < n; i++) {
    int c = (int)(i % C);
    double xh = (x[i] - s->mean[c]) * s->istd[c];
    dx[i] = gamma[c] * s->istd[c] * (dz[i] - db[c] / s->M - xh * dg[c] / s->M);
  }
}

static double nerr(const float *got, const double *ref, size_t n)
{
  double e = 0, m = 0;
  for (size_t i = 0; i < n; i++) e = fmax(e, fabs(got[i] - ref[i])), m = fmax(m, fabs(ref[i]));
  return m > 0 ? e / m : e;
}

/* One op of the block's chain and the BN whose vectors it uses. */
struct step {
  int pattern, relu, fork, acc;
  const struct geo *g;
  int bn;
  void *x, *w, *y, *r, *dy, *gg, *dx, *dw;
  const char *layer;
};
enum { SUM, SQ, GAM, BET, RM, RV, RMN, RVN, EQS, EQB, MEAN, ISTD, DG, DB, CDY, CX, CB, NVEC }; /* per-BN vectors */

/* The slots of a chain op: its tensors, and its BN's vectors (a convolution's statistics go to
 * the BN after it, its prologue is the BN before it). */
static void step_ptrs(const struct step *s, void *vec[][NVEC], void **p)
{
  void **v = vec[s->bn];
  p[DPT_CG_X] = s->x, p[DPT_CG_W] = s->w, p[DPT_CG_Y] = s->y, p[DPT_CG_R] = s->r, p[DPT_CG_DY] = s->dy;
  p[DPT_CG_G] = s->gg, p[DPT_CG_DX] = s->dx, p[DPT_CG_DW] = s->dw;
  if (s->pattern == DPT_CG_CONV_STATS || s->pattern == DPT_CG_SBR_CONV_STATS) {
    p[DPT_CG_SUM] = v[SUM], p[DPT_CG_SQSUM] = v[SQ];
    if (s->pattern == DPT_CG_SBR_CONV_STATS) p[DPT_CG_S] = vec[s->bn - 1][EQS], p[DPT_CG_B] = vec[s->bn - 1][EQB];
  } else if (s->pattern == DPT_CG_SBR_WGRAD) {
    p[DPT_CG_S] = v[EQS], p[DPT_CG_B] = v[EQB];
  } else {
    p[DPT_CG_SUM] = v[SUM], p[DPT_CG_SQSUM] = v[SQ], p[DPT_CG_GAMMA] = v[GAM], p[DPT_CG_BETA] = v[BET];
    p[DPT_CG_RMEAN] = v[RM], p[DPT_CG_RVAR] = v[RV], p[DPT_CG_EQ_SCALE] = v[EQS], p[DPT_CG_EQ_BIAS] = v[EQB];
    p[DPT_CG_RMEAN_NEXT] = v[RMN], p[DPT_CG_RVAR_NEXT] = v[RVN];
    p[DPT_CG_MEAN] = v[MEAN], p[DPT_CG_ISTD] = v[ISTD], p[DPT_CG_DGAMMA] = v[DG], p[DPT_CG_DBETA] = v[DB];
    p[DPT_CG_C_DY] = v[CDY], p[DPT_CG_C_X] = v[CX], p[DPT_CG_C_B] = v[CB];
    if (s->pattern == DPT_CG_SBAR) p[DPT_CG_S] = v[EQS], p[DPT_CG_B] = v[EQB];
  }
}

void bottleneck(struct env *e)
{
  const int io = DPT_CG_F16, N = 4, H = 8, CI = 64, CM = 16;
  struct geo g1 = geo_of(N, CI, H, H, CM, 1, 1, 0), g2 = geo_of(N, CM, H, H, CM, 3, 1, 1), g3 = geo_of(N, CM, H, H, CI, 1, 1, 0);
  size_t nI = (size_t)N * H * H * CI, nM = (size_t)N * H * H * CM;
  size_t nw1 = (size_t)CM * CI, nw2 = (size_t)CM * 9 * CM, nw3 = (size_t)CI * CM;
  float *x0 = host_rand(nI, 1.0f, io), *w1 = host_rand(nw1, 0.15f, io), *w2 = host_rand(nw2, 0.1f, io), *w3 = host_rand(nw3, 0.2f, io);
  float *dyo = host_rand(nI, 1.0f, io);
  float gam[3][64], bet[3][64], zero64[64] = {0}, one64[64];
  for (int c = 0; c < 64; c++) one64[c] = 1.0f;
  for (int l = 0; l < 3; l++)
    for (int c = 0; c < 64; c++) gam[l][c] = 1.0f + 0.2f * frand(), bet[l][c] = 0.1f * frand();
  /* ---- the float64 unfused block ---- */
  double *dx0 = to_d(x0, nI), *c1 = malloc(nM * 8), *z1 = malloc(nM * 8), *c2 = malloc(nM * 8), *z2 = malloc(nM * 8);
  double *c3 = malloc(nI * 8), *b3 = malloc(nI * 8), *yo = malloc(nI * 8);
  struct bn_f64 s1, s2, s3;
  conv_ref(&g1, dx0, w1, c1, NULL);
  bn_fwd(c1, nM, CM, gam[0], bet[0], 1, z1, &s1);
  conv_ref(&g2, z1, w2, c2, NULL);
  bn_fwd(c2, nM, CM, gam[1], bet[1], 1, z2, &s2);
  conv_ref(&g3, z2, w3, c3, NULL);
  bn_fwd(c3, nI, CI, gam[2], bet[2], 0, b3, &s3);
  for (size_t i = 0; i < nI; i++) yo[i] = fmax(0.0, b3[i] + x0[i]);
  /* backward */
  double *gsc = malloc(nI * 8), *dc3 = malloc(nI * 8), *dz2 = malloc(nM * 8), *dc2 = malloc(nM * 8), *dz1 = malloc(nM * 8);
  double *dc1 = malloc(nM * 8), *dxin = malloc(nI * 8), *dw1 = malloc(nw1 * 8), *dw2 = malloc(nw2 * 8), *dw3 = malloc(nw3 * 8);
  double dg[3][64], db[3][64];
  for (size_t i = 0; i < nI; i++) gsc[i] = yo[i] > 0 ? dyo[i] : 0.0;
  bn_bwd(gsc, c3, nI, gam[2], &s3, dc3, dg[2], db[2]);
  wgrad_ref(&g3, z2, dc3, dw3, NULL);
  dgrad_ref(&g3, dc3, w3, dz2, NULL);
  for (size_t i = 0; i < nM; i++) dz2[i] = z2[i] > 0 ? dz2[i] : 0.0;
  bn_bwd(dz2, c2, nM, gam[1], &s2, dc2, dg[1], db[1]);
  wgrad_ref(&g2, z1, dc2, dw2, NULL);
  dgrad_ref(&g2, dc2, w2, dz1, NULL);
  for (size_t i = 0; i < nM; i++) dz1[i] = z1[i] > 0 ? dz1[i] : 0.0;
  bn_bwd(dz1, c1, nM, gam[0], &s1, dc1, dg[0], db[0]);
  wgrad_ref(&g1, dx0, dc1, dw1, NULL);
  dgrad_ref(&g1, dc1, w1, dxin, NULL);
  for (size_t i = 0; i < nI; i++) dxin[i] += gsc[i];
  /* ---- the fused chain on the GPU ---- */
  void *X0 = dev(nI, io), *W1 = dev(nw1, io), *W2 = dev(nw2, io), *W3 = dev(nw3, io), *C1 = dev(nM, io), *C2 = dev(nM, io);
  void *C3 = dev(nI, io), *Y = dev(nI, io), *DYO = dev(nI, io), *G = dev(nI, io), *DC3 = dev(nI, io), *G2 = dev(nM, io);
  void *DC2 = dev(nM, io), *G1 = dev(nM, io), *DC1 = dev(nM, io), *DW1 = dev(nw1, io), *DW2 = dev(nw2, io), *DW3 = dev(nw3, io);
  void *vec[3][NVEC];
  for (int l = 0; l < 3; l++)
    for (int v = 0; v < NVEC; v++) vec[l][v] = dev(64, DPT_CG_F32);
  put(X0, x0, nI, io), put(W1, w1, nw1, io), put(W2, w2, nw2, io), put(W3, w3, nw3, io), put(DYO, dyo, nI, io);
  for (int l = 0; l < 3; l++) {
    put(vec[l][GAM], gam[l], 64, DPT_CG_F32), put(vec[l][BET], bet[l], 64, DPT_CG_F32);
    put(vec[l][RM], zero64, 64, DPT_CG_F32), put(vec[l][RV], one64, 64, DPT_CG_F32);
  }
  struct step chain[] = {
      /* forward */
      {DPT_CG_CONV_STATS, 0, 0, 0, &g1, 0, X0, W1, C1, NULL, NULL, NULL, NULL, NULL, "block.conv1"},
      {DPT_CG_BN_FINALIZE, 0, 0, 0, &g2, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "block.bn1"},
      {DPT_CG_SBR_CONV_STATS, 1, 0, 0, &g2, 1, C1, W2, C2, NULL, NULL, NULL, NULL, NULL, "block.conv2"},
      {DPT_CG_BN_FINALIZE, 0, 0, 0, &g3, 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "block.bn2"},
      {DPT_CG_SBR_CONV_STATS, 1, 0, 0, &g3, 2, C2, W3, C3, NULL, NULL, NULL, NULL, NULL, "block.conv3"},
      {DPT_CG_BN_FINALIZE, 0, 0, 0, &g1, 2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "block.bn3"},
      {DPT_CG_SBAR, 1, 0, 0, &g1, 2, C3, NULL, Y, X0, NULL, NULL, NULL, NULL, "block.add"},
      /* backward: g (the shortcut's gradient) forked into G, then copied into the input's gradient */
      {DPT_CG_DBN_WEIGHT, 1, 1, 0, &g1, 2, C3, NULL, Y, NULL, DYO, G, NULL, NULL, "block.add"},
      {DPT_CG_DBN_APPLY, 0, 0, 0, &g1, 2, C3, NULL, NULL, NULL, NULL, G, DC3, NULL, "block.bn3"},
      {DPT_CG_SBR_WGRAD, 1, 0, 0, &g3, 1, C2, NULL, NULL, NULL, DC3, NULL, NULL, DW3, "block.conv3"},
      {DPT_CG_DGRAD_DRELU_DBN, 1, 0, 0, &g3, 1, C2, W3, NULL, NULL, DC3, G2, NULL, NULL, "block.conv3"},
      {DPT_CG_DBN_APPLY, 0, 0, 0, &g2, 1, C2, NULL, NULL, NULL, NULL, G2, DC2, NULL, "block.bn2"},
      {DPT_CG_SBR_WGRAD, 1, 0, 0, &g2, 0, C1, NULL, NULL, NULL, DC2, NULL, NULL, DW2, "block.conv2"},
      {DPT_CG_DGRAD_DRELU_DBN, 1, 0, 0, &g2, 0, C1, W2, NULL, NULL, DC2, G1, NULL, NULL, "block.conv2"},
      {DPT_CG_DBN_APPLY, 0, 0, 0, &g1, 0, C1, NULL, NULL, NULL, NULL, G1, DC1, NULL, "block.bn1"},
      {DPT_CG_WGRAD, 0, 0, 0, &g1, 0, X0, NULL, NULL, NULL, DC1, NULL, NULL, DW1, "block.conv1"},
      {DPT_CG_DGRAD, 0, 0, 1, &g1, 0, NULL, W1, NULL, NULL, DC1, NULL, G, NULL, "block.conv1"},
  };
  /* the geometry of each op: BN / apply ops act on the tensor [N, C, H, H] of their BN */
  int nops = (int)(sizeof chain / sizeof *chain);
  struct dpt_cg_op ops[32];
  int built = 0, unsupported = -1, own[32] = {0}; /* own[i]: dbn_weight on the own kernel, as the executor runs it */
  for (int i = 0; i < nops && unsupported < 0; i++) {
    const struct step *s = &chain[i];
    int C = s->bn == 2 ? CI : CM;
    struct geo tg = geo_of(N, C, H, H, 1, 1, 1, 0), cg = *s->g;
    int conv = s->pattern == DPT_CG_CONV_STATS || s->pattern == DPT_CG_SBR_CONV_STATS || s->pattern == DPT_CG_SBR_WGRAD ||
               s->pattern == DPT_CG_DGRAD_DRELU_DBN || s->pattern == DPT_CG_WGRAD || s->pattern == DPT_CG_DGRAD;
    struct dpt_cg_desc d = desc(s->pattern, io, conv ? &cg : &tg, s->relu, s->layer);
    d.fork = s->fork, d.accumulate = s->acc;
    void *p[DPT_CG_NSLOTS] = {0};
    step_ptrs(s, vec, p);
    struct dpt_err err;
    /* build (timing runs change the outputs; the chain below runs every op once in order) */
    int rc = dpt_cg_build(&e->ctx, &d, p, &ops[i], &err);
    if (rc == DPT_E_UNSUPPORTED && s->pattern == DPT_CG_DBN_WEIGHT) {
      printf("bottleneck block: %s (%s) on the own dBN-weight kernel: %s\n", dpt_cg_pattern_name(s->pattern), s->layer,
             err.msg);
      own[i] = 1, built++;
      continue;
    }
    if (rc == DPT_E_UNSUPPORTED) {
      printf("bottleneck block: not run: %s (%s) has no engine here: %s\n", dpt_cg_pattern_name(s->pattern), s->layer,
             err.msg);
      unsupported = i;
      break;
    }
    CHECK(rc == 0, "bottleneck %s: %s", s->layer, err.msg);
    if (rc) break;
    built++;
  }
  if (built == nops) {
    /* reset what the timing runs changed, then the step in order: running stats, the input gradient */
    for (int l = 0; l < 3; l++) put(vec[l][RM], zero64, 64, DPT_CG_F32), put(vec[l][RV], one64, 64, DPT_CG_F32);
    for (int i = 0; i < nops; i++) {
      const struct step *s = &chain[i];
      void *p[DPT_CG_NSLOTS] = {0};
      step_ptrs(s, vec, p);
      struct dpt_err err;
      if (!own[i]) {
        CHECK(!dpt_cg_execute(&e->ctx, &ops[i], p, &err), "bottleneck %s: %s", s->layer, err.msg);
        continue;
      }
      cudaStream_t st = 0; /* the handle's, as the executor's */
      CHECK(cudnnGetStream(e->ctx.dnn, &st) == CUDNN_STATUS_SUCCESS, "bottleneck %s: cudnnGetStream", s->layer);
      struct dpt_cuda_dbn_args a = {p[DPT_CG_DY], s->relu ? p[DPT_CG_Y] : NULL, p[DPT_CG_X], s->fork ? p[DPT_CG_G] : NULL,
                                    io, s->bn == 2 ? CI : CM, (size_t)N * H * H, p[DPT_CG_MEAN],
                                    p[DPT_CG_ISTD], p[DPT_CG_GAMMA], p[DPT_CG_DGAMMA], p[DPT_CG_DBETA], p[DPT_CG_C_DY],
                                    p[DPT_CG_C_X], p[DPT_CG_C_B]};
      CU((cudaError_t)dpt_cuda_dbn_weight(&a, e->ctx.workspace, e->ctx.workspace_limit, st));
    }
    CU(cudaDeviceSynchronize());
    float *gy = get(Y, nI, io), *gdx = get(G, nI, io), *gw1 = get(DW1, nw1, io), *gw2 = get(DW2, nw2, io),
          *gw3 = get(DW3, nw3, io);
    double u = unit(io), ef = nerr(gy, yo, nI), edx = nerr(gdx, dxin, nI);
    double ew = fmax(nerr(gw1, dw1, nw1), fmax(nerr(gw2, dw2, nw2), nerr(gw3, dw3, nw3)));
    double ebn = 0;
    for (int l = 0; l < 3; l++) {
      int C = l == 2 ? CI : CM;
      float *gg = get(vec[l][DG], C, DPT_CG_F32), *gb = get(vec[l][DB], C, DPT_CG_F32);
      ebn = fmax(ebn, fmax(nerr(gg, dg[l], C), nerr(gb, db[l], C)));
      free(gg), free(gb);
    }
    printf("bottleneck block fp16, fused vs unfused float64 (normalised max error): output %.3g, input gradient %.3g, "
           "weight gradients %.3g, BN parameter gradients %.3g (u = %.3g)\n", ef, edx, ew, ebn, u);
    CHECK(ef <= 16 * u, "bottleneck output: %.3g > 16 u", ef);
    CHECK(edx <= 64 * u && ew <= 64 * u && ebn <= 64 * u, "bottleneck gradients: dx %.3g dw %.3g dbn %.3g > 64 u", edx,
          ew, ebn);
    free(gy), free(gdx), free(gw1), free(gw2), free(gw3);
  }
  for (int i = 0; i < built; i++) dpt_cg_destroy(&ops[i]);
  void *all[] = {X0, W1, W2, W3, C1, C2, C3, Y, DYO, G, DC3, G2, DC2, G1, DC1, DW1, DW2, DW3};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) cudaFree(all[i]);
  for (int l = 0; l < 3; l++)
    for (int v = 0; v < NVEC; v++) cudaFree(vec[l][v]);
  free(x0), free(w1), free(w2), free(w3), free(dyo), free(dx0), free(c1), free(z1), free(c2), free(z2), free(c3), free(b3);
  free(yo), free(gsc), free(dc3), free(dz2), free(dc2), free(dz1), free(dc1), free(dxin), free(dw1), free(dw2), free(dw3);
}
