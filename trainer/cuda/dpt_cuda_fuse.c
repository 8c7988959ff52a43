/* dpt_cuda_fuse.c — the fused-block plan of the GPU step (see dpt_cuda_fuse.h). */
#include "dpt_cuda_fuse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const fop_names[DPT_FOP_NKINDS] = {
    "conv_stats", "sbr_conv_stats", "bn_finalize", "sbr_apply", "sbar", "dsbar", "dbn_weight",
    "dbn_apply", "dgrad_drelu_dbn", "dgrad", "wgrad", "sbr_wgrad", "grad_acc", "legacy_fwd",
    "legacy_bwd"};

const char *dpt_fop_name(enum dpt_fop_kind k)
{
  return k >= 0 && k < DPT_FOP_NKINDS ? fop_names[k] : "?";
}

static const char *const fref_names[DPT_FREF_NKINDS] = {
    "act", "diff", "w", "dw", "bn_param", "bn_stats", "bn_eq", "bn_saved", "bn_dparam", "bn_deq"};

const char *dpt_fref_name(int k) { return k >= 0 && k < DPT_FREF_NKINDS ? fref_names[k] : "?"; }

void dpt_cuda_fuse_cfg_default(struct dpt_fuse_cfg *cfg)
{
  memset(cfg, 0, sizeof *cfg);
  cfg->fuse = 1;
  cfg->channel_multiple = 8;
  cfg->batch = 256;
  cfg->elem_bytes = 2;
}

void dpt_cuda_fuse_free(struct dpt_fuse_plan *plan)
{
  if (!plan) return;
  free(plan->ops);
  free(plan->conv_fused);
  free(plan->bn_mode);
  free(plan->act_written);
  free(plan->act_kept);
  free(plan->diff_written);
  free(plan->fwd_first);
  free(plan->fwd_n);
  free(plan->bwd_first);
  free(plan->bwd_n);
  memset(plan, 0, sizeof *plan);
}

/* ---- the model, checked and indexed ----------------------------------------- */

struct graph {
  const struct dpt_model *m;
  int *n_cons;   /* [n_tensors] reading slots */
  int *cons;     /* [n_tensors] the consumer layer when n_cons == 1 */
};

static int bad_layer(struct dpt_err *err, const struct dpt_model *m, int li, const char *fmt, const char *a,
                     long x, long y)
{
  char why[256];
  snprintf(why, sizeof why, fmt, a, x, y);
  return dpt_err_set(err, DPT_E_INPUT,
                     "fusion plan: layer %d '%s' (%s): %s: the model is inconsistent (build it with "
                     "dpt_model_resnet50 or the dpt_model_add_* functions)",
                     li, m->layers[li].name, dpt_layer_type_name(m->layers[li].type), why);
}

static int same_shape(const struct dpt_tensor_desc *a, const struct dpt_tensor_desc *b)
{
  return a->c == b->c && a->h == b->h && a->w == b->w;
}

