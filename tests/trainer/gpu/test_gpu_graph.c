/* test_gpu_graph: the cuda backend's CUDA-graph steps (--cuda-graph on: ops->step_begin,
 * dpt_cuda_capture's plan, dpt_cuda_graph) against the same steps run as they come.
 *
 * 20 training steps of dpt-train's one-rank call list (step_begin, forward, loss, backward,
 * [overflow check], update), a different batch each, with a validation pass of 3 batches after
 * step 10 (its own key: run eagerly once, captured, replayed), on ResNet-50 v1.5 width 1/16,
 * small stem, 32 px, batch 8:
 *   fp32 (deterministic algorithms chosen by heuristics in both): the parameters, the BN running
 *     statistics and the per-step loss totals with capture equal those without, bit for bit;
 *   mixed (fp16, dynamic loss scaling): the same loss curve (every step's loss sum within 1e-5
 *     relative of the uncaptured run's: the replay runs the same kernels on the same data, so any
 *     gap is a missing or stale input), the same loss scale and skipped-step count at the end;
 *   mixed with the fused step (--fuse on) too, against the fused step uncaptured;
 *   fp32 and mixed again with the convolutions on cuDNN graph engines (conv graph, as
 *     DPT_CUDA_CONV=graph: dpt_cuda_convg.c, the heuristics' first deterministic config in both),
 *     so cudnnBackendExecute is captured and replayed too;
 *   the counts: one graph per key captured (training, validation), every later step replayed
 *     (dpt_backend_cuda_fusion_info); no host wait in the captured steps (host_waits counts only
 *     the per-step loss read-back).
 * Exit 77 (SKIPPED) without a GPU. */
#include <string.h>

#include "dpt_cuda_capture.h"
#include "gpu_test.h"

#define N 8
#define STEPS 20
#define VAL_AFTER 10
#define VAL_BATCHES 3

static struct dpt_model m;
static float *xs;    /* [STEPS + VAL_BATCHES, N, 3, 32, 32] */
static int *ys;      /* [STEPS + VAL_BATCHES, N] */
static size_t nx;
static int conv_graph; /* the convolutions' cuDNN graphs (dpt_cuda_convg.c) */

struct run {
  double loss[STEPS], val_loss;
  float *params, *state;
  struct dpt_loss_scaler scaler;
  struct dpt_cuda_fusion_info info;
  long waits;
};

static void announce(struct dpt_backend *be, int what, float lr)
{
  struct dpt_err err = {0};
  struct dpt_cap_run_cfg c = {1, DPT_CAP_COMM_NONE, 0, !strcmp(be->precision, "mixed"), 0, N};
  struct dpt_cap_step s;
  dpt_cuda_capture_step_of(&c, what, 1, &s);
  die_on(be->ops->step_begin(be, &s, lr, &err), &err, "step_begin");
}

static void train(enum dpt_cuda_precision prec, int fuse, int graph, struct run *res)
{
  struct dpt_err err = {0};
  struct dpt_backend_opts o;
  struct dpt_cuda_opts co;
  struct dpt_backend *be;
  struct dpt_loss_totals t;
  int mixed = prec == DPT_CUDA_MIXED;
  dpt_backend_opts_default(&o);
  o.batch = N;
  oracle_opts(&co);
  co.precision = prec;
  co.loss_scale = 1024.0f;
  co.algo_search = 0;
  co.fuse = fuse ? DPT_CUDA_ON : DPT_CUDA_OFF;
  co.graph = graph ? DPT_CUDA_ON : DPT_CUDA_OFF;
  co.conv = conv_graph ? DPT_CUDA_CONV_GRAPH : DPT_CUDA_CONV_AUTO;
  die_on(dpt_backend_cuda_create_ex(&m, &o, &co, &be, &err), &err, "cuda backend");
  CHECK(be->graph == graph, "graph mode %d (want %d)", be->graph, graph);
  die_on(be->ops->sgd_init(be, 0.9f, 1e-4f, 0, NULL, &err), &err, "sgd_init");
  long w0 = be->ops->host_waits(be);
  for (int s = 0; s < STEPS; s++) {
    float lr = 0.05f * (1.0f - (float)s / STEPS); /* a new rate each step: lr_dev must follow */
    announce(be, DPT_CAP_TRAIN_STEP, lr);
    die_on(dpt_backend_forward(be, xs + (size_t)s * nx, 1, NULL, &err), &err, "forward");
    die_on(be->ops->loss(be, ys + (size_t)s * N, 0.1f, 1.0f / N, &err), &err, "loss");
    die_on(dpt_backend_backward(be, NULL, NULL, &err), &err, "backward");
    if (mixed) die_on(be->ops->overflow_check(be, NULL, &err), &err, "overflow check");
    die_on(be->ops->sgd_step(be, lr, NULL, &err), &err, "update");
    die_on(be->ops->loss_totals(be, &t, &err), &err, "loss totals"); /* the step's loss: a host point */
    res->loss[s] = t.loss_sum;
    if (s == VAL_AFTER - 1) {
      for (int v = 0; v < VAL_BATCHES; v++) {
        announce(be, DPT_CAP_VALIDATION, 0);
        die_on(dpt_backend_forward(be, xs + (size_t)(STEPS + v) * nx, 0, NULL, &err), &err, "val forward");
        die_on(be->ops->loss(be, ys + (size_t)(STEPS + v) * N, 0, 0, &err), &err, "val loss");
      }
      die_on(be->ops->loss_totals(be, &t, &err), &err, "val totals");
      res->val_loss = t.loss_sum;
    }
  }
  res->waits = be->ops->host_waits(be) - w0;
  die_on(be->ops->copy_slab(be, DPT_SLAB_PARAMS, res->params, 0, &err), &err, "download");
  die_on(be->ops->copy_slab(be, DPT_SLAB_STATE, res->state, 0, &err), &err, "download");
  if (mixed) die_on(be->ops->scaler_get(be, &res->scaler, &err), &err, "scaler");
  dpt_backend_cuda_fusion_info(be, &res->info);
  dpt_backend_destroy(be);
}

