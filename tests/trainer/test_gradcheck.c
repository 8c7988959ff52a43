/* test_gradcheck: every layer type of the CPU backend (oneDNN) against a
 * double-precision reference executor written here, and its analytic
 * gradients (parameters and input) against central finite differences of that
 * double-precision reference.  Each layer type runs on the plain layout (fed
 * by the input) and on oneDNN's blocked layout (behind a 1x1 convolution);
 * composite graphs (bottlenecks with projection + identity shortcuts, a stem
 * with blocks and head) and two whole ResNet-50s (width 1/16: small stem at
 * 16x16, ImageNet stem at 64x64) are checked end to end.
 *
 * Tolerances: forward |cpu - ref| <= 1e-4 * (1 + |ref|) (fp32 accumulation
 * over <= a few thousand terms); gradients |g - fd| <= 2e-3 * (|fd| + 0.01 *
 * mean|fd|): fp32 backward vs a double FD with h = 1e-7 (truncation ~1e-14,
 * rounding ~1e-9), so the bound measures the fp32 kernels.  The whole network
 * is kept small on purpose: with millions of ReLU units (e.g. 32x32 small
 * stem, batch 16) some unit crosses its kink within +-h for most probes and
 * the FD itself is wrong by ~1% — the PyTorch reference (test_ref) covers the
 * larger case.  Whole networks get 1e-2: their fp32 forward already differs
 * from double by ~1e-5 relative after 50 layers (printed), and a probe whose
 * gradient is small next to the mean sees that amplified. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_backend.h"

#include "dpt_check.h"

#define EPS 1e-5

/* ---- double-precision reference executor over any dpt_model graph ------- */

static size_t tsize(const struct dpt_model *m, int t, int n)
{
  return (size_t)n * m->tensors[t].c * m->tensors[t].h * m->tensors[t].w;
}

