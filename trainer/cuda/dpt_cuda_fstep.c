/* dpt_cuda_fstep.c — the fused step's executor (see dpt_cuda_fstep.h). */
#include "dpt_cuda_fstep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_cuda_dbn.h"
#include "dpt_cuda_kernels.h"

static struct dpt_fx_ref ref_of(int kind, int id, size_t off) { return (struct dpt_fx_ref){kind, id, off}; }

/* The plan's operands of op: the first gradient it reads, the first / last activation it reads,
 * the gradient it writes (see dpt_cuda_fuse.c's emit_* for the order). */
static int first_in(const struct dpt_fop *op, int kind)
{
  for (int k = 0; k < op->n_in; k++)
    if (op->in[k].kind == kind) return op->in[k].id;
  return -1;
}

static int last_in(const struct dpt_fop *op, int kind)
{
  int id = -1;
  for (int k = 0; k < op->n_in; k++)
    if (op->in[k].kind == kind) id = op->in[k].id;
  return id;
}

static int out_of(const struct dpt_fop *op, int kind)
{
  for (int k = 0; k < op->n_out; k++)
    if (op->out[k].kind == kind) return op->out[k].id;
  return -1;
}

/* BN layer bn's vector v, its parameters / gradients / running statistics (gamma or beta,
 * dgamma or dbeta, mean or var: which = 0 or 1). */
static struct dpt_fx_ref bnv(int bn, int v) { return ref_of(DPT_FXR_BNVEC, bn, (size_t)v); }

static struct dpt_fx_ref bnp(const struct dpt_model *m, int kind, int bn, int which)
{
  const struct dpt_layer_desc *l = &m->layers[bn];
  int st = kind == DPT_FXR_STATE || kind == DPT_FXR_STATE_NEXT;
  size_t off = (st ? l->s_off : l->w_off) + (size_t)which * (size_t)l->c_out;
  return ref_of(kind, bn, off);
}

/* Slot s of a pattern that comes from BN layer bn: its vectors, parameters, their gradients and
 * running statistics. */
static struct dpt_fx_ref bn_slot(const struct dpt_model *m, int bn, int s)
{
  switch (s) {
  case DPT_CG_SUM: return bnv(bn, DPT_FX_SUM);
  case DPT_CG_SQSUM: return bnv(bn, DPT_FX_SQSUM);
  case DPT_CG_EQ_SCALE: return bnv(bn, DPT_FX_EQ_SCALE);
  case DPT_CG_EQ_BIAS: return bnv(bn, DPT_FX_EQ_BIAS);
  case DPT_CG_MEAN: return bnv(bn, DPT_FX_MEAN);
  case DPT_CG_ISTD: return bnv(bn, DPT_FX_ISTD);
  case DPT_CG_C_DY: return bnv(bn, DPT_FX_C_DY);
  case DPT_CG_C_X: return bnv(bn, DPT_FX_C_X);
  case DPT_CG_C_B: return bnv(bn, DPT_FX_C_B);
  case DPT_CG_GAMMA: return bnp(m, DPT_FXR_PARAM, bn, 0);
  case DPT_CG_BETA: return bnp(m, DPT_FXR_PARAM, bn, 1);
  case DPT_CG_RMEAN: return bnp(m, DPT_FXR_STATE, bn, 0);
  case DPT_CG_RVAR: return bnp(m, DPT_FXR_STATE, bn, 1);
  case DPT_CG_RMEAN_NEXT: return bnp(m, DPT_FXR_STATE_NEXT, bn, 0);
  case DPT_CG_RVAR_NEXT: return bnp(m, DPT_FXR_STATE_NEXT, bn, 1);
  case DPT_CG_DGAMMA: return bnp(m, DPT_FXR_GRAD, bn, 0);
  case DPT_CG_DBETA: return bnp(m, DPT_FXR_GRAD, bn, 1);
  default: return ref_of(DPT_FXR_NONE, -1, 0);
  }
}

static void bn_slots(struct dpt_fx_ref *ref, const struct dpt_model *m, int bn, const int *slots, int n)
{
  for (int i = 0; i < n; i++) ref[slots[i]] = bn_slot(m, bn, slots[i]);
}

/* X of a convolution op: its input, or (prologue: S, B) the input of the BN pb applied there, its
 * scale / bias the finalize's fp32 vectors or (sb_io) their copies in the I/O type. */
