/* test_gpu_vs_cpu: one training step of the CUDA backend and of the CPU backend (the
 * oracle), BOTH against the float64 reference of the same inputs (ref/gpu_ref.*,
 * ref/make_gpu_ref.py; bounds and their measured reasons: tests/trainer/ref_f64.h) —
 * ResNet-50 v1.5 width 1/8, small stem, 3x32x32, 10 classes, batch 8, dpt's seeded
 * initialisation, label smoothing 0.1, at fp32, tf32, mixed (fp16) and bf16:
 *
 *   logits within S x the precision's measured logits sensitivity of float64;
 *   every gradient block within max(rounding bound, S x measured sensitivity) and
 *     the whole gradient's L2 error within S x its measured sensitivity — the H100's
 *     "fp32: gradients 0.0478 in layer3.4.bn3" was the CPU side as much as the GPU:
 *     ReLU inputs within fp32's forward error of 0 (trainer.test_ref_f64 shows the
 *     CPU's 4.79e-2 there); at 16-bit precision this fixture's gradients are not
 *     determined (float64 emulation alone moves them by 74% / 139% in L2), so those
 *     bounds are loose by measurement, and the test says so in its output;
 *   every gradient finite; BN running statistics within 1e-4 (fp32) / the logits bound;
 *   loss kernel == dpt_softmax_xent on the same logits (loss 1e-6, top-1/5 equal),
 *     including the ignored label (-1);
 *   the update == dpt_sgd_step on the same inputs (1e-6): the fused optimizer (one launch per
 *     step, the weight copies the next forward reads written in the same pass; issue 15).
 * Then the same on the well-conditioned fixture (ref/gpu_ref_tight.*: width 1/32, 8x8
 * inputs, no ReLU input within 50 sigma of fp32's forward error of 0): at fp32 every
 * gradient block of both backends is held to its rounding bound R (all 161 blocks), the
 * tight check the first fixture cannot give; tf32 / mixed / bf16 keep their measured
 * sensitivity bounds there (16-bit rounding flips masks on any ResNet: the output
 * says how many blocks are tight).
 * Both fixtures run twice: with cudnnFind's (deterministic) algorithms, then with every
 * convolution that can on a cuDNN graph engine (conv graph, as DPT_CUDA_CONV=graph: dpt_cuda_convg.c, the
 * heuristics' first deterministic sum-of-products config), held to the same bounds; the
 * graph pass must put at least one convolution direction of gpu_ref on a graph at each
 * precision (an FPROP / DGRAD / WGRAD graph that builds nowhere is a bug, not a fallback).
 * At mixed the BN right before each residual add does the add and its ReLU too (BN_ADD_ACTIVATION,
 * dpt_cuda_bn.c) where cuDNN sizes it: the backend's notes are printed, and the same bounds hold.
 * Exit 77 (SKIPPED) without a GPU.  Argument: the ref directory. */
#include <string.h>

#include "dpt_optim.h"
#include "gpu_test.h"
#include "ref_f64.h"

#define N 8
#define K 10

static struct dpt_model m;
static int graph_pass; /* DPT_CUDA_CONV=graph */
static struct ref_f64 r;
static const float *x;
static const int *labels;

/* One step at prec; mixed: loss scale `scale`.  Returns 1 when a mixed step's gradients are not finite
 * (nothing else checked: the caller redoes it at half the scale, as dpt-train's dynamic scaler and
 * PyTorch's GradScaler skip such a step), else 0. */
