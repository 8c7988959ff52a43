/* dpt_model.c — ResNet-50 v1.5 graph builder, parameter layout and init. */
#include "dpt_model.h"
#include "dpt_optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const type_names[DPT_LAYER_NTYPES] = {
    "conv", "bn", "relu", "maxpool", "gap", "fc", "add"};

const char *dpt_layer_type_name(enum dpt_layer_type t)
{
  return (t >= 0 && t < DPT_LAYER_NTYPES) ? type_names[t] : "?";
}

void dpt_model_cfg_default(struct dpt_model_cfg *cfg)
{
  cfg->in_channels = 3;
  cfg->image_size = 224;
  cfg->num_classes = 1000;
  cfg->small_stem = 0;
  cfg->width = 1.0;
  cfg->zero_init_residual = 1;
  cfg->seed = 1;
}

/* ---- RNG ---------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x)
{
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void dpt_rng_seed(struct dpt_rng *r, uint64_t seed)
{
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t dpt_rng_next(struct dpt_rng *r)
{
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double dpt_rng_uniform(struct dpt_rng *r) { return (double)(dpt_rng_next(r) >> 11) * 0x1.0p-53; }

double dpt_rng_normal(struct dpt_rng *r)
{
  double u1 = dpt_rng_uniform(r), u2 = dpt_rng_uniform(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint64_t dpt_rng_below(struct dpt_rng *r, uint64_t n)
{
  if (n <= 1) return 0;
  uint64_t lim = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = dpt_rng_next(r);
  while (x >= lim);
  return x % n;
}

/* ---- builder ------------------------------------------------------------ */

static int push_tensor(struct dpt_model *m, int c, int h, int w, int producer, struct dpt_err *err)
{
  if (m->n_tensors == m->cap_tensors) {
    int cap = m->cap_tensors ? 2 * m->cap_tensors : 64;
    void *p = realloc(m->tensors, (size_t)cap * sizeof *m->tensors);
    if (!p) return dpt_err_set(err, DPT_E_NOMEM, "model: out of memory for %d tensors", cap);
    m->tensors = p;
    m->cap_tensors = cap;
  }
  struct dpt_tensor_desc *t = &m->tensors[m->n_tensors];
  t->c = c;
  t->h = h;
  t->w = w;
  t->producer = producer;
  t->n_consumers = 0;
  return m->n_tensors++;
}

static struct dpt_layer_desc *push_layer(struct dpt_model *m, enum dpt_layer_type type,
                                         const char *name, int in0, int in1, struct dpt_err *err)
{
  if (in0 < 0 || in0 >= m->n_tensors || (in1 >= m->n_tensors)) {
    dpt_err_set(err, DPT_E_INPUT, "model: layer '%s' reads tensor %d/%d but only %d exist", name,
                in0, in1, m->n_tensors);
    return NULL;
  }
  if (m->n_layers == m->cap_layers) {
    int cap = m->cap_layers ? 2 * m->cap_layers : 64;
    void *p = realloc(m->layers, (size_t)cap * sizeof *m->layers);
    if (!p) {
      dpt_err_set(err, DPT_E_NOMEM, "model: out of memory for %d layers", cap);
      return NULL;
    }
    m->layers = p;
    m->cap_layers = cap;
  }
  struct dpt_layer_desc *l = &m->layers[m->n_layers];
  memset(l, 0, sizeof *l);
  l->type = type;
  snprintf(l->name, sizeof l->name, "%s", name);
  l->in[0] = in0;
  l->in[1] = in1;
  l->out = -1;
  l->c_in = m->tensors[in0].c;
  m->tensors[in0].n_consumers++;
  if (in1 >= 0) m->tensors[in1].n_consumers++;
  return l;
}

static int finish_layer(struct dpt_model *m, struct dpt_layer_desc *l, int c, int h, int w,
                        struct dpt_err *err)
{
  int t = push_tensor(m, c, h, w, m->n_layers, err);
  if (t < 0) return t;
  l->out = t;
  l->c_out = c;
  m->n_layers++;
  return t;
}