static void compare(enum dpt_cuda_precision prec, int fuse)
{
  size_t np = m.n_params, ns = m.n_state;
  struct run a, b;
  const char *pn = dpt_cuda_precision_name(prec);
  char what[96];
  snprintf(what, sizeof what, "%s%s%s", pn, fuse ? " fused" : "", conv_graph ? " (convolutions on cuDNN graphs)" : "");
  a.params = malloc(np * 4), a.state = malloc(ns * 4), b.params = malloc(np * 4), b.state = malloc(ns * 4);
  train(prec, fuse, 0, &a);
  train(prec, fuse, 1, &b);
  /* training + validation: each captured once (its second run), replayed after */
  CHECK(b.info.graphs_captured == 2, "%s: %ld graphs captured (want 2: training, validation)", what,
        b.info.graphs_captured);
  CHECK(b.info.graphs_launched == (STEPS - 1) + (VAL_BATCHES - 1), "%s: %ld launches (want %d)", what,
        b.info.graphs_launched, (STEPS - 1) + (VAL_BATCHES - 1));
  CHECK(b.waits == a.waits && a.waits == STEPS + 1, "%s: host waits %ld captured, %ld uncaptured (want %d: the loss "
        "read-backs)", what, b.waits, a.waits, STEPS + 1);
  double worst = 0;
  for (int s = 0; s < STEPS; s++) worst = fmax(worst, fabs(a.loss[s] - b.loss[s]) / fmax(fabs(a.loss[s]), 1e-30));
  if (prec == DPT_CUDA_FP32) {
    CHECK(!memcmp(a.params, b.params, np * 4) && !memcmp(a.state, b.state, ns * 4),
          "%s: parameters or BN statistics after %d steps differ with capture", what, STEPS);
    CHECK(worst == 0 && a.val_loss == b.val_loss, "%s: loss curve differs with capture (%.3g relative)", what, worst);
  } else {
    CHECK(worst <= 1e-5 && fabs(a.val_loss - b.val_loss) <= 1e-5 * fabs(a.val_loss),
          "%s: loss curve with capture %.3g relative from without (validation %.9g vs %.9g)", what, worst, b.val_loss,
          a.val_loss);
    CHECK(a.scaler.scale == b.scaler.scale && a.scaler.skipped == b.scaler.skipped,
          "%s: loss scale %g/%ld with capture, %g/%ld without", what, (double)b.scaler.scale, b.scaler.skipped,
          (double)a.scaler.scale, a.scaler.skipped);
  }
  printf("%s: %d steps + %d validation batches, %ld graphs captured, %ld launches; loss curve max gap %.2e, "
         "parameters %s\n", what, STEPS, VAL_BATCHES, b.info.graphs_captured, b.info.graphs_launched, worst,
         memcmp(a.params, b.params, np * 4) ? "differ" : "bit-identical");
  free(a.params), free(a.state), free(b.params), free(b.state);
}

int main(void)
{
  gpu_or_skip("test_gpu_graph");
  struct dpt_err err = {0};
  struct dpt_model_cfg cfg;
  dpt_model_cfg_default(&cfg);
  cfg.width = 1.0 / 16;
  cfg.image_size = 32;
  cfg.num_classes = 10;
  cfg.small_stem = 1;
  die_on(dpt_model_resnet50(&m, &cfg, &err), &err, "model");
  nx = (size_t)N * 3 * 32 * 32;
  int nb = STEPS + VAL_BATCHES;
  xs = malloc((size_t)nb * nx * 4);
  ys = malloc((size_t)nb * N * sizeof(int));
  struct dpt_rng rng;
  dpt_rng_seed(&rng, 9);
  for (size_t i = 0; i < (size_t)nb * nx; i++) xs[i] = (float)dpt_rng_normal(&rng);
  for (int i = 0; i < nb * N; i++) ys[i] = i % N == 3 ? -1 : (int)dpt_rng_below(&rng, 10);
  compare(DPT_CUDA_FP32, 0);
  compare(DPT_CUDA_MIXED, 0);
  compare(DPT_CUDA_MIXED, 1);
  conv_graph = 1;
  compare(DPT_CUDA_FP32, 0);
  compare(DPT_CUDA_MIXED, 0);
  free(xs), free(ys);
  dpt_model_free(&m);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
