/* dpt_cpu_layers.c — the CPU backend's layers on oneDNN 2.6 (see dpt_backend_cpu.c for the
 * layout and fusion rules): convolution (oneDNN's direct kernels, or Winograd F(4x4,3x3) by
 * dpt_wino for 3x3/1 on blocked layouts), batch normalisation (+ fused ReLU), ReLU, max /
 * global-average pooling, inner product, residual add (+ fused ReLU). */
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_cpu_priv.h"

/* ---- weights in backward (convolution and inner product) ---------------- */

/* The weight gradient just computed in the primitive's layout -> the plain slab. */
static int dw_to_slab(struct cpu_backend *cb, struct cpu_layer *L, const char *name, struct dpt_err *err)
{
  if (!L->dw_reorder) return 0;
  dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, L->dw_prim}, {DNNL_ARG_TO, L->dw_user}};
  return dpt_cpu_exec(cb, L->dw_reorder, 2, a, "weight gradient reorder", name, err);
}

/* The weights in backward-data's layout: the forward's copy, or a reorder of the slab into
 * the shared buffer when backward-data wants another layout. */
static int w_for_bwd_data(struct cpu_backend *cb, struct cpu_layer *L, const char *name, dnnl_memory_t *w,
                          struct dpt_err *err)
{
  *w = L->w_prim;
  if (!L->w_reorder_bwd) return 0;
  dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, L->w_user}, {DNNL_ARG_TO, L->w_prim_bwd}};
  *w = L->w_prim_bwd;
  return dpt_cpu_exec(cb, L->w_reorder_bwd, 2, a, "weight reorder", name, err);
}

/* ---- convolution -------------------------------------------------------- */

static int conv_forward(struct dpt_layer *l, int training, struct dpt_err *err)
{
  struct cpu_layer *L = l->impl;
  struct cpu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  int rc;
  if (L->use_wino) {
    if ((rc = dpt_wino_forward(&L->wino, cb->t[d->in[0]].buf, l->params, cb->t[d->out].buf, cb->wino_ws, err)))
      dpt_err_prefix(err, "layer '%s'", d->name);
    return rc;
  }
  if (L->w_reorder) {
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, L->w_user}, {DNNL_ARG_TO, L->w_prim}};
    if ((rc = dpt_cpu_exec(cb, L->w_reorder, 2, a, "weight reorder", d->name, err))) return rc;
  }
  dnnl_memory_t src = cb->t[d->in[0]].mem;
  if (L->src_reorder) {
    dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, L->src_priv}};
    if ((rc = dpt_cpu_exec(cb, L->src_reorder, 2, r, "input reorder", d->name, err))) return rc;
    src = L->src_priv;
  }
  dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, src},
                          {DNNL_ARG_WEIGHTS, L->w_prim},
                          {DNNL_ARG_DST, cb->t[d->out].mem}};
  return dpt_cpu_exec(cb, L->fwd, 3, a, "convolution forward", d->name, err);
}

static int conv_backward_wino(struct dpt_layer *l, struct dpt_err *err)
{
  struct cpu_layer *L = l->impl;
  struct cpu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  struct cpu_tensor *in = &cb->t[d->in[0]], *out = &cb->t[d->out];
  int acc = 0, rc;
  float *dx = NULL;
  if (in->need_diff) {
    acc = cb->pub.grad_written[d->in[0]];
    cb->pub.grad_written[d->in[0]] = 1;
    dx = acc ? cb->scratch : in->diff;
  }
  if ((rc = dpt_wino_backward(&L->wino, in->buf, l->params, out->diff, dx, l->grads, cb->wino_ws, err))) {
    dpt_err_prefix(err, "layer '%s'", d->name);
    return rc;
  }
  if (acc) dpt_cpu_diff_accumulate(cb, d->in[0], cb->scratch);
  return 0;
}

static int conv_backward(struct dpt_layer *l, struct dpt_err *err)
{
  struct cpu_layer *L = l->impl;
  struct cpu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  struct cpu_tensor *in = &cb->t[d->in[0]], *out = &cb->t[d->out];
  int rc;
  if (L->use_wino) return conv_backward_wino(l, err);
  {
    dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, L->src_priv ? L->src_priv : in->mem},
                            {DNNL_ARG_DIFF_DST, out->diff_mem},
                            {DNNL_ARG_DIFF_WEIGHTS, L->dw_prim}};
    if ((rc = dpt_cpu_exec(cb, L->bwd_w, 3, a, "convolution backward weights", d->name, err))) return rc;
  }
  if ((rc = dw_to_slab(cb, L, d->name, err))) return rc;
  if (!in->need_diff) return 0;
  dnnl_memory_t w;
  if ((rc = w_for_bwd_data(cb, L, d->name, &w, err))) return rc;
  int acc;
  dnnl_memory_t tgt = dpt_cpu_diff_target(cb, d->in[0], L->scratch_mem, &acc);
  dnnl_exec_arg_t a[3] = {{DNNL_ARG_DIFF_DST, out->diff_mem},
                          {DNNL_ARG_WEIGHTS, w},
                          {DNNL_ARG_DIFF_SRC, L->dsrc_priv ? L->dsrc_priv : tgt}};
  if ((rc = dpt_cpu_exec(cb, L->bwd, 3, a, "convolution backward data", d->name, err))) return rc;
  if (L->dsrc_reorder) {
    dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, L->dsrc_priv}, {DNNL_ARG_TO, tgt}};
    if ((rc = dpt_cpu_exec(cb, L->dsrc_reorder, 2, r, "input gradient reorder", d->name, err))) return rc;
  }
  if (acc) dpt_cpu_diff_accumulate(cb, d->in[0], cb->scratch);
  return 0;
}

/* A 3x3 convolution (pad 1) whose input has a blocked layout (nChw8c, nChw16c) with 64 or more
 * channels in and out runs by Winograd (dpt_wino; DPT_CPU_CONV=winograd: at any channel count,
 * direct: never): F(4x4,3x3) at stride 1, the polyphase F(4,2) parts at stride 2 (measured on
 * the 2-core Xeon capped to AVX2, batch 32, 1 thread, forward + backward: ResNet-50's three
 * stride-2 3x3 layers at 32 px 239 ms against oneDNN's direct 308 ms); the output keeps the
 * input's layout. */
