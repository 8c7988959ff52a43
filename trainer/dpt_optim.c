/* dpt_optim.c — loss, SGD, schedules. */
#include "dpt_optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double dpt_softmax_xent(const float *logits, const int *labels, int n, int k, float smoothing,
                        float grad_scale, float *dlogits, int *top1, int *top5)
{
  double total = 0.0;
  int c1 = 0, c5 = 0;
#pragma omp parallel for reduction(+ : total, c1, c5) schedule(static)
  for (int i = 0; i < n; i++) {
    const float *z = logits + (size_t)i * k;
    int y = labels[i];
    if (y < 0 || y >= k) { /* padding (validation) or ignored */
      if (dlogits) memset(dlogits + (size_t)i * k, 0, (size_t)k * sizeof *dlogits);
      continue;
    }
    double mx = z[0];
    for (int j = 1; j < k; j++) mx = z[j] > mx ? z[j] : mx;
    double se = 0.0, sz = 0.0;
    for (int j = 0; j < k; j++) {
      se += exp((double)z[j] - mx);
      sz += (double)z[j];
    }
    double lse = mx + log(se);
    /* loss = -(1-eps) * log p_y - eps/K * sum_j log p_j */
    double loss = (1.0 - smoothing) * (lse - z[y]) + smoothing * (lse - sz / k);
    total += loss;
    if (dlogits) {
      float *g = dlogits + (size_t)i * k;
      for (int j = 0; j < k; j++) {
        double p = exp((double)z[j] - lse);
        double t = smoothing / k + (j == y ? 1.0 - smoothing : 0.0);
        g[j] = (float)(grad_scale * (p - t));
      }
    }
    int rank = 0; /* logits strictly greater than the label's (ties favour the label) */
    for (int j = 0; j < k; j++) rank += z[j] > z[y];
    c1 += rank < 1;
    c5 += rank < 5;
  }
  if (top1) *top1 = c1;
  if (top5) *top5 = c5;
  return total;
}

int dpt_sgd_init(struct dpt_sgd *o, size_t n, float momentum, float weight_decay,
                 const unsigned char *decay_mask, struct dpt_err *err)
{
  memset(o, 0, sizeof *o);
  o->n = n;
  o->momentum = momentum;
  o->weight_decay = weight_decay;
  o->velocity = calloc(n ? n : 1, sizeof(float));
  o->decay_mask = malloc(n ? n : 1);
  if (!o->velocity || !o->decay_mask) {
    dpt_sgd_free(o);
    return dpt_err_set(err, DPT_E_NOMEM, "sgd: out of memory for %zu parameters", n);
  }
  if (decay_mask) memcpy(o->decay_mask, decay_mask, n);
  else memset(o->decay_mask, 1, n);
  return 0;
}

void dpt_sgd_step(struct dpt_sgd *o, float lr, float *w, const float *grad)
{
  const float m = o->momentum, wd = o->weight_decay;
  float *v = o->velocity;
  const unsigned char *mask = o->decay_mask;
  const size_t n = o->n;
  const int nest = o->nesterov;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    float g = grad[i] + (mask[i] ? wd * w[i] : 0.0f);
    float vi = m * v[i] + g;
    v[i] = vi;
    w[i] -= lr * (nest ? g + m * vi : vi);
  }
}

void dpt_sgd_free(struct dpt_sgd *o)
{
  free(o->velocity);
  free(o->decay_mask);
  o->velocity = NULL;
  o->decay_mask = NULL;
}