static void ref_forward(const struct dpt_model *m, int N, const double *p, const double *x,
                        double **T /* [n_tensors] scratch, allocated here */)
{
  memcpy(T[0], x, tsize(m, 0, N) * sizeof(double));
  for (int li = 0; li < m->n_layers; li++) {
    const struct dpt_layer_desc *l = &m->layers[li];
    const struct dpt_tensor_desc *X = &m->tensors[l->in[0]], *Y = &m->tensors[l->out];
    const double *in = T[l->in[0]];
    double *out = T[l->out];
    int C = X->c, H = X->h, W = X->w, Ho = Y->h, Wo = Y->w, Co = Y->c;
    switch (l->type) {
    case DPT_LAYER_CONV: {
      const double *w = p + l->w_off;
      int k = l->kernel, s = l->stride, pd = l->pad;
      for (int n = 0; n < N; n++)
        for (int co = 0; co < Co; co++)
          for (int oy = 0; oy < Ho; oy++)
            for (int ox = 0; ox < Wo; ox++) {
              double acc = 0;
              for (int ci = 0; ci < C; ci++)
                for (int ky = 0; ky < k; ky++) {
                  int iy = oy * s - pd + ky;
                  if (iy < 0 || iy >= H) continue;
                  for (int kx = 0; kx < k; kx++) {
                    int ix = ox * s - pd + kx;
                    if (ix < 0 || ix >= W) continue;
                    acc += w[((size_t)(co * C + ci) * k + ky) * k + kx] *
                           in[(((size_t)n * C + ci) * H + iy) * W + ix];
                  }
                }
              out[(((size_t)n * Co + co) * Ho + oy) * Wo + ox] = acc;
            }
      break;
    }
    case DPT_LAYER_BN: {
      const double *g = p + l->w_off, *b = p + l->b_off;
      size_t hw = (size_t)H * W;
      for (int c = 0; c < C; c++) {
        double mean = 0, var = 0;
        for (int n = 0; n < N; n++)
          for (size_t i = 0; i < hw; i++) mean += in[((size_t)n * C + c) * hw + i];
        mean /= (double)N * hw;
        for (int n = 0; n < N; n++)
          for (size_t i = 0; i < hw; i++) {
            double d = in[((size_t)n * C + c) * hw + i] - mean;
            var += d * d;
          }
        var /= (double)N * hw;
        double inv = 1.0 / sqrt(var + EPS);
        for (int n = 0; n < N; n++)
          for (size_t i = 0; i < hw; i++) {
            size_t o = ((size_t)n * C + c) * hw + i;
            double y = g[c] * (in[o] - mean) * inv + b[c];
            out[o] = (l->relu && y < 0) ? 0 : y;
          }
      }
      break;
    }
    case DPT_LAYER_RELU:
      for (size_t i = 0; i < tsize(m, l->out, N); i++) out[i] = in[i] > 0 ? in[i] : 0;
      break;
    case DPT_LAYER_ADD: {
      const double *in1 = T[l->in[1]];
      for (size_t i = 0; i < tsize(m, l->out, N); i++) {
        double y = in[i] + in1[i];
        out[i] = (l->relu && y < 0) ? 0 : y;
      }
      break;
    }
    case DPT_LAYER_MAXPOOL: {
      int k = l->kernel, s = l->stride, pd = l->pad;
      for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
          for (int oy = 0; oy < Ho; oy++)
            for (int ox = 0; ox < Wo; ox++) {
              double mx = -INFINITY;
              for (int ky = 0; ky < k; ky++)
                for (int kx = 0; kx < k; kx++) {
                  int iy = oy * s - pd + ky, ix = ox * s - pd + kx;
                  if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                  double v = in[(((size_t)n * C + c) * H + iy) * W + ix];
                  if (v > mx) mx = v;
                }
              out[(((size_t)n * C + c) * Ho + oy) * Wo + ox] = mx;
            }
      break;
    }
    case DPT_LAYER_GAP:
      for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
          double acc = 0;
          for (int i = 0; i < H * W; i++) acc += in[((size_t)n * C + c) * H * W + i];
          out[(size_t)n * C + c] = acc / (H * W);
        }
      break;
    case DPT_LAYER_FC: {
      const double *w = p + l->w_off, *b = p + l->b_off;
      int J = C * H * W;
      for (int n = 0; n < N; n++)
        for (int k = 0; k < Co; k++) {
          double acc = b[k];
          for (int j = 0; j < J; j++) acc += w[(size_t)k * J + j] * in[(size_t)n * J + j];
          out[(size_t)n * Co + k] = acc;
        }
      break;
    }
    default:
      break;
    }
  }
}

/* L = sum(out * R) */
static double ref_loss(const struct dpt_model *m, int N, const double *p, const double *x,
                       double **T, const double *R)
{
  ref_forward(m, N, p, x, T);
  int o = m->layers[m->n_layers - 1].out;
  double L = 0;
  for (size_t i = 0; i < tsize(m, o, N); i++) L += T[o][i] * R[i];
  return L;
}

static double urand(unsigned *s)
{
  *s = *s * 1664525u + 1013904223u;
  return (*s >> 8) * (1.0 / 16777216.0);
}

