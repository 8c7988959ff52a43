/* dpt_cuda_plan.c — host-side planning for the CUDA backend (see dpt_cuda_plan.h). */
#include "dpt_cuda_plan.h"

#include "dpt_cuda_fuse.h"
#include "dpt_data.h" /* struct dpt_input_format */

#include <stdlib.h>
#include <string.h>

int dpt_cuda_precision_parse(const char *s)
{
  if (!s) return -1;
  if (!strcmp(s, "fp32")) return DPT_CUDA_FP32;
  if (!strcmp(s, "tf32")) return DPT_CUDA_TF32;
  if (!strcmp(s, "mixed") || !strcmp(s, "fp16")) return DPT_CUDA_MIXED;
  if (!strcmp(s, "bf16")) return DPT_CUDA_BF16;
  return -1;
}

const char *dpt_cuda_precision_name(enum dpt_cuda_precision p)
{
  switch (p) {
  case DPT_CUDA_FP32: return "fp32";
  case DPT_CUDA_TF32: return "tf32";
  case DPT_CUDA_MIXED: return "mixed";
  case DPT_CUDA_BF16: return "bf16";
  }
  return "?";
}

int dpt_cuda_precision_half(enum dpt_cuda_precision p)
{
  return p == DPT_CUDA_MIXED || p == DPT_CUDA_BF16;
}

int dpt_cuda_stored_channels(int c, int is_network_input, enum dpt_cuda_precision p)
{
  if (!dpt_cuda_precision_half(p) || !is_network_input) return c;
  return (c + DPT_CUDA_CHANNEL_MULTIPLE - 1) / DPT_CUDA_CHANNEL_MULTIPLE * DPT_CUDA_CHANNEL_MULTIPLE;
}

const char *dpt_cuda_region_name(enum dpt_cuda_region r)
{
  static const char *const n[DPT_CUDA_NREGIONS] = {
      "parameter slab", "gradient slab", "state slab", "SGD momentum and weight-decay mask",
      "activations, gradients and scratch (liveness arena)", "FC gradient cast", "weight copies",
      "batch-norm saved statistics", "input/output staging", "loss buffers"};
  return r >= 0 && r < DPT_CUDA_NREGIONS ? n[r] : "?";
}

void dpt_cuda_plan_free(struct dpt_cuda_plan *plan)
{
  if (!plan) return;
  free(plan->t);
  free(plan->conv);
  free(plan->shape_rep);
  free(plan->wcopy_off);
  free(plan->scratch_off);
  free(plan->discard_off);
  if (plan->fuse) dpt_cuda_fuse_free(plan->fuse);
  free(plan->fuse);
  memset(plan, 0, sizeof *plan);
}

void dpt_cuda_plan_input_format(const struct dpt_cuda_plan *plan, struct dpt_input_format *f)
{
  const struct dpt_cuda_tensor_plan *x = &plan->t[0];
  memset(f, 0, sizeof *f);
  f->layout = x->nhwc ? DPT_DATA_NHWC : DPT_DATA_NCHW;
  f->dtype = x->elem_bytes == 4 ? DPT_DATA_F32 : plan->precision == DPT_CUDA_BF16 ? DPT_DATA_BF16 : DPT_DATA_F16;
  f->batch = x->n;
  f->c = x->c;
  f->c_stored = x->c_stored;
  f->h = x->h;
  f->w = x->w;
  f->device = -1;
}

static int same_shape(const struct dpt_cuda_conv_plan *a, const struct dpt_cuda_conv_plan *b)
{
  return a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w && a->k == b->k &&
         a->r == b->r && a->s == b->s && a->stride == b->stride && a->pad == b->pad;
}

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