int dpt_lars_init(struct dpt_lars *l, size_t n, const struct dpt_param_seg *seg, int n_seg, float eta,
                  float eps, struct dpt_err *err)
{
  size_t at = 0;
  memset(l, 0, sizeof *l);
  if (!(eta > 0) || !(eps >= 0) || n_seg < 0)
    return dpt_err_set(err, DPT_E_INPUT, "lars: eta %g must be > 0, eps %g >= 0 and the tensor count %d >= 0",
                       (double)eta, (double)eps, n_seg);
  for (int i = 0; i < n_seg; i++) { /* in slab order, back to back, ending at n */
    if (seg[i].off != at || !seg[i].len)
      return dpt_err_set(err, DPT_E_INPUT, "lars: parameter tensor %d at offset %zu (length %zu) does not follow "
                         "the previous one, which ended at %zu: the tensors must tile the slab",
                         i, seg[i].off, seg[i].len, at);
    at += seg[i].len;
  }
  if (at != n)
    return dpt_err_set(err, DPT_E_INPUT, "lars: the %d parameter tensors hold %zu values, the slab %zu", n_seg, at, n);
  size_t ns = n_seg ? (size_t)n_seg : 1;
  l->seg = malloc(ns * sizeof *l->seg);
  l->ratio = malloc(ns * sizeof *l->ratio);
  if (!l->seg || !l->ratio) {
    dpt_lars_free(l);
    return dpt_err_set(err, DPT_E_NOMEM, "lars: out of memory for %d parameter tensors", n_seg);
  }
  if (n_seg) memcpy(l->seg, seg, (size_t)n_seg * sizeof *seg);
  for (int i = 0; i < n_seg; i++) l->ratio[i] = 1.0f;
  l->n_seg = n_seg;
  l->eta = eta;
  l->eps = eps > 0 ? eps : (float)DPT_LARS_EPS_ZERO;
  return 0;
}

/* One tensor: its trust ratio from the norms (summed in double), then the update. */
static float lars_tensor(const struct dpt_lars *l, const struct dpt_param_seg *s, const struct dpt_sgd *o,
                         float lr, float *w, const float *grad)
{
  const float m = o->momentum, wd = o->weight_decay;
  const int nest = o->nesterov;
  float *v = o->velocity + s->off, ratio = 1.0f, dec = 0.0f;
  w += s->off;
  grad += s->off;
  if (!s->skip) {
    double ww = 0, gg = 0;
    for (size_t i = 0; i < s->len; i++) {
      ww += (double)w[i] * w[i];
      gg += (double)grad[i] * grad[i];
    }
    double wn = sqrt(ww), gn = sqrt(gg);
    if (wn > 0 && gn > 0) ratio = (float)(l->eta * wn / (gn + wd * wn + l->eps));
    dec = wd;
  }
  const float lt = lr * ratio;
  for (size_t i = 0; i < s->len; i++) {
    float g = grad[i] + dec * w[i];
    float vi = m * v[i] - lt * g;
    v[i] = vi;
    w[i] += nest ? m * vi - lt * g : vi;
  }
  return ratio;
}

void dpt_lars_step(struct dpt_lars *l, struct dpt_sgd *o, float lr, float *w, const float *grad)
{
  /* tensors of very different sizes (64 to 2.4M values): handed out one at a time */
#pragma omp parallel for schedule(dynamic, 1)
  for (int i = 0; i < l->n_seg; i++) l->ratio[i] = lars_tensor(l, &l->seg[i], o, lr, w, grad);
}

void dpt_lars_free(struct dpt_lars *l)
{
  free(l->seg);
  free(l->ratio);
  l->seg = NULL;
  l->ratio = NULL;
  l->n_seg = 0;
}

double dpt_rmsw_alpha_sgd(double e, double c, double p)
{
  if (!(p > 0)) return e < c ? 0.0 : 1.0;
  if (e < c) return 0.5 * exp(2.0 * (e - c) / p);
  if (e < c + p / 2) return 0.5 + (e - c) / p;
  return 1.0;
}