static int conv_create_wino(struct cpu_backend *cb, struct cpu_layer *L, struct dpt_layer *l, struct dpt_err *err)
{
  const struct dpt_model *m = cb->pub.model;
  const struct dpt_layer_desc *d = l->desc;
  const struct dpt_tensor_desc *x = &m->tensors[d->in[0]], *y = &m->tensors[d->out];
  struct cpu_tensor *in = &cb->t[d->in[0]];
  struct dpt_err e2 = {0};
  dnnl_memory_desc_t blk_md, out_md;
  dnnl_dims_t sd = {cb->pub.opts.batch, x->c, x->h, x->w}, dd = {cb->pub.opts.batch, y->c, y->h, y->w};
  int s2 = d->stride == 2 && y->h == (x->h + 1) / 2 && y->w == (x->w + 1) / 2;
  if (cb->conv_mode == DPT_CPU_CONV_DIRECT || d->kernel != 3 || d->pad != 1 || !in->has_md ||
      !(s2 || (d->stride == 1 && x->h == y->h && x->w == y->w)))
    return 0;
  /* auto: only where the products are wide enough to pay for the transforms' memory traffic.
   * Measured (AMD EPYC, batch 32): ResNet-50's 64-channel 3x3 at 32x32, 2 threads, AVX2: forward +
   * backward 9.1 + 16.7 ms by Winograd, 11.1 + 24.2 ms direct; the main job's network (width 1/8:
   * 8 to 64 channels, 1 thread): 383 img/s with Winograd on all of them, 431 from 16 channels,
   * 479 from 32, 505 from 64, 481 direct. */
  if (cb->conv_mode == DPT_CPU_CONV_AUTO && (x->c < 64 || y->c < 64))
    return 0;
  for (int blk = 8; blk <= 16; blk += 8) {
    dnnl_format_tag_t tag = blk == 8 ? dnnl_aBcd8b : dnnl_aBcd16b;
    dnnl_memory_desc_init_by_tag(&blk_md, 4, sd, dnnl_f32, tag);
    if (!dnnl_memory_desc_equal(&blk_md, &in->md) ||
        (s2 ? dpt_wino_init_s2(&L->wino, cb->pub.opts.batch, x->c, y->c, x->h, x->w, blk, &e2)
            : dpt_wino_init(&L->wino, cb->pub.opts.batch, x->c, y->c, x->h, x->w, blk, cb->wino_m, &e2)))
      continue;
    dnnl_memory_desc_init_by_tag(&out_md, 4, dd, dnnl_f32, tag);
    int rc = dpt_cpu_tensor_set(cb, d->out, &out_md, err);
    if (rc) return rc;
    size_t b = dpt_wino_workspace(&L->wino);
    if (b > cb->wino_bytes) cb->wino_bytes = b;
    L->use_wino = 1;
    return 0;
  }
  return 0;
}

static int conv_create(struct cpu_backend *cb, struct cpu_layer *L, struct dpt_layer *l,
                       struct dpt_err *err)
{
  const struct dpt_model *m = cb->pub.model;
  const struct dpt_layer_desc *d = l->desc;
  const struct dpt_tensor_desc *x = &m->tensors[d->in[0]], *y = &m->tensors[d->out];
  struct cpu_tensor *in = &cb->t[d->in[0]];
  int N = cb->pub.opts.batch, rc = 0, slow = 3;
  struct dpt_cpu_conv_pds best = {0};
  dnnl_primitive_desc_t rpd = NULL;
  dnnl_memory_desc_t w_any, w_user;
  dnnl_dims_t sd = {N, x->c, x->h, x->w}, wd = {d->c_out, x->c, d->kernel, d->kernel},
              dd = {N, y->c, y->h, y->w};
  dnnl_dims_t strides = {d->stride, d->stride}, pl = {d->pad, d->pad};
  dnnl_dims_t pr = {(y->h - 1) * d->stride + d->kernel - x->h - d->pad,
                    (y->w - 1) * d->stride + d->kernel - x->w - d->pad};
  dnnl_memory_desc_init_by_tag(&w_any, 4, wd, dnnl_f32, dnnl_format_tag_any);
  dnnl_memory_desc_init_by_tag(&w_user, 4, wd, dnnl_f32, dnnl_oihw);
  int need_bwd_d = in->need_diff;
  if ((rc = conv_create_wino(cb, L, l, err)) || L->use_wino) return rc;