int dpt_model_init(struct dpt_model *m, int in_c, int in_h, int in_w, struct dpt_err *err)
{
  memset(m, 0, sizeof *m);
  dpt_model_cfg_default(&m->cfg);
  m->cfg.in_channels = in_c;
  m->cfg.image_size = in_h;
  if (in_c < 1 || in_h < 1 || in_w < 1)
    return dpt_err_set(err, DPT_E_INPUT, "model: input shape %dx%dx%d is empty", in_c, in_h, in_w);
  int t = push_tensor(m, in_c, in_h, in_w, -1, err);
  return t < 0 ? t : 0;
}

int dpt_model_add_conv(struct dpt_model *m, const char *name, int in, int c_out, int kernel,
                       int stride, int pad, struct dpt_err *err)
{
  struct dpt_layer_desc *l = push_layer(m, DPT_LAYER_CONV, name, in, -1, err);
  if (!l) return err ? err->code : DPT_E_INPUT;
  const struct dpt_tensor_desc *x = &m->tensors[in];
  int ho = (x->h + 2 * pad - kernel) / stride + 1, wo = (x->w + 2 * pad - kernel) / stride + 1;
  if (ho < 1 || wo < 1 || c_out < 1)
    return dpt_err_set(err, DPT_E_INPUT,
                       "model: conv '%s' on %dx%d input with kernel %d stride %d gives %dx%d: "
                       "use a larger --image-size",
                       name, x->h, x->w, kernel, stride, ho, wo);
  l->kernel = kernel;
  l->stride = stride;
  l->pad = pad;
  l->w_off = m->n_params;
  l->w_len = (size_t)c_out * x->c * kernel * kernel;
  m->n_params += l->w_len;
  l->macs = (double)ho * wo * c_out * x->c * kernel * kernel;
  m->macs += l->macs;
  m->n_conv++;
  return finish_layer(m, l, c_out, ho, wo, err);
}

int dpt_model_add_bn(struct dpt_model *m, const char *name, int in, int relu, struct dpt_err *err)
{
  struct dpt_layer_desc *l = push_layer(m, DPT_LAYER_BN, name, in, -1, err);
  if (!l) return err ? err->code : DPT_E_INPUT;
  const struct dpt_tensor_desc *x = &m->tensors[in];
  l->relu = relu;
  l->w_off = m->n_params;
  l->w_len = (size_t)x->c;
  l->b_off = l->w_off + l->w_len;
  l->b_len = (size_t)x->c;
  m->n_params += 2 * (size_t)x->c;
  l->s_off = m->n_state;
  m->n_state += 2 * (size_t)x->c;
  m->n_bn++;
  return finish_layer(m, l, x->c, x->h, x->w, err);
}

int dpt_model_add_relu(struct dpt_model *m, const char *name, int in, struct dpt_err *err)
{
  struct dpt_layer_desc *l = push_layer(m, DPT_LAYER_RELU, name, in, -1, err);
  if (!l) return err ? err->code : DPT_E_INPUT;
  const struct dpt_tensor_desc *x = &m->tensors[in];
  return finish_layer(m, l, x->c, x->h, x->w, err);
}

int dpt_model_add_maxpool(struct dpt_model *m, const char *name, int in, int kernel, int stride,
                          int pad, struct dpt_err *err)
{
  struct dpt_layer_desc *l = push_layer(m, DPT_LAYER_MAXPOOL, name, in, -1, err);
  if (!l) return err ? err->code : DPT_E_INPUT;
  const struct dpt_tensor_desc *x = &m->tensors[in];
  int ho = (x->h + 2 * pad - kernel) / stride + 1, wo = (x->w + 2 * pad - kernel) / stride + 1;
  if (ho < 1 || wo < 1 || pad >= kernel)
    return dpt_err_set(err, DPT_E_INPUT, "model: maxpool '%s' on %dx%d input gives %dx%d", name,
                       x->h, x->w, ho, wo);
  l->kernel = kernel;
  l->stride = stride;
  l->pad = pad;
  return finish_layer(m, l, x->c, ho, wo, err);
}

int dpt_model_add_gap(struct dpt_model *m, const char *name, int in, struct dpt_err *err)
{
  struct dpt_layer_desc *l = push_layer(m, DPT_LAYER_GAP, name, in, -1, err);
  if (!l) return err ? err->code : DPT_E_INPUT;
  const struct dpt_tensor_desc *x = &m->tensors[in];
  l->kernel = x->h; /* informational */
  return finish_layer(m, l, x->c, 1, 1, err);
}