static void conv_input(struct dpt_fx_ref *ref, const struct dpt_model *m, int conv, int pb, int prologue, int sb_io)
{
  if (prologue) {
    ref[DPT_CG_X] = ref_of(DPT_FXR_ACT, m->layers[pb].in[0], 0);
    ref[DPT_CG_S] = bnv(pb, sb_io ? DPT_FX_EQ_IO : DPT_FX_EQ_SCALE);
    ref[DPT_CG_B] = bnv(pb, sb_io ? DPT_FX_EQ_BIAS_IO : DPT_FX_EQ_BIAS);
  } else {
    ref[DPT_CG_X] = ref_of(DPT_FXR_ACT, m->layers[conv].in[0], 0);
  }
}

static int unsupported(struct dpt_err *err, const struct dpt_model *m, const struct dpt_fop *op, const char *why)
{
  return dpt_err_set(err, DPT_E_UNSUPPORTED, "fused step: %s of layer '%s': %s", dpt_fop_name(op->kind),
                     m->layers[op->layer].name, why);
}

/* The graph description and slot operands of plan op i; sb_io: a prologue pattern's scale / bias in
 * the I/O type (the finalize's vectors cast after it, eq_to_io), else fp32. */
static int describe(struct dpt_cuda_fstep *fx, int i, struct dpt_cg_desc *d, struct dpt_fx_ref *ref, int *pack,
                    int sb_io, struct dpt_err *err)
{
  const struct dpt_model *m = fx->m;
  const struct dpt_fop *op = &fx->plan->fuse->ops[i];
  const struct dpt_cuda_tensor_plan *tp = fx->plan->t;
  memset(d, 0, sizeof *d);
  for (int s = 0; s < DPT_CG_NSLOTS; s++) ref[s] = ref_of(DPT_FXR_NONE, -1, 0);
  *pack = 0;
  d->io = fx->io_type;
  d->sb = sb_io ? fx->io_type : DPT_CG_F32;
  d->tf32 = fx->tf32;
  d->relu = op->relu;
  d->layer = m->layers[op->layer].name;
  int conv = op->conv;
  if (conv >= 0) { /* convolution geometry: the conv's input tensor as stored */
    const struct dpt_layer_desc *l = &m->layers[conv];
    const struct dpt_cuda_tensor_plan *x = &tp[l->in[0]];
    d->n = x->n, d->c = x->c_stored, d->h = x->h, d->w = x->w;
    d->k = l->c_out, d->r = l->kernel, d->stride = l->stride, d->pad = l->pad;
  }
  switch (op->kind) {
  case DPT_FOP_CONV_STATS:
  case DPT_FOP_SBR_CONV_STATS: {
    const struct dpt_layer_desc *l = &m->layers[conv];
    int sb = op->bn[0];
    d->pattern = op->kind == DPT_FOP_CONV_STATS ? DPT_CG_CONV_STATS : DPT_CG_SBR_CONV_STATS;
    conv_input(ref, m, conv, op->bn[1], op->kind == DPT_FOP_SBR_CONV_STATS, sb_io);
    ref[DPT_CG_W] = ref_of(DPT_FXR_W, conv, 0);
    ref[DPT_CG_Y] = ref_of(DPT_FXR_ACT, l->out, 0);
    ref[DPT_CG_SUM] = bnv(sb, DPT_FX_SUM);
    ref[DPT_CG_SQSUM] = bnv(sb, DPT_FX_SQSUM);
    return 0;
  }
  case DPT_FOP_BN_FINALIZE: {
    int bn = op->bn[0];
    const struct dpt_cuda_tensor_plan *x = &tp[m->layers[bn].in[0]];
    d->pattern = DPT_CG_BN_FINALIZE;
    d->n = x->n, d->c = m->layers[bn].c_out, d->h = x->h, d->w = x->w;
    d->eps = fx->eps;
    d->momentum = fx->momentum;
    static const int fin[] = {DPT_CG_SUM, DPT_CG_SQSUM, DPT_CG_GAMMA, DPT_CG_BETA, DPT_CG_RMEAN, DPT_CG_RVAR,
                              DPT_CG_RMEAN_NEXT, DPT_CG_RVAR_NEXT, /* the update: the slab's mirror */
                              DPT_CG_EQ_SCALE, DPT_CG_EQ_BIAS, DPT_CG_MEAN, DPT_CG_ISTD};
    bn_slots(ref, m, bn, fin, (int)(sizeof fin / sizeof *fin));
    return 0;
  }
  case DPT_FOP_SBR_APPLY:
  case DPT_FOP_SBAR:
  case DPT_FOP_DSBAR: {
    int b0 = op->bn[0], x = m->layers[b0].in[0];
    d->pattern = op->kind == DPT_FOP_SBR_APPLY ? DPT_CG_SBR_APPLY : op->kind == DPT_FOP_SBAR ? DPT_CG_SBAR : DPT_CG_DSBAR;
    d->n = tp[x].n, d->c = tp[x].c_stored, d->h = tp[x].h, d->w = tp[x].w;
    ref[DPT_CG_X] = ref_of(DPT_FXR_ACT, x, 0);
    ref[DPT_CG_S] = bnv(b0, DPT_FX_EQ_SCALE);
    ref[DPT_CG_B] = bnv(b0, DPT_FX_EQ_BIAS);
    ref[DPT_CG_Y] = ref_of(DPT_FXR_ACT, out_of(op, DPT_FREF_ACT), 0);
    if (op->kind == DPT_FOP_SBAR) {
      ref[DPT_CG_R] = ref_of(DPT_FXR_ACT, last_in(op, DPT_FREF_ACT), 0);
    } else if (op->kind == DPT_FOP_DSBAR) {
      int b1 = op->bn[1];
      ref[DPT_CG_X2] = ref_of(DPT_FXR_ACT, m->layers[b1].in[0], 0);
      ref[DPT_CG_S2] = bnv(b1, DPT_FX_EQ_SCALE);
      ref[DPT_CG_B2] = bnv(b1, DPT_FX_EQ_BIAS);
    }
    return 0;
  }
  case DPT_FOP_DBN_WEIGHT:
  case DPT_FOP_DBN_APPLY: {
    int bn = op->bn[0], x = last_in(op, DPT_FREF_ACT); /* the BN's input is the last activation read */
    d->pattern = op->kind == DPT_FOP_DBN_WEIGHT ? DPT_CG_DBN_WEIGHT : DPT_CG_DBN_APPLY;
    d->n = tp[x].n, d->c = tp[x].c_stored, d->h = tp[x].h, d->w = tp[x].w;
    d->fork = op->fork;
    ref[DPT_CG_X] = ref_of(DPT_FXR_ACT, x, 0);
    if (op->relu) { /* g = relu'(y) * dy, y the ReLU's output (the first activation read) */
      ref[DPT_CG_DY] = ref_of(DPT_FXR_DIFF, first_in(op, DPT_FREF_DIFF), 0);
      ref[DPT_CG_Y] = ref_of(DPT_FXR_ACT, first_in(op, DPT_FREF_ACT), 0);
    } else if (op->kind == DPT_FOP_DBN_WEIGHT) {
      ref[DPT_CG_DY] = ref_of(DPT_FXR_DIFF, first_in(op, DPT_FREF_DIFF), 0);
    } else {
      ref[DPT_CG_G] = ref_of(DPT_FXR_DIFF, first_in(op, DPT_FREF_DIFF), 0);
    }
    static const int wt[] = {DPT_CG_MEAN, DPT_CG_ISTD, DPT_CG_GAMMA, DPT_CG_DGAMMA, DPT_CG_DBETA,
                             DPT_CG_C_DY, DPT_CG_C_X, DPT_CG_C_B};
    if (op->kind == DPT_FOP_DBN_WEIGHT) {
      if (op->fork) ref[DPT_CG_G] = ref_of(DPT_FXR_DIFF, out_of(op, DPT_FREF_DIFF), 0);
      bn_slots(ref, m, bn, wt, (int)(sizeof wt / sizeof *wt));
    } else {
      if (op->accumulate) return unsupported(err, m, op, "dBN apply adding into a gradient another reader wrote");
      ref[DPT_CG_DX] = ref_of(DPT_FXR_DIFF, out_of(op, DPT_FREF_DIFF), 0);
      bn_slots(ref, m, bn, wt + 5, 3); /* the coefficients */
    }
    return 0;
  }
  case DPT_FOP_DGRAD_DRELU_DBN: {
    const struct dpt_layer_desc *l = &m->layers[conv];
    int pb = op->bn[0];
    if (op->accumulate) return unsupported(err, m, op, "dgrad + dBN adding into a gradient another reader wrote");
    d->pattern = DPT_CG_DGRAD_DRELU_DBN;
    ref[DPT_CG_DY] = ref_of(DPT_FXR_DIFF, l->out, 0);
    ref[DPT_CG_W] = ref_of(DPT_FXR_W, conv, 0);
    ref[DPT_CG_X] = ref_of(DPT_FXR_ACT, m->layers[pb].in[0], 0);
    ref[DPT_CG_G] = ref_of(DPT_FXR_DIFF, l->in[0], 0);
    static const int dd[] = {DPT_CG_MEAN, DPT_CG_ISTD, DPT_CG_GAMMA, DPT_CG_BETA, DPT_CG_DGAMMA, DPT_CG_DBETA,
                             DPT_CG_C_DY, DPT_CG_C_X, DPT_CG_C_B};
    bn_slots(ref, m, pb, dd, (int)(sizeof dd / sizeof *dd));
    return 0;
  }
  case DPT_FOP_DGRAD: {
    const struct dpt_layer_desc *l = &m->layers[conv];
    d->pattern = DPT_CG_DGRAD;
    d->accumulate = op->accumulate;
    ref[DPT_CG_DY] = ref_of(DPT_FXR_DIFF, l->out, 0);
    ref[DPT_CG_W] = ref_of(DPT_FXR_W, conv, 0);
    ref[DPT_CG_DX] = ref_of(DPT_FXR_DIFF, l->in[0], 0);
    return 0;
  }
  case DPT_FOP_WGRAD:
  case DPT_FOP_SBR_WGRAD: {
    const struct dpt_layer_desc *l = &m->layers[conv];
    d->pattern = op->kind == DPT_FOP_WGRAD ? DPT_CG_WGRAD : DPT_CG_SBR_WGRAD;
    conv_input(ref, m, conv, op->bn[0], op->kind == DPT_FOP_SBR_WGRAD, sb_io);
    ref[DPT_CG_DY] = ref_of(DPT_FXR_DIFF, l->out, 0);
    ref[DPT_CG_DW] = ref_of(DPT_FXR_WGRAD, conv, 0);
    *pack = 1;
    return 0;
  }
  default:
    return dpt_err_set(err, DPT_E_INPUT, "fused step: op %d (%s) has no graph", i, dpt_fop_name(op->kind));
  }
}