size_t dpt_cuda_arena_place(int n, const size_t *bytes, const int *lo, const int *hi, size_t align,
                            size_t *off)
{
  int *order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order), *placed = calloc((size_t)(n > 0 ? n : 1), sizeof *placed);
  size_t top = 0;
  if (!order || !placed) { /* no memory to plan with: everything side by side (still correct) */
    for (int i = 0; i < n; i++) {
      off[i] = top;
      top += lo[i] <= hi[i] ? align_up(bytes[i], align) : 0;
    }
    free(order);
    free(placed);
    return top;
  }
  for (int i = 0; i < n; i++) order[i] = i;
  for (int a = 1; a < n; a++) /* largest first, then earliest (stable insertion sort) */
    for (int b = a; b > 0 && bytes[order[b]] > bytes[order[b - 1]]; b--) {
      int x = order[b];
      order[b] = order[b - 1];
      order[b - 1] = x;
    }
  for (int a = 0; a < n; a++) {
    int i = order[a];
    off[i] = 0;
    if (lo[i] > hi[i]) continue;
    size_t sz = align_up(bytes[i] ? bytes[i] : 1, align), cand = 0;
    for (int moved = 1; moved;) { /* lowest offset clear of every placed buffer live with i */
      moved = 0;
      for (int b = 0; b < a; b++) {
        int j = order[b];
        if (!placed[j] || hi[j] < lo[i] || hi[i] < lo[j]) continue;
        size_t js = align_up(bytes[j] ? bytes[j] : 1, align);
        if (cand < off[j] + js && off[j] < cand + sz) {
          cand = off[j] + js;
          moved = 1;
        }
      }
    }
    off[i] = cand;
    placed[i] = 1;
    if (cand + sz > top) top = cand + sz;
  }
  free(order);
  free(placed);
  return top;
}

/* Which activations backward reads (the cuDNN calls of dpt_backend_cuda.c):
 * conv, BN, FC: their input; BN+ReLU, ReLU, add+ReLU: their output (the ReLU
 * mask); ReLU and pooling: input and output (cudnnActivationBackward /
 * cudnnPoolingBackward take both). */
static void backward_reads(const struct dpt_layer_desc *l, int *in, int *out)
{
  *in = l->type == DPT_LAYER_CONV || l->type == DPT_LAYER_BN || l->type == DPT_LAYER_FC ||
        l->type == DPT_LAYER_RELU || l->type == DPT_LAYER_MAXPOOL || l->type == DPT_LAYER_GAP;
  *out = ((l->type == DPT_LAYER_BN || l->type == DPT_LAYER_ADD) && l->relu) || l->type == DPT_LAYER_RELU ||
         l->type == DPT_LAYER_MAXPOOL || l->type == DPT_LAYER_GAP;
}

/* Lifetimes on the step axis: forward of layer i is step i, its backward step
 * 2L-1-i.  An activation lives from its producer's forward (the input: step 0)
 * to its last reader (forward consumers; backward readers; the logits: the
 * loss after the forward, step L).  A gradient lives from the backward of the
 * tensor's last consumer (its first writer; the logits' from step L) to the
 * backward of its producer (the input's: to the end, 2L). */
static void lifetimes(const struct dpt_model *m, struct dpt_cuda_plan *plan, int need_input_grad)
{
  int L = m->n_layers, o = m->layers[L - 1].out;
  for (int t = 0; t < m->n_tensors; t++) {
    struct dpt_cuda_tensor_plan *tp = &plan->t[t];
    int p = m->tensors[t].producer;
    tp->act_lo = p < 0 ? 0 : p;
    tp->act_hi = t == o ? L : tp->act_lo;
    tp->diff_lo = t == o ? L : 2 * L;
    tp->diff_hi = p < 0 ? 2 * L : 2 * L - 1 - p;
    tp->keep = 0;
  }
  for (int i = 0; i < L; i++) {
    const struct dpt_layer_desc *l = &m->layers[i];
    int rin, rout;
    backward_reads(l, &rin, &rout);
    for (int k = 0; k < 2; k++) {
      int t = l->in[k];
      if (t < 0) continue;
      struct dpt_cuda_tensor_plan *tp = &plan->t[t];
      if (i > tp->act_hi) tp->act_hi = i;
      if (rin && k == 0) {
        tp->keep = 1;
        if (2 * L - 1 - i > tp->act_hi) tp->act_hi = 2 * L - 1 - i;
      }
      if (2 * L - 1 - i < tp->diff_lo) tp->diff_lo = 2 * L - 1 - i;
    }
    if (rout) {
      struct dpt_cuda_tensor_plan *tp = &plan->t[l->out];
      tp->keep = 1;
      if (2 * L - 1 - i > tp->act_hi) tp->act_hi = 2 * L - 1 - i;
    }
  }
  if (!need_input_grad) plan->t[0].diff_lo = 2 * L + 1, plan->t[0].diff_hi = 0; /* none */
}

