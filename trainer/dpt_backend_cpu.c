/* dpt_backend_cpu.c — the CPU backend on oneDNN 2.6 (C API).
 *
 * Layout: the first convolution chooses its layouts (format_tag_any); every
 * later layer is created on the layout its input already has, convolutions
 * pick their output layout (any) and BN / ReLU / pooling / add keep it, so
 * the blocked layout (nChw16c on AVX-512) flows through the whole network.
 * Reorders happen only at the edges: user input -> first conv, plain PyTorch
 * weights in the slab -> the conv's blocked weights (once per forward), blocked
 * weight gradients -> the plain gradient slab, and the output tensor -> user.
 * Every primitive is created once, at backend creation, for the fixed batch.
 *
 * Fusions: BN + ReLU (dnnl_fuse_norm_relu, training and inference), residual
 * add + ReLU (binary post-op).  conv + ReLU post-op does not occur in
 * ResNet training (a BN sits between them).  3x3 convolutions (stride 1 or 2) on a blocked
 * layout with 64 or more channels run by Winograd (dpt_wino: F(4x4,3x3), and its polyphase
 * F(4,2) parts at stride 2; DPT_CPU_CONV=direct: oneDNN's direct kernels only, =winograd: at
 * any channel count).
 *
 * Files: this one is the backend (slabs, the forward and backward walks, memory plans,
 * edges, helpers); the layers are dpt_cpu_layers.c; what both share is dpt_cpu_priv.h.
 *
 * Slabs: host memory (host_slabs = 1), the optimizer is dpt_sgd_step.  Testing
 * aid: DPT_CPU_DEVICE_SLABS=1 simulates a device backend: host_slabs = 0, the
 * public params / grads / state / velocity pointers are NULL, pending a
 * PROT_NONE token (any direct host access by the trainer crashes), the waits a
 * device would make are counted (host_waits) and copy_slab() memcpy's between the caller's
 * buffers and the backend's private slabs, so dpt-train's device path (the one
 * the cuda backend takes) runs, bit for bit, on a machine without a GPU. */
#include "dpt_backend.h"

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dpt_cpu_priv.h"

/* ---- helpers ------------------------------------------------------------ */

int dpt_cpu_fail(struct dpt_err *err, dnnl_status_t st, const char *call, const char *layer)
{
  return dpt_err_set(err, DPT_E_RUNTIME, "oneDNN %s failed for layer '%s': %s", call, layer,
                     dnnl_status2str(st));
}


/* dnnl_primitive_create, with the implementation recorded (a reference kernel is said at start) */
dnnl_status_t dpt_cpu_prim_create(struct cpu_backend *cb, dnnl_primitive_t *prim,
                                  const_dnnl_primitive_desc_t pd, const char *layer)
{
  dpt_cpu_impl_record(&cb->impls, pd, layer);
  return dnnl_primitive_create(prim, pd);
}

void *dpt_cpu_alloc(struct cpu_backend *cb, size_t bytes)
{
  size_t n = (bytes + 63) / 64 * 64;
  if (n == 0) n = 64;
  void *p = aligned_alloc(64, n);
  if (p) {
    memset(p, 0, n);
    cb->bytes_total += n;
  }
  return p;
}

const dnnl_memory_desc_t *dpt_cpu_query_md(const_dnnl_primitive_desc_t pd, dnnl_query_t what, int i)
{
  return dnnl_primitive_desc_query_md(pd, what, i);
}

void dpt_cpu_md_plain(dnnl_memory_desc_t *md, int n, int c, int h, int w, int two_d)
{
  if (two_d) {
    dnnl_dims_t d = {n, c};
    dnnl_memory_desc_init_by_tag(md, 2, d, dnnl_f32, dnnl_nc);
  } else {
    dnnl_dims_t d = {n, c, h, w};
    dnnl_memory_desc_init_by_tag(md, 4, d, dnnl_f32, dnnl_nchw);
  }
}

int dpt_cpu_is_2d(const struct dpt_model *m, int tid)
{
  int p = m->tensors[tid].producer;
  return p >= 0 && m->layers[p].type == DPT_LAYER_FC;
}

int dpt_cpu_exec(struct cpu_backend *cb, dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args,
                 const char *what, const char *layer, struct dpt_err *err)
{
  dnnl_status_t st = dnnl_primitive_execute(p, cb->strm, nargs, args);
  if (st != dnnl_success) return dpt_cpu_fail(err, st, what, layer);
  return 0;
}

/* Give tensor tid its layout and buffers. */
int dpt_cpu_tensor_set(struct cpu_backend *cb, int tid, const dnnl_memory_desc_t *md, struct dpt_err *err)
{
  struct cpu_tensor *t = &cb->t[tid];
  int rc = 0;
  t->md = *md;
  t->has_md = 1;
  t->bytes = dnnl_memory_desc_get_size(md);
  /* buffer assigned by act_plan() once every tensor is known */
  DN(dnnl_memory_create(&t->mem, md, cb->eng, DNNL_MEMORY_NONE), "tensor");
  if (t->need_diff) /* buffer assigned by diff_plan() once every tensor is known */
    DN(dnnl_memory_create(&t->diff_mem, md, cb->eng, DNNL_MEMORY_NONE), "tensor diff");
  if (t->bytes > cb->scratch_bytes) cb->scratch_bytes = t->bytes;
  return 0;
fail:
  return rc;
}

/* Where a layer writes the gradient of input tensor tid: the tensor's own
 * diff buffer the first time, the scratch buffer when it must be added. */
dnnl_memory_t dpt_cpu_diff_target(struct cpu_backend *cb, int tid, dnnl_memory_t scratch_mem, int *acc)
{
  *acc = cb->pub.grad_written[tid];
  cb->pub.grad_written[tid] = 1;
  return *acc ? scratch_mem : cb->t[tid].diff_mem;
}

