/* test_optim: softmax cross-entropy (label smoothing, padding labels, top-k),
 * momentum SGD (weight-decay mask, nesterov), LARS against a float64 oracle of the MLPerf
 * reference's formula, RMSprop warm-up (its mix at chosen epochs, 4 steps against a float64
 * oracle), and the learning-rate schedules. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_optim.h"

#include "dpt_check.h"
#define NEAR(a, b, tol) (fabs((double)(a) - (double)(b)) <= (tol) * (1 + fabs((double)(b))))

/* LARS: 3 steps of the MLPerf ResNet-50 reference's update (lars_optimizer.py) on five tensors
 * (a weight, a BN gamma and beta, which are skipped, an all-zero weight: trust ratio 1 on step 1,
 * and a weight whose gradient is 0: ratio 1, decay only), with a changing learning rate (the
 * momentum buffer holds lr-scaled steps), momentum 0.9, wd 0.01, eta 0.02, eps 0 (taken as 1e-7).
 * The values come from tests/trainer/optim_oracle.py (numpy, float64), not from dpt. */
static const double lars_w0[18] = {0.7380505400522861, -0.61927827593542284, 0.43982259252975203, 1.1879870357968392, -1.0793286748947775, 0.37032255725651914, 0.90589999999999993, 0.94704999999999995, 0.9588500000000002, -2.3025000000000002, 1.15625, -0.58812500000000001, -0.13786275644298462, 0.41358826932895382, -0.27572551288596925, -0.068931378221492312, 0.67556553750000004, -0.38603745};
static const double lars_v0[18] = {-0.027513756581053032, -0.0086056597365897596, 0.017733404818189909, -0.0052817398901893603, -0.035336288300127222, 0.031294501104337527, -0.045100000000000001, 0.022550000000000001, -0.067649999999999988, -1.1274999999999999, 0.56374999999999997, -0.28187499999999999, -0.041869401136105031, 0.12560820340831508, -0.083738802272210061, -0.020934700568052515, -0.010819462499999998, 0.0061825500000000011};
static const double lars_r0[5] = {0.029330856131320433, 1, 1, 0.0095534807317833471, 1};
static const double lars_w1[18] = {0.71313029939117667, -0.62707338429282788, 0.45588509096422192, 1.1832039533937746, -1.1113356013338023, 0.39866807037667135, 0.86530999999999991, 0.9673449999999999, 0.89796500000000012, -3.3172499999999996, 1.6636250000000001, -0.84181250000000007, -0.17833705691720689, 0.53501117075162063, -0.35667411383441378, -0.089168528458603444, 0.6659563435875, -0.38054648205000002};
static const double lars_v1[18] = {-0.027577840614576993, -0.0086259944630402811, 0.017775021918528606, -0.0052936840923602279, -0.0354192855889452, 0.031367804853649081, -0.045100000000000001, 0.022550000000000001, -0.067649999999999988, -1.1274999999999999, 0.56374999999999997, -0.28187499999999999, -0.04287419602639797, 0.12862258807919391, -0.085748392052795941, -0.021437098013198985, -0.010768503374999999, 0.0061534305000000011};
static const double lars_r1[5] = {0.029550075338553864, 1, 1, 0.013810427170275001, 1};
static const float lars_w0in[18] = {0.8f, -0.6f, 0.4f, 1.2f, -1.0f, 0.3f, 1.0f, 0.9f, 1.1f,
                                     0.05f, -0.02f, 0.0f, 0, 0, 0, 0, 0.7f, -0.4f};
static const float lars_g0[18] = {0.3f, 0.1f, -0.2f, 0.05f, 0.4f, -0.35f, 0.02f, -0.01f, 0.03f,
                                  0.5f, -0.25f, 0.125f, 0.1f, -0.3f, 0.2f, 0.05f, 0, 0};