static int run(const char *fx, enum dpt_cuda_precision prec, enum ref_prec rp, float scale)
{
  int overflow = 0;
  double tl = ref_logits_tol(&r, rp), tp = rp == REF_FP32 ? 1e-4 : tl;
  struct dpt_err err = {0};
  struct dpt_backend_opts o;
  struct dpt_cuda_opts co;
  struct dpt_backend *cpu, *gpu;
  size_t np = m.n_params, ns = m.n_state;
  dpt_backend_opts_default(&o);
  o.batch = N;
  oracle_opts(&co);
  co.precision = prec;
  co.loss_scale = scale;
  co.conv = graph_pass ? DPT_CUDA_CONV_GRAPH : DPT_CUDA_CONV_AUTO; /* auto: legacy when deterministic */
  die_on(dpt_backend_create("cpu", &m, &o, &cpu, &err), &err, "cpu backend");
  die_on(dpt_backend_cuda_create_ex(&m, &o, &co, &gpu, &err), &err, "cuda backend");
  { /* the algorithms chosen per convolution shape (forward / data / filter): a block over its bound
     * is traced to one */
    const struct dpt_cuda_plan *pl = dpt_backend_cuda_plan(gpu);
    printf("%s %s: algorithms per shape (fwd/data/filter):", fx, dpt_cuda_precision_name(prec));
    int on_graphs = 0;
    for (int sh = 0; sh < pl->n_shapes; sh++) {
      int al[3], on[4];
      size_t ws[3];
      float tl4[4], tg4[4];
      if (dpt_backend_cuda_algos(gpu, sh, al, ws) == 0) printf(" %d/%d/%d", al[0], al[1], al[2]);
      int n = dpt_backend_cuda_conv_graphs(gpu, sh, on, tl4, tg4);
      if (n > 0) printf("[graph %s%s%s%s]", on[0] ? "f" : "", on[1] ? "d" : "", on[2] ? "D" : "", on[3] ? "w" : "");
      on_graphs += n > 0 ? n : 0;
    }
    printf("\n%s %s: %d convolution shape-direction(s) on cuDNN graph engines (DPT_CUDA_CONV=%s)\n", fx,
           dpt_cuda_precision_name(prec), on_graphs, graph_pass ? "graph" : "unset: deterministic, cudnnFind's");
    if (!graph_pass) CHECK(on_graphs == 0, "%s: %d graph(s) in a deterministic run without DPT_CUDA_CONV", fx, on_graphs);
    else if (!strcmp(fx, "gpu_ref"))
      CHECK(on_graphs > 0, "%s %s: DPT_CUDA_CONV=graph put no convolution on a cuDNN graph (see the notes)", fx,
            dpt_cuda_precision_name(prec));
    if (graph_pass || prec == DPT_CUDA_MIXED) printf("%s", gpu->ops->notes(gpu)); /* mixed: BN+add+ReLU's line */
  }
  float lc[N * K], lg[N * K], dl[N * K];
  (void)tp;
  float *g = malloc(np * 4), *p = malloc(np * 4), *s = malloc(ns * 4);
  unsigned char *mask = malloc(np);
  dpt_model_decay_mask(&m, 1, mask);
  /* identical starting bytes: the reference's */
  memcpy(cpu->params, ref_section(&r, "params0", np), np * 4);
  memcpy(cpu->state, ref_section(&r, "state0", ns), ns * 4);
  die_on(gpu->ops->copy_slab(gpu, DPT_SLAB_PARAMS, cpu->params, 1, &err), &err, "upload");
  die_on(gpu->ops->copy_slab(gpu, DPT_SLAB_STATE, cpu->state, 1, &err), &err, "upload");
  die_on(dpt_backend_forward(cpu, x, 1, lc, &err), &err, "cpu forward");
  die_on(dpt_backend_forward(gpu, x, 1, lg, &err), &err, "gpu forward");
  int c1, c5, g1, g5;
  double Lc = dpt_softmax_xent(lc, labels, N, K, 0.1f, 1.0f / N, dl, &c1, &c5), Lg;
  die_on(dpt_backend_cuda_loss(gpu, labels, 0.1f, 1.0f / N, &Lg, &g1, &g5, &err), &err, "gpu loss");
  const float *l64 = ref_section(&r, "logits", N * K);
  double el = nerr(lg, l64, N * K), elc = nerr(lc, l64, N * K);
  printf("%s %s: logits vs float64: gpu %.2e cpu %.2e (bound %.2e), loss %.6f vs %.6f\n", fx,
         dpt_cuda_precision_name(prec), el, elc, tl, Lg, Lc);
  CHECK(el <= tl && elc <= ref_logits_tol(&r, REF_FP32),
        "%s: logits vs float64 gpu %.3g cpu %.3g (bound %.3g)", dpt_cuda_precision_name(prec), el, elc, tl);
  /* loss kernel alone on identical logits */
  {
    double Lh = dpt_softmax_xent(lg, labels, N, K, 0.1f, 1.0f / N, NULL, &c1, &c5);
    CHECK(fabs(Lh - Lg) <= 1e-6 * fabs(Lh) && c1 == g1 && c5 == g5, "loss kernel %.9g vs %.9g, top1 %d/%d top5 %d/%d",
          Lg, Lh, g1, c1, g5, c5);
  }
  die_on(dpt_backend_backward(cpu, dl, NULL, &err), &err, "cpu backward");
  die_on(dpt_backend_backward(gpu, NULL, NULL, &err), &err, "gpu backward");
  int finite;
  die_on(dpt_backend_cuda_grads_finite(gpu, NULL, &finite, &err), &err, "finite");
  if (!finite && prec == DPT_CUDA_MIXED) {
    overflow = 1;
    goto out;
  }
  CHECK(finite, "%s %s: a gradient is not finite", fx, dpt_cuda_precision_name(prec));
  die_on(gpu->ops->copy_slab(gpu, DPT_SLAB_GRADS, g, 0, &err), &err, "download");
  static const char *const show[] = {"layer3.4.bn3.weight", "layer3.4.bn3.bias", "layer4.2.bn3.bias", "fc.weight",
                                     "fc.bias", NULL};
  char who[64];
  snprintf(who, sizeof who, "%s cuda %s", fx, dpt_cuda_precision_name(prec));
  int tight = 0, bad = ref_check_grads(&r, who, g, rp, show, &tight);
  CHECK(bad == 0, "%s: %d gradient check(s) over their bound vs float64", who, bad);
  if (rp == REF_FP32 && !strcmp(fx, "gpu_ref_tight"))
    CHECK(tight == r.n_blocks, "%s: %d of %d blocks at the rounding bound (the fixture must give all)", who, tight,
          r.n_blocks);
  bad = ref_check_grads(&r, "cpu fp32 (same step)", cpu->grads, REF_FP32, NULL, NULL);
  CHECK(bad == 0, "cpu: %d gradient check(s) over their bound vs float64", bad);
  /* one SGD step each, from the CPU's gradients so only the update is compared */
  struct dpt_sgd sgd;
  die_on(dpt_sgd_init(&sgd, np, 0.9f, 1e-4f, mask, &err), &err, "sgd");
  die_on(gpu->ops->copy_slab(gpu, DPT_SLAB_GRADS, cpu->grads, 1, &err), &err, "upload");
  die_on(gpu->ops->copy_slab(gpu, DPT_SLAB_PARAMS, cpu->params, 1, &err), &err, "upload");
  for (int it = 0; it < 2; it++) {
    dpt_sgd_step(&sgd, 0.1f, cpu->params, cpu->grads);
    die_on(dpt_backend_cuda_sgd_step(gpu, 0.1f, 0.9f, 1e-4f, 0, mask, &err), &err, "gpu sgd");
  }
  die_on(gpu->ops->copy_slab(gpu, DPT_SLAB_PARAMS, p, 0, &err), &err, "download");
  double ep = 0;
  for (size_t i = 0; i < np; i++) ep = fmax(ep, fabs((double)p[i] - cpu->params[i]));
  CHECK(ep <= 1e-6, "fused optimizer vs dpt_sgd_step: %.3g", ep);
  die_on(gpu->ops->copy_slab(gpu, DPT_SLAB_STATE, s, 0, &err), &err, "download");
  double es = nerr(s, ref_section(&r, "state1", ns), ns);
  printf("%s: sgd %.2e, running stats %.2e, device memory %zu (peak %zu)\n", dpt_cuda_precision_name(prec),
         ep, es, gpu->ops->memory_bytes(gpu), dpt_backend_cuda_peak_bytes(gpu));
  CHECK(es <= tp, "%s: BN running statistics %.3g (tol %.3g)", dpt_cuda_precision_name(prec), es, tp);
  dpt_sgd_free(&sgd);
out:
  dpt_backend_destroy(cpu);
  dpt_backend_destroy(gpu);
  free(g), free(p), free(s), free(mask);
  return overflow;
}