void dpt_cpu_diff_accumulate(struct cpu_backend *cb, int tid, const float *s)
{
  struct cpu_tensor *t = &cb->t[tid];
  size_t n = t->bytes / sizeof(float);
  float *d = t->diff;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) d[i] += s[i];
}

/* Weight plumbing shared by conv and FC: slab (plain) <-> primitive layout. */
int dpt_cpu_weights_setup(struct cpu_backend *cb, struct cpu_layer *L, const char *name,
                          const dnnl_memory_desc_t *user_md, const dnnl_memory_desc_t *fwd_md,
                          const dnnl_memory_desc_t *bwd_md, const dnnl_memory_desc_t *dw_md, float *w_slab,
                          float *dw_slab, struct dpt_err *err)
{
  int rc = 0;
  dnnl_primitive_desc_t pd = NULL;
  DN(dnnl_memory_create(&L->w_user, user_md, cb->eng, w_slab), name);
  DN(dnnl_memory_create(&L->dw_user, user_md, cb->eng, dw_slab), name);
  if (dnnl_memory_desc_equal(fwd_md, user_md)) {
    DN(dnnl_memory_create(&L->w_prim, user_md, cb->eng, w_slab), name);
  } else {
    L->w_blk = dpt_cpu_alloc(cb, dnnl_memory_desc_get_size(fwd_md));
    if (!L->w_blk) return dpt_err_set(err, DPT_E_NOMEM, "cpu backend: out of memory (weights of '%s')", name);
    DN(dnnl_memory_create(&L->w_prim, fwd_md, cb->eng, L->w_blk), name);
    DN(dnnl_reorder_primitive_desc_create(&pd, user_md, cb->eng, fwd_md, cb->eng, NULL), name);
    DN(dpt_cpu_prim_create(cb, &L->w_reorder, pd, name), name);
    dnnl_primitive_desc_destroy(pd);
    pd = NULL;
  }
  if (bwd_md) {
    if (dnnl_memory_desc_equal(bwd_md, fwd_md)) {
      L->w_prim_bwd = NULL; /* reuse w_prim */
    } else {
      /* reordered right before bwd-data and used only there: shared buffer */
      size_t wb = dnnl_memory_desc_get_size(bwd_md);
      if (wb > cb->dw_bytes) cb->dw_bytes = wb;
      DN(dnnl_memory_create(&L->w_prim_bwd, bwd_md, cb->eng, DNNL_MEMORY_NONE), name);
      DN(dnnl_reorder_primitive_desc_create(&pd, user_md, cb->eng, bwd_md, cb->eng, NULL), name);
      DN(dpt_cpu_prim_create(cb, &L->w_reorder_bwd, pd, name), name);
      dnnl_primitive_desc_destroy(pd);
      pd = NULL;
    }
  }
  if (dnnl_memory_desc_equal(dw_md, user_md)) {
    DN(dnnl_memory_create(&L->dw_prim, user_md, cb->eng, dw_slab), name);
  } else {
    /* blocked weight gradients live only between bwd-weights and the reorder
     * into the slab: one buffer shared by all layers (attached after creation) */
    size_t dwb = dnnl_memory_desc_get_size(dw_md);
    if (dwb > cb->dw_bytes) cb->dw_bytes = dwb;
    DN(dnnl_memory_create(&L->dw_prim, dw_md, cb->eng, DNNL_MEMORY_NONE), name);
    DN(dnnl_reorder_primitive_desc_create(&pd, dw_md, cb->eng, user_md, cb->eng, NULL), name);
    DN(dpt_cpu_prim_create(cb, &L->dw_reorder, pd, name), name);
    dnnl_primitive_desc_destroy(pd);
    pd = NULL;
  }
  return 0;
fail:
  if (pd) dnnl_primitive_desc_destroy(pd);
  return rc;
}

int dpt_cpu_scratch_mem(struct cpu_backend *cb, dnnl_memory_t *m, int tid, const char *name,
                        struct dpt_err *err)
{
  int rc = 0;
  /* The scratch buffer is attached after every tensor is known (handle set in create). */
  DN(dnnl_memory_create(m, &cb->t[tid].md, cb->eng, DNNL_MEMORY_NONE), name);
  return 0;
fail:
  return rc;
}

/* ---- backend ------------------------------------------------------------ */

static int cpu_forward(struct dpt_backend *be, const float *x, int training, float *out,
                       struct dpt_err *err)
{
  struct cpu_backend *cb = CB(be);
  const struct dpt_model *m = be->model;
  int rc;
  if (out) cb->waits++; /* a device backend waits for the output it hands back */
  else out = cb->last_out; /* kept for loss() */
  if (cb->pre_x && cb->pre_x == x) x = cb->pre_buf; /* the simulated device's prefetched copy */
  cb->pre_x = NULL;
  DN(dnnl_memory_set_data_handle(cb->in_user, (void *)x), "input");
  if (cb->in_reorder) {
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, cb->in_user}, {DNNL_ARG_TO, cb->t[0].mem}};
    if ((rc = dpt_cpu_exec(cb, cb->in_reorder, 2, a, "input reorder", "input", err))) goto fail;
  } else {
    memcpy(cb->t[0].buf, x, cb->t[0].bytes);
  }
  for (int i = 0; i < m->n_layers; i++) {
    struct dpt_layer *l = &be->layers[i];
    if ((rc = l->ops->forward(l, training, err))) goto fail;
  }
  {
    int o = m->layers[m->n_layers - 1].out;
    DN(dnnl_memory_set_data_handle(cb->out_user, out), "output");
    if (cb->out_reorder) {
      dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, cb->t[o].mem}, {DNNL_ARG_TO, cb->out_user}};
      if ((rc = dpt_cpu_exec(cb, cb->out_reorder, 2, a, "output reorder", "output", err))) goto fail;
    } else {
      memcpy(out, cb->t[o].buf, cb->t[o].bytes);
    }
  }
  DN(dnnl_stream_wait(cb->strm), "forward");
  return 0;
