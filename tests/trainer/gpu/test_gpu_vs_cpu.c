/* test_gpu_vs_cpu: one training step on the CUDA backend equals the CPU
 * backend (the oracle) — ResNet-50 v1.5 width 1/8, small stem, 3x32x32, 10
 * classes, batch 8, same seeded initialisation in both, same batch, label
 * smoothing 0.1, SGD momentum 0.9 wd 1e-4 (not on BN/bias), lr 0.1:
 *
 *   fp32 (FMA math, TF32 off, deterministic algorithms): logits and loss
 *     within 1e-4 relative, every gradient block within 1e-3 of its max,
 *     parameters after the SGD kernel within 1e-5 absolute, BN running
 *     statistics within 1e-4 — both are fp32 with different summation orders;
 *   mixed (fp16 NHWC, fp32 master weights, loss scale 1024): logits within
 *     3e-2, gradient blocks within 1e-1 of their max (fp16 has 11 bits;
 *     errors of a few 2^-11 per layer compound over 50 layers), all finite;
 *   loss kernel == dpt_softmax_xent on the same logits (loss 1e-6, top-1/5
 *     counts equal), including an ignored label (-1);
 *   SGD kernel == dpt_sgd_step on the same inputs (1e-6).
 * Exit 77 (SKIPPED) without a GPU. */
#include <string.h>

#include "dpt_optim.h"
#include "gpu_test.h"

#define N 8
#define K 10

static struct dpt_model m;
static float x[N * 3 * 32 * 32];
static int labels[N];

static void run(enum dpt_cuda_precision prec, double tl, double tg, double tp)
{
  struct dpt_err err = {0};
  struct dpt_backend_opts o;
  struct dpt_cuda_opts co;
  struct dpt_backend *cpu, *gpu;
  size_t np = m.n_params, ns = m.n_state;
  dpt_backend_opts_default(&o);
  o.batch = N;
  oracle_opts(&co);
  co.precision = prec;
  co.loss_scale = 1024.0f;
  die_on(dpt_backend_create("cpu", &m, &o, &cpu, &err), &err, "cpu backend");
  die_on(dpt_backend_cuda_create_ex(&m, &o, &co, &gpu, &err), &err, "cuda backend");
  float lc[N * K], lg[N * K], dl[N * K];
  float *g = malloc(np * 4), *p = malloc(np * 4), *s = malloc(ns * 4);
  unsigned char *mask = malloc(np);
  dpt_model_decay_mask(&m, 1, mask);
  /* identical starting bytes */
  die_on(gpu->ops->copy_slab(gpu, DPT_SLAB_PARAMS, p, 0, &err), &err, "download");
  CHECK(!memcmp(p, cpu->params, np * 4), "%s: initial parameters differ", dpt_cuda_precision_name(prec));
  die_on(dpt_backend_forward(cpu, x, 1, lc, &err), &err, "cpu forward");
  die_on(dpt_backend_forward(gpu, x, 1, lg, &err), &err, "gpu forward");
  int c1, c5, g1, g5;
  double Lc = dpt_softmax_xent(lc, labels, N, K, 0.1f, 1.0f / N, dl, &c1, &c5), Lg;
  die_on(dpt_backend_cuda_loss(gpu, labels, 0.1f, 1.0f / N, &Lg, &g1, &g5, &err), &err, "gpu loss");
  double el = nerr(lg, lc, N * K);
  printf("%s: logits %.2e, loss %.6f vs %.6f\n", dpt_cuda_precision_name(prec), el, Lg, Lc);
  CHECK(el <= tl && fabs(Lg - Lc) <= tl * fabs(Lc), "%s: logits %.3g loss %.6g vs %.6g (tol %.3g)",
        dpt_cuda_precision_name(prec), el, Lg, Lc, tl);
  /* loss kernel alone on identical logits */
  {
    double Lh = dpt_softmax_xent(lg, labels, N, K, 0.1f, 1.0f / N, NULL, &c1, &c5);
    CHECK(fabs(Lh - Lg) <= 1e-6 * fabs(Lh) && c1 == g1 && c5 == g5, "loss kernel %.9g vs %.9g, top1 %d/%d top5 %d/%d",
          Lg, Lh, g1, c1, g5, c5);
  }
  die_on(dpt_backend_backward(cpu, dl, NULL, &err), &err, "cpu backward");
  die_on(dpt_backend_backward(gpu, NULL, NULL, &err), &err, "gpu backward");
  die_on(gpu->ops->copy_slab(gpu, DPT_SLAB_GRADS, g, 0, &err), &err, "download");
  const char *worst = "";
  double eg = blocks_err(&m, g, cpu->grads, &worst);
  int finite;
  die_on(dpt_backend_cuda_grads_finite(gpu, NULL, &finite, &err), &err, "finite");
  printf("%s: gradients %.2e (worst %s), finite %d\n", dpt_cuda_precision_name(prec), eg, worst, finite);
  CHECK(eg <= tg && finite, "%s: gradients %.3g in %s (tol %.3g), finite %d", dpt_cuda_precision_name(prec),
        eg, worst, tg, finite);
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
  CHECK(ep <= 1e-6, "SGD kernel vs dpt_sgd_step: %.3g", ep);
  die_on(gpu->ops->copy_slab(gpu, DPT_SLAB_STATE, s, 0, &err), &err, "download");
  double es = nerr(s, cpu->state, ns);
  printf("%s: sgd %.2e, running stats %.2e, device memory %zu (peak %zu)\n", dpt_cuda_precision_name(prec),
         ep, es, gpu->ops->memory_bytes(gpu), dpt_backend_cuda_peak_bytes(gpu));
  CHECK(es <= tp, "%s: BN running statistics %.3g (tol %.3g)", dpt_cuda_precision_name(prec), es, tp);
  dpt_sgd_free(&sgd);
  dpt_backend_destroy(cpu);
  dpt_backend_destroy(gpu);
  free(g), free(p), free(s), free(mask);
}

int main(void)
{
  gpu_or_skip("test_gpu_vs_cpu");
  struct dpt_err err = {0};
  struct dpt_model_cfg cfg;
  dpt_model_cfg_default(&cfg);
  cfg.width = 1.0 / 8;
  cfg.image_size = 32;
  cfg.small_stem = 1;
  cfg.num_classes = K;
  cfg.zero_init_residual = 0; /* every branch contributes, so every layer is compared */
  die_on(dpt_model_resnet50(&m, &cfg, &err), &err, "model");
  struct dpt_rng rng;
  dpt_rng_seed(&rng, 11);
  for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = (float)dpt_rng_normal(&rng);
  for (int i = 0; i < N; i++) labels[i] = (int)dpt_rng_below(&rng, K);
  labels[3] = -1; /* ignored row */
  run(DPT_CUDA_FP32, 1e-4, 1e-3, 1e-4);
  run(DPT_CUDA_MIXED, 3e-2, 1e-1, 3e-2);
  dpt_model_free(&m);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
