/* dpt_cuda_plan.c — host-side planning for the CUDA backend (see dpt_cuda_plan.h). */
#include "dpt_cuda_plan.h"

#include <stdlib.h>
#include <string.h>

int dpt_cuda_precision_parse(const char *s)
{
  if (!s) return -1;
  if (!strcmp(s, "fp32")) return DPT_CUDA_FP32;
  if (!strcmp(s, "tf32")) return DPT_CUDA_TF32;
  if (!strcmp(s, "mixed") || !strcmp(s, "fp16")) return DPT_CUDA_MIXED;
  return -1;
}

const char *dpt_cuda_precision_name(enum dpt_cuda_precision p)
{
  switch (p) {
  case DPT_CUDA_FP32: return "fp32";
  case DPT_CUDA_TF32: return "tf32";
  case DPT_CUDA_MIXED: return "mixed";
  }
  return "?";
}

int dpt_cuda_stored_channels(int c, int is_network_input, enum dpt_cuda_precision p)
{
  if (p != DPT_CUDA_MIXED || !is_network_input) return c;
  return (c + DPT_CUDA_CHANNEL_MULTIPLE - 1) / DPT_CUDA_CHANNEL_MULTIPLE * DPT_CUDA_CHANNEL_MULTIPLE;
}

void dpt_cuda_plan_free(struct dpt_cuda_plan *plan)
{
  if (!plan) return;
  free(plan->t);
  free(plan->conv);
  free(plan->shape_rep);
  memset(plan, 0, sizeof *plan);
}

static int same_shape(const struct dpt_cuda_conv_plan *a, const struct dpt_cuda_conv_plan *b)
{
  return a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w && a->k == b->k &&
         a->r == b->r && a->s == b->s && a->stride == b->stride && a->pad == b->pad;
}

int dpt_cuda_plan_build(const struct dpt_model *m, int batch, enum dpt_cuda_precision prec,
                        int need_input_grad, struct dpt_cuda_plan *plan, struct dpt_err *err)
{
  int rc = 0;
  memset(plan, 0, sizeof *plan);
  if (batch < 1) return dpt_err_set(err, DPT_E_INPUT, "cuda plan: batch size %d < 1", batch);
  if (m->n_layers < 1 || m->n_tensors < 2)
    return dpt_err_set(err, DPT_E_INPUT, "cuda plan: the model has no layers");
  plan->precision = prec;
  plan->batch = batch;
  plan->bn_persistent_train = prec == DPT_CUDA_MIXED;
  plan->n_tensors = m->n_tensors;
  plan->t = calloc((size_t)m->n_tensors, sizeof *plan->t);
  plan->conv = calloc((size_t)(m->n_conv > 0 ? m->n_conv : 1), sizeof *plan->conv);
  plan->shape_rep = calloc((size_t)(m->n_conv > 0 ? m->n_conv : 1), sizeof *plan->shape_rep);
  if (!plan->t || !plan->conv || !plan->shape_rep) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "cuda plan: out of memory for %d tensors", m->n_tensors);
    goto fail;
  }
  int eb = prec == DPT_CUDA_MIXED ? 2 : 4;
  size_t largest = 0;
  for (int i = 0; i < m->n_tensors; i++) {
    const struct dpt_tensor_desc *d = &m->tensors[i];
    struct dpt_cuda_tensor_plan *t = &plan->t[i];
    t->n = batch;
    t->c = d->c;
    t->h = d->h;
    t->w = d->w;
    /* Mixed precision keeps FC outputs (the logits) in fp32: cuBLAS writes fp32
     * from fp16 inputs, the loss and the bias gradient run in fp32. */
    int fc_out = d->producer >= 0 && m->layers[d->producer].type == DPT_LAYER_FC;
    t->c_stored = dpt_cuda_stored_channels(d->c, i == 0, prec);
    t->nhwc = prec == DPT_CUDA_MIXED && !fc_out;
    t->elem_bytes = fc_out ? 4 : eb;
    t->bytes = (size_t)batch * t->c_stored * d->h * d->w * t->elem_bytes;
    plan->act_bytes += t->bytes;
    if (i > 0 || need_input_grad) plan->diff_bytes += t->bytes;
    if (t->bytes > largest) largest = t->bytes;
  }
  plan->scratch_bytes = largest;

  for (int li = 0; li < m->n_layers; li++) {
    const struct dpt_layer_desc *l = &m->layers[li];
    if (l->in[0] < 0 || l->in[0] >= m->n_tensors || l->out <= 0 || l->out >= m->n_tensors) {
      rc = dpt_err_set(err, DPT_E_INPUT, "cuda plan: layer %d '%s' refers to tensor %d/%d of %d",
                       li, l->name, l->in[0], l->out, m->n_tensors);
      goto fail;
    }
    if (l->type == DPT_LAYER_BN) plan->bn_saved_bytes += 2 * (size_t)l->c_out * sizeof(float);
    if (prec == DPT_CUDA_MIXED && (l->type == DPT_LAYER_CONV || l->type == DPT_LAYER_FC)) {
      size_t wl = l->w_len;
      if (l->type == DPT_LAYER_CONV)
        wl = (size_t)l->c_out * plan->t[l->in[0]].c_stored * l->kernel * l->kernel;
      plan->half_weight_bytes += 2 * wl * 2; /* weights + weight gradients, fp16 */
    }
    if (l->type != DPT_LAYER_CONV) continue;
    const struct dpt_cuda_tensor_plan *x = &plan->t[l->in[0]], *y = &plan->t[l->out];
    struct dpt_cuda_conv_plan *c = &plan->conv[plan->n_conv];
    c->layer = li;
    c->n = batch;
    c->c = x->c_stored;
    c->c_logical = x->c;
    c->h = x->h;
    c->w = x->w;
    c->k = l->c_out;
    c->r = c->s = l->kernel;
    c->stride = l->stride;
    c->pad = l->pad;
    /* cuDNN: out = 1 + (in + 2 pad - ((filter - 1) * dilation + 1)) / stride */
    c->p = 1 + (x->h + 2 * l->pad - l->kernel) / l->stride;
    c->q = 1 + (x->w + 2 * l->pad - l->kernel) / l->stride;
    if (x->c != l->c_in || y->c != l->c_out || c->p != y->h || c->q != y->w) {
      rc = dpt_err_set(err, DPT_E_INPUT,
                       "cuda plan: convolution '%s': input [%d,%d,%d,%d], filter [%d,%d,%d,%d] "
                       "stride %d pad %d gives [%d,%d,%d,%d] in cuDNN but the model says "
                       "[%d,%d,%d,%d]", l->name, batch, x->c, x->h, x->w, l->c_out, l->c_in,
                       l->kernel, l->kernel, l->stride, l->pad, batch, l->c_out, c->p, c->q,
                       batch, y->c, y->h, y->w);
      goto fail;
    }
    if (prec == DPT_CUDA_MIXED)
      c->tensor_core = c->c % DPT_CUDA_CHANNEL_MULTIPLE == 0 && c->k % DPT_CUDA_CHANNEL_MULTIPLE == 0;
    else
      c->tensor_core = prec == DPT_CUDA_TF32;
    c->shape_id = -1;
    for (int s = 0; s < plan->n_shapes; s++)
      if (same_shape(c, &plan->conv[plan->shape_rep[s]])) {
        c->shape_id = s;
        break;
      }
    if (c->shape_id < 0) {
      c->shape_id = plan->n_shapes;
      plan->shape_rep[plan->n_shapes++] = plan->n_conv;
    }
    plan->n_conv++;
  }
  plan->param_bytes = plan->grad_bytes = m->n_params * sizeof(float);
  plan->state_bytes = m->n_state * sizeof(float);
  {
    const struct dpt_cuda_tensor_plan *in = &plan->t[0];
    const struct dpt_cuda_tensor_plan *out = &plan->t[m->layers[m->n_layers - 1].out];
    size_t nin = (size_t)batch * in->c * in->h * in->w, nout = (size_t)batch * out->c * out->h * out->w;
    plan->io_bytes = (nin * (need_input_grad ? 2 : 1) + 2 * nout) * sizeof(float);
  }
  plan->total_bytes = plan->param_bytes + plan->grad_bytes + plan->state_bytes + plan->act_bytes +
                      plan->diff_bytes + plan->scratch_bytes + plan->half_weight_bytes +
                      plan->bn_saved_bytes + plan->io_bytes;
  return 0;
