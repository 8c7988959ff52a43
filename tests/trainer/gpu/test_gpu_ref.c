/* test_gpu_ref: the CUDA backend (fp32, TF32 off, deterministic algorithms)
 * against the same PyTorch 1.13 reference as the CPU backend's test_ref
 * (tests/trainer/ref: ResNet-50 v1.5 width 1/16, small stem, 3x8x8, 10
 * classes, batch 4, label smoothing 0.1, SGD lr 0.02 momentum 0.9 wd 5e-4 on
 * conv/fc weights, two steps), with the loss and the SGD step run by the
 * backend's own kernels.  Same rule as test_ref, every bound 10x PyTorch's
 * own fp32 error against the float64 reference (ref.json "torch32_vs_float64"),
 * and step 2 from the reference's params1 / velocity1 / state1 as there, so
 * step 1's error is not counted again, amplified.  Exit 77 without a GPU. */
#include <jansson.h>
#include <string.h>

#include "dpt_file.h"
#include "dpt_optim.h"
#include "gpu_test.h"

static json_t *meta;
static unsigned char *blob;
static size_t blob_len;

static const void *section(const char *name, size_t want)
{
  json_t *s = json_object_get(json_object_get(meta, "sections"), name);
  size_t off = s ? (size_t)json_integer_value(json_object_get(s, "offset")) : 0;
  size_t cnt = s ? (size_t)json_integer_value(json_object_get(s, "count")) : 0;
  if (!s || cnt != want || off + cnt * 4 > blob_len) {
    fprintf(stderr, "ref.bin section '%s': %zu values at %zu, expected %zu\n", name, cnt, off, want);
    exit(1);
  }
  return blob + off;
}