static void resolve_all(const struct dpt_cuda_fstep *fx, const struct dpt_fx_ref *ref, void **ptrs)
{
  for (int s = 0; s < DPT_CG_NSLOTS; s++)
    ptrs[s] = ref[s].kind == DPT_FXR_NONE ? NULL : fx->io.resolve(fx->io.ctx, &ref[s]);
}

/* The BN whose scale / bias a prologue op (sbr_conv_stats, sbr_wgrad) applies to its input; -1 for
 * the other ops. */
static int prologue_bn(const struct dpt_fop *op)
{
  return op->kind == DPT_FOP_SBR_CONV_STATS ? op->bn[1] : op->kind == DPT_FOP_SBR_WGRAD ? op->bn[0] : -1;
}

/* Describe and build plan op i into o (sb_io: see describe).  1: not built, left to the last round
 * (probing, and its key already has an engine in the cache). */
static int build_op(struct dpt_cuda_fstep *fx, int i, struct dpt_cuda_fstep_op *o, int sb_io, struct dpt_err *e)
{
  struct dpt_cg_desc d;
  void *ptrs[DPT_CG_NSLOTS];
  int r = describe(fx, i, &d, o->ref, &o->pack, sb_io, e);
  if (!r && fx->ctx.probe && fx->ctx.cache) {
    char key[DPT_ENGINE_KEY_MAX];
    dpt_cg_key(&d, key, sizeof key);
    if (dpt_engine_cache_get(fx->ctx.cache, key)) return 1;
  }
  if (!r) {
    resolve_all(fx, o->ref, ptrs);
    if ((r = dpt_cg_build(&fx->ctx, &d, ptrs, &o->cg, e)))
      dpt_err_prefix(e, "fused step op %d (%s)", i, dpt_fop_name(fx->plan->fuse->ops[i].kind));
  }
  return r;
}

