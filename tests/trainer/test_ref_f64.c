/* test_ref_f64: the CPU backend (oneDNN, fp32) against the float64 reference of the
 * GPU-vs-CPU fixture (ref/gpu_ref.*, ref/make_gpu_ref.py; bounds: ref_f64.h).
 *
 * The fixture is trainer.gpu.vs_cpu's (the H100 run reported "fp32: gradients
 * 0.0478 in layer3.4.bn3"): this test shows on every machine which side of that
 * comparison float64 agrees with, and pins the CPU backend's error per gradient
 * block to its measured bound.  It also proves the fixture is the test's: the
 * reference's params0 are dpt_model_init_params' bytes and its x / labels are
 * dpt_rng seed 11's.  REF_F64_ALL=1 prints every block (the analysis table). */
#include <string.h>

#include "dpt_backend.h"
#include "dpt_optim.h"
#include "ref_f64.h"

#include "dpt_check.h"

int main(int argc, char **argv)
{
  struct ref_f64 r;
  struct dpt_err err = {0};
  struct dpt_model m;
  struct dpt_model_cfg cfg;
  ref_load(&r, argc > 1 ? argv[1] : ".");
  ref_model_cfg(&r, &cfg);
  int N = (int)json_integer_value(json_object_get(r.meta, "batch")), K = cfg.num_classes;
  float smooth = (float)json_number_value(json_object_get(r.meta, "label_smoothing"));
  if (dpt_model_resnet50(&m, &cfg, &err)) ref_die("model", err.msg);
  size_t np = m.n_params, ns = m.n_state, nx = (size_t)N * cfg.in_channels * cfg.image_size * cfg.image_size;
  CHECK(np == (size_t)json_integer_value(json_object_get(r.meta, "n_params")), "parameter count %zu", np);
  /* the reference's starting point is dpt's own initialisation and data stream */
  float *p0 = malloc(np * 4), *s0 = malloc(ns * 4), *x = malloc(nx * 4);
  dpt_model_init_params(&m, cfg.seed, p0, s0);
  CHECK(!memcmp(p0, ref_section(&r, "params0", np), np * 4), "params0 are not dpt_model_init_params(seed %llu)",
        (unsigned long long)cfg.seed);
  struct dpt_rng rng;
  dpt_rng_seed(&rng, 11);
  for (size_t i = 0; i < nx; i++) x[i] = (float)dpt_rng_normal(&rng);
  CHECK(!memcmp(x, ref_section(&r, "x", nx), nx * 4), "x is not dpt_rng seed 11's normals");
  const int *labels = ref_section(&r, "labels", (size_t)N);
  for (int i = 0; i < N; i++) {
    int want = i == 3 ? -1 : (int)dpt_rng_below(&rng, (uint64_t)K);
    if (i == 3) dpt_rng_below(&rng, (uint64_t)K);
    CHECK(labels[i] == want, "label %d: %d, the stream gives %d", i, labels[i], want);
  }

  struct dpt_backend_opts o;
  struct dpt_backend *be;
  dpt_backend_opts_default(&o);
  o.batch = N;
  if (dpt_backend_create("cpu", &m, &o, &be, &err)) ref_die("cpu backend", err.msg);
  float *lg = malloc((size_t)N * K * 4), *dl = malloc((size_t)N * K * 4);
  CHECK(dpt_backend_forward(be, x, 1, lg, &err) == 0, "forward: %s", err.msg);
  double L = dpt_softmax_xent(lg, labels, N, K, smooth, 1.0f / N, dl, NULL, NULL) / N;
  CHECK(dpt_backend_backward(be, dl, NULL, &err) == 0, "backward: %s", err.msg);
  double el = ref_nerr(lg, ref_section(&r, "logits", (size_t)N * K), (size_t)N * K);
  double lref = *(const float *)ref_section(&r, "loss", 1);
  printf("cpu fp32: logits %.2e, loss %.8f vs %.8f\n", el, L, lref);
  double ls = REF_S * ref_meta_prec(&r, "logits_sens", REF_FP32);
  CHECK(el <= ls && fabs(L - lref) <= ls * fabs(lref), "logits %.3g loss %.9g vs %.9g (bound %.3g)", el, L, lref, ls);
  static const char *const show[] = {"layer3.4.bn3.weight", "layer3.4.bn3.bias", "layer2.2.bn3.bias",
                                     "layer2.2.conv3.weight", "bn1.bias", NULL};
  int all = getenv("REF_F64_ALL") && atoi(getenv("REF_F64_ALL"));
  if (all)
    for (int i = 0; i < r.n_blocks; i++) {
      const struct ref_block *b = &r.b[i];
      double e = ref_nerr(be->grads + b->off, (const float *)ref_section(&r, "grads", np) + b->off, b->count);
      printf("block %-28s cpu %.2e torch32 %.2e cond %7.1f bound %.2e\n", b->name, e, b->torch32, b->cond,
             ref_block_tol(b, REF_FP32));
    }
  int bad = ref_check_grads(&r, "cpu fp32", be->grads, REF_FP32, show, NULL);
  CHECK(bad == 0, "%d gradient block(s) of the cpu backend over their bound", bad);
  double es = ref_nerr(be->state, ref_section(&r, "state1", ns), ns);
  printf("cpu fp32: BN running statistics %.2e\n", es);
  CHECK(es <= 1e-4, "running statistics %.3g", es); /* 0.1 x the batch variance's forward error */
  dpt_backend_destroy(be);
  dpt_model_free(&m);
  free(p0), free(s0), free(x), free(lg), free(dl);
  ref_free(&r);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