  /* Layouts: the input tensor's (no reorder) and oneDNN's choice of output, unless a
   * pass then runs oneDNN's reference code (e.g. 8 channels: AVX-512 kernels want 16, the
   * AVX2 ones nChw8c; the 1-channel stem's weight gradient on AVX2 wants channels-last in
   * and out); then the first (input, output) layout pair with JIT kernels for forward,
   * backward-data and backward-weights, on a private reordered copy of the input
   * (dpt_cpu_conv_choose).  What still runs reference code is said at start (notes). */
  if (dpt_cpu_conv_choose(cb->eng, in->has_md ? &in->md : NULL, sd, &w_any, dd,
                          cb->nhwc ? dnnl_nhwc : dnnl_format_tag_any, strides, pl, pr, need_bwd_d, !cb->nhwc,
                          &best, &slow)) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "oneDNN has no convolution for '%s' (%dx%dx%d -> %dx%dx%d)",
                     d->name, x->c, x->h, x->w, y->c, y->h, y->w);
    goto fail;
  }
  const dnnl_memory_desc_t *csrc = dpt_cpu_query_md(best.fwd, dnnl_query_src_md, 0);
  if (!in->has_md) {
    if ((rc = dpt_cpu_tensor_set(cb, d->in[0], csrc, err))) goto fail;
  } else if (!dnnl_memory_desc_equal(csrc, &in->md)) {
    size_t bytes = dnnl_memory_desc_get_size(csrc);
    L->src_buf = dpt_cpu_alloc(cb, bytes);
    L->dsrc_buf = need_bwd_d ? dpt_cpu_alloc(cb, bytes) : NULL;
    if (!L->src_buf || (need_bwd_d && !L->dsrc_buf)) {
      rc = dpt_err_set(err, DPT_E_NOMEM, "cpu backend: out of memory");
      goto fail;
    }
    DN(dnnl_memory_create(&L->src_priv, csrc, cb->eng, L->src_buf), d->name);
    DN(dnnl_reorder_primitive_desc_create(&rpd, &in->md, cb->eng, csrc, cb->eng, NULL), d->name);
    DN(dpt_cpu_prim_create(cb, &L->src_reorder, rpd, d->name), d->name);
    dnnl_primitive_desc_destroy(rpd);
    rpd = NULL;
    if (need_bwd_d) {
      DN(dnnl_memory_create(&L->dsrc_priv, csrc, cb->eng, L->dsrc_buf), d->name);
      DN(dnnl_reorder_primitive_desc_create(&rpd, csrc, cb->eng, &in->md, cb->eng, NULL), d->name);
      DN(dpt_cpu_prim_create(cb, &L->dsrc_reorder, rpd, d->name), d->name);
      dnnl_primitive_desc_destroy(rpd);
      rpd = NULL;
    }
  }
  if ((rc = dpt_cpu_tensor_set(cb, d->out, dpt_cpu_query_md(best.fwd, dnnl_query_dst_md, 0), err))) goto fail;
  DN(dpt_cpu_prim_create(cb, &L->fwd, best.fwd, d->name), d->name);
  DN(dpt_cpu_prim_create(cb, &L->bwd_w, best.bwd_w, d->name), d->name);
  const dnnl_memory_desc_t *bwd_w_md = NULL;
  if (need_bwd_d) {
    DN(dpt_cpu_prim_create(cb, &L->bwd, best.bwd_d, d->name), d->name);
    bwd_w_md = dpt_cpu_query_md(best.bwd_d, dnnl_query_weights_md, 0);
    if ((rc = dpt_cpu_scratch_mem(cb, &L->scratch_mem, d->in[0], d->name, err))) goto fail;
  }
  rc = dpt_cpu_weights_setup(cb, L, d->name, &w_user, dpt_cpu_query_md(best.fwd, dnnl_query_weights_md, 0), bwd_w_md,
                     dpt_cpu_query_md(best.bwd_w, dnnl_query_diff_weights_md, 0), l->params, l->grads, err);
fail:
  if (rpd) dnnl_primitive_desc_destroy(rpd);
  dpt_cpu_conv_pds_free(&best);
  return rc;
}

/* ---- batch normalisation (+ fused ReLU) ---------------------------------- */

static int bn_forward(struct dpt_layer *l, int training, struct dpt_err *err)
{
  struct cpu_layer *L = l->impl;
  struct cpu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  int rc;
  if (training) {
    dnnl_exec_arg_t a[7] = {{DNNL_ARG_SRC, cb->t[d->in[0]].mem}, {DNNL_ARG_DST, cb->t[d->out].mem},
                            {DNNL_ARG_SCALE, L->w_user},       {DNNL_ARG_SHIFT, L->b_mem},
                            {DNNL_ARG_MEAN, L->mean_mem},      {DNNL_ARG_VARIANCE, L->var_mem},
                            {DNNL_ARG_WORKSPACE, L->ws_mem}};
    if ((rc = dpt_cpu_exec(cb, L->fwd, d->relu ? 7 : 6, a, "batch-norm forward", d->name, err))) return rc;
    /* Running statistics as PyTorch: unbiased variance, momentum 0.1. */
    const struct dpt_tensor_desc *x = &cb->pub.model->tensors[d->in[0]];
    double n = (double)cb->pub.opts.batch * x->h * x->w;
    float mom = cb->pub.opts.bn_momentum, unb = n > 1 ? (float)(n / (n - 1)) : 1.0f;
    float *rm = l->state, *rv = l->state + d->c_out;
    for (int c = 0; c < d->c_out; c++) {
      rm[c] = (1.0f - mom) * rm[c] + mom * L->mean[c];
      rv[c] = (1.0f - mom) * rv[c] + mom * L->var[c] * unb;
    }
    return 0;
  }
  dnnl_exec_arg_t a[6] = {{DNNL_ARG_SRC, cb->t[d->in[0]].mem}, {DNNL_ARG_DST, cb->t[d->out].mem},
                          {DNNL_ARG_SCALE, L->w_user},       {DNNL_ARG_SHIFT, L->b_mem},
                          {DNNL_ARG_MEAN, L->rmean_mem},     {DNNL_ARG_VARIANCE, L->rvar_mem}};
  return dpt_cpu_exec(cb, L->fwd_inf, 6, a, "batch-norm inference", d->name, err);
}

static int bn_backward(struct dpt_layer *l, struct dpt_err *err)
{
  struct cpu_layer *L = l->impl;
  struct cpu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  int acc, rc;
  struct cpu_tensor *in = &cb->t[d->in[0]];
  /* without an input gradient, dgamma/dbeta are still needed: dx goes to scratch */
  dnnl_memory_t tgt = in->need_diff ? dpt_cpu_diff_target(cb, d->in[0], L->scratch_mem, &acc) : L->scratch_mem;
  if (!in->need_diff) acc = 0;
  dnnl_exec_arg_t a[10] = {{DNNL_ARG_SRC, in->mem},
                           {DNNL_ARG_DIFF_DST, cb->t[d->out].diff_mem},
                           {DNNL_ARG_MEAN, L->mean_mem},
                           {DNNL_ARG_VARIANCE, L->var_mem},
                           {DNNL_ARG_SCALE, L->w_user},
                           {DNNL_ARG_SHIFT, L->b_mem},
                           {DNNL_ARG_DIFF_SRC, tgt},
                           {DNNL_ARG_DIFF_SCALE, L->dw_user},
                           {DNNL_ARG_DIFF_SHIFT, L->db_mem},
                           {DNNL_ARG_WORKSPACE, L->ws_mem}};
  if ((rc = dpt_cpu_exec(cb, L->bwd, d->relu ? 10 : 9, a, "batch-norm backward", d->name, err))) return rc;
  if (acc) dpt_cpu_diff_accumulate(cb, d->in[0], cb->scratch);
  return 0;
}

