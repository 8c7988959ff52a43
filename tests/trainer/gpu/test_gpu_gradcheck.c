/* test_gpu_gradcheck: every layer type of the CUDA backend (fp32, TF32 off)
 * against central finite differences of its own forward pass: convolution
 * (3x3 stride 2 pad 1), BN+ReLU (training: batch statistics), stand-alone
 * ReLU, max pool (3x3 stride 2 pad 1), global average pool + FC, residual add
 * + ReLU fed by two convolutions (gradient accumulation at a fork).  Loss
 * L = sum(r * out) for a fixed random r, so dL/dout = r.  Probes: 6 elements
 * of every parameter block and 6 of the input; h = 1e-3; fp32 forward passes,
 * the loss summed in double: truncation O(h^2) ~ 1e-6, rounding ~ 1e-7 |L| / h,
 * so |g - fd| <= 2e-2 |fd| + 2e-3 * mean|g| separates a wrong gradient (off by
 * O(1)) from noise.  Exit 77 (SKIPPED) without a GPU. */
#include <string.h>

#include "gpu_test.h"

static double loss_of(struct dpt_backend *be, const float *x, const float *r, float *out, size_t nout)
{
  struct dpt_err err = {0};
  die_on(dpt_backend_forward(be, x, 1, out, &err), &err, "forward");
  double L = 0;
  for (size_t i = 0; i < nout; i++) L += (double)r[i] * out[i];
  return L;
}

static void check_model(const char *what, struct dpt_model *m, int N)
{
  struct dpt_err err = {0};
  struct dpt_backend_opts o;
  struct dpt_cuda_opts co;
  struct dpt_backend *be;
  dpt_backend_opts_default(&o);
  o.batch = N;
  o.need_input_grad = 1;
  oracle_opts(&co);
  die_on(dpt_backend_cuda_create_ex(m, &o, &co, &be, &err), &err, what);
  const struct dpt_tensor_desc *in = &m->tensors[0], *ot = dpt_model_output(m);
  size_t nx = (size_t)N * in->c * in->h * in->w, nout = (size_t)N * ot->c * ot->h * ot->w;
  size_t np = m->n_params ? m->n_params : 1;
  float *x = malloc(nx * 4), *dx = malloc(nx * 4), *r = malloc(nout * 4), *out = malloc(nout * 4);
  float *p = malloc(np * 4), *g = malloc(np * 4);
  struct dpt_rng rng;
  dpt_rng_seed(&rng, 7);
  for (size_t i = 0; i < nx; i++) x[i] = (float)dpt_rng_normal(&rng);
  for (size_t i = 0; i < nout; i++) r[i] = (float)dpt_rng_normal(&rng);
  for (size_t i = 0; i < m->n_params; i++) p[i] = (float)(0.5 * dpt_rng_normal(&rng));
  die_on(be->ops->copy_slab(be, DPT_SLAB_PARAMS, p, 1, &err), &err, "upload");
  loss_of(be, x, r, out, nout);
  die_on(dpt_backend_backward(be, r, dx, &err), &err, "backward");
  die_on(be->ops->copy_slab(be, DPT_SLAB_GRADS, g, 0, &err), &err, "download");
  const double h = 1e-3;
  int bad = 0, probes = 0;
  for (int li = 0; li < m->n_layers; li++) {
    const struct dpt_layer_desc *l = &m->layers[li];
    for (int blk = 0; blk < 2; blk++) {
      size_t off = blk ? l->b_off : l->w_off, len = blk ? l->b_len : l->w_len;
      if (!len) continue;
      double mean = 0;
      for (size_t i = 0; i < len; i++) mean += fabs(g[off + i]) / len;
      for (int k = 0; k < 6; k++) {
        size_t j = off + dpt_rng_below(&rng, len);
        float keep = p[j];
        p[j] = keep + (float)h;
        die_on(be->ops->copy_slab(be, DPT_SLAB_PARAMS, p, 1, &err), &err, "upload");
        double lp = loss_of(be, x, r, out, nout);
        p[j] = keep - (float)h;
        die_on(be->ops->copy_slab(be, DPT_SLAB_PARAMS, p, 1, &err), &err, "upload");
        double lm = loss_of(be, x, r, out, nout);
        p[j] = keep;
        double fd = (lp - lm) / (2 * h);
        probes++;
        if (fabs(g[j] - fd) > 2e-2 * fabs(fd) + 2e-3 * mean) {
          bad++;
          fprintf(stderr, "%s: %s %s[%zu]: analytic %.6g, finite difference %.6g\n", what, l->name,
                  blk ? "bias" : "weight", j - off, g[j], fd);
        }
      }
    }
  }
  die_on(be->ops->copy_slab(be, DPT_SLAB_PARAMS, p, 1, &err), &err, "upload");
  double mean = 0;
  for (size_t i = 0; i < nx; i++) mean += fabs(dx[i]) / nx;
  for (int k = 0; k < 6; k++) {
    size_t j = dpt_rng_below(&rng, nx);
    float keep = x[j];
    x[j] = keep + (float)h;
    double lp = loss_of(be, x, r, out, nout);
    x[j] = keep - (float)h;
    double lm = loss_of(be, x, r, out, nout);
    x[j] = keep;
    double fd = (lp - lm) / (2 * h);
    probes++;
    if (fabs(dx[j] - fd) > 2e-2 * fabs(fd) + 2e-3 * mean) {
      bad++;
      fprintf(stderr, "%s: input[%zu]: analytic %.6g, finite difference %.6g\n", what, j, dx[j], fd);
    }
  }
  printf("%-24s %3d probes, %d off\n", what, probes, bad);
  CHECK(bad == 0, "%s: %d of %d gradient probes off", what, bad, probes);
  dpt_backend_destroy(be);
  free(x), free(dx), free(r), free(out), free(p), free(g);
}