int dpt_rmsw_init(struct dpt_rmsw *r, size_t n, float *m, float lr_rms, float mu2, float eps, double center,
                  double period, struct dpt_err *err)
{
  memset(r, 0, sizeof *r);
  if (!m || !(lr_rms > 0) || !(mu2 >= 0 && mu2 < 1) || !(eps > 0) || !(period > 0) || !(center >= 0))
    return dpt_err_set(err, DPT_E_INPUT, "rmsprop warm-up: a second-moment buffer, lr %g > 0, mu2 %g in [0, 1), eps %g "
                       "> 0, centre %g >= 0 and period %g > 0 epochs are needed", (double)lr_rms, (double)mu2,
                       (double)eps, center, period);
  r->m = m;
  r->n = n;
  r->lr_rms = lr_rms;
  r->mu2 = mu2;
  r->eps = eps;
  r->center = center;
  r->period = period;
  return 0;
}

void dpt_rmsw_step(const struct dpt_rmsw *r, struct dpt_sgd *o, float lr, double epoch, float *w, const float *grad)
{
  const float a = (float)dpt_rmsw_alpha_sgd(epoch, r->center, r->period);
  const float ar = lr > 0 ? (1.0f - a) * r->lr_rms / lr : 0.0f;
  const float mu1 = o->momentum, wd = o->weight_decay, mu2 = r->mu2, eps = r->eps;
  float *d = o->velocity, *m = r->m;
  const unsigned char *mask = o->decay_mask;
  const size_t n = r->n;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    float g = grad[i] + (mask[i] ? wd * w[i] : 0.0f);
    float mi = mu2 * m[i] + (1.0f - mu2) * (g * g);
    m[i] = mi;
    float di = mu1 * d[i] - g * (a + ar / (sqrtf(mi) + eps));
    d[i] = di;
    w[i] += lr * di;
  }
}

static const char *const kind_names[] = {"const", "step", "multistep", "poly", "cosine", "piecewise"};

int dpt_schedule_parse_kind(const char *s)
{
  for (int i = 0; i <= DPT_SCHED_PIECEWISE; i++)
    if (!strcmp(s, kind_names[i])) return i;
  return -1;
}

const char *dpt_schedule_kind_name(enum dpt_sched_kind k)
{
  return (k >= 0 && k <= DPT_SCHED_PIECEWISE) ? kind_names[k] : "?";
}

double dpt_schedule_lr(const struct dpt_schedule *s, double e)
{
  double peak = s->peak_lr;
  if (s->warmup_epochs > 0 && e < s->warmup_epochs) {
    double f = s->warmup_start + (1.0 - s->warmup_start) * (e / s->warmup_epochs);
    return peak * f;
  }
  switch (s->kind) {
  case DPT_SCHED_CONST:
    return peak;
  case DPT_SCHED_STEP: {
    if (s->step_epochs <= 0) return peak;
    return peak * pow(s->gamma, floor(e / s->step_epochs));
  }
  case DPT_SCHED_MULTISTEP: {
    int k = 0;
    double f = 1.0;
    for (; k < s->n_milestones && e >= s->milestones[k]; k++) f *= s->n_gammas ? s->gammas[k] : s->gamma;
    return peak * f;
  }
  case DPT_SCHED_POLY: {
    double span = s->total_epochs - s->warmup_epochs;
    double t = span > 0 ? (e - s->warmup_epochs) / span : 1.0;
    if (t > 1) t = 1;
    return s->min_lr + (peak - s->min_lr) * pow(1.0 - t, s->power);
  }
  case DPT_SCHED_PIECEWISE: {
    int k = 0;
    while (k + 1 < s->n_levels && e >= s->starts[k + 1]) k++;
    return s->n_levels ? s->levels[k] : peak;
  }
  case DPT_SCHED_COSINE: {
    double span = s->total_epochs - s->warmup_epochs;
    double t = span > 0 ? (e - s->warmup_epochs) / span : 1.0;
    if (t > 1) t = 1;
    return s->min_lr + 0.5 * (peak - s->min_lr) * (1.0 + cos(M_PI * t));
  }
  }
  return peak;
}