static int bn_create(struct cpu_backend *cb, struct cpu_layer *L, struct dpt_layer *l,
                     struct dpt_err *err)
{
  const struct dpt_layer_desc *d = l->desc;
  struct cpu_tensor *in = &cb->t[d->in[0]];
  int rc = 0, C = d->c_out;
  float eps = cb->pub.opts.bn_eps;
  unsigned flags = dnnl_use_scale | dnnl_use_shift | (d->relu ? dnnl_fuse_norm_relu : 0);
  dnnl_primitive_desc_t fpd = NULL, ipd = NULL, bpd = NULL;
  dnnl_batch_normalization_desc_t bd;
  dnnl_memory_desc_t cmd;
  dnnl_dims_t cd = {C};
  dnnl_memory_desc_init_by_tag(&cmd, 1, cd, dnnl_f32, dnnl_x);
  if (!in->has_md) {
    const struct dpt_tensor_desc *x = &cb->pub.model->tensors[d->in[0]];
    dnnl_memory_desc_t md;
    dpt_cpu_md_plain(&md, cb->pub.opts.batch, x->c, x->h, x->w, 0);
    if ((rc = dpt_cpu_tensor_set(cb, d->in[0], &md, err))) return rc;
  }
  if ((rc = dpt_cpu_tensor_set(cb, d->out, &in->md, err))) return rc;

  DN(dnnl_batch_normalization_forward_desc_init(&bd, dnnl_forward_training, &in->md, eps, flags), d->name);
  DN(dnnl_primitive_desc_create(&fpd, &bd, NULL, cb->eng, NULL), d->name);
  DN(dpt_cpu_prim_create(cb, &L->fwd, fpd, d->name), d->name);
  DN(dnnl_batch_normalization_forward_desc_init(&bd, dnnl_forward_inference, &in->md, eps,
                                                flags | dnnl_use_global_stats), d->name);
  DN(dnnl_primitive_desc_create(&ipd, &bd, NULL, cb->eng, NULL), d->name);
  DN(dpt_cpu_prim_create(cb, &L->fwd_inf, ipd, d->name), d->name);
  DN(dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &in->md, &in->md, eps, flags), d->name);
  DN(dnnl_primitive_desc_create(&bpd, &bd, NULL, cb->eng, fpd), d->name);
  DN(dpt_cpu_prim_create(cb, &L->bwd, bpd, d->name), d->name);

  L->mean = dpt_cpu_alloc(cb, C * sizeof(float));
  L->var = dpt_cpu_alloc(cb, C * sizeof(float));
  if (!L->mean || !L->var) { rc = dpt_err_set(err, DPT_E_NOMEM, "cpu backend: out of memory"); goto fail; }
  DN(dnnl_memory_create(&L->mean_mem, &cmd, cb->eng, L->mean), d->name);
  DN(dnnl_memory_create(&L->var_mem, &cmd, cb->eng, L->var), d->name);
  DN(dnnl_memory_create(&L->rmean_mem, &cmd, cb->eng, l->state), d->name);
  DN(dnnl_memory_create(&L->rvar_mem, &cmd, cb->eng, l->state + C), d->name);
  DN(dnnl_memory_create(&L->w_user, &cmd, cb->eng, l->params), d->name);
  DN(dnnl_memory_create(&L->b_mem, &cmd, cb->eng, l->params + C), d->name);
  DN(dnnl_memory_create(&L->dw_user, &cmd, cb->eng, l->grads), d->name);
  DN(dnnl_memory_create(&L->db_mem, &cmd, cb->eng, l->grads + C), d->name);
  if (d->relu) {
    const dnnl_memory_desc_t *wmd = dpt_cpu_query_md(fpd, dnnl_query_workspace_md, 0);
    L->ws = dpt_cpu_alloc(cb, dnnl_memory_desc_get_size(wmd));
    if (!L->ws) { rc = dpt_err_set(err, DPT_E_NOMEM, "cpu backend: out of memory"); goto fail; }
    DN(dnnl_memory_create(&L->ws_mem, wmd, cb->eng, L->ws), d->name);
  }
  rc = dpt_cpu_scratch_mem(cb, &L->scratch_mem, d->in[0], d->name, err);
fail:
  if (fpd) dnnl_primitive_desc_destroy(fpd);
  if (ipd) dnnl_primitive_desc_destroy(ipd);
  if (bpd) dnnl_primitive_desc_destroy(bpd);
  return rc;
}

/* ---- ReLU ----------------------------------------------------------------- */

static int relu_forward(struct dpt_layer *l, int training, struct dpt_err *err)
{
  struct cpu_layer *L = l->impl;
  struct cpu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  dnnl_exec_arg_t a[2] = {{DNNL_ARG_SRC, cb->t[d->in[0]].mem}, {DNNL_ARG_DST, cb->t[d->out].mem}};
  return dpt_cpu_exec(cb, L->fwd, 2, a, "relu forward", d->name, err);
}

static int relu_backward(struct dpt_layer *l, struct dpt_err *err)
{
  struct cpu_layer *L = l->impl;
  struct cpu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  if (!cb->t[d->in[0]].need_diff) return 0;
  int acc, rc;
  dnnl_memory_t tgt = dpt_cpu_diff_target(cb, d->in[0], L->scratch_mem, &acc);
  dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, cb->t[d->in[0]].mem},
                          {DNNL_ARG_DIFF_DST, cb->t[d->out].diff_mem},
                          {DNNL_ARG_DIFF_SRC, tgt}};
  if ((rc = dpt_cpu_exec(cb, L->bwd, 3, a, "relu backward", d->name, err))) return rc;
  if (acc) dpt_cpu_diff_accumulate(cb, d->in[0], cb->scratch);
  return 0;
}