/* A prologue op first with its scale / bias in the I/O type, as NVIDIA's samples and the documented
 * ConvBNfprop / ConvBNwgrad engines take them (FP16), then in fp32 (what ran before; cuDNN 9.14 and
 * 9.19 on the H200 offered no engine for it).  *sb_io says which one built. */
static int build_prologue(struct dpt_cuda_fstep *fx, int i, struct dpt_cuda_fstep_op *o, int *sb_io,
                          struct dpt_err *e)
{
  int io16 = fx->io_type != DPT_CG_F32;
  if (io16) {
    *sb_io = 1;
    int r = build_op(fx, i, o, 1, e);
    if (r != DPT_E_UNSUPPORTED) return r;
  }
  *sb_io = 0;
  *e = (struct dpt_err){0};
  int r = build_op(fx, i, o, 0, e);
  if (r == DPT_E_UNSUPPORTED && io16)
    dpt_err_prefix(e, "scale / bias in %s: unsupported; in fp32", fx->io_type == DPT_CG_F16 ? "fp16" : "bf16");
  return r;
}

/* Plan op i, a dbn_weight whose graph no engine takes (why: cuDNN's reason), into o as the own
 * kernel's: the graph's description and operands, nothing built; its partial sums' bytes into
 * fx->workspace. */