static int graph_build(const struct dpt_model *m, struct graph *g, struct dpt_err *err)
{
  int nt = m->n_tensors, rc = 0;
  memset(g, 0, sizeof *g);
  g->m = m;
  if (m->n_layers < 1 || nt < 2)
    return dpt_err_set(err, DPT_E_INPUT, "fusion plan: the model has %d layers and %d tensors", m->n_layers, nt);
  g->n_cons = calloc((size_t)nt, sizeof *g->n_cons);
  g->cons = malloc((size_t)nt * sizeof *g->cons);
  if (!g->n_cons || !g->cons) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "fusion plan: out of memory for %d tensors", nt);
    goto fail;
  }
  for (int t = 0; t < nt; t++) g->cons[t] = -1;
  for (int li = 0; li < m->n_layers; li++) {
    const struct dpt_layer_desc *l = &m->layers[li];
    int nin = l->type == DPT_LAYER_ADD ? 2 : 1;
    if (l->type < 0 || l->type >= DPT_LAYER_NTYPES) {
      rc = bad_layer(err, m, li, "unknown layer type%s %ld%ld", "", l->type, 0);
      goto fail;
    }
    if (l->out <= 0 || l->out >= nt) {
      rc = bad_layer(err, m, li, "%soutput tensor %ld is not one of the %ld tensors", "", l->out, nt);
      goto fail;
    }
    if (m->tensors[l->out].producer != li) {
      rc = bad_layer(err, m, li, "%sits output tensor %ld names layer %ld as its producer", "", l->out,
                     m->tensors[l->out].producer);
      goto fail;
    }
    if (nin == 1 && l->in[1] >= 0) {
      rc = bad_layer(err, m, li, "%sa second input (tensor %ld) on a one-input layer%ld", "", l->in[1], 0);
      goto fail;
    }
    for (int k = 0; k < nin; k++) {
      int t = l->in[k];
      if (t < 0 || t >= nt) {
        rc = bad_layer(err, m, li, "%sinput tensor %ld is not one of the %ld tensors", "", t, nt);
        goto fail;
      }
      if (m->tensors[t].producer >= li || (t != 0 && m->tensors[t].producer < 0)) {
        rc = bad_layer(err, m, li, "%sinput tensor %ld is written by layer %ld, not before it", "", t,
                       m->tensors[t].producer);
        goto fail;
      }
      g->n_cons[t]++;
      g->cons[t] = li;
    }
    const struct dpt_tensor_desc *x = &m->tensors[l->in[0]], *y = &m->tensors[l->out];
    switch (l->type) {
    case DPT_LAYER_CONV:
      if (l->c_in != x->c || l->c_out != y->c) {
        rc = bad_layer(err, m, li, "%s%ld input channels in the layer, %ld in its input tensor", "", l->c_in, x->c);
        if (l->c_in == x->c) rc = bad_layer(err, m, li, "%s%ld output channels in the layer, %ld in its output tensor", "", l->c_out, y->c);
        goto fail;
      }
      if (l->kernel < 1 || l->stride < 1 || l->pad < 0) {
        rc = bad_layer(err, m, li, "%skernel %ld, stride %ld", "", l->kernel, l->stride);
        goto fail;
      }
      break;
    case DPT_LAYER_BN:
      if (l->c_out != x->c || !same_shape(x, y)) {
        rc = bad_layer(err, m, li, "%s%ld channels in the layer, %ld in its input tensor (or the output's shape differs)",
                       "", l->c_out, x->c);
        goto fail;
      }
      break;
    case DPT_LAYER_ADD:
      if (!same_shape(x, y) || !same_shape(&m->tensors[l->in[1]], y)) {
        rc = bad_layer(err, m, li, "%sadds tensors %ld and %ld of different shapes", "", l->in[0], l->in[1]);
        goto fail;
      }
      break;
    case DPT_LAYER_RELU:
      if (!same_shape(x, y)) {
        rc = bad_layer(err, m, li, "%sinput %ld and output %ld differ in shape", "", l->in[0], l->out);
        goto fail;
      }
      break;
    default:
      break;
    }
  }
  for (int t = 0; t < nt; t++) {
    int p = m->tensors[t].producer;
    int last = t == m->layers[m->n_layers - 1].out;
    if (m->tensors[t].n_consumers != g->n_cons[t]) {
      rc = bad_layer(err, m, p >= 0 ? p : 0, "%sits output tensor %ld says %ld readers", "", t, m->tensors[t].n_consumers);
      if (p < 0)
        rc = dpt_err_set(err, DPT_E_INPUT, "fusion plan: the input tensor says %d readers, the layers read it %d times",
                         m->tensors[t].n_consumers, g->n_cons[t]);
      goto fail;
    }
    if (!g->n_cons[t] && !last) {
      rc = bad_layer(err, m, p >= 0 ? p : 0, "%sits output tensor %ld is never read%ld", "", t, 0);
      goto fail;
    }
  }
  return 0;
fail:
  free(g->n_cons);
  free(g->cons);
  memset(g, 0, sizeof *g);
  return rc;
}

static void graph_free(struct graph *g)
{
  free(g->n_cons);
  free(g->cons);
}

/* ---- decisions ---------------------------------------------------------------- */

static int stored_c(const struct dpt_fuse_cfg *cfg, const struct dpt_model *m, int t)
{
  return t == 0 && cfg->input_c_stored > 0 ? cfg->input_c_stored : m->tensors[t].c;
}

/* The BN layer whose output is tensor t, or -1. */
static int bn_of(const struct dpt_model *m, int t)
{
  int p = m->tensors[t].producer;
  return p >= 0 && m->layers[p].type == DPT_LAYER_BN ? p : -1;
}

/* A residual add fused with the BN(s) applied on its inputs: 1 with the first such BN, the
 * second (-1: the other input is the identity shortcut `other`); 0 when the add is plain. */
static int fused_add(const struct dpt_fuse_plan *p, const struct dpt_model *m, const struct dpt_layer_desc *l, int *first,
                     int *second, int *other)
{
  int a = bn_of(m, l->in[0]), b = bn_of(m, l->in[1]);
  int fa = a >= 0 && p->bn_mode[a] == DPT_FBN_ADD, fb = b >= 0 && p->bn_mode[b] == DPT_FBN_ADD;
  *first = fa ? a : b;
  *second = fa && fb ? b : -1;
  *other = fa ? l->in[1] : l->in[0];
  return fa || fb;
}