/* The same axis for the fused step: the tensors the fusion plan's ops write and read.  A
 * forward op named after layer i runs at step i, a backward op named after layer i at step
 * 2L-1-i (dpt_backend_backward_walk runs it there); an activation lives from its writer to its
 * last reader (the logits: the loss, step L), a gradient from its first writer (the logits':
 * the loss) to its last reader or writer (the input's: the end, 2L).  Tensors no op writes
 * (act_lo > act_hi, diff_lo > diff_hi) get no arena space. */
static void fused_lifetimes(const struct dpt_model *m, const struct dpt_fuse_plan *fp, struct dpt_cuda_plan *plan,
                            int need_input_grad)
{
  int L = m->n_layers, o = m->layers[L - 1].out;
  for (int t = 0; t < m->n_tensors; t++) {
    struct dpt_cuda_tensor_plan *tp = &plan->t[t];
    tp->act_lo = 2 * L + 1, tp->act_hi = -1;
    tp->diff_lo = 2 * L + 1, tp->diff_hi = -1;
    tp->keep = 0;
  }
  plan->t[0].act_lo = 0;
  plan->t[0].act_hi = 0;
  for (int i = 0; i < fp->n_ops; i++) {
    const struct dpt_fop *op = &fp->ops[i];
    int step = op->backward ? 2 * L - 1 - op->layer : op->layer;
    for (int k = 0; k < op->n_in + op->n_out; k++) {
      const struct dpt_fref *r = k < op->n_in ? &op->in[k] : &op->out[k - op->n_in];
      int write = k >= op->n_in;
      if (r->kind != DPT_FREF_ACT && r->kind != DPT_FREF_DIFF) continue;
      struct dpt_cuda_tensor_plan *tp = &plan->t[r->id];
      int *lo = r->kind == DPT_FREF_ACT ? &tp->act_lo : &tp->diff_lo, *hi = r->kind == DPT_FREF_ACT ? &tp->act_hi
                                                                                                   : &tp->diff_hi;
      if (write && step < *lo) *lo = step;
      if (step > *hi) *hi = step;
      if (r->kind == DPT_FREF_ACT && op->backward && !write) tp->keep = 1;
    }
  }
  struct dpt_cuda_tensor_plan *lt = &plan->t[o];
  if (lt->act_hi < L) lt->act_hi = L; /* the loss reads the logits */
  if (lt->diff_lo > L) lt->diff_lo = L; /* and writes their gradient */
  if (lt->diff_hi < L) lt->diff_hi = L;
  if (need_input_grad) {
    if (plan->t[0].diff_lo > 2 * L) plan->t[0].diff_lo = 2 * L;
    plan->t[0].diff_hi = 2 * L;
  }
}

/* Layer i's backward is one legacy op of the fusion plan. */
static int fp_legacy_bwd(const struct dpt_fuse_plan *fp, int i)
{
  return fp->bwd_n[i] == 1 && fp->ops[fp->bwd_first[i]].kind == DPT_FOP_LEGACY_BWD;
}

int dpt_cuda_fuse_channel_multiple(enum dpt_cuda_precision p)
{
  return dpt_cuda_precision_half(p) ? DPT_CUDA_CHANNEL_MULTIPLE : 4;
}

#define ARENA_ALIGN 256

int dpt_cuda_layout_nchw(const char *layout, enum dpt_cuda_precision p)
{
  if (!layout || !*layout || !strcmp(layout, "auto")) return p == DPT_CUDA_FP32;
  if (!strcmp(layout, "nhwc")) return 0;
  if (!strcmp(layout, "nchw")) return 1;
  return -1;
}

