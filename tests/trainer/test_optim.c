/* test_optim: softmax cross-entropy (label smoothing, padding labels, top-k),
 * momentum SGD (weight-decay mask, nesterov) and the learning-rate schedules. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_optim.h"

#include "dpt_check.h"
#define NEAR(a, b, tol) (fabs((double)(a) - (double)(b)) <= (tol) * (1 + fabs((double)(b))))

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
  c.kind = DPT_SCHED_STEP;
  c.step_epochs = 30;
  CHECK(NEAR(dpt_schedule_lr(&c, 65), 0.032, 1e-9), "step %g", dpt_schedule_lr(&c, 65));
  c.kind = DPT_SCHED_COSINE;
  CHECK(NEAR(dpt_schedule_lr(&c, 5), 3.2, 1e-9) && NEAR(dpt_schedule_lr(&c, 47.5), 1.6, 1e-9) &&
            dpt_schedule_lr(&c, 90) < 1e-12, "cosine %g %g", dpt_schedule_lr(&c, 47.5), dpt_schedule_lr(&c, 90));
  c.kind = DPT_SCHED_POLY;
  c.power = 2;
  CHECK(NEAR(dpt_schedule_lr(&c, 47.5), 0.8, 1e-9), "poly %g", dpt_schedule_lr(&c, 47.5));
  c.kind = DPT_SCHED_CONST;
  CHECK(NEAR(dpt_schedule_lr(&c, 70), 3.2, 1e-12), "const");
  CHECK(dpt_schedule_parse_kind("cosine") == DPT_SCHED_COSINE && dpt_schedule_parse_kind("linear") == -1, "parse");
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else printf("ok: cross-entropy, SGD, schedules\n");
  return failures ? 1 : 0;
}