fail:
  return rc;
}

/* The backward walk's cpu part at a gradient bucket: the bucket's weight gradients are in the
 * slab once the stream is done (ready = NULL). */
static int cpu_bucket_done(struct dpt_backend *be, int bucket, void **ready, struct dpt_err *err)
{
  struct cpu_backend *cb = CB(be);
  int rc = 0;
  (void)bucket;
  *ready = NULL;
  DN(dnnl_stream_wait(cb->strm), "backward");
fail:
  return rc;
}

static int cpu_backward(struct dpt_backend *be, const float *dout, float *dx, struct dpt_err *err)
{
  struct cpu_backend *cb = CB(be);
  const struct dpt_model *m = be->model;
  int rc, o = m->layers[m->n_layers - 1].out;
  if (dx && !be->opts.need_input_grad)
    return dpt_err_set(err, DPT_E_INPUT, "cpu backend: input gradient asked for but the backend "
                       "was created without need_input_grad");
  if (!dout) dout = cb->last_dout; /* what loss() left */
  DN(dnnl_memory_set_data_handle(cb->dout_user, (void *)dout), "output gradient");
  if (cb->dout_reorder) {
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, cb->dout_user}, {DNNL_ARG_TO, cb->t[o].diff_mem}};
    if ((rc = dpt_cpu_exec(cb, cb->dout_reorder, 2, a, "output gradient reorder", "output", err))) goto fail;
  } else {
    memcpy(cb->t[o].diff, dout, cb->t[o].bytes);
  }
  if ((rc = dpt_backend_backward_walk(be, cpu_bucket_done, err))) goto fail;
  if (dx) {
    cb->waits++; /* a device backend waits for the input gradient it hands back */
    DN(dnnl_memory_set_data_handle(cb->dx_user, dx), "input gradient");
    if (cb->dx_reorder) {
      dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, cb->t[0].diff_mem}, {DNNL_ARG_TO, cb->dx_user}};
      if ((rc = dpt_cpu_exec(cb, cb->dx_reorder, 2, a, "input gradient reorder", "input", err))) goto fail;
    } else {
      memcpy(dx, cb->t[0].diff, cb->t[0].bytes);
    }
  }
  DN(dnnl_stream_wait(cb->strm), "backward");
  return 0;
fail:
  return rc;
}

/* The loss on the host over the kept output: what the cuda backend does on the device. */
static int cpu_loss(struct dpt_backend *be, const int *labels, float smoothing, float grad_scale,
                    struct dpt_err *err)
{
  struct cpu_backend *cb = CB(be);
  int t1 = 0, t5 = 0, N = be->opts.batch;
  (void)err;
  cb->tot.loss_sum += dpt_softmax_xent(cb->last_out, labels, N, cb->n_classes, smoothing, grad_scale,
                                       cb->last_dout, &t1, &t5);
  cb->tot.top1 += t1;
  cb->tot.top5 += t5;
  for (int i = 0; i < N; i++) cb->tot.rows += labels[i] >= 0 && labels[i] < cb->n_classes;
  return 0;
}

static int cpu_loss_totals(struct dpt_backend *be, struct dpt_loss_totals *t, struct dpt_err *err)
{
  struct cpu_backend *cb = CB(be);
  (void)err;
  cb->waits++;
  *t = cb->tot;
  memset(&cb->tot, 0, sizeof cb->tot);
  return 0;
}

static long cpu_host_waits(const struct dpt_backend *be)
{
  return CB(be)->waits;
}

static int cpu_copy_slab(struct dpt_backend *be, enum dpt_slab which, float *host, int to_backend,
                         struct dpt_err *err)
{
  struct cpu_backend *cb = CB(be);
  if (which == DPT_SLAB_VELOCITY && !cb->sgd_ready)
    return dpt_err_set(err, DPT_E_INPUT, "cpu backend: velocity slab asked for before sgd_init");
  if (which == DPT_SLAB_PENDING && !cb->pending)
    return dpt_err_set(err, DPT_E_INPUT, "cpu backend: pending slab asked for before pending_init");
  float *s = which == DPT_SLAB_PARAMS ? cb->params : which == DPT_SLAB_GRADS ? cb->grads
             : which == DPT_SLAB_STATE ? cb->state : which == DPT_SLAB_PENDING ? cb->pending
             : cb->sgd.velocity;
  size_t n = which == DPT_SLAB_STATE ? be->model->n_state : be->model->n_params;
  if (!host) return dpt_err_set(err, DPT_E_INPUT, "cpu backend: copy_slab with no host buffer");
  cb->waits++; /* a device backend's copy waits */
  if (host == s) return 0;
  if (to_backend) memcpy(s, host, n * sizeof(float));
  else memcpy(host, s, n * sizeof(float));
  return 0;
}

static size_t cpu_memory_bytes(const struct dpt_backend *be)
{
  return CB(be)->bytes_total;
}

static int cpu_sgd_init(struct dpt_backend *be, float momentum, float weight_decay, int nesterov,
                        const unsigned char *mask, struct dpt_err *err)
{
  struct cpu_backend *cb = CB(be);
  int rc;
  if (cb->sgd_ready) {
    if (cb->rmsw_ready) cb->bytes_total -= cb->sgd.n * sizeof(float); /* its second moment goes too */
    cb->rmsw_ready = 0;
    cb->bytes_total -= cb->sgd.n * (sizeof(float) + 1);
    dpt_sgd_free(&cb->sgd);
    cb->sgd_ready = 0;
    be->velocity = NULL;
  }
  if ((rc = dpt_sgd_init(&cb->sgd, be->model->n_params, momentum, weight_decay, mask, err))) return rc;
  cb->sgd.nesterov = nesterov;
  cb->sgd_ready = 1;
  cb->bytes_total += cb->sgd.n * (sizeof(float) + 1); /* velocity + mask */
  be->velocity = cb->device_slabs ? NULL : cb->sgd.velocity;
  return 0;
}