int dpt_cuda_plan_build(const struct dpt_model *m, int batch, enum dpt_cuda_precision prec,
                        int need_input_grad, struct dpt_cuda_plan *plan, struct dpt_err *err)
{
  return dpt_cuda_plan_build_ex(m, batch, prec, need_input_grad, NULL, plan, err);
}

int dpt_cuda_plan_build_ex(const struct dpt_model *m, int batch, enum dpt_cuda_precision prec, int need_input_grad,
                           const struct dpt_cuda_plan_opts *po, struct dpt_cuda_plan *plan, struct dpt_err *err)
{
  int rc = 0;
  size_t *sz = NULL, *off = NULL;
  int *lo = NULL, *hi = NULL;
  memset(plan, 0, sizeof *plan);
  if (batch < 1) return dpt_err_set(err, DPT_E_INPUT, "cuda plan: batch size %d < 1", batch);
  if (m->n_layers < 1 || m->n_tensors < 2)
    return dpt_err_set(err, DPT_E_INPUT, "cuda plan: the model has no layers");
  int half = dpt_cuda_precision_half(prec);
  plan->precision = prec;
  plan->batch = batch;
  plan->bn_persistent_train = half;
  plan->nchw = po && po->fp32_nchw && !po->fuse && !half;
  plan->n_tensors = m->n_tensors;
  plan->n_steps = 2 * m->n_layers;
  plan->t = calloc((size_t)m->n_tensors, sizeof *plan->t);
  plan->conv = calloc((size_t)(m->n_conv > 0 ? m->n_conv : 1), sizeof *plan->conv);
  plan->shape_rep = calloc((size_t)(m->n_conv > 0 ? m->n_conv : 1), sizeof *plan->shape_rep);
  plan->wcopy_off = malloc((size_t)m->n_layers * sizeof *plan->wcopy_off);
  plan->scratch_off = malloc((size_t)m->n_layers * sizeof *plan->scratch_off);
  plan->discard_off = malloc((size_t)m->n_layers * sizeof *plan->discard_off);
  size_t nbuf = 2 * (size_t)m->n_tensors + 2 * (size_t)m->n_layers;
  sz = calloc(nbuf, sizeof *sz);
  off = malloc(nbuf * sizeof *off);
  lo = calloc(nbuf, sizeof *lo);
  hi = calloc(nbuf, sizeof *hi);
  if (!plan->t || !plan->conv || !plan->shape_rep || !plan->wcopy_off || !plan->scratch_off || !plan->discard_off ||
      !sz || !off || !lo || !hi) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "cuda plan: out of memory for %d tensors", m->n_tensors);
    goto fail;
  }
  int eb = half ? 2 : 4;
  size_t largest = 0;
  for (int i = 0; i < m->n_tensors; i++) {
    const struct dpt_tensor_desc *d = &m->tensors[i];
    struct dpt_cuda_tensor_plan *t = &plan->t[i];
    t->n = batch;
    t->c = d->c;
    t->h = d->h;
    t->w = d->w;
    /* The FC output (the logits) stays fp32 at every precision: cuBLAS writes
     * fp32 from 16-bit inputs, the loss and the bias gradient run in fp32. */
    int fc_out = d->producer >= 0 && m->layers[d->producer].type == DPT_LAYER_FC;
    t->c_stored = dpt_cuda_stored_channels(d->c, i == 0, prec);
    t->nhwc = !plan->nchw;
    t->elem_bytes = fc_out ? 4 : eb;
    t->bytes = (size_t)batch * t->c_stored * d->h * d->w * t->elem_bytes;
    plan->act_bytes += t->bytes;
    if (i > 0 || need_input_grad) plan->diff_bytes += t->bytes;
    if (t->bytes > largest) largest = t->bytes;
  }
  plan->scratch_bytes = largest;

  size_t wgrad = 0;
  for (int li = 0; li < m->n_layers; li++) {
    const struct dpt_layer_desc *l = &m->layers[li];
    plan->wcopy_off[li] = (size_t)-1;
    if (l->in[0] < 0 || l->in[0] >= m->n_tensors || l->out <= 0 || l->out >= m->n_tensors) {
      rc = dpt_err_set(err, DPT_E_INPUT, "cuda plan: layer %d '%s' refers to tensor %d/%d of %d",
                       li, l->name, l->in[0], l->out, m->n_tensors);
      goto fail;
    }
    if (l->type == DPT_LAYER_BN) plan->bn_saved_bytes += 2 * (size_t)l->c_out * sizeof(float);
    if (l->type == DPT_LAYER_FC && half) { /* 16-bit FC weights (fp32 uses the slab) */
      plan->wcopy_off[li] = plan->weight_copy_bytes;
      plan->weight_copy_bytes += align_up(l->w_len * 2, ARENA_ALIGN);
      plan->half_weight_bytes += l->w_len * 2;
    }
    if (l->type != DPT_LAYER_CONV) continue;
    /* every NHWC conv: its KRSC weights in the compute type (cast / transposed each forward) and
     * the shared KRSC weight-gradient buffer; NCHW fp32 reads and writes the slabs' KCRS in place */
    size_t wl = (size_t)l->c_out * plan->t[l->in[0]].c_stored * l->kernel * l->kernel * (size_t)eb;
    if (!plan->nchw) {
      plan->wcopy_off[li] = plan->weight_copy_bytes;
      plan->weight_copy_bytes += align_up(wl, ARENA_ALIGN);
      if (half) plan->half_weight_bytes += 2 * wl;
      if (wl > wgrad) wgrad = wl;
    }
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
    if (half)
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
  plan->wgrad_off = plan->weight_copy_bytes;
  plan->weight_copy_bytes += align_up(wgrad ? wgrad : 1, ARENA_ALIGN);

  /* the liveness arena: activations, gradients and each layer's backward scratch (live
   * during that layer's backward step only), placed together */
  if (po && po->fuse) {
    struct dpt_fuse_cfg fc;
    dpt_cuda_fuse_cfg_default(&fc);
    fc.channel_multiple = dpt_cuda_fuse_channel_multiple(prec);
    fc.input_c_stored = plan->t[0].c_stored;
    fc.need_input_grad = need_input_grad;
    fc.batch = batch;
    fc.elem_bytes = eb;
    fc.legacy = po->legacy;
    if (!(plan->fuse = calloc(1, sizeof *plan->fuse))) {
      rc = dpt_err_set(err, DPT_E_NOMEM, "cuda plan: out of memory for the fusion plan");
      goto fail;
    }
    if ((rc = dpt_cuda_fuse_build(m, &fc, plan->fuse, err))) {
      free(plan->fuse);
      plan->fuse = NULL;
      dpt_err_prefix(err, "cuda plan (fused step)");
      goto fail;
    }
    fused_lifetimes(m, plan->fuse, plan, need_input_grad);
    for (int i = 0; i < m->n_layers; i++)
      if (m->layers[i].type == DPT_LAYER_BN)
        plan->bn_fused_bytes += DPT_CUDA_BN_FUSED_VECS * (size_t)m->layers[i].c_out * sizeof(float);
    plan->bn_next_off = align_up(plan->bn_saved_bytes + plan->bn_fused_bytes, ARENA_ALIGN);
    plan->bn_fused_bytes = plan->bn_next_off - plan->bn_saved_bytes + m->n_state * sizeof(float);
  } else {
    lifetimes(m, plan, need_input_grad);
  }
  int nt = m->n_tensors, L = m->n_layers;
  for (int i = 0; i < nt; i++) {
    const struct dpt_cuda_tensor_plan *t = &plan->t[i];
    sz[i] = sz[nt + i] = t->bytes;
    lo[i] = t->act_lo, hi[i] = t->act_hi;
    lo[nt + i] = t->diff_lo, hi[nt + i] = t->diff_hi;
  }
  for (int i = 0; i < L; i++) {
    const struct dpt_layer_desc *l = &m->layers[i];
    /* the fused step: only a layer whose backward stays on the legacy calls has them */
    int legacy_bwd = !plan->fuse || fp_legacy_bwd(plan->fuse, i);
    /* BN+ReLU's backward masks into the scratch; an add's does it in one pass into its inputs'
     * gradients (dpt_cuda_add_bwd), except an add of a tensor to itself */
    int relu = ((l->type == DPT_LAYER_BN && l->relu) || (l->type == DPT_LAYER_ADD && l->relu && l->in[0] == l->in[1])) &&
               legacy_bwd;
    int discard = l->type == DPT_LAYER_BN && plan->t[l->in[0]].diff_lo > plan->t[l->in[0]].diff_hi && legacy_bwd;
    size_t *b = sz + 2 * nt + 2 * i;
    int *a = lo + 2 * nt + 2 * i, *z = hi + 2 * nt + 2 * i;
    b[0] = plan->t[l->out].bytes, a[0] = relu ? 2 * L - 1 - i : 1, z[0] = relu ? 2 * L - 1 - i : 0;
    b[1] = plan->t[l->in[0]].bytes, a[1] = discard ? 2 * L - 1 - i : 1, z[1] = discard ? 2 * L - 1 - i : 0;
  }
  plan->arena_bytes = dpt_cuda_arena_place((int)nbuf, sz, lo, hi, ARENA_ALIGN, off);
  for (int i = 0; i < nt; i++) {
    plan->t[i].act_off = off[i];
    plan->t[i].diff_off = off[nt + i];
  }
  for (int i = 0; i < L; i++) {
    plan->scratch_off[i] = lo[2 * nt + 2 * i] <= hi[2 * nt + 2 * i] ? off[2 * nt + 2 * i] : (size_t)-1;
    plan->discard_off[i] = lo[2 * nt + 2 * i + 1] <= hi[2 * nt + 2 * i + 1] ? off[2 * nt + 2 * i + 1] : (size_t)-1;
  }

  plan->param_bytes = plan->grad_bytes = m->n_params * sizeof(float);
  plan->state_bytes = m->n_state * sizeof(float);
  plan->sgd_bytes = m->n_params * (sizeof(float) + 1);
  {
    const struct dpt_cuda_tensor_plan *in = &plan->t[0];
    const struct dpt_cuda_tensor_plan *out = &plan->t[m->layers[m->n_layers - 1].out];
    size_t nin = (size_t)batch * in->c * in->h * in->w, nout = (size_t)batch * out->c * out->h * out->w;
    plan->io_bytes = (nin * (need_input_grad ? 2 : 1) + 2 * nout) * sizeof(float);
  }
  /* labels [N], ranks [N], row losses [N] (4 bytes each), then 256 bytes at a 16-byte
   * boundary: the overflow flag, the loss totals (4 doubles) and the loss scaler
   * (struct dpt_loss_scaler) the device keeps (dpt_backend_cuda.c) */
  plan->loss_bytes = (size_t)batch * 12 + 16 + 256;
  size_t *r = plan->region;
  r[DPT_CUDA_R_PARAMS] = plan->param_bytes ? plan->param_bytes : 4;
  r[DPT_CUDA_R_GRADS] = plan->grad_bytes ? plan->grad_bytes : 4;
  r[DPT_CUDA_R_STATE] = plan->state_bytes ? plan->state_bytes : 4;
  r[DPT_CUDA_R_SGD] = align_up(plan->param_bytes, ARENA_ALIGN) + (m->n_params ? m->n_params : 1);
  r[DPT_CUDA_R_ARENA] = plan->arena_bytes;
  plan->fc_cast_bytes = 0;
  for (int i = 0; i < L; i++)
    if (m->layers[i].type == DPT_LAYER_FC && half) plan->fc_cast_bytes += align_up(plan->t[m->layers[i].out].bytes / 2, ARENA_ALIGN);
  r[DPT_CUDA_R_SCRATCH] = plan->fc_cast_bytes ? plan->fc_cast_bytes : ARENA_ALIGN;
  r[DPT_CUDA_R_WEIGHTS] = plan->weight_copy_bytes;
  r[DPT_CUDA_R_BN] = plan->bn_saved_bytes + plan->bn_fused_bytes ? plan->bn_saved_bytes + plan->bn_fused_bytes : 4;
  r[DPT_CUDA_R_STAGING] = plan->io_bytes;
  r[DPT_CUDA_R_LOSS] = plan->loss_bytes;
  for (int i = 0; i < DPT_CUDA_NREGIONS; i++) plan->total_bytes += r[i];
  free(sz), free(off), free(lo), free(hi);
  return 0;
fail:
  free(sz), free(off), free(lo), free(hi);
  dpt_cuda_plan_free(plan);
  return rc;
}