/* mixed from a loss scale of 1024, halved while the step's gradients overflow fp16 (down to 16).  The
 * tight fixture needs it: its float64 gradients reach 83.1 (layer1.0.conv1.weight; make_gpu_ref.py's
 * model), so 83.1 x 1024 = 85,000 does not fit an fp16 weight gradient (65,504): the third visit's
 * "error inf" (layer1.0.conv1.weight, and bn1's two blocks) was a step that overflowed, which any
 * fp16 trainer skips.  gpu_ref's largest is 9.0
 * (conv1.weight): it must run at 1024 unhalved. */
static void run_mixed(const char *fx)
{
  float scale = 1024.0f;
  int halvings = 0;
  while (run(fx, DPT_CUDA_MIXED, REF_FP16, scale)) {
    printf("%s mixed: gradients overflow fp16 at loss scale %g: the step redone at %g\n", fx, scale, scale / 2);
    halvings++;
    scale /= 2;
    if (scale < 16.0f) break;
  }
  CHECK(scale >= 16.0f, "%s mixed: gradients not finite at any loss scale from 1024 down to 16", fx);
  CHECK(strcmp(fx, "gpu_ref") || halvings == 0, "%s mixed: %d halving(s) of the loss scale (none expected)", fx,
        halvings);
}

static void fixture(const char *dir, const char *fx)
{
  struct dpt_err err = {0};
  struct dpt_model_cfg cfg;
  ref_load_named(&r, dir, fx);
  ref_model_cfg(&r, &cfg); /* small stem, 10 classes, zero_init_residual off; gpu_ref: width 1/8, 32 px;
                              gpu_ref_tight: width 1/32, 8 px */
  cfg.seed = ref_seed(&r, "init_seed", cfg.seed);
  die_on(dpt_model_resnet50(&m, &cfg, &err), &err, "model");
  x = ref_section(&r, "x", (size_t)N * cfg.in_channels * cfg.image_size * cfg.image_size);
  labels = ref_section(&r, "labels", N); /* label 3 is -1: an ignored row */
  run(fx, DPT_CUDA_FP32, REF_FP32, 1024.0f);
  run(fx, DPT_CUDA_TF32, REF_TF32, 1024.0f);
  run_mixed(fx);
  run(fx, DPT_CUDA_BF16, REF_BF16, 1024.0f);
  dpt_model_free(&m);
  ref_free(&r);
}

int main(int argc, char **argv)
{
  gpu_or_skip("test_gpu_vs_cpu");
  const char *dir = argc > 1 ? argv[1] : ".";
  fixture(dir, "gpu_ref");
  fixture(dir, "gpu_ref_tight");
  printf("--- again, every convolution that can on a cuDNN graph engine (DPT_CUDA_CONV=graph)\n");
  graph_pass = 1;
  fixture(dir, "gpu_ref");
  fixture(dir, "gpu_ref_tight");
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
