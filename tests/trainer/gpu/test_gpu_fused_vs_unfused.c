/* test_gpu_fused_vs_unfused: the cuda backend's fused step (--fuse on: dpt_cuda_fstep, the fusion
 * plan's ops through cuDNN graphs) against its unfused step (--fuse off, the oracle) on the same
 * batch: forward, loss, backward and one update, at tf32, mixed (fp16) and bf16, on the fixtures
 * of trainer.gpu.vs_cpu (ref/gpu_ref: ResNet-50 v1.5 width 1/8, small stem, 3x32x32, batch 8;
 * ref/gpu_ref_tight: width 1/32, 8x8).  Tolerances are derived the way test_gpu_vs_cpu derives
 * its own (tests/trainer/ref_f64.h): both paths are held to the float64 reference of the same
 * inputs with the precision's bounds (logits: S x the measured logits sensitivity; every
 * gradient block: max(rounding bound, S x measured sensitivity); the whole gradient's L2 error),
 * so fused and unfused agree within the sum of the two bounds, no looser tolerance of their own;
 * the update: each path's parameters after one step equal dpt_sgd_step on its own downloaded
 * gradients within 1e-6 (the fused optimizer is that arithmetic), BN running statistics of both
 * within the logits bound of the reference.
 *
 * The fused path must fuse something on gpu_ref (channels 8, 16, 32: the tensor-core multiples):
 * at fp16 and bf16 at least one op runs through a cuDNN graph, else the test fails saying that
 * no engine took any pattern (the support matrix of trainer.gpu.fused then says why).  On
 * gpu_ref_tight nothing can fuse (2-channel convolutions): the fused backend must run exactly the
 * unfused calls, bit for bit (deterministic algorithms chosen by heuristics in both).
 * Exit 77 (SKIPPED) without a GPU.  Argument: the ref directory. */
#include <string.h>

#include "dpt_optim.h"
#include "gpu_test.h"
#include "ref_f64.h"

#define N 8
#define K 10

static struct dpt_model m;
static struct ref_f64 r;
static const float *x;
static const int *labels;

struct result {
  float logits[N * K];
  float *grads, *params, *state;
  struct dpt_cuda_fusion_info info;
};

static void one_step(const char *fx, enum dpt_cuda_precision prec, int fuse, struct result *res)
{
  struct dpt_err err = {0};
  struct dpt_backend_opts o;
  struct dpt_cuda_opts co;
  struct dpt_backend *be;
  size_t np = m.n_params, ns = m.n_state;
  dpt_backend_opts_default(&o);
  o.batch = N;
  oracle_opts(&co);
  co.precision = prec;
  co.loss_scale = 1024.0f;
  co.algo_search = 0; /* heuristics: both backends pick the same legacy algorithms */
  co.fuse = fuse ? DPT_CUDA_ON : DPT_CUDA_OFF;
  co.graph = DPT_CUDA_OFF;
  die_on(dpt_backend_cuda_create_ex(&m, &o, &co, &be, &err), &err, fuse ? "fused backend" : "unfused backend");
  dpt_backend_cuda_fusion_info(be, &res->info);
  if (fuse && be->ops->notes) printf("%s %s fused: %s", fx, dpt_cuda_precision_name(prec), be->ops->notes(be));
  unsigned char *mask = malloc(np);
  dpt_model_decay_mask(&m, 1, mask);
  die_on(be->ops->copy_slab(be, DPT_SLAB_PARAMS, (float *)ref_section(&r, "params0", np), 1, &err), &err, "upload");
  die_on(be->ops->copy_slab(be, DPT_SLAB_STATE, (float *)ref_section(&r, "state0", ns), 1, &err), &err, "upload");
  die_on(be->ops->sgd_init(be, 0.9f, 1e-4f, 0, mask, &err), &err, "sgd_init");
  die_on(dpt_backend_forward(be, x, 1, res->logits, &err), &err, "forward");
  double L;
  int t1, t5;
  die_on(dpt_backend_cuda_loss(be, labels, 0.1f, 1.0f / N, &L, &t1, &t5, &err), &err, "loss");
  die_on(dpt_backend_backward(be, NULL, NULL, &err), &err, "backward");
  die_on(be->ops->copy_slab(be, DPT_SLAB_GRADS, res->grads, 0, &err), &err, "download");
  if (prec == DPT_CUDA_MIXED) die_on(be->ops->overflow_check(be, NULL, &err), &err, "overflow check");
  die_on(be->ops->sgd_step(be, 0.1f, NULL, &err), &err, "update");
  die_on(be->ops->copy_slab(be, DPT_SLAB_PARAMS, res->params, 0, &err), &err, "download");
  die_on(be->ops->copy_slab(be, DPT_SLAB_STATE, res->state, 0, &err), &err, "download");
  /* the update against dpt_sgd_step on this path's own gradients */
  struct dpt_sgd sgd;
  float *p = malloc(np * 4);
  memcpy(p, ref_section(&r, "params0", np), np * 4);
  die_on(dpt_sgd_init(&sgd, np, 0.9f, 1e-4f, mask, &err), &err, "sgd");
  dpt_sgd_step(&sgd, 0.1f, p, res->grads);
  double ep = 0;
  for (size_t i = 0; i < np; i++) ep = fmax(ep, fabs((double)p[i] - res->params[i]));
  CHECK(ep <= 1e-6, "%s %s %s: update vs dpt_sgd_step on its gradients: %.3g", fx, dpt_cuda_precision_name(prec),
        fuse ? "fused" : "unfused", ep);
  dpt_sgd_free(&sgd);
  free(p), free(mask);
  dpt_backend_destroy(be);
}