static int ensure_plain(struct cpu_backend *cb, int tid, struct dpt_err *err)
{
  if (cb->t[tid].has_md) return 0;
  const struct dpt_tensor_desc *x = &cb->pub.model->tensors[tid];
  dnnl_memory_desc_t md;
  dpt_cpu_md_plain(&md, cb->pub.opts.batch, x->c, x->h, x->w, dpt_cpu_is_2d(cb->pub.model, tid));
  if (cb->nhwc && md.ndims == 4) {
    dnnl_dims_t d = {cb->pub.opts.batch, x->c, x->h, x->w};
    dnnl_memory_desc_init_by_tag(&md, 4, d, dnnl_f32, dnnl_nhwc);
  }
  return dpt_cpu_tensor_set(cb, tid, &md, err);
}

static int relu_create(struct cpu_backend *cb, struct cpu_layer *L, struct dpt_layer *l,
                       struct dpt_err *err)
{
  const struct dpt_layer_desc *d = l->desc;
  int rc = 0;
  dnnl_primitive_desc_t fpd = NULL, bpd = NULL;
  dnnl_eltwise_desc_t ed;
  if ((rc = ensure_plain(cb, d->in[0], err))) return rc;
  struct cpu_tensor *in = &cb->t[d->in[0]];
  if ((rc = dpt_cpu_tensor_set(cb, d->out, &in->md, err))) return rc;
  DN(dnnl_eltwise_forward_desc_init(&ed, dnnl_forward_training, dnnl_eltwise_relu, &in->md, 0.f, 0.f), d->name);
  DN(dnnl_primitive_desc_create(&fpd, &ed, NULL, cb->eng, NULL), d->name);
  DN(dpt_cpu_prim_create(cb, &L->fwd, fpd, d->name), d->name);
  if (in->need_diff) {
    DN(dnnl_eltwise_backward_desc_init(&ed, dnnl_eltwise_relu, &in->md, &in->md, 0.f, 0.f), d->name);
    DN(dnnl_primitive_desc_create(&bpd, &ed, NULL, cb->eng, fpd), d->name);
    DN(dpt_cpu_prim_create(cb, &L->bwd, bpd, d->name), d->name);
    rc = dpt_cpu_scratch_mem(cb, &L->scratch_mem, d->in[0], d->name, err);
  }
fail:
  if (fpd) dnnl_primitive_desc_destroy(fpd);
  if (bpd) dnnl_primitive_desc_destroy(bpd);
  return rc;
}

/* ---- pooling: max (with workspace) and global average -------------------- */

static int pool_forward(struct dpt_layer *l, int training, struct dpt_err *err)
{
  struct cpu_layer *L = l->impl;
  struct cpu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, cb->t[d->in[0]].mem},
                          {DNNL_ARG_DST, cb->t[d->out].mem},
                          {DNNL_ARG_WORKSPACE, L->ws_mem}};
  return dpt_cpu_exec(cb, L->fwd, L->ws_mem ? 3 : 2, a, "pooling forward", d->name, err);
}

static int pool_backward(struct dpt_layer *l, struct dpt_err *err)
{
  struct cpu_layer *L = l->impl;
  struct cpu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  if (!cb->t[d->in[0]].need_diff) return 0;
  int acc, rc;
  dnnl_memory_t tgt = dpt_cpu_diff_target(cb, d->in[0], L->scratch_mem, &acc);
  dnnl_exec_arg_t a[3] = {{DNNL_ARG_DIFF_DST, cb->t[d->out].diff_mem},
                          {DNNL_ARG_DIFF_SRC, tgt},
                          {DNNL_ARG_WORKSPACE, L->ws_mem}};
  if ((rc = dpt_cpu_exec(cb, L->bwd, L->ws_mem ? 3 : 2, a, "pooling backward", d->name, err))) return rc;
  if (acc) dpt_cpu_diff_accumulate(cb, d->in[0], cb->scratch);
  return 0;
}

static int pool_create(struct cpu_backend *cb, struct cpu_layer *L, struct dpt_layer *l,
                       struct dpt_err *err)
{
  const struct dpt_model *m = cb->pub.model;
  const struct dpt_layer_desc *d = l->desc;
  const struct dpt_tensor_desc *x = &m->tensors[d->in[0]], *y = &m->tensors[d->out];
  int rc = 0, N = cb->pub.opts.batch;
  dnnl_primitive_desc_t fpd = NULL, bpd = NULL;
  dnnl_pooling_desc_t pdsc;
  int maxp = d->type == DPT_LAYER_MAXPOOL;
  int k_h = maxp ? d->kernel : x->h, k_w = maxp ? d->kernel : x->w;
  int s = maxp ? d->stride : 1, p = maxp ? d->pad : 0;
  dnnl_dims_t strides = {s, s}, kernel = {k_h, k_w}, pl = {p, p};
  dnnl_dims_t pr = {(y->h - 1) * s + k_h - x->h - p, (y->w - 1) * s + k_w - x->w - p};
  dnnl_dims_t dd = {N, y->c, y->h, y->w};
  dnnl_memory_desc_t dst_any;
  dnnl_alg_kind_t alg = maxp ? dnnl_pooling_max : dnnl_pooling_avg_exclude_padding;
  if ((rc = ensure_plain(cb, d->in[0], err))) return rc;
  struct cpu_tensor *in = &cb->t[d->in[0]];
  dnnl_memory_desc_init_by_tag(&dst_any, 4, dd, dnnl_f32, dnnl_format_tag_any);
  DN(dnnl_pooling_forward_desc_init(&pdsc, dnnl_forward_training, alg, &in->md, &dst_any, strides,
                                    kernel, pl, pr), d->name);
  DN(dnnl_primitive_desc_create(&fpd, &pdsc, NULL, cb->eng, NULL), d->name);
  if ((rc = dpt_cpu_tensor_set(cb, d->out, dpt_cpu_query_md(fpd, dnnl_query_dst_md, 0), err))) goto fail;
  DN(dpt_cpu_prim_create(cb, &L->fwd, fpd, d->name), d->name);
  const dnnl_memory_desc_t *wmd = dpt_cpu_query_md(fpd, dnnl_query_workspace_md, 0);
  if (wmd && dnnl_memory_desc_get_size(wmd) > 0) {
    L->ws = dpt_cpu_alloc(cb, dnnl_memory_desc_get_size(wmd));
    if (!L->ws) { rc = dpt_err_set(err, DPT_E_NOMEM, "cpu backend: out of memory"); goto fail; }
    DN(dnnl_memory_create(&L->ws_mem, wmd, cb->eng, L->ws), d->name);
  }
  if (in->need_diff) {
    DN(dnnl_pooling_backward_desc_init(&pdsc, alg, &in->md, &cb->t[d->out].md, strides, kernel, pl, pr), d->name);
    DN(dnnl_primitive_desc_create(&bpd, &pdsc, NULL, cb->eng, fpd), d->name);
    DN(dpt_cpu_prim_create(cb, &L->bwd, bpd, d->name), d->name);
    rc = dpt_cpu_scratch_mem(cb, &L->scratch_mem, d->in[0], d->name, err);
  }
fail:
  if (fpd) dnnl_primitive_desc_destroy(fpd);
  if (bpd) dnnl_primitive_desc_destroy(bpd);
  return rc;
}

