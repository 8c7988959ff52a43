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

static const char *const kind_names[] = {"const", "step", "multistep", "poly", "cosine"};

int dpt_schedule_parse_kind(const char *s)
{
  for (int i = 0; i < 5; i++)
    if (!strcmp(s, kind_names[i])) return i;
  return -1;
}

const char *dpt_schedule_kind_name(enum dpt_sched_kind k)
{
  return (k >= 0 && k <= DPT_SCHED_COSINE) ? kind_names[k] : "?";
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
    while (k < s->n_milestones && e >= s->milestones[k]) k++;
    return peak * pow(s->gamma, k);
  }
  case DPT_SCHED_POLY: {
    double span = s->total_epochs - s->warmup_epochs;
    double t = span > 0 ? (e - s->warmup_epochs) / span : 1.0;
    if (t > 1) t = 1;
    return s->min_lr + (peak - s->min_lr) * pow(1.0 - t, s->power);
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