static int own_dbn(struct dpt_cuda_fstep *fx, int i, struct dpt_cuda_fstep_op *o, const struct dpt_err *why,
                   struct dpt_err *e)
{
  int pack, fop = o->fop;
  memset(o, 0, sizeof *o);
  o->fop = fop;
  int rc = describe(fx, i, &o->cg.d, o->ref, &pack, 0, e);
  if (rc) return rc;
  size_t ws = dpt_cuda_dbn_weight_ws(o->cg.d.c, (size_t)o->cg.d.n * o->cg.d.h * o->cg.d.w);
  if (ws > fx->workspace) fx->workspace = ws;
  if (!fx->n_own_dbn++) snprintf(fx->own_dbn_why, sizeof fx->own_dbn_why, "%.319s", why->msg);
  return 0;
}

void dpt_cuda_fstep_destroy(struct dpt_cuda_fstep *fx)
{
  if (!fx) return;
  for (int k = 0; k < fx->n; k++)
    if (fx->op[k].graph) dpt_cg_destroy(&fx->op[k].cg);
  free(fx->op);
  free(fx->index);
  free(fx->eq_io);
  free(fx->run);
  memset(fx, 0, sizeof *fx);
}

int dpt_cuda_fstep_build(struct dpt_cuda_fstep *fx, const struct dpt_model *m, const struct dpt_cuda_plan *plan,
                         const struct dpt_cg_ctx *ctx, cudaStream_t stream, const struct dpt_cuda_fstep_io *io,
                         double bn_eps, double bn_momentum, int *failed, int *n_failed, struct dpt_err *err)
{
  const struct dpt_fuse_plan *fp = plan->fuse;
  int rc = 0;
  memset(fx, 0, sizeof *fx);
  *n_failed = 0;
  fx->run_last = -1;
  if (!fp) return dpt_err_set(err, DPT_E_INPUT, "fused step: the plan has no fusion plan");
  fx->m = m;
  fx->plan = plan;
  fx->io = *io;
  fx->ctx = *ctx;
  fx->stream = stream;
  fx->io_type = plan->precision == DPT_CUDA_MIXED ? DPT_CG_F16 : plan->precision == DPT_CUDA_BF16 ? DPT_CG_BF16
                                                                                                  : DPT_CG_F32;
  fx->tf32 = plan->precision == DPT_CUDA_TF32;
  fx->eps = bn_eps;
  fx->momentum = bn_momentum;
  fx->op = calloc((size_t)(fp->n_ops ? fp->n_ops : 1), sizeof *fx->op);
  fx->index = malloc((size_t)(fp->n_ops ? fp->n_ops : 1) * sizeof *fx->index);
  fx->eq_io = calloc((size_t)(m->n_layers ? m->n_layers : 1), 1);
  if (!fx->op || !fx->index || !fx->eq_io) {
    dpt_cuda_fstep_destroy(fx);
    return dpt_err_set(err, DPT_E_NOMEM, "fused step: out of memory for %d ops", fp->n_ops);
  }
  for (int i = 0; i < fp->n_ops; i++) {
    const struct dpt_fop *op = &fp->ops[i];
    fx->index[i] = -1;
    if (op->kind == DPT_FOP_LEGACY_FWD || op->kind == DPT_FOP_LEGACY_BWD) continue;
    struct dpt_cuda_fstep_op *o = &fx->op[fx->n];
    o->fop = i;
    fx->index[i] = fx->n;
    if (op->kind == DPT_FOP_GRAD_ACC) { /* own kernel: dx += g */
      o->ref[0] = ref_of(DPT_FXR_DIFF, out_of(op, DPT_FREF_DIFF), 0);
      o->ref[1] = ref_of(DPT_FXR_DIFF, first_in(op, DPT_FREF_DIFF) == o->ref[0].id ? last_in(op, DPT_FREF_DIFF)
                                                                                   : first_in(op, DPT_FREF_DIFF), 0);
      fx->n++;
      continue;
    }
    struct dpt_err e = {0};
    int sb_io = 0, r = prologue_bn(op) >= 0 ? build_prologue(fx, i, o, &sb_io, &e) : build_op(fx, i, o, 0, &e);
    if (r == 1) { /* known to build: left to the last round */
      fx->index[i] = -1;
      memset(o, 0, sizeof *o);
      fx->probed++;
      continue;
    }
    if (r == DPT_E_UNSUPPORTED && op->kind == DPT_FOP_DBN_WEIGHT) { /* no engine: the own kernel */
      if ((rc = own_dbn(fx, i, o, &e, err))) goto fail;
      fx->n++;
      continue;
    }
    if (r == DPT_E_UNSUPPORTED) { /* no engine: noted, the others still built (one re-plan for all) */
      if (!*n_failed) *err = e;
      failed[(*n_failed)++] = i;
      fx->index[i] = -1;
      memset(o, 0, sizeof *o);
      continue;
    }
    if ((rc = r)) {
      *err = e;
      goto fail;
    }
    o->graph = 1;
    fx->n_graph++;
    o->sb_io = sb_io;
    if (prologue_bn(op) >= 0) fx->n_prologue++, fx->n_sb_io += sb_io;
    if (sb_io) fx->eq_io[prologue_bn(op)] = 1; /* that BN's finalize casts its scale / bias for it */
    fx->n++;
    if (o->cg.workspace > fx->workspace) fx->workspace = o->cg.workspace;
    if (o->cg.from_cache) fx->from_cache++;
    else fx->timed++;
  }
  if (*n_failed) {
    rc = DPT_E_UNSUPPORTED;
    goto fail;
  }
  if (!(fx->run = malloc((size_t)(m->n_layers ? m->n_layers : 1) * sizeof *fx->run))) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "fused step: out of memory for the running statistics' ranges");
    goto fail;
  }
  fx->n_run = dpt_cuda_fuse_running_ranges(m, fp, fx->run, &fx->run_last);
  return 0;
