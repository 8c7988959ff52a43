/* dpt_cuda_fuse_check.c — what is proved of a fusion plan (see dpt_cuda_fuse.h): the dataflow
 * replay, the gradient buckets' timing, and its one-line-per-op print. */
#include "dpt_cuda_fuse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* ---- the dataflow check ----------------------------------------------------------- */

struct replay {
  int *act, *act_read, *act_read_bwd, *diff; /* [n_tensors] */
  int *conv_fwd, *finalized, *dw, *dparam;   /* [n_layers] */
  unsigned char *have;                       /* [n_layers * DPT_FREF_NKINDS] per-layer vectors */
};

static int op_fail(struct dpt_err *err, const struct dpt_model *m, const struct dpt_fuse_plan *p, int i,
                   const struct dpt_fref *r, const char *why)
{
  const struct dpt_fop *op = &p->ops[i];
  const char *rn = "?";
  if (r && (r->kind == DPT_FREF_ACT || r->kind == DPT_FREF_DIFF)) {
    int pr = r->id >= 0 && r->id < m->n_tensors ? m->tensors[r->id].producer : -2;
    rn = pr >= 0 ? m->layers[pr].name : pr == -1 ? "input" : "?";
  } else if (r && r->id >= 0 && r->id < m->n_layers) {
    rn = m->layers[r->id].name;
  }
  if (r)
    return dpt_err_set(err, DPT_E_INPUT, "fusion plan: op %d (%s %s, layer '%s'): %s %d (%s): %s", i,
                       op->backward ? "backward" : "forward", dpt_fop_name(op->kind),
                       op->layer >= 0 && op->layer < m->n_layers ? m->layers[op->layer].name : "?",
                       dpt_fref_name(r->kind), r->id, rn, why);
  return dpt_err_set(err, DPT_E_INPUT, "fusion plan: op %d (%s, layer '%s'): %s", i, dpt_fop_name(op->kind),
                     op->layer >= 0 && op->layer < m->n_layers ? m->layers[op->layer].name : "?", why);
}

static int ref_valid(const struct dpt_model *m, const struct dpt_fref *r)
{
  switch (r->kind) {
  case DPT_FREF_ACT:
  case DPT_FREF_DIFF: return r->id >= 0 && r->id < m->n_tensors;
  case DPT_FREF_W:
  case DPT_FREF_DW:
    return r->id >= 0 && r->id < m->n_layers &&
           (m->layers[r->id].type == DPT_LAYER_CONV || m->layers[r->id].type == DPT_LAYER_FC);
  default: /* the per-BN vectors */
    return r->kind >= DPT_FREF_BN_PARAM && r->kind < DPT_FREF_NKINDS && r->id >= 0 && r->id < m->n_layers &&
           m->layers[r->id].type == DPT_LAYER_BN;
  }
}