int dpt_model_add_fc(struct dpt_model *m, const char *name, int in, int c_out, struct dpt_err *err)
{
  struct dpt_layer_desc *l = push_layer(m, DPT_LAYER_FC, name, in, -1, err);
  if (!l) return err ? err->code : DPT_E_INPUT;
  const struct dpt_tensor_desc *x = &m->tensors[in];
  if (c_out < 1) return dpt_err_set(err, DPT_E_INPUT, "model: fc '%s' with %d outputs", name, c_out);
  size_t c_in = (size_t)x->c * x->h * x->w;
  l->c_in = (int)c_in;
  l->w_off = m->n_params;
  l->w_len = (size_t)c_out * c_in;
  l->b_off = l->w_off + l->w_len;
  l->b_len = (size_t)c_out;
  m->n_params += l->w_len + l->b_len;
  l->macs = (double)c_out * c_in;
  m->macs += l->macs;
  m->n_fc++;
  return finish_layer(m, l, c_out, 1, 1, err);
}

int dpt_model_add_add(struct dpt_model *m, const char *name, int a, int b, int relu,
                      struct dpt_err *err)
{
  if (b < 0 || b >= m->n_tensors)
    return dpt_err_set(err, DPT_E_INPUT, "model: add '%s' reads missing tensor %d", name, b);
  const struct dpt_tensor_desc *x = &m->tensors[a], *y = &m->tensors[b];
  if (x->c != y->c || x->h != y->h || x->w != y->w)
    return dpt_err_set(err, DPT_E_INPUT, "model: add '%s' of %dx%dx%d and %dx%dx%d tensors", name,
                       x->c, x->h, x->w, y->c, y->h, y->w);
  struct dpt_layer_desc *l = push_layer(m, DPT_LAYER_ADD, name, a, b, err);
  if (!l) return err ? err->code : DPT_E_INPUT;
  l->relu = relu;
  return finish_layer(m, l, x->c, x->h, x->w, err);
}

void dpt_model_free(struct dpt_model *m)
{
  if (!m) return;
  free(m->layers);
  free(m->tensors);
  memset(m, 0, sizeof *m);
}

/* ---- ResNet-50 v1.5 ----------------------------------------------------- */

static int scaled(int c, double width)
{
  int v = (int)(c * width + 0.5);
  return v < 1 ? 1 : v;
}

#define TRY(expr)                                                                                 \
  do {                                                                                            \
    rc = (expr);                                                                                  \
    if (rc < 0) goto fail;                                                                        \
  } while (0)

int dpt_model_resnet50(struct dpt_model *m, const struct dpt_model_cfg *cfg, struct dpt_err *err)
{
  static const int blocks[4] = {3, 4, 6, 3};
  static const int planes[4] = {64, 128, 256, 512};
  int rc;
  char name[48];
  if (cfg->width <= 0 || cfg->width > 8)
    return dpt_err_set(err, DPT_E_INPUT, "model: width multiplier %g outside (0, 8]", cfg->width);
  if (cfg->num_classes < 1)
    return dpt_err_set(err, DPT_E_INPUT, "model: %d classes", cfg->num_classes);
  rc = dpt_model_init(m, cfg->in_channels, cfg->image_size, cfg->image_size, err);
  if (rc < 0) return rc;
  m->cfg = *cfg;

  int inplanes = scaled(64, cfg->width);
  int t;
  if (cfg->small_stem) {
    TRY(t = dpt_model_add_conv(m, "conv1", 0, inplanes, 3, 1, 1, err));
    TRY(t = dpt_model_add_bn(m, "bn1", t, 1, err));
  } else {
    TRY(t = dpt_model_add_conv(m, "conv1", 0, inplanes, 7, 2, 3, err));
    TRY(t = dpt_model_add_bn(m, "bn1", t, 1, err));
    TRY(t = dpt_model_add_maxpool(m, "maxpool", t, 3, 2, 1, err));
  }
  for (int s = 0; s < 4; s++) {
    int width = scaled(planes[s], cfg->width), out = width * 4;
    for (int b = 0; b < blocks[s]; b++) {
      int stride = (b == 0 && s > 0) ? 2 : 1;
      int x = t, y, sc = t;
      char pre[24];
      snprintf(pre, sizeof pre, "layer%d.%d", s + 1, b);
#define NM(suffix) (snprintf(name, sizeof name, "%s.%s", pre, suffix), name)
      TRY(y = dpt_model_add_conv(m, NM("conv1"), x, width, 1, 1, 0, err));
      TRY(y = dpt_model_add_bn(m, NM("bn1"), y, 1, err));
      TRY(y = dpt_model_add_conv(m, NM("conv2"), y, width, 3, stride, 1, err)); /* v1.5 */
      TRY(y = dpt_model_add_bn(m, NM("bn2"), y, 1, err));
      TRY(y = dpt_model_add_conv(m, NM("conv3"), y, out, 1, 1, 0, err));
      TRY(y = dpt_model_add_bn(m, NM("bn3"), y, 0, err));
      m->layers[m->n_layers - 1].last_bn = 1;
      if (stride != 1 || inplanes != out) {
        TRY(sc = dpt_model_add_conv(m, NM("downsample.0"), x, out, 1, stride, 0, err));
        TRY(sc = dpt_model_add_bn(m, NM("downsample.1"), sc, 0, err));
      }
      TRY(t = dpt_model_add_add(m, NM("add"), y, sc, 1, err));
#undef NM
      inplanes = out;
    }
  }
  TRY(t = dpt_model_add_gap(m, "avgpool", t, err));
  TRY(t = dpt_model_add_fc(m, "fc", t, cfg->num_classes, err));
  return 0;
fail:
  dpt_model_free(m);
  return rc;
}