/* ---- inner product (FC with bias) ---------------------------------------- */

static int fc_forward(struct dpt_layer *l, int training, struct dpt_err *err)
{
  struct cpu_layer *L = l->impl;
  struct cpu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  int rc;
  if (L->w_reorder) {
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, L->w_user}, {DNNL_ARG_TO, L->w_prim}};
    if ((rc = dpt_cpu_exec(cb, L->w_reorder, 2, a, "weight reorder", d->name, err))) return rc;
  }
  dnnl_exec_arg_t a[4] = {{DNNL_ARG_SRC, cb->t[d->in[0]].mem},
                          {DNNL_ARG_WEIGHTS, L->w_prim},
                          {DNNL_ARG_BIAS, L->b_mem},
                          {DNNL_ARG_DST, cb->t[d->out].mem}};
  return dpt_cpu_exec(cb, L->fwd, 4, a, "inner product forward", d->name, err);
}

static int fc_backward(struct dpt_layer *l, struct dpt_err *err)
{
  struct cpu_layer *L = l->impl;
  struct cpu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  struct cpu_tensor *in = &cb->t[d->in[0]], *out = &cb->t[d->out];
  int rc;
  {
    dnnl_exec_arg_t a[4] = {{DNNL_ARG_SRC, in->mem},
                            {DNNL_ARG_DIFF_DST, out->diff_mem},
                            {DNNL_ARG_DIFF_WEIGHTS, L->dw_prim},
                            {DNNL_ARG_DIFF_BIAS, L->db_mem}};
    if ((rc = dpt_cpu_exec(cb, L->bwd_w, 4, a, "inner product backward weights", d->name, err))) return rc;
  }
  if ((rc = dw_to_slab(cb, L, d->name, err))) return rc;
  if (!in->need_diff) return 0;
  dnnl_memory_t w;
  if ((rc = w_for_bwd_data(cb, L, d->name, &w, err))) return rc;
  int acc;
  dnnl_memory_t tgt = dpt_cpu_diff_target(cb, d->in[0], L->scratch_mem, &acc);
  dnnl_exec_arg_t a[3] = {{DNNL_ARG_DIFF_DST, out->diff_mem},
                          {DNNL_ARG_WEIGHTS, w},
                          {DNNL_ARG_DIFF_SRC, tgt}};
  if ((rc = dpt_cpu_exec(cb, L->bwd, 3, a, "inner product backward data", d->name, err))) return rc;
  if (acc) dpt_cpu_diff_accumulate(cb, d->in[0], cb->scratch);
  return 0;
}

static int fc_create(struct cpu_backend *cb, struct cpu_layer *L, struct dpt_layer *l,
                     struct dpt_err *err)
{
  const struct dpt_model *m = cb->pub.model;
  const struct dpt_layer_desc *d = l->desc;
  const struct dpt_tensor_desc *x = &m->tensors[d->in[0]];
  int rc = 0, N = cb->pub.opts.batch, K = d->c_out;
  dnnl_primitive_desc_t fpd = NULL, bpd = NULL, wpd = NULL;
  dnnl_inner_product_desc_t ipd;
  if ((rc = ensure_plain(cb, d->in[0], err))) return rc;
  struct cpu_tensor *in = &cb->t[d->in[0]];
  int src2d = in->md.ndims == 2;
  dnnl_memory_desc_t w_any, w_user, b_md, dst_md;
  dnnl_dims_t wd4 = {K, x->c, x->h, x->w}, wd2 = {K, x->c}, bd = {K}, dd = {N, K};
  dnnl_memory_desc_init_by_tag(&w_any, src2d ? 2 : 4, src2d ? wd2 : wd4, dnnl_f32, dnnl_format_tag_any);
  dnnl_memory_desc_init_by_tag(&w_user, src2d ? 2 : 4, src2d ? wd2 : wd4, dnnl_f32, src2d ? dnnl_oi : dnnl_oihw);
  dnnl_memory_desc_init_by_tag(&b_md, 1, bd, dnnl_f32, dnnl_x);
  dnnl_memory_desc_init_by_tag(&dst_md, 2, dd, dnnl_f32, dnnl_nc);
  if ((rc = dpt_cpu_tensor_set(cb, d->out, &dst_md, err))) return rc;
  DN(dnnl_inner_product_forward_desc_init(&ipd, dnnl_forward_training, &in->md, &w_any, &b_md, &dst_md), d->name);
  DN(dnnl_primitive_desc_create(&fpd, &ipd, NULL, cb->eng, NULL), d->name);
  DN(dpt_cpu_prim_create(cb, &L->fwd, fpd, d->name), d->name);
  DN(dnnl_inner_product_backward_weights_desc_init(&ipd, &in->md, &w_any, &b_md, &dst_md), d->name);
  DN(dnnl_primitive_desc_create(&wpd, &ipd, NULL, cb->eng, fpd), d->name);
  DN(dpt_cpu_prim_create(cb, &L->bwd_w, wpd, d->name), d->name);
  const dnnl_memory_desc_t *bwd_w_md = NULL;
  if (in->need_diff) {
    DN(dnnl_inner_product_backward_data_desc_init(&ipd, &in->md, &w_any, &dst_md), d->name);
    DN(dnnl_primitive_desc_create(&bpd, &ipd, NULL, cb->eng, fpd), d->name);
    DN(dpt_cpu_prim_create(cb, &L->bwd, bpd, d->name), d->name);
    bwd_w_md = dpt_cpu_query_md(bpd, dnnl_query_weights_md, 0);
    if ((rc = dpt_cpu_scratch_mem(cb, &L->scratch_mem, d->in[0], d->name, err))) goto fail;
  }
  DN(dnnl_memory_create(&L->b_mem, &b_md, cb->eng, l->params + d->w_len), d->name);
  DN(dnnl_memory_create(&L->db_mem, &b_md, cb->eng, l->grads + d->w_len), d->name);
  rc = dpt_cpu_weights_setup(cb, L, d->name, &w_user, dpt_cpu_query_md(fpd, dnnl_query_weights_md, 0), bwd_w_md,
                     dpt_cpu_query_md(wpd, dnnl_query_diff_weights_md, 0), l->params, l->grads, err);
fail:
  if (fpd) dnnl_primitive_desc_destroy(fpd);
  if (bpd) dnnl_primitive_desc_destroy(bpd);
  if (wpd) dnnl_primitive_desc_destroy(wpd);
  return rc;
}