static int cpu_sgd_step(struct dpt_backend *be, float lr, const float *grads, struct dpt_err *err)
{
  struct cpu_backend *cb = CB(be);
  if (!cb->sgd_ready) return dpt_err_set(err, DPT_E_INPUT, "cpu backend: sgd_step before sgd_init");
  if (grads && grads == be->pending) { /* the pending slab (on the simulated device, its token) */
    grads = cb->pending;
  } else if (grads && cb->device_slabs) { /* like a real device: a host gradient goes into the slab first */
    memcpy(cb->grads, grads, be->model->n_params * sizeof(float));
    grads = NULL;
  }
  if (cb->rmsw_ready) dpt_rmsw_step(&cb->rmsw, &cb->sgd, lr, be->opt_epoch, cb->params, grads ? grads : cb->grads);
  else if (cb->lars_ready) dpt_lars_step(&cb->lars, &cb->sgd, lr, cb->params, grads ? grads : cb->grads);
  else dpt_sgd_step(&cb->sgd, lr, cb->params, grads ? grads : cb->grads);
  return 0;
}

static int cpu_rmsw_init(struct dpt_backend *be, float lr_rms, float mu2, float eps, double center, double period,
                         struct dpt_err *err)
{
  struct cpu_backend *cb = CB(be);
  size_t n = be->model->n_params;
  if (!cb->sgd_ready) return dpt_err_set(err, DPT_E_INPUT, "cpu backend: rmsw_init before sgd_init");
  if (cb->device_slabs)
    return dpt_err_set(err, DPT_E_UNSUPPORTED, "cpu backend with device slabs: no second-moment slab for RMSprop warm-up");
  if (!cb->rmsw_ready) { /* the momentum buffer grows to [momentum | second moment] */
    float *v2 = calloc(2 * (n ? n : 1), sizeof(float));
    if (!v2) return dpt_err_set(err, DPT_E_NOMEM, "cpu backend: out of memory for the second moment (%zu values)", n);
    memcpy(v2, cb->sgd.velocity, n * sizeof(float));
    free(cb->sgd.velocity);
    cb->sgd.velocity = v2;
    be->velocity = v2;
    cb->bytes_total += n * sizeof(float);
  }
  cb->rmsw_ready = 0;
  int rc = dpt_rmsw_init(&cb->rmsw, n, cb->sgd.velocity + n, lr_rms, mu2, eps, center, period, err);
  if (rc) return rc;
  cb->rmsw_ready = 1;
  return 0;
}

static int cpu_lars_init(struct dpt_backend *be, const struct dpt_param_seg *seg, int n_seg, float eta, float eps,
                         struct dpt_err *err)
{
  struct cpu_backend *cb = CB(be);
  int rc;
  if (!cb->sgd_ready) return dpt_err_set(err, DPT_E_INPUT, "cpu backend: lars_init before sgd_init");
  dpt_lars_free(&cb->lars);
  cb->lars_ready = 0;
  if ((rc = dpt_lars_init(&cb->lars, be->model->n_params, seg, n_seg, eta, eps, err))) return rc;
  cb->lars_ready = 1;
  return 0;
}

static int cpu_pending_init(struct dpt_backend *be, struct dpt_err *err)
{
  struct cpu_backend *cb = CB(be);
  if (!cb->pending && !(cb->pending = dpt_cpu_alloc(cb, (be->model->n_params ? be->model->n_params : 1) * sizeof(float))))
    return dpt_err_set(err, DPT_E_NOMEM, "cpu backend: out of memory for the pending gradient (%zu floats)",
                       be->model->n_params);
  /* the simulated device hands out an address the host cannot touch (PROT_NONE), as a
   * device pointer: the loop may only pass it back (sgd_step, stash_grads, a device
   * communicator), any dereference crashes */
  if (cb->device_slabs && !cb->pending_token) {
    void *t = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED) return dpt_err_set(err, DPT_E_NOMEM, "cpu backend: mmap of the pending slab's token failed");
    cb->pending_token = t;
  }
  be->pending = cb->device_slabs ? cb->pending_token : cb->pending;
  return 0;
}

static int cpu_stash_grads(struct dpt_backend *be, void **ready, struct dpt_err *err)
{
  struct cpu_backend *cb = CB(be);
  *ready = NULL; /* done on return */
  if (!cb->pending) return dpt_err_set(err, DPT_E_INPUT, "cpu backend: stash_grads before pending_init");
  memcpy(cb->pending, cb->grads, be->model->n_params * sizeof(float));
  return 0;
}

static int cpu_sync(struct dpt_backend *be, struct dpt_err *err)
{
  (void)err; /* oneDNN's CPU stream has finished when backward() returns */
  CB(be)->waits++;
  return 0;
}