static void decide(const struct graph *g, struct dpt_fuse_plan *plan)
{
  const struct dpt_model *m = g->m;
  const struct dpt_fuse_cfg *cfg = &plan->cfg;
  int cm = cfg->channel_multiple > 0 ? cfg->channel_multiple : 1;
  const unsigned char *keep = cfg->legacy; /* layers kept on the legacy calls (no engine here) */
  for (int li = 0; li < m->n_layers; li++) {
    const struct dpt_layer_desc *l = &m->layers[li];
    if (l->type != DPT_LAYER_CONV || !cfg->fuse) continue;
    int y = l->out;
    plan->conv_fused[li] = stored_c(cfg, m, l->in[0]) % cm == 0 && l->c_out % cm == 0 && g->n_cons[y] == 1 &&
                           m->layers[g->cons[y]].type == DPT_LAYER_BN && !(keep && (keep[li] || keep[g->cons[y]]));
  }
  for (int li = 0; li < m->n_layers; li++) {
    const struct dpt_layer_desc *l = &m->layers[li];
    if (l->type != DPT_LAYER_BN) continue;
    int p = m->tensors[l->in[0]].producer;
    if (!cfg->fuse || p < 0 || m->layers[p].type != DPT_LAYER_CONV || !plan->conv_fused[p] || (keep && keep[li])) {
      plan->bn_mode[li] = DPT_FBN_LEGACY;
      continue;
    }
    int z = l->out, c = g->n_cons[z] == 1 ? g->cons[z] : -1;
    if (c >= 0 && m->layers[c].type == DPT_LAYER_CONV && plan->conv_fused[c] && m->layers[c].in[0] == z)
      plan->bn_mode[li] = DPT_FBN_PROLOGUE;
    else if (c >= 0 && m->layers[c].type == DPT_LAYER_ADD && m->layers[c].in[0] != m->layers[c].in[1] &&
             !(keep && keep[c]))
      plan->bn_mode[li] = DPT_FBN_ADD;
    else
      plan->bn_mode[li] = DPT_FBN_APPLY;
  }
}

/* ---- op emission -------------------------------------------------------------- */

struct emit {
  struct dpt_fuse_plan *plan;
  int cap;
  int failed;
  const struct dpt_model *m;
};

static struct dpt_fop *op_new(struct emit *e, int kind, int backward, int layer)
{
  struct dpt_fuse_plan *p = e->plan;
  if (p->n_ops == e->cap) {
    int nc = e->cap ? 2 * e->cap : 64;
    struct dpt_fop *o = realloc(p->ops, (size_t)nc * sizeof *o);
    if (!o) {
      e->failed = 1;
      return NULL;
    }
    p->ops = o;
    e->cap = nc;
  }
  struct dpt_fop *op = &p->ops[p->n_ops++];
  memset(op, 0, sizeof *op);
  op->kind = kind;
  op->backward = backward;
  op->layer = layer;
  op->conv = -1;
  op->bn[0] = op->bn[1] = -1;
  return op;
}

static void rd(struct dpt_fop *op, int kind, int id)
{
  if (op && op->n_in < DPT_FOP_MAX_IN) op->in[op->n_in++] = (struct dpt_fref){kind, id};
}

static void wr(struct dpt_fop *op, int kind, int id)
{
  if (op && op->n_out < DPT_FOP_MAX_OUT) op->out[op->n_out++] = (struct dpt_fref){kind, id};
}

/* The op writes the gradient of tensor t: the first writer overwrites, later ones add (and read it). */
static void wr_diff(struct dpt_fop *op, struct dpt_fuse_plan *p, int t)
{
  if (!op) return;
  if (p->diff_written[t]) {
    rd(op, DPT_FREF_DIFF, t);
    op->accumulate = 1;
  }
  wr(op, DPT_FREF_DIFF, t);
  p->diff_written[t] = 1;
}

static int needs_grad(const struct dpt_fuse_plan *p, int t) { return t != 0 || p->cfg.need_input_grad; }