int dpt_cuda_fuse_check(const struct dpt_model *m, const struct dpt_fuse_plan *p, struct dpt_err *err)
{
  int nt = m->n_tensors, nl = m->n_layers, rc = 0;
  struct replay s;
  if (p->n_tensors != nt || p->n_layers != nl)
    return dpt_err_set(err, DPT_E_INPUT, "fusion plan: made for %d layers / %d tensors, the model has %d / %d",
                       p->n_layers, p->n_tensors, nl, nt);
  s.act = calloc((size_t)nt, sizeof(int));
  s.act_read = calloc((size_t)nt, sizeof(int));
  s.act_read_bwd = calloc((size_t)nt, sizeof(int));
  s.diff = calloc((size_t)nt, sizeof(int));
  s.conv_fwd = calloc((size_t)nl, sizeof(int));
  s.finalized = calloc((size_t)nl, sizeof(int));
  s.dw = calloc((size_t)nl, sizeof(int));
  s.dparam = calloc((size_t)nl, sizeof(int));
  s.have = calloc((size_t)nl * DPT_FREF_NKINDS, 1);
  if (!s.act || !s.act_read || !s.act_read_bwd || !s.diff || !s.conv_fwd || !s.finalized || !s.dw || !s.dparam ||
      !s.have) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "fusion plan check: out of memory");
    goto done;
  }
  s.act[0] = 1;
  for (int l = 0; l < nl; l++)
    if (m->layers[l].type == DPT_LAYER_BN) s.have[(size_t)l * DPT_FREF_NKINDS + DPT_FREF_BN_PARAM] = 1;
  int out_t = m->layers[nl - 1].out;
  for (int i = 0; i < p->n_ops; i++) {
    const struct dpt_fop *op = &p->ops[i];
    int bwd = i >= p->n_fwd;
    if (op->backward != bwd) {
      rc = op_fail(err, m, p, i, NULL, bwd ? "a forward op among the backward ones" : "a backward op in the forward pass");
      goto done;
    }
    if (i == p->n_fwd) s.diff[out_t] = 1; /* the loss */
    for (int k = 0; k < op->n_in; k++) {
      const struct dpt_fref *r = &op->in[k];
      if (!ref_valid(m, r)) {
        rc = op_fail(err, m, p, i, r, "not an operand of this model");
        goto done;
      }
      int ok = 1;
      switch (r->kind) {
      case DPT_FREF_ACT:
        ok = s.act[r->id] > 0;
        s.act_read[r->id]++;
        if (bwd) s.act_read_bwd[r->id]++;
        break;
      case DPT_FREF_DIFF: ok = bwd && s.diff[r->id]; break;
      case DPT_FREF_W: break;
      case DPT_FREF_DW: ok = 0; break;
      default: ok = s.have[(size_t)r->id * DPT_FREF_NKINDS + r->kind]; break;
      }
      if (!ok) {
        rc = op_fail(err, m, p, i, r, r->kind == DPT_FREF_ACT ? "read but never written (a virtual tensor?)"
                                                            : "read before anything writes it");
        goto done;
      }
    }
    for (int k = 0; k < op->n_out; k++) {
      const struct dpt_fref *r = &op->out[k];
      if (!ref_valid(m, r)) {
        rc = op_fail(err, m, p, i, r, "not an operand of this model");
        goto done;
      }
      int read_too = 0;
      for (int j = 0; j < op->n_in; j++) read_too |= op->in[j].kind == r->kind && op->in[j].id == r->id;
      switch (r->kind) {
      case DPT_FREF_ACT:
        if (bwd || s.act[r->id]) {
          rc = op_fail(err, m, p, i, r, bwd ? "activation written in the backward pass" : "activation written twice");
          goto done;
        }
        s.act[r->id] = 1;
        break;
      case DPT_FREF_DIFF:
        if (!bwd || (s.diff[r->id] && !read_too)) {
          rc = op_fail(err, m, p, i, r, !bwd ? "gradient written in the forward pass"
                                             : "overwrites a gradient another reader already wrote (must accumulate)");
          goto done;
        }
        s.diff[r->id] = 1;
        break;
      case DPT_FREF_DW: s.dw[r->id]++; break;
      case DPT_FREF_BN_DPARAM: s.dparam[r->id]++; /* fall through */
      default: s.have[(size_t)r->id * DPT_FREF_NKINDS + r->kind] = 1; break;
      }
    }
    if (!bwd && op->conv >= 0) s.conv_fwd[op->conv]++;
    if (!bwd && (op->kind == DPT_FOP_BN_FINALIZE || (op->kind == DPT_FOP_LEGACY_FWD && op->bn[0] >= 0)))
      s.finalized[op->bn[0] >= 0 ? op->bn[0] : op->layer]++;
  }
  for (int l = 0; l < nl; l++) {
    const struct dpt_layer_desc *d = &m->layers[l];
    const char *why = NULL;
    char buf[160];
    if (d->type == DPT_LAYER_CONV && s.conv_fwd[l] != 1)
      snprintf(buf, sizeof buf, "convolution in %d forward ops (must be exactly 1)", s.conv_fwd[l]), why = buf;
    else if (d->type == DPT_LAYER_BN && s.finalized[l] != 1)
      snprintf(buf, sizeof buf, "BN finalized %d times (must be once)", s.finalized[l]), why = buf;
    else if (d->type == DPT_LAYER_BN && s.dparam[l] != 1)
      snprintf(buf, sizeof buf, "dgamma/dbeta written %d times (must be once)", s.dparam[l]), why = buf;
    else if ((d->type == DPT_LAYER_CONV || d->type == DPT_LAYER_FC) && s.dw[l] != 1)
      snprintf(buf, sizeof buf, "weight gradient written %d times (must be once)", s.dw[l]), why = buf;
    if (why) {
      rc = dpt_err_set(err, DPT_E_INPUT, "fusion plan: layer %d '%s' (%s): %s", l, d->name,
                       dpt_layer_type_name(d->type), why);
      goto done;
    }
  }
  for (int t = 0; t < nt; t++) {
    int pr = m->tensors[t].producer;
    const char *name = pr >= 0 ? m->layers[pr].name : "input";
    if (s.act[t] && !s.act_read[t] && t != out_t) {
      rc = dpt_err_set(err, DPT_E_INPUT, "fusion plan: tensor %d (output of '%s') is written and never read", t, name);
      goto done;
    }
    if (!!s.act[t] != !!p->act_written[t] || !!s.act_read_bwd[t] != !!p->act_kept[t] ||
        !!s.diff[t] != !!p->diff_written[t]) {
      rc = dpt_err_set(err, DPT_E_INPUT,
                       "fusion plan: tensor %d (output of '%s'): the plan says written %d kept %d gradient %d, its "
                       "ops say %d %d %d", t, name, p->act_written[t], p->act_kept[t], p->diff_written[t],
                       !!s.act[t], !!s.act_read_bwd[t], !!s.diff[t]);
      goto done;
    }
  }