static void cpu_destroy(struct dpt_backend *be)
{
  struct cpu_backend *cb = CB(be);
  if (!cb) return;
  if (be->layers) {
    for (int i = 0; i < be->model->n_layers; i++)
      if (be->layers[i].ops) be->layers[i].ops->destroy(&be->layers[i]);
  }
  if (cb->t) {
    for (int i = 0; i < cb->n_tensors; i++) {
      if (cb->t[i].mem) dnnl_memory_destroy(cb->t[i].mem);
      if (cb->t[i].diff_mem) dnnl_memory_destroy(cb->t[i].diff_mem);
      if (!cb->t[i].pooled) free(cb->t[i].buf);
    }
  }
  dnnl_memory_t mems[] = {cb->in_user, cb->out_user, cb->dout_user, cb->dx_user};
  for (size_t i = 0; i < 4; i++)
    if (mems[i]) dnnl_memory_destroy(mems[i]);
  dnnl_primitive_t prims[] = {cb->in_reorder, cb->out_reorder, cb->dout_reorder, cb->dx_reorder};
  for (size_t i = 0; i < 4; i++)
    if (prims[i]) dnnl_primitive_destroy(prims[i]);
  if (cb->strm) dnnl_stream_destroy(cb->strm);
  if (cb->eng) dnnl_engine_destroy(cb->eng);
  free(cb->scratch);
  free(cb->scratch2);
  free(cb->last_out);
  free(cb->pre_buf);
  free(cb->last_dout);
  free(cb->dw_shared);
  free(cb->wino_ws);
  for (int i = 0; i < cb->n_pool; i++) free(cb->pool[i]);
  free(cb->pool);
  for (int i = 0; i < cb->n_apool; i++) free(cb->apool[i]);
  free(cb->apool);
  free(cb->t);
  free(cb->l);
  free(be->layers);
  free(cb->params);
  free(cb->grads);
  free(cb->state);
  free(cb->pending);
  if (cb->pending_token) munmap(cb->pending_token, 4096);
  dpt_sgd_free(&cb->sgd);
  dpt_lars_free(&cb->lars);
  free(cb);
}

/* What oneDNN runs that is slow: one line per primitive on its reference code (dpt_cpu_impl). */
static const char *cpu_notes(struct dpt_backend *be)
{
  return CB(be)->impls.text;
}

/* DPT_CPU_DEVICE_SLABS: the simulated device takes the next batch ahead as the cuda backend does
 * (ops->prefetch): copied now, and the forward with the same x trains on the copy.  A loop that
 * hands that forward other bytes than it gave here (a loader slot refilled in between, a batch
 * kept across an epoch) trains on other data than the plain cpu run, and test_devsim's
 * byte-for-byte comparisons fail. */
static int cpu_prefetch(struct dpt_backend *be, const float *x, struct dpt_err *err)
{
  struct cpu_backend *cb = CB(be);
  const struct dpt_tensor_desc *in = &be->model->tensors[0];
  size_t bytes = (size_t)be->opts.batch * in->c * in->h * in->w * sizeof(float);
  if (!cb->pre_buf && !(cb->pre_buf = malloc(bytes)))
    return dpt_err_set(err, DPT_E_NOMEM, "cpu backend: out of memory for a prefetched batch (%zu bytes)", bytes);
  memcpy(cb->pre_buf, x, bytes);
  cb->pre_x = x;
  return 0;
}

#define CPU_OPS                                                                                                      \
  .name = "cpu", .forward = cpu_forward, .backward = cpu_backward, .copy_slab = cpu_copy_slab,                       \
  .memory_bytes = cpu_memory_bytes, .destroy = cpu_destroy, .sgd_init = cpu_sgd_init, .lars_init = cpu_lars_init,   \
  .rmsw_init = cpu_rmsw_init, .sgd_step = cpu_sgd_step, .sync = cpu_sync, .peak_bytes = cpu_memory_bytes,           \
  .pending_init = cpu_pending_init, .stash_grads = cpu_stash_grads, .loss = cpu_loss,                               \
  .loss_totals = cpu_loss_totals, .host_waits = cpu_host_waits, .notes = cpu_notes
static const struct dpt_backend_ops cpu_ops = {CPU_OPS};
static const struct dpt_backend_ops cpu_dev_ops = {CPU_OPS, .prefetch = cpu_prefetch}; /* DPT_CPU_DEVICE_SLABS */

/* plain edge view + reorder between it and a tensor's layout */
static int edge(struct cpu_backend *cb, int tid, dnnl_memory_t *user, dnnl_primitive_t *reorder,
                int to_tensor, struct dpt_err *err)
{
  const struct dpt_model *m = cb->pub.model;
  const struct dpt_tensor_desc *x = &m->tensors[tid];
  dnnl_memory_desc_t md;
  dnnl_primitive_desc_t pd = NULL;
  int rc = 0;
  dpt_cpu_md_plain(&md, cb->pub.opts.batch, x->c, x->h, x->w, cb->t[tid].md.ndims == 2);
  DN(dnnl_memory_create(user, &md, cb->eng, DNNL_MEMORY_NONE), "edge");
  if (!dnnl_memory_desc_equal(&md, &cb->t[tid].md)) {
    if (to_tensor)
      DN(dnnl_reorder_primitive_desc_create(&pd, &md, cb->eng, &cb->t[tid].md, cb->eng, NULL), "edge");
    else
      DN(dnnl_reorder_primitive_desc_create(&pd, &cb->t[tid].md, cb->eng, &md, cb->eng, NULL), "edge");
    DN(dpt_cpu_prim_create(cb, reorder, pd, "edge"), "edge");
  }
fail:
  if (pd) dnnl_primitive_desc_destroy(pd);
  return rc;
}

/* Gradient buffers by liveness.  Backward runs layers from last to first; the
 * gradient of tensor t is written first by its last consumer (highest layer
 * index) and read last by its producer, so it lives over the layer-index
 * interval [producer, last consumer].  Tensors whose intervals do not
 * overlap share one buffer (largest first, first fit), which brings gradient
 * memory from the sum over all tensors down to a few of the largest.  Every
 * tensor's gradient is fully rewritten (padding included) by its first
 * writer in each backward pass, so sharing never leaks stale values. */