static void emit_forward(struct emit *e, const struct graph *g, int li)
{
  const struct dpt_model *m = g->m;
  struct dpt_fuse_plan *p = e->plan;
  const struct dpt_layer_desc *l = &m->layers[li];
  struct dpt_fop *op;
  switch (l->type) {
  case DPT_LAYER_CONV:
    if (p->conv_fused[li]) {
      int t = l->in[0], pb = bn_of(m, t), sb = g->cons[l->out];
      if (pb >= 0 && p->bn_mode[pb] == DPT_FBN_PROLOGUE) {
        op = op_new(e, DPT_FOP_SBR_CONV_STATS, 0, li);
        if (!op) return;
        op->bn[1] = pb;
        op->relu = m->layers[pb].relu;
        rd(op, DPT_FREF_ACT, m->layers[pb].in[0]);
        rd(op, DPT_FREF_BN_EQ, pb);
      } else {
        op = op_new(e, DPT_FOP_CONV_STATS, 0, li);
        if (!op) return;
        rd(op, DPT_FREF_ACT, t);
      }
      op->conv = li;
      op->bn[0] = sb;
      rd(op, DPT_FREF_W, li);
      wr(op, DPT_FREF_ACT, l->out);
      wr(op, DPT_FREF_BN_STATS, sb);
      return;
    }
    break;
  case DPT_LAYER_BN:
    if (p->bn_mode[li] != DPT_FBN_LEGACY) {
      op = op_new(e, DPT_FOP_BN_FINALIZE, 0, li);
      if (!op) return;
      op->bn[0] = li;
      rd(op, DPT_FREF_BN_STATS, li);
      rd(op, DPT_FREF_BN_PARAM, li);
      wr(op, DPT_FREF_BN_EQ, li);
      wr(op, DPT_FREF_BN_SAVED, li);
      wr(op, DPT_FREF_BN_PARAM, li); /* running mean / var */
      if (p->bn_mode[li] == DPT_FBN_APPLY) {
        op = op_new(e, DPT_FOP_SBR_APPLY, 0, li);
        if (!op) return;
        op->bn[0] = li;
        op->relu = l->relu;
        rd(op, DPT_FREF_ACT, l->in[0]);
        rd(op, DPT_FREF_BN_EQ, li);
        wr(op, DPT_FREF_ACT, l->out);
      }
      return;
    }
    op = op_new(e, DPT_FOP_LEGACY_FWD, 0, li);
    if (!op) return;
    op->bn[0] = li;
    rd(op, DPT_FREF_ACT, l->in[0]);
    rd(op, DPT_FREF_BN_PARAM, li);
    wr(op, DPT_FREF_ACT, l->out);
    wr(op, DPT_FREF_BN_SAVED, li);
    wr(op, DPT_FREF_BN_PARAM, li);
    return;
  case DPT_LAYER_ADD: {
    int first, second, other;
    if (fused_add(p, m, l, &first, &second, &other)) {
      op = op_new(e, second >= 0 ? DPT_FOP_DSBAR : DPT_FOP_SBAR, 0, li);
      if (!op) return;
      op->relu = l->relu;
      op->bn[0] = first;
      op->bn[1] = second;
      rd(op, DPT_FREF_ACT, m->layers[first].in[0]);
      rd(op, DPT_FREF_BN_EQ, first);
      if (second >= 0) {
        rd(op, DPT_FREF_ACT, m->layers[second].in[0]);
        rd(op, DPT_FREF_BN_EQ, second);
      } else {
        rd(op, DPT_FREF_ACT, other);
      }
      wr(op, DPT_FREF_ACT, l->out);
      return;
    }
    break;
  }
  default:
    break;
  }
  op = op_new(e, DPT_FOP_LEGACY_FWD, 0, li);
  if (!op) return;
  if (l->type == DPT_LAYER_CONV) op->conv = li;
  op->relu = l->relu;
  rd(op, DPT_FREF_ACT, l->in[0]);
  if (l->type == DPT_LAYER_ADD) rd(op, DPT_FREF_ACT, l->in[1]);
  if (l->type == DPT_LAYER_CONV || l->type == DPT_LAYER_FC) rd(op, DPT_FREF_W, li);
  wr(op, DPT_FREF_ACT, l->out);
}

/* dBN weight + apply of BN layer bn on gradient dy of its (ReLU'd) output y_t. */
static void emit_bwd_bn_apply(struct emit *e, int bn)
{
  const struct dpt_model *m = e->m;
  struct dpt_fuse_plan *p = e->plan;
  const struct dpt_layer_desc *l = &m->layers[bn];
  struct dpt_fop *op = op_new(e, DPT_FOP_DBN_WEIGHT, 1, bn);
  if (!op) return;
  op->bn[0] = bn;
  op->relu = l->relu;
  rd(op, DPT_FREF_DIFF, l->out);
  if (l->relu) rd(op, DPT_FREF_ACT, l->out);
  rd(op, DPT_FREF_ACT, l->in[0]);
  rd(op, DPT_FREF_BN_SAVED, bn);
  rd(op, DPT_FREF_BN_PARAM, bn);
  wr(op, DPT_FREF_BN_DPARAM, bn);
  wr(op, DPT_FREF_BN_DEQ, bn);
  op = op_new(e, DPT_FOP_DBN_APPLY, 1, bn);
  if (!op) return;
  op->bn[0] = bn;
  op->relu = l->relu;
  rd(op, DPT_FREF_DIFF, l->out);
  if (l->relu) rd(op, DPT_FREF_ACT, l->out);
  rd(op, DPT_FREF_ACT, l->in[0]);
  rd(op, DPT_FREF_BN_DEQ, bn);
  wr_diff(op, p, l->in[0]);
}