static void run(const char *fx, enum dpt_cuda_precision prec, enum ref_prec rp)
{
  size_t np = m.n_params, ns = m.n_state;
  struct result u, f;
  const char *pn = dpt_cuda_precision_name(prec);
  double tl = ref_logits_tol(&r, rp);
  u.grads = malloc(np * 4), u.params = malloc(np * 4), u.state = malloc(ns * 4);
  f.grads = malloc(np * 4), f.params = malloc(np * 4), f.state = malloc(ns * 4);
  one_step(fx, prec, 0, &u);
  one_step(fx, prec, 1, &f);
  const float *l64 = ref_section(&r, "logits", N * K);
  double eu = nerr(u.logits, l64, N * K), ef = nerr(f.logits, l64, N * K), euf = nerr(f.logits, u.logits, N * K);
  printf("%s %s: %d ops through cuDNN graphs (%d engines from the cache, %d timed), %d on own kernels, %d layers back "
         "on legacy calls; logits vs float64 fused %.2e unfused %.2e (bound %.2e), fused vs unfused %.2e\n", fx, pn,
         f.info.graph_ops, f.info.from_cache, f.info.timed, f.info.own_ops, f.info.legacy_layers, ef, eu, tl, euf);
  CHECK(eu <= tl && ef <= tl, "%s %s: logits vs float64: fused %.3g unfused %.3g (bound %.3g)", fx, pn, ef, eu, tl);
  char who[80];
  snprintf(who, sizeof who, "%s %s fused", fx, pn);
  int bad = ref_check_grads(&r, who, f.grads, rp, NULL, NULL);
  CHECK(bad == 0, "%s: %d gradient check(s) over their bound vs float64", who, bad);
  snprintf(who, sizeof who, "%s %s unfused", fx, pn);
  bad = ref_check_grads(&r, who, u.grads, rp, NULL, NULL);
  CHECK(bad == 0, "%s: %d gradient check(s) over their bound vs float64", who, bad);
  double es = nerr(f.state, ref_section(&r, "state1", ns), ns);
  CHECK(es <= tl, "%s %s fused: BN running statistics %.3g (bound %.3g)", fx, pn, es, tl);
  if (!strcmp(fx, "gpu_ref") && prec != DPT_CUDA_TF32)
    CHECK(f.info.graph_ops > 0, "%s %s: the fused backend ran no op through a cuDNN graph (no engine took any "
          "pattern here: see trainer.gpu.fused's support matrix)", fx, pn);
  if (!strcmp(fx, "gpu_ref_tight")) { /* nothing fuses: the same calls */
    CHECK(f.info.graph_ops == 0, "%s %s: %d fused ops on 2-channel convolutions", fx, pn, f.info.graph_ops);
    CHECK(!memcmp(f.logits, u.logits, sizeof f.logits) && !memcmp(f.grads, u.grads, np * 4) &&
              !memcmp(f.params, u.params, np * 4),
          "%s %s: the fused backend with nothing to fuse differs from the unfused one", fx, pn);
  }
  free(u.grads), free(u.params), free(u.state), free(f.grads), free(f.params), free(f.state);
}

static void fixture(const char *dir, const char *fx)
{
  struct dpt_err err = {0};
  struct dpt_model_cfg cfg;
  ref_load_named(&r, dir, fx);
  ref_model_cfg(&r, &cfg);
  cfg.seed = ref_seed(&r, "init_seed", cfg.seed);
  die_on(dpt_model_resnet50(&m, &cfg, &err), &err, "model");
  x = ref_section(&r, "x", (size_t)N * cfg.in_channels * cfg.image_size * cfg.image_size);
  labels = ref_section(&r, "labels", N);
  run(fx, DPT_CUDA_TF32, REF_TF32);
  run(fx, DPT_CUDA_MIXED, REF_FP16);
  run(fx, DPT_CUDA_BF16, REF_BF16);
  dpt_model_free(&m);
  ref_free(&r);
}

int main(int argc, char **argv)
{
  gpu_or_skip("test_gpu_fused_vs_unfused");
  const char *dir = argc > 1 ? argv[1] : ".";
  fixture(dir, "gpu_ref");
  fixture(dir, "gpu_ref_tight");
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