/* Run one model through the backend and check forward + gradients. */
static void check_model(const char *what, struct dpt_model *m, int N, int n_probe, int randomize, double tol)
{
  struct dpt_err err = {0};
  struct dpt_backend_opts o;
  struct dpt_backend *be = NULL;
  dpt_backend_opts_default(&o);
  o.batch = N;
  o.need_input_grad = 1;
  if (dpt_backend_create("cpu", m, &o, &be, &err)) {
    CHECK(0, "%s: backend: %s", what, err.msg);
    return;
  }
  unsigned seed = 12345;
  size_t np = m->n_params, nx = tsize(m, 0, N);
  int ot = m->layers[m->n_layers - 1].out;
  size_t no = tsize(m, ot, N);
  /* random parameters: BN gamma in [0.5, 1.5], everything else in [-0.5, 0.5] scaled by fan-in */
  for (int li = 0; randomize && li < m->n_layers; li++) {
    const struct dpt_layer_desc *l = &m->layers[li];
    double sc = l->type == DPT_LAYER_CONV ? 1.0 / sqrt((double)l->c_in * l->kernel * l->kernel)
              : l->type == DPT_LAYER_FC   ? 1.0 / sqrt((double)l->c_in) : 1.0;
    for (size_t i = 0; i < l->w_len; i++)
      be->params[l->w_off + i] = (float)(l->type == DPT_LAYER_BN ? 0.5 + urand(&seed) : 2 * sc * (urand(&seed) - 0.5));
    for (size_t i = 0; i < l->b_len; i++) be->params[l->b_off + i] = (float)(urand(&seed) - 0.5);
  }
  float *x = malloc(nx * sizeof *x), *out = malloc(no * sizeof *out), *dout = malloc(no * sizeof *dout);
  float *dx = malloc(nx * sizeof *dx);
  double *pd = malloc(np * sizeof *pd), *xd = malloc(nx * sizeof *xd), *R = malloc(no * sizeof *R);
  double **T = calloc((size_t)m->n_tensors, sizeof *T);
  for (int t = 0; t < m->n_tensors; t++) T[t] = malloc(tsize(m, t, N) * sizeof(double));
  for (size_t i = 0; i < nx; i++) xd[i] = x[i] = (float)(2 * urand(&seed) - 1);
  for (size_t i = 0; i < np; i++) pd[i] = be->params[i];
  for (size_t i = 0; i < no; i++) R[i] = dout[i] = (float)(2 * urand(&seed) - 1);

  if (dpt_backend_forward(be, x, 1, out, &err) || dpt_backend_backward(be, dout, dx, &err)) {
    CHECK(0, "%s: run: %s", what, err.msg);
    goto done;
  }
  ref_forward(m, N, pd, xd, T);
  double fmax = 0;
  for (size_t i = 0; i < no; i++) {
    double e = fabs(out[i] - T[ot][i]) / (1 + fabs(T[ot][i]));
    if (e > fmax) fmax = e;
  }
  CHECK(fmax <= 1e-4, "%s: forward differs from the double reference by %.3g", what, fmax);

  /* probe parameters of every layer and the input */
  double worst = 0, h = 1e-7; /* double: rounding ~1e-16 * |L| / h ~ 1e-8; small h makes ReLU-kink crossings rare */
  int probes = 0;
  for (int pass = 0; pass < 2; pass++) {
    size_t n = pass ? nx : np;
    if (!n) continue;
    double *v = pass ? xd : pd;
    const float *g = pass ? dx : be->grads;
    int cnt = n_probe < (int)n ? n_probe : (int)n;
    double *num = malloc(cnt * sizeof *num);
    size_t *idx = malloc(cnt * sizeof *idx);
    double mean_abs = 0;
    for (int k = 0; k < cnt; k++) {
      idx[k] = (cnt == (int)n) ? (size_t)k : (size_t)(urand(&seed) * n) % n;
      double keep = v[idx[k]];
      v[idx[k]] = keep + h;
      double lp = ref_loss(m, N, pd, xd, T, R);
      v[idx[k]] = keep - h;
      double lm = ref_loss(m, N, pd, xd, T, R);
      v[idx[k]] = keep;
      num[k] = (lp - lm) / (2 * h);
      mean_abs += fabs(num[k]) / cnt;
    }
    for (int k = 0; k < cnt; k++) {
      double e = fabs(g[idx[k]] - num[k]) / (fabs(num[k]) + 0.01 * mean_abs + 1e-12);
      if (e > worst) worst = e;
      if (e > tol && failures < 40)
        fprintf(stderr, "  %s: %s[%zu] analytic %.8g numeric %.8g\n", what, pass ? "dx" : "param",
                idx[k], g[idx[k]], num[k]);
      probes++;
    }
    free(num);
    free(idx);
  }
  CHECK(worst <= tol, "%s: gradient relative error %.3g > %.3g", what, worst, tol);
  printf("%-34s forward err %.2e  grad err %.2e  (%d probes)\n", what, fmax, worst, probes);
done:
  for (int t = 0; t < m->n_tensors; t++) free(T[t]);
  free(T);
  free(x), free(out), free(dout), free(dx), free(pd), free(xd), free(R);
  dpt_backend_destroy(be);
}

typedef int (*build_fn)(struct dpt_model *m, int in, struct dpt_err *err);