fail:
  dpt_cuda_fstep_destroy(fx);
  return rc;
}

/* BN bn's equivalent scale and bias, fp32 [2][C] as its finalize (or the eval-mode kernel) wrote
 * them, into DPT_FX_EQ_IO in the I/O type, one launch, for the prologue ops that read them so (sb_io). */
static cudaError_t eq_to_io(struct dpt_cuda_fstep *fx, int bn)
{
  struct dpt_fx_ref s = bnv(bn, DPT_FX_EQ_SCALE), sio = bnv(bn, DPT_FX_EQ_IO);
  return (cudaError_t)dpt_cuda_f32_to(fx->io.resolve(fx->io.ctx, &s), fx->io.resolve(fx->io.ctx, &sio), fx->io_type,
                                      1.0f, 2 * (size_t)fx->m->layers[bn].c_out, fx->stream);
}

int dpt_cuda_fstep_run(struct dpt_cuda_fstep *fx, int i, int training, struct dpt_err *err)
{
  const struct dpt_model *m = fx->m;
  int k = i >= 0 && i < fx->plan->fuse->n_ops ? fx->index[i] : -1;
  if (k < 0) return dpt_err_set(err, DPT_E_INPUT, "fused step: op %d is not one of the executor's", i);
  const struct dpt_fop *op = &fx->plan->fuse->ops[i];
  struct dpt_cuda_fstep_op *o = &fx->op[k];
  cudaError_t ce = cudaSuccess;
  const char *what = dpt_fop_name(op->kind);
  if (!o->graph && op->kind == DPT_FOP_DBN_WEIGHT) { /* no engine for its graph: the own kernel */
    void *p[DPT_CG_NSLOTS];
    const struct dpt_cg_desc *d = &o->cg.d;
    resolve_all(fx, o->ref, p);
    struct dpt_cuda_dbn_args a = {p[DPT_CG_DY], d->relu ? p[DPT_CG_Y] : NULL, p[DPT_CG_X], d->fork ? p[DPT_CG_G] : NULL,
                                  fx->io_type, d->c, (size_t)d->n * d->h * d->w, p[DPT_CG_MEAN], p[DPT_CG_ISTD],
                                  p[DPT_CG_GAMMA], p[DPT_CG_DGAMMA], p[DPT_CG_DBETA], p[DPT_CG_C_DY], p[DPT_CG_C_X],
                                  p[DPT_CG_C_B]};
    ce = (cudaError_t)dpt_cuda_dbn_weight(&a, fx->ctx.workspace, fx->ctx.workspace_limit, fx->stream);
    what = "dBN weight kernel (no cuDNN engine for its graph)";
    goto done;
  }
  if (!o->graph) { /* grad_acc: the shortcut's gradient += g */
    const struct dpt_cuda_tensor_plan *t = &fx->plan->t[o->ref[0].id];
    void *dx = fx->io.resolve(fx->io.ctx, &o->ref[0]), *g = fx->io.resolve(fx->io.ctx, &o->ref[1]);
    ce = (cudaError_t)dpt_cuda_acc(dx, g, fx->io_type, (size_t)t->n * t->c_stored * t->h * t->w, fx->stream);
    goto done;
  }
  if (!training && op->kind == DPT_FOP_BN_FINALIZE) { /* validation: the running statistics */
    void *ptrs[DPT_CG_NSLOTS];
    resolve_all(fx, o->ref, ptrs);
    ce = (cudaError_t)dpt_cuda_bn_eq_infer(ptrs[DPT_CG_GAMMA], ptrs[DPT_CG_BETA], ptrs[DPT_CG_RMEAN], ptrs[DPT_CG_RVAR],
                                           fx->eps, o->cg.d.c, ptrs[DPT_CG_EQ_SCALE], ptrs[DPT_CG_EQ_BIAS], fx->stream);
    what = "eval-mode BN scale/bias kernel";
    if (ce == cudaSuccess && fx->eq_io[op->bn[0]]) ce = eq_to_io(fx, op->bn[0]);
    goto done;
  }
  {
    void *ptrs[DPT_CG_NSLOTS];
    int rc;
    resolve_all(fx, o->ref, ptrs);
    if ((rc = dpt_cg_execute(&fx->ctx, &o->cg, ptrs, err))) return rc;
    if (op->kind == DPT_FOP_BN_FINALIZE && fx->eq_io[op->bn[0]]) {
      what = "BN scale/bias cast to the I/O type";
      if ((ce = eq_to_io(fx, op->bn[0])) != cudaSuccess) goto done;
    }
    if (training && i == fx->run_last) { /* every finalize ran: their updates to the running statistics */
      for (int r = 0; r < fx->n_run && ce == cudaSuccess; r++) {
        struct dpt_fx_ref to = ref_of(DPT_FXR_STATE, -1, fx->run[r].off);
        struct dpt_fx_ref from = ref_of(DPT_FXR_STATE_NEXT, -1, fx->run[r].off);
        ce = cudaMemcpyAsync(fx->io.resolve(fx->io.ctx, &to), fx->io.resolve(fx->io.ctx, &from),
                             fx->run[r].n * sizeof(float), cudaMemcpyDeviceToDevice, fx->stream);
      }
      what = "running statistics' copy";
    }
    if (o->pack) { /* KRSC weight gradient -> the fp32 KCRS gradient slab (loss-scaled in mixed precision) */
      const struct dpt_layer_desc *l = &m->layers[op->conv];
      const struct dpt_cuda_tensor_plan *x = &fx->plan->t[l->in[0]];
      struct dpt_fx_ref g = ref_of(DPT_FXR_GRAD, op->conv, l->w_off);
      ce = (cudaError_t)dpt_cuda_nhwc_to_nchw32(ptrs[DPT_CG_DW], fx->io_type, fx->io.resolve(fx->io.ctx, &g), l->c_out,
                                                x->c, (size_t)l->kernel * l->kernel, x->c_stored, 1.0f, fx->stream);
      what = "weight-gradient packing";
    }
  }
done:
  if (ce != cudaSuccess)
    return dpt_err_set(err, DPT_E_RUNTIME, "fused step: %s of layer '%s' failed on device %d: %s", what,
                       m->layers[op->layer].name, fx->ctx.device, cudaGetErrorString(ce));
  return 0;
}