done:
  free(s.act), free(s.act_read), free(s.act_read_bwd), free(s.diff);
  free(s.conv_fwd), free(s.finalized), free(s.dw), free(s.dparam), free(s.have);
  return rc;
}

/* ---- the gradient buckets ------------------------------------------------------- */

int dpt_cuda_fuse_check_buckets(const struct dpt_model *m, const struct dpt_fuse_plan *p, const struct dpt_bucket *b,
                                int n, struct dpt_err *err)
{
  for (int i = p->n_fwd; i < p->n_ops; i++) {
    const struct dpt_fop *op = &p->ops[i];
    for (int k = 0; k < op->n_out; k++) {
      const struct dpt_fref *r = &op->out[k];
      if (r->kind != DPT_FREF_DW && r->kind != DPT_FREF_BN_DPARAM) continue;
      for (int q = 0; q < n; q++) {
        if (r->id < b[q].first_layer || r->id > b[q].last_layer) continue;
        if (op->layer < b[q].first_layer)
          return dpt_err_set(err, DPT_E_INPUT, "fusion plan: backward op %d (%s, named after '%s') writes the "
                             "gradient of '%s' in bucket %d (layers %d..%d) after that bucket's hook (at the step "
                             "of layer %d '%s')", i, dpt_fop_name(op->kind), m->layers[op->layer].name,
                             m->layers[r->id].name, q, b[q].first_layer, b[q].last_layer, b[q].first_layer,
                             m->layers[b[q].first_layer].name);
      }
    }
  }
  return 0;
}

/* ---- printing --------------------------------------------------------------------- */

static void print_ref(FILE *f, const struct dpt_model *m, const struct dpt_fref *r)
{
  if (r->kind == DPT_FREF_ACT || r->kind == DPT_FREF_DIFF) {
    int pr = r->id >= 0 && r->id < m->n_tensors ? m->tensors[r->id].producer : -1;
    fprintf(f, " %s(%s)", dpt_fref_name(r->kind), pr >= 0 ? m->layers[pr].name : "input");
  } else {
    fprintf(f, " %s(%s)", dpt_fref_name(r->kind), r->id >= 0 && r->id < m->n_layers ? m->layers[r->id].name : "?");
  }
}

void dpt_cuda_fuse_print(const struct dpt_model *m, const struct dpt_fuse_plan *p, void *file)
{
  FILE *f = file;
  for (int i = 0; i < p->n_ops; i++) {
    const struct dpt_fop *op = &p->ops[i];
    fprintf(f, "%s %3d %-15s %-22s", op->backward ? "bwd" : "fwd", i, dpt_fop_name(op->kind),
            m->layers[op->layer].name);
    if (op->relu) fputs(" relu", f);
    if (op->fork) fputs(" fork", f);
    if (op->accumulate) fputs(" acc", f);
    fputs(" <-", f);
    for (int k = 0; k < op->n_in; k++) print_ref(f, m, &op->in[k]);
    fputs(" ->", f);
    for (int k = 0; k < op->n_out; k++) print_ref(f, m, &op->out[k]);
    fputc('\n', f);
  }
}