int main(void)
{
  gpu_or_skip("test_gpu_gradcheck");
  struct dpt_err err = {0};
  struct dpt_model m;
  int t;
#define BUILD(call) die_on((t = (call)) < 0 ? t : 0, &err, #call)
  BUILD(dpt_model_init(&m, 4, 7, 7, &err));
  BUILD(dpt_model_add_conv(&m, "conv", 0, 8, 3, 2, 1, &err));
  check_model("conv 3x3/2", &m, 2);
  dpt_model_free(&m);

  BUILD(dpt_model_init(&m, 4, 5, 5, &err));
  BUILD(dpt_model_add_bn(&m, "bn", 0, 1, &err));
  check_model("bn+relu", &m, 3);
  dpt_model_free(&m);

  BUILD(dpt_model_init(&m, 4, 5, 5, &err));
  BUILD(dpt_model_add_relu(&m, "relu", 0, &err));
  check_model("relu", &m, 2);
  dpt_model_free(&m);

  BUILD(dpt_model_init(&m, 4, 6, 6, &err));
  BUILD(dpt_model_add_maxpool(&m, "pool", 0, 3, 2, 1, &err));
  check_model("maxpool 3x3/2", &m, 2);
  dpt_model_free(&m);

  BUILD(dpt_model_init(&m, 8, 3, 3, &err));
  int gp;
  BUILD(gp = dpt_model_add_gap(&m, "gap", 0, &err));
  BUILD(dpt_model_add_fc(&m, "fc", gp, 5, &err));
  check_model("gap+fc", &m, 3);
  dpt_model_free(&m);

  BUILD(dpt_model_init(&m, 4, 5, 5, &err));
  int a, b;
  BUILD(a = dpt_model_add_conv(&m, "a", 0, 6, 1, 1, 0, &err));
  BUILD(b = dpt_model_add_conv(&m, "b", 0, 6, 3, 1, 1, &err));
  BUILD(dpt_model_add_add(&m, "add", a, b, 1, &err));
  check_model("fork+add+relu", &m, 2);
  dpt_model_free(&m);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