static void emit_bwd_add(struct emit *e, const struct graph *g, int li)
{
  const struct dpt_model *m = g->m;
  struct dpt_fuse_plan *p = e->plan;
  const struct dpt_layer_desc *l = &m->layers[li];
  int first, second, other;
  fused_add(p, m, l, &first, &second, &other);
  int dual = second >= 0, r_grad = !dual && needs_grad(p, other);
  int fork = dual || r_grad;
  struct dpt_fref gref = {DPT_FREF_DIFF, m->layers[first].out};
  int acc_to_r = 0;
  if (r_grad) {
    if (!p->diff_written[other]) gref.id = other; /* g is the shortcut's gradient: written in place */
    else acc_to_r = 1;
  }
  struct dpt_fop *op = op_new(e, DPT_FOP_DBN_WEIGHT, 1, li);
  if (!op) return;
  op->bn[0] = first;
  op->relu = l->relu;
  op->fork = fork;
  rd(op, DPT_FREF_DIFF, l->out);
  if (l->relu) rd(op, DPT_FREF_ACT, l->out);
  rd(op, DPT_FREF_ACT, m->layers[first].in[0]);
  rd(op, DPT_FREF_BN_SAVED, first);
  rd(op, DPT_FREF_BN_PARAM, first);
  if (fork) {
    wr(op, gref.kind, gref.id);
    p->diff_written[gref.id] = 1;
  }
  wr(op, DPT_FREF_BN_DPARAM, first);
  wr(op, DPT_FREF_BN_DEQ, first);
  if (dual) {
    op = op_new(e, DPT_FOP_DBN_WEIGHT, 1, li);
    if (!op) return;
    op->bn[0] = second;
    rd(op, gref.kind, gref.id);
    rd(op, DPT_FREF_ACT, m->layers[second].in[0]);
    rd(op, DPT_FREF_BN_SAVED, second);
    rd(op, DPT_FREF_BN_PARAM, second);
    wr(op, DPT_FREF_BN_DPARAM, second);
    wr(op, DPT_FREF_BN_DEQ, second);
  }
  for (int k = 0; k < (dual ? 2 : 1); k++) {
    int bn = k ? second : first;
    op = op_new(e, DPT_FOP_DBN_APPLY, 1, li);
    if (!op) return;
    op->bn[0] = bn;
    if (fork) {
      rd(op, gref.kind, gref.id);
    } else { /* g recomputed from the output gradient and the ReLU mask */
      op->relu = l->relu;
      rd(op, DPT_FREF_DIFF, l->out);
      if (l->relu) rd(op, DPT_FREF_ACT, l->out);
    }
    rd(op, DPT_FREF_ACT, m->layers[bn].in[0]);
    rd(op, DPT_FREF_BN_DEQ, bn);
    wr_diff(op, p, m->layers[bn].in[0]);
  }
  if (acc_to_r) {
    op = op_new(e, DPT_FOP_GRAD_ACC, 1, li);
    if (!op) return;
    rd(op, gref.kind, gref.id);
    wr_diff(op, p, other);
  }
}