static void test_lars(void)
{
  struct dpt_err err = {0};
  const struct dpt_param_seg seg[5] = {{0, 6, 0}, {6, 3, 1}, {9, 3, 1}, {12, 4, 0}, {16, 2, 0}};
  const double *want_w[2] = {lars_w0, lars_w1}, *want_v[2] = {lars_v0, lars_v1}, *want_r[2] = {lars_r0, lars_r1};
  const float lrs[3] = {0.5f, 1.0f, 0.25f};
  /* float32 against float64: 3 steps of at most 6 roundings each of values up to 3.4, plus the
   * inputs' own rounding to float: below 64 units of 2^-24 relative to 1 + |value| */
  const double tol = 64.0 / (1 << 24);
  for (int nest = 0; nest < 2; nest++) {
    struct dpt_sgd o;
    struct dpt_lars l;
    float w[18], g[18];
    CHECK(dpt_sgd_init(&o, 18, 0.9f, 0.01f, NULL, &err) == 0, "%s", err.msg);
    o.nesterov = nest;
    CHECK(dpt_lars_init(&l, 18, seg, 5, 0.02f, 0.0f, &err) == 0, "%s", err.msg);
    CHECK(l.eps == (float)DPT_LARS_EPS_ZERO, "eps 0 becomes %g, not 1e-7", (double)l.eps);
    memcpy(w, lars_w0in, sizeof w);
    for (int k = 0; k < 3; k++) {
      for (int i = 0; i < 18; i++) g[i] = lars_g0[i] * (1.0f + 0.5f * (float)k);
      dpt_lars_step(&l, &o, lrs[k], w, g);
      if (k == 0) /* the all-zero weight and the zero gradient: ratio 1 */
        CHECK(l.ratio[3] == 1.0f && l.ratio[4] == 1.0f && l.ratio[1] == 1.0f, "step 1 ratios %g %g %g",
              (double)l.ratio[1], (double)l.ratio[3], (double)l.ratio[4]);
    }
    for (int i = 0; i < 18; i++) {
      CHECK(NEAR(w[i], want_w[nest][i], tol), "lars nesterov=%d w[%d] %.9g vs %.9g", nest, i, w[i], want_w[nest][i]);
      CHECK(NEAR(o.velocity[i], want_v[nest][i], tol), "lars nesterov=%d momentum[%d] %.9g vs %.9g", nest, i,
            o.velocity[i], want_v[nest][i]);
    }
    for (int t = 0; t < 5; t++)
      CHECK(NEAR(l.ratio[t], want_r[nest][t], tol), "lars nesterov=%d trust ratio %d %.9g vs %.9g", nest, t,
            l.ratio[t], want_r[nest][t]);
    dpt_lars_free(&l);
    dpt_sgd_free(&o);
  }
  /* tensors that do not tile the slab are refused, saying where */
  struct dpt_lars l;
  const struct dpt_param_seg gap[2] = {{0, 6, 0}, {7, 3, 1}}, shortv[1] = {{0, 6, 0}};
  CHECK(dpt_lars_init(&l, 10, gap, 2, 0.001f, 0, &err) == DPT_E_INPUT && strstr(err.msg, "offset 7"), "gap: %s",
        err.msg);
  CHECK(dpt_lars_init(&l, 10, shortv, 1, 0.001f, 0, &err) == DPT_E_INPUT && strstr(err.msg, "6 values, the slab 10"),
        "short: %s", err.msg);
  CHECK(dpt_lars_init(&l, 6, shortv, 1, 0.0f, 0, &err) == DPT_E_INPUT, "eta 0 must be refused");
}

/* RMSprop warm-up (Akiba et al. 2017): 4 steps at epochs 0, 10, 12, 13 (the mix's exponential
 * part, its centre, its linear part, pure SGD) with rates 0.1, 0.2, 0.2, 0.05, a decay mask,
 * mu1 0.9, wd 0.01, rms lr 3e-4, mu2 0.99, eps 1e-8, centre 10, period 5: values from
 * tests/trainer/optim_oracle.py (numpy, float64). */
static const double rmsw_w[6] = {0.39199313701531896, 0.12233605385100794, 1.4580910767735533, -2.2729432794623317, 0.81141174847971353, -0.19427525596277812};
static const double rmsw_d[6] = {-0.51119014587862677, 1.9236091189066853, -0.15495316165106654, -1.4011272804357247, 0.26444667123773435, -0.97457311607912289};
static const double rmsw_m[6] = {0.0014034231144124665, 0.021488553235809379, 0.0001033079580077067, 0.011196309060156704, 0.00033463810000000031, 0.0053542096000000049};

