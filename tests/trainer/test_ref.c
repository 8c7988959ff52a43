/* test_ref: the CPU backend + loss + SGD against PyTorch 1.13 (ref/make_ref.py).
 *
 * Fixture: ResNet-50 v1.5 (torchvision definition), small stem, width 1/16,
 * 3x8x8, 10 classes, batch 4, label smoothing 0.1, SGD(lr 0.02, momentum
 * 0.9, wd 5e-4 on conv/fc weights), two steps; reference in float64.
 *
 * Tolerance rule: dpt's float32 error against the float64 reference must be
 * at most 10x PyTorch's own float32 error against it (ref.json
 * "torch32_vs_float64", same metric, the largest of 8 float32 runs with the
 * batch in 8 orders), i.e. the same numerical quality as PyTorch; oneDNN sums
 * in a different order (blocked channels, parallel reductions, another order
 * again on AVX2 than on AVX-512) so bit-equality is not expected.  Errors are
 * max |a - b| normalised by max |b| of the compared block (per parameter
 * tensor for gradients), absolute for parameters.
 *
 * The rule holds on every ISA because the fixture is well conditioned:
 * every ReLU input of step 1 lies >= 50 sigma of float32's forward error from
 * 0 (ref.json "relu_margin", asserted by make_ref.py; the former 3x32x32
 * fixture had 1.5 sigma, and oneDNN's AVX2 kernels flipped a mask there:
 * layer3.5.bn3's gradient 12% off), so no float32 implementation switches a
 * mask and every difference is rounding.  Each step is checked from the
 * reference's state (as make_ref.py runs PyTorch float32): step 2 starts from
 * params1 / velocity1 / state1 and updates with grads2 of the reference, so
 * step 1's error is not counted again, amplified, in step 2's checks.  The
 * test runs again under ONEDNN_MAX_CPU_ISA caps (CMakeLists.txt). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_backend.h"
#include "dpt_file.h"
#include "dpt_optim.h"

#include "dpt_check.h"

static json_t *meta;
static unsigned char *blob;
static size_t blob_len;

static const void *section(const char *name, size_t want)
{
  json_t *s = json_object_get(json_object_get(meta, "sections"), name);
  if (!s) {
    fprintf(stderr, "ref.json has no section '%s'\n", name);
    exit(1);
  }
  size_t off = json_integer_value(json_object_get(s, "offset"));
  size_t cnt = json_integer_value(json_object_get(s, "count"));
  if (cnt != want || off + cnt * 4 > blob_len) {
    fprintf(stderr, "ref.bin section '%s': %zu values at %zu, expected %zu\n", name, cnt, off, want);
    exit(1);
  }
  return blob + off;
}

/* max |a - b| / max |b| */
static double nerr(const float *a, const float *b, size_t n)
{
  double e = 0, mb = 0;
  for (size_t i = 0; i < n; i++) {
    e = fmax(e, fabs((double)a[i] - b[i]));
    mb = fmax(mb, fabs((double)b[i]));
  }
  return mb > 0 ? e / mb : e;
}

static double maxabs(const float *a, const float *b, size_t n)
{
  double e = 0;
  for (size_t i = 0; i < n; i++) e = fmax(e, fabs((double)a[i] - b[i]));
  return e;
}

static double grads_err(const struct dpt_model *m, const float *g, const float *ref, const char **worst)
{
  double w = 0;
  for (int i = 0; i < m->n_layers; i++) {
    const struct dpt_layer_desc *l = &m->layers[i];
    if (!l->w_len) continue;
    double e = nerr(g + l->w_off, ref + l->w_off, l->w_len);
    if (l->b_len) e = fmax(e, nerr(g + l->b_off, ref + l->b_off, l->b_len));
    if (e > w) {
      w = e;
      *worst = l->name;
    }
  }
  return w;
}