/* ---- residual add (+ fused ReLU) ----------------------------------------- */

static int add_forward(struct dpt_layer *l, int training, struct dpt_err *err)
{
  struct cpu_layer *L = l->impl;
  struct cpu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  dnnl_memory_t b = cb->t[d->in[1]].mem;
  if (L->src_reorder) { /* branches in different layouts: bring the shortcut to the main one */
    dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, b}, {DNNL_ARG_TO, L->src_priv}};
    int rc = dpt_cpu_exec(cb, L->src_reorder, 2, r, "shortcut reorder", d->name, err);
    if (rc) return rc;
    b = L->src_priv;
  }
  dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC_0, cb->t[d->in[0]].mem},
                          {DNNL_ARG_SRC_1, b},
                          {DNNL_ARG_DST, cb->t[d->out].mem}};
  return dpt_cpu_exec(cb, L->fwd, 3, a, "binary add forward", d->name, err);
}

static int add_backward(struct dpt_layer *l, struct dpt_err *err)
{
  struct cpu_layer *L = l->impl;
  struct cpu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  struct cpu_tensor *out = &cb->t[d->out];
  int rc, done0 = 0;
  /* g = relu'(out) * dout in out's layout; the first input usually takes it directly. */
  dnnl_memory_t g_mem = out->diff_mem;
  float *g = out->diff;
  if (d->relu) {
    struct cpu_tensor *in0 = &cb->t[d->in[0]];
    if (in0->need_diff && !cb->pub.grad_written[d->in[0]] && !L->g_reorder[0]) {
      g_mem = in0->diff_mem;
      g = in0->diff;
      cb->pub.grad_written[d->in[0]] = 1;
      done0 = 1;
    } else {
      g_mem = L->g_mem;
      g = cb->scratch2;
    }
    dnnl_exec_arg_t a[3] = {{DNNL_ARG_DST, out->mem},
                            {DNNL_ARG_DIFF_DST, out->diff_mem},
                            {DNNL_ARG_DIFF_SRC, g_mem}};
    if ((rc = dpt_cpu_exec(cb, L->bwd, 3, a, "relu backward (add)", d->name, err))) return rc;
  }
  for (int k = done0; k < 2; k++) {
    int tid = d->in[k];
    struct cpu_tensor *in = &cb->t[tid];
    if (!in->need_diff) continue;
    if (!L->g_reorder[k]) { /* same layout as the output */
      if (cb->pub.grad_written[tid]) dpt_cpu_diff_accumulate(cb, tid, g);
      else if (in->diff != g) memcpy(in->diff, g, in->bytes);
      cb->pub.grad_written[tid] = 1;
      continue;
    }
    int acc;
    dnnl_memory_t tgt = dpt_cpu_diff_target(cb, tid, k ? L->scratch_mem1 : L->scratch_mem, &acc);
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, g_mem}, {DNNL_ARG_TO, tgt}};
    if ((rc = dpt_cpu_exec(cb, L->g_reorder[k], 2, a, "gradient reorder (add)", d->name, err))) return rc;
    if (acc) dpt_cpu_diff_accumulate(cb, tid, cb->scratch);
  }
  return 0;
}