static int b_conv3(struct dpt_model *m, int in, struct dpt_err *e) { return dpt_model_add_conv(m, "conv3x3", in, 16, 3, 1, 1, e); }
static int b_conv3s2(struct dpt_model *m, int in, struct dpt_err *e) { return dpt_model_add_conv(m, "conv3x3s2", in, 32, 3, 2, 1, e); }
static int b_conv1s2(struct dpt_model *m, int in, struct dpt_err *e) { return dpt_model_add_conv(m, "conv1x1s2", in, 16, 1, 2, 0, e); }
static int b_conv7(struct dpt_model *m, int in, struct dpt_err *e) { return dpt_model_add_conv(m, "conv7x7s2", in, 16, 7, 2, 3, e); }
static int b_bn(struct dpt_model *m, int in, struct dpt_err *e) { return dpt_model_add_bn(m, "bn", in, 0, e); }
static int b_bnrelu(struct dpt_model *m, int in, struct dpt_err *e) { return dpt_model_add_bn(m, "bn+relu", in, 1, e); }
static int b_relu(struct dpt_model *m, int in, struct dpt_err *e) { return dpt_model_add_relu(m, "relu", in, e); }
static int b_maxpool(struct dpt_model *m, int in, struct dpt_err *e) { return dpt_model_add_maxpool(m, "maxpool", in, 3, 2, 1, e); }
static int b_gap(struct dpt_model *m, int in, struct dpt_err *e) { return dpt_model_add_gap(m, "gap", in, e); }
static int b_fc(struct dpt_model *m, int in, struct dpt_err *e) { return dpt_model_add_fc(m, "fc", in, 10, e); }
static int b_add(struct dpt_model *m, int in, struct dpt_err *e) { return dpt_model_add_add(m, "add", in, in, 0, e); }
/* two bottleneck blocks: projection shortcut, then identity shortcut (fork + accumulate) */
static int bottleneck(struct dpt_model *m, int x, int w, int out, int stride, int proj, struct dpt_err *e)
{
  int y, sc = x;
  if ((y = dpt_model_add_conv(m, "c1", x, w, 1, 1, 0, e)) < 0) return y;
  if ((y = dpt_model_add_bn(m, "b1", y, 1, e)) < 0) return y;
  if ((y = dpt_model_add_conv(m, "c2", y, w, 3, stride, 1, e)) < 0) return y;
  if ((y = dpt_model_add_bn(m, "b2", y, 1, e)) < 0) return y;
  if ((y = dpt_model_add_conv(m, "c3", y, out, 1, 1, 0, e)) < 0) return y;
  if ((y = dpt_model_add_bn(m, "b3", y, 0, e)) < 0) return y;
  if (proj) {
    if ((sc = dpt_model_add_conv(m, "ds", x, out, 1, stride, 0, e)) < 0) return sc;
    if ((sc = dpt_model_add_bn(m, "dsbn", sc, 0, e)) < 0) return sc;
  }
  return dpt_model_add_add(m, "add", y, sc, 1, e);
}
static int b_blocks(struct dpt_model *m, int in, struct dpt_err *e)
{
  int t = bottleneck(m, in, 4, 16, 2, 1, e);
  return t < 0 ? t : bottleneck(m, t, 4, 16, 1, 0, e);
}
static int b_blocks16(struct dpt_model *m, int in, struct dpt_err *e)
{
  int t = bottleneck(m, in, 16, 32, 2, 1, e);
  return t < 0 ? t : bottleneck(m, t, 16, 32, 1, 0, e);
}
static int b_stem_head(struct dpt_model *m, int in, struct dpt_err *e)
{
  int t;
  if ((t = dpt_model_add_conv(m, "stem", in, 4, 3, 1, 1, e)) < 0) return t;
  if ((t = dpt_model_add_bn(m, "stembn", t, 1, e)) < 0) return t;
  if ((t = bottleneck(m, t, 4, 16, 1, 1, e)) < 0) return t;
  if ((t = bottleneck(m, t, 4, 16, 1, 0, e)) < 0) return t;
  if ((t = bottleneck(m, t, 8, 32, 2, 1, e)) < 0) return t;
  if ((t = dpt_model_add_gap(m, "gap", t, e)) < 0) return t;
  return dpt_model_add_fc(m, "fc", t, 5, e);
}
static int b_addrelu(struct dpt_model *m, int in, struct dpt_err *e) { return dpt_model_add_add(m, "add+relu", in, in, 1, e); }