static void emit_backward(struct emit *e, const struct graph *g, int li)
{
  const struct dpt_model *m = g->m;
  struct dpt_fuse_plan *p = e->plan;
  const struct dpt_layer_desc *l = &m->layers[li];
  struct dpt_fop *op;
  switch (l->type) {
  case DPT_LAYER_CONV:
    if (p->conv_fused[li]) {
      int t = l->in[0], pb = bn_of(m, t);
      if (pb >= 0 && p->bn_mode[pb] == DPT_FBN_PROLOGUE) {
        int x = m->layers[pb].in[0];
        op = op_new(e, DPT_FOP_SBR_WGRAD, 1, li);
        if (!op) return;
        op->conv = li;
        op->bn[0] = pb;
        op->relu = m->layers[pb].relu;
        rd(op, DPT_FREF_DIFF, l->out);
        rd(op, DPT_FREF_ACT, x);
        rd(op, DPT_FREF_BN_EQ, pb);
        wr(op, DPT_FREF_DW, li);
        op = op_new(e, DPT_FOP_DGRAD_DRELU_DBN, 1, li);
        if (!op) return;
        op->conv = li;
        op->bn[0] = pb;
        op->relu = m->layers[pb].relu;
        rd(op, DPT_FREF_DIFF, l->out);
        rd(op, DPT_FREF_W, li);
        rd(op, DPT_FREF_ACT, x);
        rd(op, DPT_FREF_BN_SAVED, pb);
        rd(op, DPT_FREF_BN_PARAM, pb);
        wr_diff(op, p, t); /* g: the BN output's gradient before its ReLU */
        wr(op, DPT_FREF_BN_DPARAM, pb);
        wr(op, DPT_FREF_BN_DEQ, pb);
        op = op_new(e, DPT_FOP_DBN_APPLY, 1, li);
        if (!op) return;
        op->bn[0] = pb;
        rd(op, DPT_FREF_DIFF, t);
        rd(op, DPT_FREF_ACT, x);
        rd(op, DPT_FREF_BN_DEQ, pb);
        wr_diff(op, p, x);
      } else {
        op = op_new(e, DPT_FOP_WGRAD, 1, li);
        if (!op) return;
        op->conv = li;
        rd(op, DPT_FREF_DIFF, l->out);
        rd(op, DPT_FREF_ACT, t);
        wr(op, DPT_FREF_DW, li);
        if (needs_grad(p, t)) {
          op = op_new(e, DPT_FOP_DGRAD, 1, li);
          if (!op) return;
          op->conv = li;
          rd(op, DPT_FREF_DIFF, l->out);
          rd(op, DPT_FREF_W, li);
          wr_diff(op, p, t);
        }
      }
      return;
    }
    break;
  case DPT_LAYER_BN:
    if (p->bn_mode[li] == DPT_FBN_PROLOGUE || p->bn_mode[li] == DPT_FBN_ADD) return; /* done by its reader */
    if (p->bn_mode[li] == DPT_FBN_APPLY) {
      emit_bwd_bn_apply(e, li);
      return;
    }
    break;
  case DPT_LAYER_ADD: {
    int first, second, other;
    if (fused_add(p, m, l, &first, &second, &other)) {
      emit_bwd_add(e, g, li);
      return;
    }
    break;
  }
  default:
    break;
  }
  /* legacy backward: what dpt_backend_cuda.c's layer reads and writes */
  op = op_new(e, DPT_FOP_LEGACY_BWD, 1, li);
  if (!op) return;
  if (l->type == DPT_LAYER_CONV) op->conv = li;
  if (l->type == DPT_LAYER_BN) op->bn[0] = li;
  op->relu = l->relu;
  rd(op, DPT_FREF_DIFF, l->out);
  int rin = l->type == DPT_LAYER_CONV || l->type == DPT_LAYER_BN || l->type == DPT_LAYER_FC ||
            l->type == DPT_LAYER_MAXPOOL || l->type == DPT_LAYER_GAP;
  int rout = ((l->type == DPT_LAYER_BN || l->type == DPT_LAYER_ADD) && l->relu) || l->type == DPT_LAYER_RELU ||
             l->type == DPT_LAYER_MAXPOOL || l->type == DPT_LAYER_GAP;
  if (rin) rd(op, DPT_FREF_ACT, l->in[0]);
  if (rout) rd(op, DPT_FREF_ACT, l->out);
  if (l->type == DPT_LAYER_CONV || l->type == DPT_LAYER_FC) rd(op, DPT_FREF_W, li);
  if (l->type == DPT_LAYER_BN) {
    rd(op, DPT_FREF_BN_SAVED, li);
    rd(op, DPT_FREF_BN_PARAM, li);
    wr(op, DPT_FREF_BN_DPARAM, li);
  }
  if (l->type == DPT_LAYER_CONV || l->type == DPT_LAYER_FC) wr(op, DPT_FREF_DW, li);
  for (int k = 0; k < (l->type == DPT_LAYER_ADD ? 2 : 1); k++) {
    if (needs_grad(p, l->in[k])) wr_diff(op, p, l->in[k]); /* (a legacy BN without: dx to a discard buffer) */
  }
}

/* ---- counts ------------------------------------------------------------------- */

static size_t tensor_bytes(const struct dpt_fuse_plan *p, const struct dpt_model *m, int t)
{
  int pr = m->tensors[t].producer;
  int eb = pr >= 0 && m->layers[pr].type == DPT_LAYER_FC ? 4 : (p->cfg.elem_bytes > 0 ? p->cfg.elem_bytes : 4);
  return (size_t)(p->cfg.batch > 0 ? p->cfg.batch : 1) * (size_t)stored_c(&p->cfg, m, t) *
         (size_t)m->tensors[t].h * (size_t)m->tensors[t].w * (size_t)eb;
}

/* Calls dpt_backend_cuda.c makes for one legacy layer op (no weight casts: the fused optimizer
 * writes the conv / FC weight copies in the compute type, fused plan or not). */