fail:
  dpt_cuda_plan_free(plan);
  return rc;
}

int dpt_cuda_pick_algo(const struct dpt_cuda_algo_cand *c, int n, size_t ws_limit, int need_det)
{
  int best = -1;
  for (int i = 0; i < n; i++) {
    if (!c[i].ok || c[i].memory > ws_limit || (need_det && !c[i].deterministic)) continue;
    if (best < 0) {
      best = i;
      continue;
    }
    /* Unknown times (heuristics): cuDNN's order is the preference. */
    if (c[i].time_ms >= 0 && c[best].time_ms >= 0 && c[i].time_ms < c[best].time_ms) best = i;
  }
  return best;
}

size_t dpt_cuda_workspace_limit(size_t free_bytes, size_t planned_bytes, size_t cap)
{
  size_t reserve = free_bytes / 16;
  if (reserve < ((size_t)64 << 20)) reserve = (size_t)64 << 20;
  size_t lim = free_bytes > planned_bytes + reserve ? free_bytes - planned_bytes - reserve : 0;
  if (cap && lim > cap) lim = cap;
  return lim;
}

void dpt_loss_scaler_init(struct dpt_loss_scaler *s)
{
  s->scale = 65536.0f;
  s->growth = 2.0f;
  s->backoff = 0.5f;
  s->growth_interval = 2000;
  s->min_scale = 1.0f;
  s->max_scale = 16777216.0f;
  s->good_steps = 0;
  s->skipped = 0;
}

int dpt_loss_scaler_update(struct dpt_loss_scaler *s, int overflow)
{
  if (overflow) {
    s->scale *= s->backoff;
    if (s->scale < s->min_scale) s->scale = s->min_scale;
    s->good_steps = 0;
    s->skipped++;
    return 0;
  }
  if (++s->good_steps >= s->growth_interval) {
    s->scale *= s->growth;
    if (s->scale > s->max_scale) s->scale = s->max_scale;
    s->good_steps = 0;
  }
  return 1;
}