int main(int argc, char **argv)
{
  const char *dir = argc > 1 ? argv[1] : ".";
  char path[4096];
  json_error_t jerr;
  struct dpt_err err = {0};
  snprintf(path, sizeof path, "%s/ref.json", dir);
  meta = json_load_file(path, 0, &jerr);
  if (!meta) {
    fprintf(stderr, "%s:%d: %s\n", path, jerr.line, jerr.text);
    return 1;
  }
  CHECK(!strcmp(json_string_value(json_object_get(meta, "schema")), "dpt.trainer-ref/1"), "schema");
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
  int N = (int)json_integer_value(json_object_get(meta, "batch"));
  float lr = (float)json_real_value(json_object_get(meta, "lr"));
  float mom = (float)json_real_value(json_object_get(meta, "momentum"));
  float wd = (float)json_real_value(json_object_get(meta, "weight_decay"));
  float smooth = (float)json_real_value(json_object_get(meta, "label_smoothing"));
  json_t *t32 = json_object_get(meta, "torch32_vs_float64");

  struct dpt_model m;
  if (dpt_model_resnet50(&m, &cfg, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  size_t np = m.n_params, ns = m.n_state;
  int K = cfg.num_classes;
  CHECK(np == (size_t)json_integer_value(json_object_get(meta, "n_params")), "parameter count %zu vs PyTorch", np);
  CHECK(ns == (size_t)json_integer_value(json_object_get(meta, "n_state")), "state count %zu", ns);
  /* slab order = torchvision named_parameters() order */
  json_t *names = json_object_get(meta, "param_names");
  size_t ni = 0;
  for (int i = 0; i < m.n_layers; i++) {
    const struct dpt_layer_desc *l = &m.layers[i];
    if (!l->w_len) continue;
    char want[64];
    snprintf(want, sizeof want, "%s.weight", l->name);
    const char *got = json_string_value(json_array_get(names, ni++));
    CHECK(got && !strcmp(got, want), "slab block %zu is %s, PyTorch has %s", ni - 1, want, got ? got : "(none)");
    snprintf(want, sizeof want, "%s.bias", l->name);
    if (l->b_len) {
      got = json_string_value(json_array_get(names, ni++));
      CHECK(got && !strcmp(got, want), "slab block %zu is %s, PyTorch has %s", ni - 1, want, got ? got : "(none)");
    }
  }

  struct dpt_backend_opts o;
  struct dpt_backend *be;
  dpt_backend_opts_default(&o);
  o.batch = N;
  if (dpt_backend_create("cpu", &m, &o, &be, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  size_t nx = (size_t)N * cfg.in_channels * cfg.image_size * cfg.image_size;
  memcpy(be->params, section("params0", np), np * 4);
  memcpy(be->state, section("state0", ns), ns * 4);
  const float *x = section("x", nx);
  const int *labels = section("labels", N);
  float *logits = malloc((size_t)N * K * 4), *dlogits = malloc((size_t)N * K * 4);
  unsigned char *mask = malloc(np);
  dpt_model_decay_mask(&m, 1, mask);
  struct dpt_sgd sgd;
  dpt_sgd_init(&sgd, np, mom, wd, mask, &err);
  const char *worst = "";

  double t32_l1 = json_real_value(json_object_get(t32, "logits1_max_rel"));
  double t32_gb = json_real_value(json_object_get(t32, "grads1_block_max_rel"));
  double t32_l2 = json_real_value(json_object_get(t32, "logits2_max_rel"));
  double t32_ev = json_real_value(json_object_get(t32, "logits_eval_max_rel"));
  double t32_g2 = json_real_value(json_object_get(t32, "grads2_block_max_rel"));
  double t32_p1 = json_real_value(json_object_get(t32, "params1_max_abs"));
  double t32_p2 = json_real_value(json_object_get(t32, "params2_max_abs"));
  double t32_s2 = json_real_value(json_object_get(t32, "state2_max_rel"));
  double margin = json_real_value(json_object_get(json_object_get(meta, "relu_margin"), "min_sigmas"));
  CHECK(margin >= 50, "ref.json: ReLU margin %.3g sigma, below 50: not the well-conditioned fixture", margin);
  for (int step = 1; step <= 2; step++) {
    char nm[32];
    int rc = dpt_backend_forward(be, x, 1, logits, &err);
    CHECK(rc == 0, "forward: %s", err.msg);
    float loss = (float)(dpt_softmax_xent(logits, labels, N, K, smooth, 1.0f / N, dlogits, NULL, NULL) / N);
    rc = dpt_backend_backward(be, dlogits, NULL, &err);
    CHECK(rc == 0, "backward: %s", err.msg);
    snprintf(nm, sizeof nm, "logits%d", step);
    double el = nerr(logits, section(nm, (size_t)N * K), (size_t)N * K);
    snprintf(nm, sizeof nm, "loss%d", step);
    double ell = nerr(&loss, section(nm, 1), 1);
    snprintf(nm, sizeof nm, "grads%d", step);
    const float *gref = section(nm, np);
    double eg = grads_err(&m, be->grads, gref, &worst);
    double tl = 10 * (step == 1 ? t32_l1 : t32_l2), tg = 10 * (step == 1 ? t32_gb : t32_g2);
    printf("step %d: logits %.2e  loss %.2e (%.6f)  grads %.2e (worst %s); bounds %.2e, %.2e\n", step, el, ell, loss,
           eg, worst, tl, tg);
    CHECK(el <= tl && ell <= tl, "step %d logits/loss error %.3g/%.3g > %.3g", step, el, ell, tl);
    CHECK(eg <= tg, "step %d gradient error %.3g in %s > %.3g", step, eg, worst, tg);
    if (step == 1) {
      dpt_sgd_step(&sgd, lr, be->params, be->grads);
      double e1 = maxabs(be->params, section("params1", np), np);
      printf("after SGD step 1: params max abs %.2e (bound %.2e)\n", e1, 10 * t32_p1);
      CHECK(e1 <= 10 * t32_p1, "params after step 1 off by %.3g > %.3g", e1, 10 * t32_p1);
      /* step 2 from the reference's state (make_ref.py does the same to PyTorch float32) */
      memcpy(be->params, section("params1", np), np * 4);
      memcpy(sgd.velocity, section("velocity1", np), np * 4);
      memcpy(be->state, section("state1", ns), ns * 4);
    } else {
      memcpy(be->grads, gref, np * 4); /* check the momentum update on the reference gradient */
      dpt_sgd_step(&sgd, lr, be->params, be->grads);
    }
  }
  double ep = maxabs(be->params, section("params2", np), np);
  double es = nerr(be->state, section("state2", ns), ns);
  printf("after SGD step 2 (momentum): params max abs %.2e (bound %.2e), BN running stats %.2e (bound %.2e)\n", ep,
         10 * t32_p2, es, 10 * t32_s2);
  CHECK(ep <= 10 * t32_p2, "params after 2 steps off by %.3g > %.3g", ep, 10 * t32_p2);
  CHECK(es <= 10 * t32_s2, "BN running statistics off by %.3g > %.3g", es, 10 * t32_s2);
  /* eval mode: running statistics, no batch statistics */
  CHECK(dpt_backend_forward(be, x, 0, logits, &err) == 0, "eval forward: %s", err.msg);
  double ee = nerr(logits, section("logits_eval", (size_t)N * K), (size_t)N * K);
  printf("eval logits %.2e (PyTorch fp32 %.2e)\n", ee, t32_ev);
  CHECK(ee <= 10 * t32_ev, "eval-mode logits off by %.3g", ee);

  /* --bn-eval-stats last-batch (BN momentum 1: no moving average): step 2's forward again (params1,
   * the reference's state1) must leave the batch's own statistics, which PyTorch's momentum-0.1
   * update gives as (state2 - 0.9 state1) / 0.1 (unbiased variance in both).  Bound: es's bound
   * times 10 for the division, plus state1's part (0.9 of it): 20 x. */
  {
    float *want = malloc(ns * 4);
    const float *s1 = section("state1", ns), *s2 = section("state2", ns);
    for (size_t i = 0; i < ns; i++) want[i] = (float)(((double)s2[i] - 0.9 * s1[i]) / 0.1);
    memcpy(be->params, section("params1", np), np * 4);
    memcpy(be->state, s1, ns * 4);
    be->opts.bn_momentum = 1.0f;
    CHECK(dpt_backend_forward(be, x, 1, logits, &err) == 0, "last-batch forward: %s", err.msg);
    double eb = nerr(be->state, want, ns);
    printf("BN momentum 1 (last-batch statistics): %.2e (bound %.2e)\n", eb, 20 * 10 * t32_s2);
    CHECK(eb <= 20 * 10 * t32_s2, "BN momentum 1: running statistics are not the batch's: %.3g", eb);
    free(want);
  }
  dpt_sgd_free(&sgd);
  free(mask), free(logits), free(dlogits), free(blob);
  dpt_backend_destroy(be);
  dpt_model_free(&m);
  json_decref(meta);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