static int legacy_launches(const struct dpt_fuse_plan *p, const struct dpt_model *m, const struct dpt_fop *op)
{
  const struct dpt_layer_desc *l = &m->layers[op->layer];
  int half = p->cfg.elem_bytes == 2, n = 0;
  int dx = 0;
  for (int k = 0; k < op->n_out; k++) dx += op->out[k].kind == DPT_FREF_DIFF;
  if (!op->backward) {
    switch (l->type) {
    case DPT_LAYER_CONV: return 1;                     /* convolution */
    case DPT_LAYER_BN: return 1 + !!l->relu;           /* BN training + ReLU */
    case DPT_LAYER_FC: return 2;                       /* GEMM + bias */
    default: return 1;                                 /* ReLU, pooling, add (+ReLU) */
    }
  }
  switch (l->type) {
  case DPT_LAYER_CONV: return 2 + dx;                  /* wgrad + packing + dgrad */
  case DPT_LAYER_BN: return 1 + !!l->relu;             /* ReLU backward + BN backward */
  case DPT_LAYER_FC: return 2 + half + dx;             /* dW GEMM + bias + (dy cast) + dx GEMM */
  case DPT_LAYER_ADD: n = !!l->relu + dx; return n;    /* ReLU backward + copy / accumulate per input */
  default: return dx;                                  /* ReLU, pooling */
  }
}

static void count(struct dpt_fuse_plan *p, const struct dpt_model *m)
{
  struct dpt_fuse_counts *c = &p->counts;
  memset(c, 0, sizeof *c);
  for (int i = 0; i < p->n_ops; i++) {
    const struct dpt_fop *op = &p->ops[i];
    int legacy = op->kind == DPT_FOP_LEGACY_FWD || op->kind == DPT_FOP_LEGACY_BWD;
    int graph = !legacy && op->kind != DPT_FOP_GRAD_ACC;
    int launches = legacy ? legacy_launches(p, m, op)
                          : 1 + (op->kind == DPT_FOP_WGRAD || op->kind == DPT_FOP_SBR_WGRAD); /* + packing */
    if (op->backward) {
      c->ops_bwd++;
      c->graph_bwd += graph;
      c->legacy_bwd += legacy;
      c->launches_bwd += launches;
    } else {
      c->ops_fwd++;
      c->graph_fwd += graph;
      c->legacy_fwd += legacy;
      c->launches_fwd += launches;
    }
    for (int k = 0; k < op->n_in; k++)
      if (op->backward && op->in[k].kind == DPT_FREF_ACT) p->act_kept[op->in[k].id] = 1;
    for (int k = 0; k < op->n_out; k++)
      if (!op->backward && op->out[k].kind == DPT_FREF_ACT) p->act_written[op->out[k].id] = 1;
  }
  p->act_written[0] = 1; /* the input batch */
  for (int t = 0; t < m->n_tensors; t++) {
    size_t b = tensor_bytes(p, m, t);
    if (p->act_written[t]) c->act_written++, c->act_written_bytes += b;
    if (p->act_kept[t]) c->act_kept++, c->act_kept_bytes += b;
    if (p->diff_written[t]) c->diff_written++, c->diff_written_bytes += b;
  }
}

/* Each layer's ops of each pass are contiguous, the forward layers in increasing order and the
 * backward ones in decreasing order (what emit_forward / emit_backward produce): the index the
 * backend runs them by. */
static int layer_ranges(struct dpt_fuse_plan *p, const struct dpt_model *m, struct dpt_err *err)
{
  int nl = m->n_layers;
  p->fwd_first = malloc((size_t)nl * sizeof(int));
  p->fwd_n = calloc((size_t)nl, sizeof(int));
  p->bwd_first = malloc((size_t)nl * sizeof(int));
  p->bwd_n = calloc((size_t)nl, sizeof(int));
  if (!p->fwd_first || !p->fwd_n || !p->bwd_first || !p->bwd_n)
    return dpt_err_set(err, DPT_E_NOMEM, "fusion plan: out of memory for %d layers", nl);
  for (int l = 0; l < nl; l++) p->fwd_first[l] = p->bwd_first[l] = -1;
  int prev = -1;
  for (int i = 0; i < p->n_ops; i++) {
    const struct dpt_fop *op = &p->ops[i];
    int bwd = i >= p->n_fwd, l = op->layer;
    int *first = bwd ? p->bwd_first : p->fwd_first, *n = bwd ? p->bwd_n : p->fwd_n;
    if (i == p->n_fwd) prev = -1;
    int in_order = l >= 0 && l < nl && (prev < 0 || l == prev || (bwd ? l < prev : l > prev));
    if (!in_order || (first[l] >= 0 && first[l] + n[l] != i))
      return dpt_err_set(err, DPT_E_INPUT, "fusion plan: op %d (%s, layer %d) is out of layer order in the %s pass",
                         i, dpt_fop_name(op->kind), l, bwd ? "backward" : "forward");
    if (first[l] < 0) first[l] = i;
    n[l]++;
    prev = l;
  }
  return 0;
}

int dpt_cuda_fuse_deny(const struct dpt_model *m, const struct dpt_fuse_plan *p, int i, unsigned char *legacy)
{
  int l = dpt_cuda_fuse_layer_denied(m, p, i);
  if (l >= 0) legacy[l] = 1;
  return l;
}