static int add_create(struct cpu_backend *cb, struct cpu_layer *L, struct dpt_layer *l,
                      struct dpt_err *err)
{
  const struct dpt_layer_desc *d = l->desc;
  int rc = 0;
  dnnl_primitive_desc_t fpd = NULL, epd = NULL, bpd = NULL;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_binary_desc_t bd;
  dnnl_eltwise_desc_t ed;
  if ((rc = ensure_plain(cb, d->in[0], err))) return rc;
  if ((rc = ensure_plain(cb, d->in[1], err))) return rc;
  struct cpu_tensor *a = &cb->t[d->in[0]], *b = &cb->t[d->in[1]];
  if ((rc = dpt_cpu_tensor_set(cb, d->out, &a->md, err))) return rc;
  DN(dnnl_primitive_attr_create(&attr), d->name);
  if (d->relu) {
    DN(dnnl_post_ops_create(&po), d->name);
    DN(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.f, 0.f), d->name);
    DN(dnnl_primitive_attr_set_post_ops(attr, po), d->name);
  }
  if (!dnnl_memory_desc_equal(&a->md, &b->md)) {
    dnnl_primitive_desc_t rpd = NULL;
    L->src_buf = dpt_cpu_alloc(cb, a->bytes);
    if (!L->src_buf) { rc = dpt_err_set(err, DPT_E_NOMEM, "cpu backend: out of memory"); goto fail; }
    DN(dnnl_memory_create(&L->src_priv, &a->md, cb->eng, L->src_buf), d->name);
    DN(dnnl_reorder_primitive_desc_create(&rpd, &b->md, cb->eng, &a->md, cb->eng, NULL), d->name);
    dnnl_status_t st = dpt_cpu_prim_create(cb, &L->src_reorder, rpd, d->name);
    dnnl_primitive_desc_destroy(rpd);
    DN(st, d->name);
  }
  DN(dnnl_binary_desc_init(&bd, dnnl_binary_add, &a->md, &a->md, &a->md), d->name);
  DN(dnnl_primitive_desc_create(&fpd, &bd, attr, cb->eng, NULL), d->name);
  DN(dpt_cpu_prim_create(cb, &L->fwd, fpd, d->name), d->name);
  if (d->relu) {
    DN(dnnl_eltwise_forward_desc_init(&ed, dnnl_forward_training, dnnl_eltwise_relu_use_dst_for_bwd,
                                      &a->md, 0.f, 0.f), d->name);
    DN(dnnl_primitive_desc_create(&epd, &ed, NULL, cb->eng, NULL), d->name);
    DN(dnnl_eltwise_backward_desc_init(&ed, dnnl_eltwise_relu_use_dst_for_bwd, &a->md, &a->md, 0.f, 0.f), d->name);
    DN(dnnl_primitive_desc_create(&bpd, &ed, NULL, cb->eng, epd), d->name);
    DN(dpt_cpu_prim_create(cb, &L->bwd, bpd, d->name), d->name);
  }
  if ((rc = dpt_cpu_scratch_mem(cb, &L->scratch_mem, d->in[0], d->name, err))) goto fail;
  if ((rc = dpt_cpu_scratch_mem(cb, &L->scratch_mem1, d->in[1], d->name, err))) goto fail;
  if ((rc = dpt_cpu_scratch_mem(cb, &L->g_mem, d->out, d->name, err))) goto fail;
  /* The blocked layout may differ between the branches (oneDNN picks per conv,
   * e.g. 4-channel vs 16-channel tensors at small widths): binary add accepts
   * mixed layouts; the backward reorders the gradient for the odd input. */
  for (int k = 0; k < 2; k++) {
    struct cpu_tensor *in = &cb->t[d->in[k]];
    if (!in->need_diff || dnnl_memory_desc_equal(&in->md, &a->md)) continue;
    dnnl_primitive_desc_t rpd = NULL;
    DN(dnnl_reorder_primitive_desc_create(&rpd, &a->md, cb->eng, &in->md, cb->eng, NULL), d->name);
    dnnl_status_t st = dpt_cpu_prim_create(cb, &L->g_reorder[k], rpd, d->name);
    dnnl_primitive_desc_destroy(rpd);
    DN(st, d->name);
  }
fail:
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (fpd) dnnl_primitive_desc_destroy(fpd);
  if (epd) dnnl_primitive_desc_destroy(epd);
  if (bpd) dnnl_primitive_desc_destroy(bpd);
  return rc;
}

/* ---- vtables ------------------------------------------------------------ */

void dpt_cpu_layer_destroy(struct dpt_layer *l)
{
  struct cpu_layer *L = l->impl;
  if (!L) return;
  dnnl_primitive_t prims[] = {L->fwd, L->fwd_inf, L->bwd, L->bwd_w, L->w_reorder, L->w_reorder_bwd,
                              L->dw_reorder, L->g_reorder[0], L->g_reorder[1], L->src_reorder,
                              L->dsrc_reorder};
  for (size_t i = 0; i < sizeof prims / sizeof *prims; i++)
    if (prims[i]) dnnl_primitive_destroy(prims[i]);
  dnnl_memory_t mems[] = {L->w_user, L->w_prim, L->w_prim_bwd, L->dw_user, L->dw_prim,
                          L->b_mem, L->db_mem, L->mean_mem, L->var_mem, L->rmean_mem,
                          L->rvar_mem, L->ws_mem, L->scratch_mem, L->scratch_mem1, L->g_mem,
                          L->src_priv, L->dsrc_priv};
  for (size_t i = 0; i < sizeof mems / sizeof *mems; i++)
    if (mems[i]) dnnl_memory_destroy(mems[i]);
  free(L->mean);
  free(L->var);
  free(L->ws);
  free(L->w_blk);
  free(L->w_blk_bwd);
  free(L->dw_blk);
  free(L->src_buf);
  free(L->dsrc_buf);
  l->impl = NULL;
}

static const struct dpt_layer_ops conv_ops = {conv_forward, conv_backward, dpt_cpu_layer_destroy};
static const struct dpt_layer_ops bn_ops = {bn_forward, bn_backward, dpt_cpu_layer_destroy};
static const struct dpt_layer_ops relu_ops = {relu_forward, relu_backward, dpt_cpu_layer_destroy};
static const struct dpt_layer_ops pool_ops = {pool_forward, pool_backward, dpt_cpu_layer_destroy};
static const struct dpt_layer_ops fc_ops = {fc_forward, fc_backward, dpt_cpu_layer_destroy};
static const struct dpt_layer_ops add_ops = {add_forward, add_backward, dpt_cpu_layer_destroy};


/* Give layer l its operations and primitives (its input tensor's layout is known). */
int dpt_cpu_layer_create(struct cpu_backend *cb, struct cpu_layer *L, struct dpt_layer *l, struct dpt_err *err)
{
  const struct dpt_layer_desc *d = l->desc;
  int rc;
  switch (d->type) {
  case DPT_LAYER_CONV: l->ops = &conv_ops; rc = conv_create(cb, L, l, err); break;
  case DPT_LAYER_BN: l->ops = &bn_ops; rc = bn_create(cb, L, l, err); break;
  case DPT_LAYER_RELU: l->ops = &relu_ops; rc = relu_create(cb, L, l, err); break;
  case DPT_LAYER_MAXPOOL:
  case DPT_LAYER_GAP: l->ops = &pool_ops; rc = pool_create(cb, L, l, err); break;
  case DPT_LAYER_FC: l->ops = &fc_ops; rc = fc_create(cb, L, l, err); break;
  case DPT_LAYER_ADD: l->ops = &add_ops; rc = add_create(cb, L, l, err); break;
  default: rc = dpt_err_set(err, DPT_E_INPUT, "cpu backend: unknown layer type %d", d->type);
  }
  return rc;
}