int main(void)
{
  struct dpt_err err = {0};
  static const struct {
    const char *name;
    build_fn fn;
    int c, hw;
  } cases[] = {
      {"conv 3x3 s1", b_conv3, 3, 6},     {"conv 3x3 s2", b_conv3s2, 16, 7},
      {"conv 1x1 s2", b_conv1s2, 16, 6},  {"conv 7x7 s2 p3", b_conv7, 3, 10},
      {"bn", b_bn, 16, 5},                {"bn+relu (fused)", b_bnrelu, 16, 5},
      {"relu", b_relu, 16, 4},            {"maxpool 3/2/1", b_maxpool, 16, 7},
      {"global avg pool", b_gap, 32, 4},  {"fc", b_fc, 32, 2},
      {"add (fork: same input twice)", b_add, 16, 4},
      {"add+relu (fused)", b_addrelu, 16, 4},
      {"bn+relu c4", b_bnrelu, 4, 5},       {"conv 3x3 s1 c4", b_conv3, 4, 6},
      {"conv 1x1 s2 c4", b_conv1s2, 4, 6},  {"add+relu c4", b_addrelu, 4, 4},
      {"2 bottlenecks w4", b_blocks, 8, 8}, {"2 bottlenecks w16", b_blocks16, 16, 8},
      {"maxpool c4", b_maxpool, 4, 7}, {"stem+3 blocks+head", b_stem_head, 3, 8},     {"gap c4", b_gap, 4, 4}, {"fc c4", b_fc, 4, 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    for (int blocked = 0; blocked < 2; blocked++) {
      struct dpt_model m;
      char name[96];
      if (dpt_model_init(&m, cases[i].c, cases[i].hw, cases[i].hw, &err)) { CHECK(0, "%s", err.msg); continue; }
      int t = 0;
      if (blocked) t = dpt_model_add_conv(&m, "pre", 0, cases[i].c, 1, 1, 0, &err);
      if (t < 0 || cases[i].fn(&m, t, &err) < 0) {
        CHECK(0, "%s: %s", cases[i].name, err.msg);
        dpt_model_free(&m);
        continue;
      }
      snprintf(name, sizeof name, "%s%s", cases[i].name, blocked ? " [blocked]" : "");
      check_model(name, &m, blocked && cases[i].fn == b_bn ? 3 : 2, 60, 1, 2e-3);
      dpt_model_free(&m);
    }
  }
  /* whole network: ResNet-50 v1.5, width 1/16, small stem, 16x16x3, 5 classes */
  struct dpt_model m;
  struct dpt_model_cfg cfg;
  dpt_model_cfg_default(&cfg);
  cfg.image_size = 16;
  cfg.num_classes = 5;
  cfg.small_stem = 1;
  cfg.width = 1.0 / 16;
  /* The network's own initialisation (Kaiming, BN 1/0) is well conditioned;
   * all-random BN parameters on 16 residual blocks amplify fp32 rounding by
   * ~1e4 (PyTorch fp32 shows the same, see test_ref).  Every branch must carry
   * gradient, so the zero-gamma residual init is off here. */
  cfg.zero_init_residual = 0;
  if (dpt_model_resnet50(&m, &cfg, &err)) CHECK(0, "%s", err.msg);
  else {
    check_model("ResNet-50 w1/16 16x16 small stem", &m, 4, 30, 0, 1e-2);
    dpt_model_free(&m);
  }
  /* standard stem (7x7/2 + maxpool) */
  cfg.small_stem = 0;
  cfg.image_size = 64;
  if (dpt_model_resnet50(&m, &cfg, &err)) CHECK(0, "%s", err.msg);
  else {
    check_model("ResNet-50 w1/16 64x64 ImageNet stem", &m, 4, 30, 0, 1e-2);
    dpt_model_free(&m);
  }
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