int main(int argc, char **argv)
{
  gpu_or_skip("test_gpu_ref");
  const char *dir = argc > 1 ? argv[1] : ".";
  char path[4096];
  json_error_t jerr;
  struct dpt_err err = {0};
  snprintf(path, sizeof path, "%s/ref.json", dir);
  if (!(meta = json_load_file(path, 0, &jerr))) {
    fprintf(stderr, "%s:%d: %s\n", path, jerr.line, jerr.text);
    return 1;
  }
  snprintf(path, sizeof path, "%s/ref.bin", dir);
  char *bytes;
  if (dpt_file_read(path, "reference blob", NULL, 0, &bytes, &blob_len, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  blob = (unsigned char *)bytes;

  json_t *jm = json_object_get(meta, "model");
  struct dpt_model_cfg cfg;
  dpt_model_cfg_default(&cfg);
  cfg.width = json_real_value(json_object_get(jm, "width"));
  cfg.image_size = (int)json_integer_value(json_object_get(jm, "image_size"));
  cfg.in_channels = (int)json_integer_value(json_object_get(jm, "in_channels"));
  cfg.num_classes = (int)json_integer_value(json_object_get(jm, "num_classes"));
  cfg.small_stem = json_is_true(json_object_get(jm, "small_stem"));
  int N = (int)json_integer_value(json_object_get(meta, "batch")), K = cfg.num_classes;
  float lr = (float)json_real_value(json_object_get(meta, "lr"));
  float mom = (float)json_real_value(json_object_get(meta, "momentum"));
  float wd = (float)json_real_value(json_object_get(meta, "weight_decay"));
  float smooth = (float)json_real_value(json_object_get(meta, "label_smoothing"));
  json_t *t32 = json_object_get(meta, "torch32_vs_float64");
  double t32_l1 = json_real_value(json_object_get(t32, "logits1_max_rel"));
  double t32_gb = json_real_value(json_object_get(t32, "grads1_block_max_rel"));
  double t32_l2 = json_real_value(json_object_get(t32, "logits2_max_rel"));
  double t32_ev = json_real_value(json_object_get(t32, "logits_eval_max_rel"));
  double t32_g2 = json_real_value(json_object_get(t32, "grads2_block_max_rel"));
  double t32_p1 = json_real_value(json_object_get(t32, "params1_max_abs"));
  double t32_p2 = json_real_value(json_object_get(t32, "params2_max_abs"));
  double t32_s2 = json_real_value(json_object_get(t32, "state2_max_rel"));

  struct dpt_model m;
  die_on(dpt_model_resnet50(&m, &cfg, &err), &err, "model");
  size_t np = m.n_params, ns = m.n_state;
  struct dpt_backend_opts o;
  struct dpt_cuda_opts co;
  struct dpt_backend *be;
  dpt_backend_opts_default(&o);
  o.batch = N;
  oracle_opts(&co);
  die_on(dpt_backend_cuda_create_ex(&m, &o, &co, &be, &err), &err, "cuda backend");
  die_on(be->ops->copy_slab(be, DPT_SLAB_PARAMS, (float *)section("params0", np), 1, &err), &err, "upload");
  die_on(be->ops->copy_slab(be, DPT_SLAB_STATE, (float *)section("state0", ns), 1, &err), &err, "upload");
  const float *x = section("x", (size_t)N * cfg.in_channels * cfg.image_size * cfg.image_size);
  const int *labels = section("labels", N);
  float *logits = malloc((size_t)N * K * 4), *g = malloc(np * 4), *p = malloc(np * 4), *s = malloc(ns * 4);
  unsigned char *mask = malloc(np);
  dpt_model_decay_mask(&m, 1, mask);
  const char *worst = "";
  for (int step = 1; step <= 2; step++) {
    char nm[32];
    double loss_sum;
    die_on(dpt_backend_forward(be, x, 1, logits, &err), &err, "forward");
    die_on(dpt_backend_cuda_loss(be, labels, smooth, 1.0f / N, &loss_sum, NULL, NULL, &err), &err, "loss");
    float loss = (float)(loss_sum / N);
    die_on(dpt_backend_backward(be, NULL, NULL, &err), &err, "backward");
    die_on(be->ops->copy_slab(be, DPT_SLAB_GRADS, g, 0, &err), &err, "download");
    snprintf(nm, sizeof nm, "logits%d", step);
    double el = nerr(logits, section(nm, (size_t)N * K), (size_t)N * K);
    snprintf(nm, sizeof nm, "loss%d", step);
    double ell = nerr(&loss, section(nm, 1), 1);
    snprintf(nm, sizeof nm, "grads%d", step);
    const float *gref = section(nm, np);
    double eg = blocks_err(&m, g, gref, &worst);
    printf("step %d: logits %.2e loss %.2e (%.6f) grads %.2e (worst %s)\n", step, el, ell, loss, eg, worst);
    if (step == 1) {
      CHECK(el <= 10 * t32_l1 && ell <= 10 * t32_l1, "step 1 logits/loss %.3g/%.3g > %.3g", el, ell, 10 * t32_l1);
      CHECK(eg <= 10 * t32_gb, "step 1 gradients %.3g in %s > %.3g", eg, worst, 10 * t32_gb);
      die_on(dpt_backend_cuda_sgd_step(be, lr, mom, wd, 0, mask, &err), &err, "sgd");
      die_on(be->ops->copy_slab(be, DPT_SLAB_PARAMS, p, 0, &err), &err, "download");
      const float *p1 = section("params1", np);
      double e1 = 0;
      for (size_t i = 0; i < np; i++) e1 = fmax(e1, fabs((double)p[i] - p1[i]));
      printf("after SGD step 1: params max abs %.2e (bound %.2e)\n", e1, 10 * t32_p1);
      CHECK(e1 <= 10 * t32_p1, "params after step 1 off by %.3g > %.3g", e1, 10 * t32_p1);
      /* step 2 from the reference's state (make_ref.py does the same to PyTorch float32) */
      die_on(be->ops->copy_slab(be, DPT_SLAB_PARAMS, (float *)p1, 1, &err), &err, "upload");
      die_on(be->ops->copy_slab(be, DPT_SLAB_VELOCITY, (float *)section("velocity1", np), 1, &err), &err, "upload");
      die_on(be->ops->copy_slab(be, DPT_SLAB_STATE, (float *)section("state1", ns), 1, &err), &err, "upload");
    } else {
      CHECK(el <= 10 * t32_l2 && ell <= 10 * t32_l2, "step 2 logits/loss %.3g/%.3g > %.3g", el, ell, 10 * t32_l2);
      CHECK(eg <= 10 * t32_g2, "step 2 gradients %.3g in %s > %.3g", eg, worst, 10 * t32_g2);
      die_on(be->ops->copy_slab(be, DPT_SLAB_GRADS, (float *)gref, 1, &err), &err, "upload");
      die_on(dpt_backend_cuda_sgd_step(be, lr, mom, wd, 0, mask, &err), &err, "sgd");
    }
  }
  die_on(be->ops->copy_slab(be, DPT_SLAB_PARAMS, p, 0, &err), &err, "download");
  die_on(be->ops->copy_slab(be, DPT_SLAB_STATE, s, 0, &err), &err, "download");
  const float *p2 = section("params2", np);
  double ep = 0;
  for (size_t i = 0; i < np; i++) ep = fmax(ep, fabs((double)p[i] - p2[i]));
  double es = nerr(s, section("state2", ns), ns);
  printf("after SGD step 2: params max abs %.2e (bound %.2e), BN running stats %.2e (bound %.2e)\n", ep,
         10 * t32_p2, es, 10 * t32_s2);
  CHECK(ep <= 10 * t32_p2, "params after 2 steps off by %.3g > %.3g", ep, 10 * t32_p2);
  CHECK(es <= 10 * t32_s2, "BN running statistics off by %.3g > %.3g", es, 10 * t32_s2);
  die_on(dpt_backend_forward(be, x, 0, logits, &err), &err, "eval forward");
  double ee = nerr(logits, section("logits_eval", (size_t)N * K), (size_t)N * K);
  printf("eval logits %.2e (PyTorch fp32 %.2e); peak device memory %zu bytes, workspace %zu\n", ee,
         t32_ev, dpt_backend_cuda_peak_bytes(be), dpt_backend_cuda_workspace_bytes(be));
  CHECK(ee <= 10 * t32_ev, "eval logits off by %.3g", ee);
  dpt_backend_destroy(be);
  dpt_model_free(&m);
  free(logits), free(g), free(p), free(s), free(mask), free(blob);
  json_decref(meta);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