/* ---- initialisation ------------------------------------------------------ */

void dpt_model_init_params(const struct dpt_model *m, uint64_t seed, float *params, float *state)
{
  struct dpt_rng rng;
  dpt_rng_seed(&rng, seed);
  for (int i = 0; i < m->n_layers; i++) {
    const struct dpt_layer_desc *l = &m->layers[i];
    switch (l->type) {
    case DPT_LAYER_CONV: {
      /* kaiming_normal_(mode="fan_out", nonlinearity="relu") */
      double fan_out = (double)l->c_out * l->kernel * l->kernel;
      double std = sqrt(2.0 / fan_out);
      for (size_t k = 0; k < l->w_len; k++) params[l->w_off + k] = (float)(std * dpt_rng_normal(&rng));
      break;
    }
    case DPT_LAYER_BN: {
      float g = (l->last_bn && m->cfg.zero_init_residual) ? 0.0f : 1.0f;
      for (size_t k = 0; k < l->w_len; k++) params[l->w_off + k] = g;
      for (size_t k = 0; k < l->b_len; k++) params[l->b_off + k] = 0.0f;
      for (int k = 0; k < l->c_out; k++) {
        state[l->s_off + k] = 0.0f;
        state[l->s_off + l->c_out + k] = 1.0f;
      }
      break;
    }
    case DPT_LAYER_FC: {
      /* nn.Linear.reset_parameters: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
      double bound = 1.0 / sqrt((double)l->c_in);
      for (size_t k = 0; k < l->w_len; k++)
        params[l->w_off + k] = (float)((2.0 * dpt_rng_uniform(&rng) - 1.0) * bound);
      for (size_t k = 0; k < l->b_len; k++)
        params[l->b_off + k] = (float)((2.0 * dpt_rng_uniform(&rng) - 1.0) * bound);
      break;
    }
    default:
      break;
    }
  }
}

int dpt_model_param_segs(const struct dpt_model *m, struct dpt_param_seg *seg, int cap)
{
  int n = 0;
  for (int i = 0; i < m->n_layers; i++) {
    const struct dpt_layer_desc *l = &m->layers[i];
    if (l->w_len && n++ < cap) seg[n - 1] = (struct dpt_param_seg){l->w_off, l->w_len, l->type == DPT_LAYER_BN};
    if (l->b_len && n++ < cap) seg[n - 1] = (struct dpt_param_seg){l->b_off, l->b_len, 1};
  }
  return n;
}

void dpt_model_decay_mask(const struct dpt_model *m, int skip_bn_bias, unsigned char *mask)
{
  memset(mask, 1, m->n_params);
  if (!skip_bn_bias) return;
  for (int i = 0; i < m->n_layers; i++) {
    const struct dpt_layer_desc *l = &m->layers[i];
    if (l->type == DPT_LAYER_BN) memset(mask + l->w_off, 0, l->w_len);
    if (l->b_len) memset(mask + l->b_off, 0, l->b_len);
  }
}