int dpt_cuda_plan_fit(const struct dpt_model *m, enum dpt_cuda_precision prec, int need_input_grad,
                      int want, size_t free_bytes, size_t reserve, size_t *need, struct dpt_err *err)
{
  return dpt_cuda_plan_fit_ex(m, prec, need_input_grad, NULL, want, free_bytes, reserve, need, err);
}

int dpt_cuda_plan_fit_ex(const struct dpt_model *m, enum dpt_cuda_precision prec, int need_input_grad,
                         const struct dpt_cuda_plan_opts *po, int want, size_t free_bytes, size_t reserve,
                         size_t *need, struct dpt_err *err)
{
  struct dpt_cuda_plan p;
  int rc;
  if ((rc = dpt_cuda_plan_build_ex(m, want, prec, need_input_grad, po, &p, err))) return rc;
  *need = p.total_bytes + reserve;
  dpt_cuda_plan_free(&p);
  if (*need <= free_bytes) return want;
  int lo = 0, hi = want; /* lo fits (0: nothing), hi does not */
  while (hi - lo > 1) {
    int mid = lo + (hi - lo) / 2;
    if ((rc = dpt_cuda_plan_build_ex(m, mid, prec, need_input_grad, po, &p, err))) return rc;
    size_t b = p.total_bytes + reserve;
    dpt_cuda_plan_free(&p);
    if (b <= free_bytes) lo = mid;
    else hi = mid;
  }
  return lo;
}
int dpt_cuda_bn_ex_aligned(const struct dpt_model *m, int li, size_t saved_off)
{
  const struct dpt_layer_desc *l = &m->layers[li];
  return l->type == DPT_LAYER_BN && l->c_out % 4 == 0 && l->w_off % 4 == 0 && l->b_off % 4 == 0 &&
         l->s_off % 4 == 0 && saved_off % 4 == 0; /* in floats: 4 = 16 bytes; + C keeps it */
}

