/* test_ref_f64: the CPU backend (oneDNN, fp32) against the float64 references of the
 * GPU-vs-CPU fixtures (ref/gpu_ref*, ref/make_gpu_ref.py; bounds: ref_f64.h).
 *
 * gpu_ref is trainer.gpu.vs_cpu's first fixture (the H100 run reported "fp32:
 * gradients 0.0478 in layer3.4.bn3"): this test shows on every machine which side of
 * that comparison float64 agrees with, and pins the CPU backend's error per gradient
 * block to its measured bound (most of them set by ReLU inputs within fp32's forward
 * error of 0).  gpu_ref_tight is the well-conditioned one (no ReLU input within 50
 * sigma of fp32's error of 0): every block is held to the rounding bound R, so a
 * kernel error of a few 1e-4 of a block fails here (checked: a BN backward scale term
 * off by 1e-3, dgamma * 1.001 in every BN, fails 35 of the 53
 * BN weight blocks here and none on gpu_ref).  Both prove they are the
 * test's: params0 are dpt_model_init_params' bytes and x / labels are dpt_rng's of the
 * fixture's seeds.  REF_F64_ALL=1 prints every block (the analysis table). */
#include <string.h>

#include "dpt_backend.h"
#include "dpt_optim.h"
#include "ref_f64.h"

#include "dpt_check.h"

/* One fixture: returns the number of blocks held to the rounding bound (fp32). */
static int check_fixture(const char *dir, const char *name, const char *const *show)
{
  struct ref_f64 r;
  struct dpt_err err = {0};
  struct dpt_model m;
  struct dpt_model_cfg cfg;
  ref_load_named(&r, dir, name);
  ref_model_cfg(&r, &cfg);
  cfg.seed = ref_seed(&r, "init_seed", cfg.seed);
  int N = (int)json_integer_value(json_object_get(r.meta, "batch")), K = cfg.num_classes;
  float smooth = (float)json_number_value(json_object_get(r.meta, "label_smoothing"));
  if (dpt_model_resnet50(&m, &cfg, &err)) ref_die("model", err.msg);
  size_t np = m.n_params, ns = m.n_state, nx = (size_t)N * cfg.in_channels * cfg.image_size * cfg.image_size;
  CHECK(np == (size_t)json_integer_value(json_object_get(r.meta, "n_params")), "%s: parameter count %zu", name, np);
  /* the reference's starting point is dpt's own initialisation and data stream */
  float *p0 = malloc(np * 4), *s0 = malloc(ns * 4), *x = malloc(nx * 4);
  unsigned long long ds = ref_seed(&r, "data_seed", 11);
  dpt_model_init_params(&m, cfg.seed, p0, s0);
  CHECK(!memcmp(p0, ref_section(&r, "params0", np), np * 4), "%s: params0 are not dpt_model_init_params(seed %llu)",
        name, (unsigned long long)cfg.seed);
  struct dpt_rng rng;
  dpt_rng_seed(&rng, ds);
  for (size_t i = 0; i < nx; i++) x[i] = (float)dpt_rng_normal(&rng);
  CHECK(!memcmp(x, ref_section(&r, "x", nx), nx * 4), "%s: x is not dpt_rng seed %llu's normals", name, ds);
  const int *labels = ref_section(&r, "labels", (size_t)N);
  for (int i = 0; i < N; i++) {
    int want = i == 3 ? -1 : (int)dpt_rng_below(&rng, (uint64_t)K);
    if (i == 3) dpt_rng_below(&rng, (uint64_t)K);
    CHECK(labels[i] == want, "%s: label %d: %d, the stream gives %d", name, i, labels[i], want);
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
  double ls = ref_logits_tol(&r, REF_FP32);
  printf("%s: cpu fp32: logits %.2e (bound %.2e), loss %.8f vs %.8f\n", name, el, ls, L, lref);
  CHECK(el <= ls && fabs(L - lref) <= ls * fabs(lref), "%s: logits %.3g loss %.9g vs %.9g (bound %.3g)", name, el, L,
        lref, ls);
  int all = getenv("REF_F64_ALL") && atoi(getenv("REF_F64_ALL"));
  if (all)
    for (int i = 0; i < r.n_blocks; i++) {
      const struct ref_block *b = &r.b[i];
      double e = ref_nerr(be->grads + b->off, (const float *)ref_section(&r, "grads", np) + b->off, b->count);
      printf("%s block %-28s cpu %.2e torch32 %.2e cond %7.1f bound %.2e\n", name, b->name, e, b->torch32, b->cond,
             ref_block_tol(&r, b, REF_FP32));
    }
  char who[64];
  snprintf(who, sizeof who, "%s: cpu fp32", name);
  int tight = 0, bad = ref_check_grads(&r, who, be->grads, REF_FP32, show, &tight);
  CHECK(bad == 0, "%s: %d gradient check(s) of the cpu backend over their bound", name, bad);
  double es = ref_nerr(be->state, ref_section(&r, "state1", ns), ns);
  printf("%s: cpu fp32: BN running statistics %.2e\n", name, es);
  CHECK(es <= 1e-4, "%s: running statistics %.3g", name, es); /* 0.1 x the batch variance's forward error */
  int nb = r.n_blocks;
  dpt_backend_destroy(be);
  dpt_model_free(&m);
  free(p0), free(s0), free(x), free(lg), free(dl);
  ref_free(&r);
  return tight == nb ? -1 : tight; /* -1: every block */
}

int main(int argc, char **argv)
{
  const char *dir = argc > 1 ? argv[1] : ".";
  static const char *const show[] = {"layer3.4.bn3.weight", "layer3.4.bn3.bias", "layer2.2.bn3.bias",
                                     "layer2.2.conv3.weight", "bn1.bias", NULL};
  static const char *const show_tight[] = {"conv1.weight", "bn1.weight", "layer1.0.bn2.weight", "layer2.1.bn1.weight",
                                           "layer4.2.bn3.bias", "fc.weight", "fc.bias", NULL};
  check_fixture(dir, "gpu_ref", show);
  /* the well-conditioned fixture: every block at the rounding bound, none over it */
  int t = check_fixture(dir, "gpu_ref_tight", show_tight);
  CHECK(t == -1, "gpu_ref_tight: only %d blocks have the rounding bound: the fixture is not the well-conditioned one", t);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