/* Activation buffers.  Backward reads the inputs of conv, BN, ReLU and FC
 * layers and the output of a residual add with ReLU; max pool (workspace),
 * global average pool and add read neither.  Tensors nobody reads in backward
 * (the last BN of every residual branch, the shortcut BNs, the stem output
 * before max pool: ~1 GB at 224x224, batch 32) only live during the forward,
 * from their producer to their last consumer, and share buffers when those
 * intervals do not overlap. */
static int act_plan(struct cpu_backend *cb, struct dpt_err *err)
{
  const struct dpt_model *m = cb->pub.model;
  int n = cb->n_tensors, rc = 0, o = m->layers[m->n_layers - 1].out;
  int *keep = calloc(n, sizeof *keep), *hi = malloc(n * sizeof *hi), *owner = malloc(n * sizeof *owner);
  size_t *pb = calloc(n, sizeof *pb);
  cb->apool = calloc(n, sizeof *cb->apool);
  if (!keep || !hi || !owner || !pb || !cb->apool) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "cpu backend: out of memory");
    goto out;
  }
  keep[0] = keep[o] = 1;
  for (int t = 0; t < n; t++) hi[t] = -1, owner[t] = -1;
  for (int i = 0; i < m->n_layers; i++) {
    const struct dpt_layer_desc *d = &m->layers[i];
    for (int k = 0; k < 2; k++)
      if (d->in[k] >= 0 && i > hi[d->in[k]]) hi[d->in[k]] = i;
    if (d->type == DPT_LAYER_CONV || d->type == DPT_LAYER_BN || d->type == DPT_LAYER_RELU ||
        d->type == DPT_LAYER_FC)
      keep[d->in[0]] = 1;
    if (d->type == DPT_LAYER_ADD && d->relu) keep[d->out] = 1;
  }
  if (getenv("DPT_CPU_KEEP_ALL")) /* debugging: no sharing */
    for (int t = 0; t < n; t++) keep[t] = 1;
  for (int t = 0; t < n; t++) {
    struct cpu_tensor *T = &cb->t[t];
    if (keep[t]) {
      T->buf = dpt_cpu_alloc(cb, T->bytes);
      if (!T->buf) {
        rc = dpt_err_set(err, DPT_E_NOMEM, "cpu backend: out of memory for tensor %d (%zu bytes)", t, T->bytes);
        goto out;
      }
    } else {
      int lo = m->tensors[t].producer, p = -1;
      for (int q = 0; q < cb->n_apool && p < 0; q++) {
        int clash = 0;
        for (int u = 0; u < t && !clash; u++)
          clash = owner[u] == q && !(hi[u] < lo || hi[t] < m->tensors[u].producer);
        if (!clash && pb[q] >= T->bytes) p = q;
      }
      if (p < 0) {
        size_t biggest = T->bytes; /* size new buffers for the largest transient tensor */
        for (int u = 0; u < n; u++)
          if (!keep[u] && cb->t[u].bytes > biggest) biggest = cb->t[u].bytes;
        p = cb->n_apool++;
        pb[p] = biggest;
        cb->apool[p] = dpt_cpu_alloc(cb, biggest);
        if (!cb->apool[p]) {
          rc = dpt_err_set(err, DPT_E_NOMEM, "cpu backend: out of memory (%zu bytes)", biggest);
          goto out;
        }
      }
      owner[t] = p;
      T->buf = cb->apool[p];
      T->pooled = 1;
    }
    if (dnnl_memory_set_data_handle(T->mem, T->buf) != dnnl_success) {
      rc = dpt_err_set(err, DPT_E_RUNTIME, "cpu backend: cannot attach the buffer of tensor %d", t);
      goto out;
    }
  }
out:
  free(keep), free(hi), free(owner), free(pb);
  return rc;
}

static int diff_plan(struct cpu_backend *cb, struct dpt_err *err)
{
  const struct dpt_model *m = cb->pub.model;
  int n = cb->n_tensors, rc = 0;
  int *lo = malloc(n * sizeof *lo), *hi = malloc(n * sizeof *hi), *order = malloc(n * sizeof *order);
  int *owner = malloc(n * sizeof *owner);
  size_t *pool_bytes = calloc(n, sizeof *pool_bytes);
  cb->pool = calloc(n, sizeof *cb->pool);
  if (!lo || !hi || !order || !owner || !pool_bytes || !cb->pool) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "cpu backend: out of memory");
    goto out;
  }
  for (int t = 0; t < n; t++) {
    lo[t] = m->tensors[t].producer; /* -1 for the input: live until the end */
    hi[t] = t == m->layers[m->n_layers - 1].out ? m->n_layers : -1;
    order[t] = t;
    owner[t] = -1;
  }
  for (int i = 0; i < m->n_layers; i++)
    for (int k = 0; k < 2; k++)
      if (m->layers[i].in[k] >= 0 && i > hi[m->layers[i].in[k]]) hi[m->layers[i].in[k]] = i;
  for (int a = 1; a < n; a++) /* largest first (insertion sort: n is small) */
    for (int b = a; b > 0 && cb->t[order[b]].bytes > cb->t[order[b - 1]].bytes; b--) {
      int x = order[b];
      order[b] = order[b - 1];
      order[b - 1] = x;
    }
  for (int a = 0; a < n; a++) {
    int t = order[a], p = -1;
    if (!cb->t[t].need_diff) continue;
    for (int q = 0; q < cb->n_pool && p < 0; q++) {
      int clash = 0;
      for (int u = 0; u < n && !clash; u++)
        clash = owner[u] == q && !(hi[u] < lo[t] || hi[t] < lo[u]);
      if (!clash && pool_bytes[q] >= cb->t[t].bytes) p = q;
    }
    if (p < 0) {
      p = cb->n_pool++;
      pool_bytes[p] = cb->t[t].bytes;
      cb->pool[p] = dpt_cpu_alloc(cb, pool_bytes[p]);
      if (!cb->pool[p]) {
        rc = dpt_err_set(err, DPT_E_NOMEM, "cpu backend: out of memory for gradients (%zu bytes)", pool_bytes[p]);
        goto out;
      }
    }
    owner[t] = p;
    cb->t[t].diff = cb->pool[p];
    if (dnnl_memory_set_data_handle(cb->t[t].diff_mem, cb->t[t].diff) != dnnl_success) {
      rc = dpt_err_set(err, DPT_E_RUNTIME, "cpu backend: cannot attach gradient buffer of tensor %d", t);
      goto out;
    }
  }