static void test_rmsw(void)
{
  struct dpt_err err = {0};
  /* the mix: 1/2 e^-4 at epoch 0, 1/2 at the centre from both sides (continuous, slope 1/p on
   * both sides), 0.9 at 12, 1 from 12.5 */
  const double c = 10, p = 5, h = 1e-6;
  CHECK(NEAR(dpt_rmsw_alpha_sgd(0, c, p), 0.5 * exp(-4.0), 1e-15) && dpt_rmsw_alpha_sgd(10, c, p) == 0.5 &&
            NEAR(dpt_rmsw_alpha_sgd(12, c, p), 0.9, 1e-15) && dpt_rmsw_alpha_sgd(12.5, c, p) == 1.0 &&
            dpt_rmsw_alpha_sgd(90, c, p) == 1.0, "mix %g %g %g %g", dpt_rmsw_alpha_sgd(0, c, p),
        dpt_rmsw_alpha_sgd(10, c, p), dpt_rmsw_alpha_sgd(12, c, p), dpt_rmsw_alpha_sgd(12.5, c, p));
  double left = dpt_rmsw_alpha_sgd(c - h, c, p), right = dpt_rmsw_alpha_sgd(c + h, c, p);
  CHECK(fabs(left - 0.5) < 2 * h / p && fabs(right - 0.5) < 2 * h / p &&
            NEAR((0.5 - left) / h, 1 / p, 1e-5) && NEAR((right - 0.5) / h, 1 / p, 1e-5),
        "mix not continuous or not smooth at the centre: %.12g | %.12g", left, right);
  for (double e = 0; e < 20; e += 0.25) /* never decreasing, within [0, 1] */
    CHECK(dpt_rmsw_alpha_sgd(e + 0.25, c, p) >= dpt_rmsw_alpha_sgd(e, c, p) && dpt_rmsw_alpha_sgd(e, c, p) > 0 &&
              dpt_rmsw_alpha_sgd(e, c, p) <= 1, "mix at %g", e);
  /* 4 steps against the oracle */
  const float w0[6] = {0.5f, -0.25f, 1.5f, -2.0f, 0.75f, 0.0f}, g0[6] = {0.1f, -0.4f, 0.02f, 0.3f, -0.05f, 0.2f};
  const unsigned char mask[6] = {1, 1, 1, 1, 0, 0};
  const double ep[4] = {0, 10, 12, 13};
  const float lrs[4] = {0.1f, 0.2f, 0.2f, 0.05f};
  struct dpt_sgd o;
  struct dpt_rmsw r;
  float w[6], g[6], m[6] = {0};
  CHECK(dpt_sgd_init(&o, 6, 0.9f, 0.01f, mask, &err) == 0, "%s", err.msg);
  CHECK(dpt_rmsw_init(&r, 6, m, 3e-4f, 0.99f, 1e-8f, 10, 5, &err) == 0, "%s", err.msg);
  memcpy(w, w0, sizeof w);
  for (int k = 0; k < 4; k++) {
    for (int i = 0; i < 6; i++) g[i] = g0[i] * (1.0f + 0.5f * (float)k);
    dpt_rmsw_step(&r, &o, lrs[k], ep[k], w, g);
  }
  /* float32 against float64: 4 steps of at most 12 roundings (the square root and the division
   * included) of values up to 2.3: below 128 units of 2^-24 relative to 1 + |value|; the second
   * moment (values 1e-4 .. 2e-2) relative to itself, 64 units */
  const double tol = 128.0 / (1 << 24);
  for (int i = 0; i < 6; i++) {
    CHECK(NEAR(w[i], rmsw_w[i], tol) && NEAR(o.velocity[i], rmsw_d[i], tol), "rmsprop warm-up w[%d] %.9g vs %.9g, "
          "d %.9g vs %.9g", i, w[i], rmsw_w[i], o.velocity[i], rmsw_d[i]);
    CHECK(fabs(m[i] - rmsw_m[i]) <= 64.0 / (1 << 24) * rmsw_m[i], "rmsprop warm-up m[%d] %.9g vs %.9g", i, m[i],
          rmsw_m[i]);
  }
  CHECK(dpt_rmsw_init(&r, 6, NULL, 3e-4f, 0.99f, 1e-8f, 10, 5, &err) == DPT_E_INPUT, "no buffer must be refused");
  CHECK(dpt_rmsw_init(&r, 6, m, 3e-4f, 1.0f, 1e-8f, 10, 5, &err) == DPT_E_INPUT && strstr(err.msg, "mu2"),
        "mu2 1 must be refused: %s", err.msg);
  dpt_sgd_free(&o);
}