int dpt_cuda_pick_algo(const struct dpt_cuda_algo_cand *c, int n, size_t ws_limit, int oracle)
{
  int best = -1;
  for (int i = 0; i < n; i++) {
    if (!c[i].ok || c[i].memory > ws_limit || (oracle && (!c[i].deterministic || c[i].transform))) continue;
    if (best < 0) {
      best = i;
      continue;
    }
    /* Unknown times (heuristics): cuDNN's order is the preference. */
    if (c[i].time_ms >= 0 && c[best].time_ms >= 0 && c[i].time_ms < c[best].time_ms) best = i;
  }
  return best;
}

size_t dpt_cuda_region_gap(size_t region_bytes, const size_t *off, const size_t *len, int n, size_t need, size_t align)
{
  size_t at = 0; /* candidate start: moves past every busy range that overlaps [at, at + need) */
  for (;;) {
    at = (at + align - 1) & ~(align - 1);
    if (at > region_bytes || need > region_bytes - at) return (size_t)-1;
    int moved = 0;
    for (int i = 0; i < n; i++)
      if (len[i] && off[i] < at + need && at < off[i] + len[i]) {
        at = off[i] + len[i];
        moved = 1;
      }
    if (!moved) return at;
  }
}

size_t dpt_cuda_workspace_limit(size_t free_bytes, size_t planned_bytes, size_t cap)
{
  size_t reserve = free_bytes / 16;
  if (reserve < ((size_t)64 << 20)) reserve = (size_t)64 << 20;
  size_t lim = free_bytes > planned_bytes + reserve ? free_bytes - planned_bytes - reserve : 0;
  if (cap && lim > cap) lim = cap;
  return lim;
}