out:
  free(lo), free(hi), free(order), free(owner), free(pool_bytes);
  return rc;
}

int dpt_backend_cpu_create(const struct dpt_model *m, const struct dpt_backend_opts *opts,
                           struct dpt_backend **out, struct dpt_err *err)
{
  int rc = 0;
  *out = NULL;
  if (m->n_layers < 1) return dpt_err_set(err, DPT_E_INPUT, "cpu backend: the model has no layers");
  if (opts->batch < 1) return dpt_err_set(err, DPT_E_INPUT, "cpu backend: batch size %d < 1", opts->batch);
  if (opts->precision && strcmp(opts->precision, "fp32"))
    return dpt_err_set(err, DPT_E_UNSUPPORTED, "cpu backend: precision '%s' is not supported: the cpu "
                       "backend computes in fp32 only (tf32, mixed and bf16 are cuda modes)", opts->precision);
  struct cpu_backend *cb = calloc(1, sizeof *cb);
  if (!cb) return dpt_err_set(err, DPT_E_NOMEM, "cpu backend: out of memory");
  struct dpt_backend *be = &cb->pub;
  be->ops = &cpu_ops;
  be->model = m;
  be->opts = *opts;
  be->precision = "fp32";
  cb->device_slabs = getenv("DPT_CPU_DEVICE_SLABS") && atoi(getenv("DPT_CPU_DEVICE_SLABS")) > 0;
  if (cb->device_slabs) be->ops = &cpu_dev_ops;
  be->host_slabs = !cb->device_slabs;
  if (opts->threads > 0) omp_set_num_threads(opts->threads);
  cb->n_tensors = m->n_tensors;
  cb->t = calloc((size_t)m->n_tensors, sizeof *cb->t);
  cb->l = calloc((size_t)m->n_layers, sizeof *cb->l);
  be->layers = calloc((size_t)m->n_layers, sizeof *be->layers);
  cb->params = dpt_cpu_alloc(cb, (m->n_params ? m->n_params : 1) * sizeof(float));
  cb->grads = dpt_cpu_alloc(cb, (m->n_params ? m->n_params : 1) * sizeof(float));
  cb->state = dpt_cpu_alloc(cb, (m->n_state ? m->n_state : 1) * sizeof(float));
  if (!cb->t || !cb->l || !be->layers || !cb->params || !cb->grads || !cb->state) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "cpu backend: out of memory for %zu parameters", m->n_params);
    goto fail;
  }
  dpt_model_init_params(m, m->cfg.seed, cb->params, cb->state);
  if (!cb->device_slabs) {
    be->params = cb->params;
    be->grads = cb->grads;
    be->state = cb->state;
  }
  DN(dnnl_engine_create(&cb->eng, dnnl_cpu, 0), "engine");
  DN(dnnl_stream_create(&cb->strm, cb->eng, dnnl_stream_default_flags), "stream");
  for (int i = 0; i < m->n_tensors; i++) cb->t[i].need_diff = i > 0 || opts->need_input_grad;
  if (getenv("DPT_CPU_LAYOUT")) cb->nhwc = !strcmp(getenv("DPT_CPU_LAYOUT"), "nhwc");
  if (getenv("DPT_CPU_CONV") && *getenv("DPT_CPU_CONV")) {
    const char *cv = getenv("DPT_CPU_CONV");
    if (!strcmp(cv, "direct")) cb->conv_mode = DPT_CPU_CONV_DIRECT;
    else if (!strcmp(cv, "winograd")) cb->conv_mode = DPT_CPU_CONV_WINOGRAD;
    else if (strcmp(cv, "auto")) {
      rc = dpt_err_set(err, DPT_E_INPUT, "cpu backend: DPT_CPU_CONV='%s': use 'auto' (the default: 3x3 stride-1 and "
                       "stride-2 convolutions with 64 or more channels by Winograd), 'winograd' (every 3x3 "
                       "convolution on a blocked layout) or 'direct' (oneDNN's direct kernels only)", cv);
      goto fail;
    }
  }
  cb->wino_m = 4;
  if (getenv("DPT_CPU_WINO_TILE") && *getenv("DPT_CPU_WINO_TILE")) {
    const char *tt = getenv("DPT_CPU_WINO_TILE");
    if (strcmp(tt, "2") && strcmp(tt, "4")) {
      rc = dpt_err_set(err, DPT_E_INPUT, "cpu backend: DPT_CPU_WINO_TILE='%s': use 4 (the default, F(4x4,3x3)) or 2 "
                       "(F(2x2,3x3): slower, a smaller rounding error)", tt);
      goto fail;
    }
    cb->wino_m = atoi(tt);
  }

  for (int i = 0; i < m->n_layers; i++) {
    const struct dpt_layer_desc *d = &m->layers[i];
    struct dpt_layer *l = &be->layers[i];
    struct cpu_layer *L = &cb->l[i];
    L->cb = cb;
    L->idx = i;
    l->desc = d;
    l->impl = L;
    l->params = cb->params + d->w_off;
    l->grads = cb->grads + d->w_off;
    l->state = d->type == DPT_LAYER_BN ? cb->state + d->s_off : NULL;
    rc = dpt_cpu_layer_create(cb, L, l, err);
    if (rc) {
      dpt_err_prefix(err, "creating layer %d '%s' (%s) at batch %d", i, d->name,
                     dpt_layer_type_name(d->type), opts->batch);
      goto fail;
    }
  }
  if ((rc = act_plan(cb, err)) || (rc = diff_plan(cb, err))) goto fail;
  if (cb->dw_bytes) {
    cb->dw_shared = dpt_cpu_alloc(cb, cb->dw_bytes);
    if (!cb->dw_shared) { rc = dpt_err_set(err, DPT_E_NOMEM, "cpu backend: out of memory"); goto fail; }
    for (int i = 0; i < m->n_layers; i++)
    {
      /* bwd-weights (dw) finishes and is reordered before bwd-data reorders its weights */
      if (cb->l[i].dw_reorder) DN(dnnl_memory_set_data_handle(cb->l[i].dw_prim, cb->dw_shared), "weight gradients");
      if (cb->l[i].w_reorder_bwd) DN(dnnl_memory_set_data_handle(cb->l[i].w_prim_bwd, cb->dw_shared), "weights");
    }
  }
  if (cb->wino_bytes && !(cb->wino_ws = dpt_cpu_alloc(cb, cb->wino_bytes))) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "cpu backend: out of memory (%zu bytes of Winograd workspace)", cb->wino_bytes);
    goto fail;
  }
  cb->scratch = dpt_cpu_alloc(cb, cb->scratch_bytes);
  cb->scratch2 = dpt_cpu_alloc(cb, cb->scratch_bytes);
  {
    const struct dpt_tensor_desc *ot = dpt_model_output(m);
    cb->n_classes = ot->c * ot->h * ot->w;
    cb->n_out = (size_t)opts->batch * cb->n_classes;
    cb->last_out = dpt_cpu_alloc(cb, cb->n_out * sizeof(float));
    cb->last_dout = dpt_cpu_alloc(cb, cb->n_out * sizeof(float));
  }
  if (!cb->scratch || !cb->scratch2 || !cb->last_out || !cb->last_dout) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "cpu backend: out of memory");
    goto fail;
  }
  for (int i = 0; i < m->n_layers; i++) {
    if (cb->l[i].scratch_mem) DN(dnnl_memory_set_data_handle(cb->l[i].scratch_mem, cb->scratch), "scratch");
    if (cb->l[i].scratch_mem1) DN(dnnl_memory_set_data_handle(cb->l[i].scratch_mem1, cb->scratch), "scratch");
    if (cb->l[i].g_mem) DN(dnnl_memory_set_data_handle(cb->l[i].g_mem, cb->scratch2), "scratch");
  }
  int o = m->layers[m->n_layers - 1].out;
  if ((rc = edge(cb, 0, &cb->in_user, &cb->in_reorder, 1, err))) goto fail;
  if ((rc = edge(cb, o, &cb->out_user, &cb->out_reorder, 0, err))) goto fail;
  if ((rc = edge(cb, o, &cb->dout_user, &cb->dout_reorder, 1, err))) goto fail;
  if (opts->need_input_grad && (rc = edge(cb, 0, &cb->dx_user, &cb->dx_reorder, 0, err))) goto fail;
  if (getenv("DPT_CPU_MEMSTATS")) { /* where the memory goes (for the PyTorch comparison) */
    size_t act = 0, wblk = 0, ws = 0, priv = 0, pool = 0;
    for (int i = 0; i < cb->n_tensors; i++) act += cb->t[i].bytes;
    for (int i = 0; i < cb->n_tensors; i++)
      if (cb->t[i].need_diff) {
        int first = 1; /* count each pool buffer once: the tensor that created it is its size */
        for (int j = 0; j < i; j++) first &= !(cb->t[j].need_diff && cb->t[j].diff == cb->t[i].diff);
        if (first) pool += cb->t[i].bytes;
      }
    for (int i = 0; i < m->n_layers; i++) {
      const dnnl_memory_desc_t *md;
      struct cpu_layer *L = &cb->l[i];
      dnnl_memory_t ms[] = {L->w_blk ? L->w_prim : NULL, NULL, NULL};
      for (int k = 0; k < 3; k++)
        if (ms[k] && dnnl_memory_get_memory_desc(ms[k], &md) == dnnl_success) wblk += dnnl_memory_desc_get_size(md);
      if (L->ws_mem && dnnl_memory_get_memory_desc(L->ws_mem, &md) == dnnl_success) ws += dnnl_memory_desc_get_size(md);
      if (L->src_priv && dnnl_memory_get_memory_desc(L->src_priv, &md) == dnnl_success)
        priv += dnnl_memory_desc_get_size(md) * (L->dsrc_priv ? 2 : 1);
    }
    size_t shared = 0;
    for (int i = 0; i < cb->n_tensors; i++) shared += cb->t[i].pooled ? cb->t[i].bytes : 0;
    fprintf(stderr, "cpu backend memory: total %.1f MB: activation tensors %.1f (%.1f of them forward-only, "
            "in %d shared buffers) + gradients <= %.1f (%d shared buffers) + blocked weights %.1f "
            "(+%.1f shared for their gradients) + workspaces %.1f + Winograd workspace %.1f + private inputs %.1f + "
            "scratch %.1f + slabs %.1f MB\n", cb->bytes_total / 1e6, act / 1e6, shared / 1e6, cb->n_apool, pool / 1e6,
            cb->n_pool, wblk / 1e6, cb->dw_bytes / 1e6, ws / 1e6, cb->wino_bytes / 1e6, priv / 1e6,
            2.0 * cb->scratch_bytes / 1e6,
            (2 * m->n_params + m->n_state) * 4 / 1e6);
  }
  *out = be;
  return 0;
fail:
  cpu_destroy(be);
  return rc;
}