int dpt_cuda_fuse_layer_denied(const struct dpt_model *m, const struct dpt_fuse_plan *p, int i)
{
  if (i < 0 || i >= p->n_ops) return -1;
  const struct dpt_fop *op = &p->ops[i];
  int l = -1;
  switch (op->kind) {
  case DPT_FOP_CONV_STATS:
  case DPT_FOP_SBR_CONV_STATS:
  case DPT_FOP_DGRAD:
  case DPT_FOP_WGRAD:
  case DPT_FOP_SBR_WGRAD:
  case DPT_FOP_DGRAD_DRELU_DBN: l = op->conv; break;
  case DPT_FOP_BN_FINALIZE:
  case DPT_FOP_SBR_APPLY: l = op->bn[0]; break;
  case DPT_FOP_SBAR:
  case DPT_FOP_DSBAR:
  case DPT_FOP_GRAD_ACC: l = op->layer; break;
  case DPT_FOP_DBN_WEIGHT:
  case DPT_FOP_DBN_APPLY: /* an add's (its BNs fused into it) or a BN's own (apply mode) */
    l = op->layer >= 0 && op->layer < m->n_layers && m->layers[op->layer].type == DPT_LAYER_ADD ? op->layer : op->bn[0];
    break;
  default: return -1;
  }
  return l >= 0 && l < m->n_layers ? l : -1;
}

static int by_off(const void *a, const void *b)
{
  size_t x = ((const struct dpt_fuse_range *)a)->off, y = ((const struct dpt_fuse_range *)b)->off;
  return x < y ? -1 : x > y;
}

int dpt_cuda_fuse_running_ranges(const struct dpt_model *m, const struct dpt_fuse_plan *p, struct dpt_fuse_range *out,
                                 int *last)
{
  int n = 0;
  *last = -1;
  for (int i = 0; i < p->n_fwd; i++) {
    const struct dpt_fop *op = &p->ops[i];
    if (op->kind != DPT_FOP_BN_FINALIZE || op->bn[0] < 0 || op->bn[0] >= m->n_layers || n >= m->n_layers) continue;
    const struct dpt_layer_desc *l = &m->layers[op->bn[0]];
    out[n++] = (struct dpt_fuse_range){l->s_off, 2 * (size_t)l->c_out};
    *last = i;
  }
  qsort(out, (size_t)n, sizeof *out, by_off);
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (k && out[k - 1].off + out[k - 1].n >= out[i].off) { /* adjacent (or overlapping): one copy */
      size_t end = out[i].off + out[i].n;
      if (end > out[k - 1].off + out[k - 1].n) out[k - 1].n = end - out[k - 1].off;
    } else {
      out[k++] = out[i];
    }
  }
  return k;
}

int dpt_cuda_fuse_build(const struct dpt_model *m, const struct dpt_fuse_cfg *cfg, struct dpt_fuse_plan *plan,
                        struct dpt_err *err)
{
  struct graph g;
  int rc;
  memset(plan, 0, sizeof *plan);
  if ((rc = graph_build(m, &g, err))) return rc;
  plan->cfg = *cfg;
  plan->n_layers = m->n_layers;
  plan->n_tensors = m->n_tensors;
  plan->conv_fused = calloc((size_t)m->n_layers, sizeof *plan->conv_fused);
  plan->bn_mode = calloc((size_t)m->n_layers, sizeof *plan->bn_mode);
  plan->act_written = calloc((size_t)m->n_tensors, sizeof *plan->act_written);
  plan->act_kept = calloc((size_t)m->n_tensors, sizeof *plan->act_kept);
  plan->diff_written = calloc((size_t)m->n_tensors, sizeof *plan->diff_written);
  if (!plan->conv_fused || !plan->bn_mode || !plan->act_written || !plan->act_kept || !plan->diff_written) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "fusion plan: out of memory for %d layers", m->n_layers);
    goto fail;
  }
  decide(&g, plan);
  struct emit e = {plan, 0, 0, m};
  for (int li = 0; li < m->n_layers && !e.failed; li++) emit_forward(&e, &g, li);
  plan->n_fwd = plan->n_ops;
  plan->diff_written[m->layers[m->n_layers - 1].out] = 1; /* the loss writes the logits' gradient */
  for (int li = m->n_layers - 1; li >= 0 && !e.failed; li--) emit_backward(&e, &g, li);
  if (e.failed) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "fusion plan: out of memory for %d ops", plan->n_ops);
    goto fail;
  }
  count(plan, m);
  if ((rc = layer_ranges(plan, m, err))) goto fail;
  for (int li = 0; cfg->legacy && li < m->n_layers; li++) plan->n_legacy_layers += !!cfg->legacy[li];
  plan->cfg.legacy = NULL; /* the caller's array: read during the build only */
  graph_free(&g);
  return 0;
fail:
  graph_free(&g);
  dpt_cuda_fuse_free(plan);
  return rc;
}