int main(void)
{
  struct dpt_err err = {0};
  /* cross-entropy against a direct double computation, with smoothing 0.1 */
  float z[3 * 4] = {1, 2, 3, 4, -1, 0.5f, 0.25f, 8, 0, 0, 0, 0};
  int y[3] = {2, 3, -1};
  float g[12];
  int t1, t5;
  double L = dpt_softmax_xent(z, y, 3, 4, 0.1f, 0.5f, g, &t1, &t5);
  double want = 0;
  for (int i = 0; i < 2; i++) {
    double mx = -1e30, se = 0;
    for (int j = 0; j < 4; j++) mx = fmax(mx, z[i * 4 + j]);
    for (int j = 0; j < 4; j++) se += exp(z[i * 4 + j] - mx);
    for (int j = 0; j < 4; j++) {
      double logp = z[i * 4 + j] - mx - log(se), t = 0.1 / 4 + (j == y[i] ? 0.9 : 0);
      want -= t * logp;
      double gg = 0.5 * (exp(logp) - t);
      CHECK(NEAR(g[i * 4 + j], gg, 1e-6), "dlogits[%d][%d] %g vs %g", i, j, g[i * 4 + j], gg);
    }
  }
  CHECK(NEAR(L, want, 1e-7), "loss %.10g vs %.10g", L, want);
  CHECK(g[8] == 0 && g[11] == 0, "padding row (label -1) must get zero gradient");
  CHECK(t1 == 1 && t5 == 2, "top1 %d top5 %d (row 0: label 2 ranks second; row 1: argmax)", t1, t5);
  /* gradient sums to zero per row */
  CHECK(fabs(g[0] + g[1] + g[2] + g[3]) < 1e-7, "softmax-target row sum");

  /* SGD: 3 steps against the closed form, decay only where masked */
  struct dpt_sgd s;
  unsigned char mask[2] = {1, 0};
  CHECK(dpt_sgd_init(&s, 2, 0.9f, 0.01f, mask, &err) == 0, "%s", err.msg);
  float w[2] = {1.0f, 1.0f}, gr[2] = {0.5f, 0.5f};
  double wd[2] = {1, 1}, v[2] = {0, 0};
  for (int k = 0; k < 3; k++) {
    dpt_sgd_step(&s, 0.1f, w, gr);
    for (int i = 0; i < 2; i++) {
      double gg = 0.5 + (i == 0 ? 0.01 * wd[i] : 0);
      v[i] = 0.9 * v[i] + gg;
      wd[i] -= 0.1 * v[i];
    }
  }
  CHECK(NEAR(w[0], wd[0], 1e-6) && NEAR(w[1], wd[1], 1e-6), "sgd %g %g vs %g %g", w[0], w[1], wd[0], wd[1]);
  CHECK(w[0] < w[1], "weight decay must shrink only the masked parameter");
  dpt_sgd_free(&s);

  /* schedules */
  struct dpt_schedule c = {0};
  c.peak_lr = dpt_lr_scaled(0.1, 8192, 256); /* Goyal et al.: 3.2 at 8k */
  CHECK(NEAR(c.peak_lr, 3.2, 1e-12), "linear scaling %g", c.peak_lr);
  c.warmup_epochs = 5;
  c.warmup_start = 0.1 / 3.2;
  c.total_epochs = 90;
  c.gamma = 0.1;
  c.kind = DPT_SCHED_MULTISTEP;
  c.n_milestones = 3;
  c.milestones[0] = 30, c.milestones[1] = 60, c.milestones[2] = 80;
  CHECK(NEAR(dpt_schedule_lr(&c, 0), 0.1, 1e-9), "warm-up start %g", dpt_schedule_lr(&c, 0));
  CHECK(NEAR(dpt_schedule_lr(&c, 2.5), (0.1 + 3.2) / 2, 1e-9), "warm-up midpoint %g", dpt_schedule_lr(&c, 2.5));
  CHECK(NEAR(dpt_schedule_lr(&c, 29.9), 3.2, 1e-9) && NEAR(dpt_schedule_lr(&c, 30), 0.32, 1e-9) &&
            NEAR(dpt_schedule_lr(&c, 85), 0.0032, 1e-9), "multistep");
  /* per-milestone factors, cumulative: ChainerMN's 90-epoch ImageNet recipe (ChainerMN v1.3
   * announcement, appendix): lr x0.2 at epoch 30, x0.1 at 60 and at 80 */
  c.n_gammas = 3;
  c.gammas[0] = 0.2, c.gammas[1] = 0.1, c.gammas[2] = 0.1;
  CHECK(NEAR(dpt_schedule_lr(&c, 29.9), 3.2, 1e-12) && NEAR(dpt_schedule_lr(&c, 30), 0.64, 1e-12) &&
            NEAR(dpt_schedule_lr(&c, 59.9), 0.64, 1e-12) && NEAR(dpt_schedule_lr(&c, 60), 0.064, 1e-12) &&
            NEAR(dpt_schedule_lr(&c, 80), 0.0064, 1e-12), "multistep gammas %g %g %g", dpt_schedule_lr(&c, 30),
        dpt_schedule_lr(&c, 60), dpt_schedule_lr(&c, 80));
  c.n_gammas = 0;
  c.kind = DPT_SCHED_STEP;
  c.step_epochs = 30;
  CHECK(NEAR(dpt_schedule_lr(&c, 65), 0.032, 1e-9), "step %g", dpt_schedule_lr(&c, 65));
  c.kind = DPT_SCHED_COSINE;
  CHECK(NEAR(dpt_schedule_lr(&c, 5), 3.2, 1e-9) && NEAR(dpt_schedule_lr(&c, 47.5), 1.6, 1e-9) &&
            dpt_schedule_lr(&c, 90) < 1e-12, "cosine %g %g", dpt_schedule_lr(&c, 47.5), dpt_schedule_lr(&c, 90));
  c.kind = DPT_SCHED_POLY;
  c.power = 2;
  CHECK(NEAR(dpt_schedule_lr(&c, 47.5), 0.8, 1e-9), "poly %g", dpt_schedule_lr(&c, 47.5));
  /* MLPerf's PolynomialDecayWithWarmup (image_classification/tensorflow2/lars_util.py) at a
   * global batch < 16384: initial lr 10, warm-up 5 epochs from 0, power 2, end lr 1e-4.
   * Values by hand: 2.5 -> 10 x 2.5 / 5; 47.5 (half-way through the decay) -> 1e-4 + 9.9999 / 4;
   * 90 -> 1e-4.  (The reference's decay spans one step more, train_steps - warmup_steps + 1.) */
  struct dpt_schedule mp = {.kind = DPT_SCHED_POLY, .peak_lr = 10, .warmup_epochs = 5, .total_epochs = 90,
                            .power = 2, .min_lr = 1e-4};
  CHECK(NEAR(dpt_schedule_lr(&mp, 2.5), 5.0, 1e-12) && NEAR(dpt_schedule_lr(&mp, 47.5), 2.500075, 1e-12) &&
            NEAR(dpt_schedule_lr(&mp, 90), 1e-4, 1e-12), "mlperf poly %g %g %g", dpt_schedule_lr(&mp, 2.5),
        dpt_schedule_lr(&mp, 47.5), dpt_schedule_lr(&mp, 90));
  c.kind = DPT_SCHED_CONST;
  CHECK(NEAR(dpt_schedule_lr(&c, 70), 3.2, 1e-12), "const");
  /* piecewise: the table's level from its start on; warm-up ramps to the first level */
  struct dpt_schedule pw = {.kind = DPT_SCHED_PIECEWISE, .warmup_epochs = 2, .n_levels = 4,
                            .starts = {0, 40, 70, 85}, .levels = {0.5, 0.075, 0.01, 0.001}};
  pw.peak_lr = pw.levels[0];
  CHECK(NEAR(dpt_schedule_lr(&pw, 1), 0.25, 1e-15) && dpt_schedule_lr(&pw, 2) == 0.5 &&
            dpt_schedule_lr(&pw, 39.99) == 0.5 && dpt_schedule_lr(&pw, 40) == 0.075 &&
            dpt_schedule_lr(&pw, 84.9) == 0.01 && dpt_schedule_lr(&pw, 85) == 0.001 && dpt_schedule_lr(&pw, 90) == 0.001,
        "piecewise %g %g %g %g", dpt_schedule_lr(&pw, 1), dpt_schedule_lr(&pw, 39.99), dpt_schedule_lr(&pw, 40),
        dpt_schedule_lr(&pw, 85));
  CHECK(dpt_schedule_parse_kind("piecewise") == DPT_SCHED_PIECEWISE &&
            !strcmp(dpt_schedule_kind_name(DPT_SCHED_PIECEWISE), "piecewise"), "piecewise name");
  CHECK(dpt_schedule_parse_kind("cosine") == DPT_SCHED_COSINE && dpt_schedule_parse_kind("linear") == -1, "parse");
  test_lars();
  test_rmsw();
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else printf("ok: cross-entropy, SGD, LARS, RMSprop warm-up, schedules\n");
  return failures ? 1 : 0;
}
