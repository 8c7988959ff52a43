/* dpt_backend_cuda.c — the CUDA backend (see dpt_backend_cuda.h): its ops table, errors and
 * allocations, the forward and backward walks, the slabs.  Its other rooms: the set-up (options,
 * device checks, allocations, layers, the fused step's graphs) in dpt_backend_cuda_create.c; the
 * input's staging and upload in dpt_backend_cuda_input.c; CUDA-graph steps in
 * dpt_backend_cuda_gstep.c; the loss and the loss scaler in dpt_backend_cuda_loss.c; the optimizers
 * in dpt_backend_cuda_optim.c.
 *
 * cuDNN 9 still ships the legacy convolution / batch-norm / activation /
 * pooling API used here (libcudnn_cnn / libcudnn_ops) and tags it deprecated
 * in favour of the graph API; the tags only become compiler attributes when
 * CUDNN_WARN_DEPRECATED is defined, which we do not, so this file builds with
 * the project's full -Wall -Wextra -Werror and no warning is silenced.
 *
 * Plan first (dpt_cuda_plan.c, host-only and tested without a GPU): tensor
 * layouts (NHWC; fp32 NCHW by default), convolution shapes and the distinct-shape
 * table, memory by lifetime.  Then one allocation per plan region (a fixed
 * list, whatever the depth): parameter, gradient and state slabs, SGD
 * momentum + mask, the liveness arena (activations, their gradients and the
 * backward scratch at the offsets the plan gives), weight copies (KRSC in the
 * compute type, one shared weight-gradient buffer), BN saved statistics,
 * staging, loss buffers; then the convolution workspace sized by the
 * algorithms chosen once per distinct shape under dpt_cuda_workspace_limit().
 * Before any allocation the plan's bytes are compared with the free device
 * memory: a batch that cannot fit is refused with the bytes it needs and the
 * largest batch that fits (dpt_cuda_plan_fit).
 *
 * Gradients of activations are delivered with cuDNN's beta blending: a layer
 * writes its input's gradient with beta = 0 the first time and beta = 1 when
 * another consumer already wrote it (residual forks), so no extra
 * accumulation pass is needed. */

#include "dpt_backend_cuda_priv.h"

/* The loss scale on the device (mixed precision), else NULL (= 1). */
static const float *dscale(const struct cu_backend *cb)
{
  return cb->plan.precision == DPT_CUDA_MIXED ? &cb->scaler->scale : NULL;
}


/* ---- error reporting: call, layer, shape ---------------------------------- */

void dpt_cuda_layer_shape(const struct cu_backend *cb, int li, char *buf, size_t len)
{
  const struct dpt_model *m = cb->pub.model;
  if (li < 0 || li >= m->n_layers) {
    snprintf(buf, len, "batch %d", cb->pub.opts.batch);
    return;
  }
  const struct dpt_layer_desc *d = &m->layers[li];
  const struct dpt_cuda_tensor_plan *x = &cb->plan.t[d->in[0]], *y = &cb->plan.t[d->out];
  int o = snprintf(buf, len, "%s [%d,%d,%d,%d] -> [%d,%d,%d,%d] %s %s", dpt_layer_type_name(d->type),
                   x->n, x->c_stored, x->h, x->w, y->n, y->c_stored, y->h, y->w,
                   y->nhwc ? "NHWC" : "NCHW", y->elem_bytes == 4 ? "fp32" : cb->dtype == DPT_DT_BF16 ? "bf16" : "fp16");
  if (d->type == DPT_LAYER_CONV && o > 0 && (size_t)o < len)
    snprintf(buf + o, len - (size_t)o, ", filter %dx%d stride %d pad %d", d->kernel, d->kernel,
             d->stride, d->pad);
}

int dpt_cuda_call_fail(struct cu_backend *cb, int li, const char *what, const char *call,
                     const char *why, struct dpt_err *err)
{
  char shape[192];
  dpt_cuda_layer_shape(cb, li, shape, sizeof shape);
  const char *name = li >= 0 && li < cb->pub.model->n_layers ? cb->pub.model->layers[li].name : what;
  return dpt_err_set(err, DPT_E_RUNTIME, "cuda backend: %s failed in layer '%s' (%s) on device %d: %s",
                     call, name, shape, cb->dev, why);
}


int dpt_cuda_dalloc(struct cu_backend *cb, void **p, size_t bytes, const char *what, struct dpt_err *err)
{
  int rc = 0;
  *p = NULL;
  if (!bytes) bytes = 256;
  if (cb->n_allocs == MAX_ALLOCS)
    return dpt_err_set(err, DPT_E_RUNTIME, "cuda backend: too many allocations (%s)", what);
  cudaError_t e = cudaMalloc(p, bytes);
  if (e != cudaSuccess) {
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    return dpt_err_set(err, e == cudaErrorMemoryAllocation ? DPT_E_NOMEM : DPT_E_RUNTIME,
                       "cuda backend: cudaMalloc of %zu bytes for %s failed on device %d (%zu of "
                       "%zu bytes free, %zu already ours): %s; use a smaller --batch-size",
                       bytes, what, cb->dev, fr, tot, cb->bytes, cudaGetErrorString(e));
  }
  CUDA_CK(cudaMemsetAsync, (*p, 0, bytes, cb->stream), -1, what);
  cb->allocs[cb->n_allocs] = *p;
  cb->alloc_bytes[cb->n_allocs++] = bytes;
  cb->bytes += bytes;
  if (cb->bytes > cb->peak) cb->peak = cb->bytes;
  return 0;
fail:
  cudaFree(*p);
  *p = NULL;
  return rc;
}

void dpt_cuda_dfree(struct cu_backend *cb, void *p)
{
  for (int i = 0; i < cb->n_allocs; i++)
    if (cb->allocs[i] == p) {
      cudaFree(p);
      cb->bytes -= cb->alloc_bytes[i];
      cb->allocs[i] = cb->allocs[--cb->n_allocs];
      cb->alloc_bytes[i] = cb->alloc_bytes[cb->n_allocs];
      return;
    }
}

/* Every host wait on the stream goes through here: counted (tests check the
 * waits per step), and the error names the context. */
int dpt_cuda_stream_sync(struct cu_backend *cb, int li, const char *what, struct dpt_err *err)
{
  int rc = 0;
  if (cb->graphs.capturing)
    return dpt_err_set(err, DPT_E_RUNTIME, "cuda backend: a host wait (%s) inside a CUDA-graph segment being "
                       "captured: the step's calls do not follow its capture plan; run with --cuda-graph off", what);
  cb->host_syncs++;
  CUDA_CK(cudaStreamSynchronize, (cb->stream), li, what);
  return 0;
fail:
  return rc;
}

/* ---- the step's walks -------------------------------------------------------- */

static int forward_layers(struct cu_backend *cb, int training, float *out, struct dpt_err *err);

/* forward / forward_device in a graph step: the batch (host images: staged and uploaded; a
 * device batch: copied into the arena's input tensor, the one address the graph reads), the
 * learning rate, then the forward's work. */
static int graph_forward(struct cu_backend *cb, const float *x, const void *xd, void *ready, int training, float *out,
                         struct dpt_err *err)
{
  int rc = 0, act;
  cudaEvent_t up;
  if (out) {
    rc = dpt_err_set(err, DPT_E_INPUT, "cuda backend: a step announced for CUDA-graph capture cannot hand its logits "
                     "to the host (forward with out)");
    goto fail;
  }
  if ((rc = dpt_cuda_gstep_item(cb, DPT_HOST_INPUT, -1, &act, err))) goto fail;
  if (xd) {
    cb->t[0].buf = cb->in_own;
    if (ready) CUDA_CK(cudaStreamWaitEvent, (cb->stream, (cudaEvent_t)ready, 0), -1, "device input ready event");
    CUDA_CK(cudaMemcpyAsync, (cb->in_own, xd, cb->plan.t[0].bytes, cudaMemcpyDeviceToDevice, cb->stream), -1,
            "device input");
  } else {
    cb->t[0].buf = cb->in_own;
    if ((rc = dpt_cuda_input_stage(cb, x, &up, err))) goto fail;
    dpt_cuda_gstep_wait(cb, up);
  }
  if (training) {
    if ((rc = dpt_cuda_gstep_item(cb, DPT_HOST_SCALARS, -1, &act, err))) goto fail;
    KERN_CK(dpt_cuda_set_f32, (cb->lr_dev, cb->step_lr, cb->stream), -1, "learning rate");
  }
  if ((rc = dpt_cuda_gstep_item(cb, DPT_CAP_FORWARD, -1, &act, err))) goto fail;
  if (act != DPT_CAPA_SKIP) {
    if (!xd && (rc = dpt_cuda_input_cast(cb, act == DPT_CAPA_RECORD, err))) goto fail;
    rc = forward_layers(cb, training, NULL, err);
  }
fail:
  return dpt_cuda_gstep_end(cb, rc, err);
}

/* The layers from the input tensor (t[0].buf) on, then the logits in fp32 on the device
 * (out32) for the device loss, and on the host when asked (out: a host wait). */
static int forward_layers(struct cu_backend *cb, int training, float *out, struct dpt_err *err)
{
  struct dpt_backend *be = &cb->pub;
  const struct dpt_model *m = be->model;
  int rc = 0, o = out_tid(cb);
  const struct dpt_cuda_tensor_plan *op = &cb->plan.t[o];
  for (int i = 0; i < m->n_layers; i++) {
    struct dpt_layer *l = &be->layers[i];
    if ((rc = l->ops->forward(l, training, err))) goto fail;
  }
  /* logits in fp32 on the device (out32) for the device loss, and on the host when asked */
  if (op->elem_bytes == 4)
    CUDA_CK(cudaMemcpyAsync, (cb->out32, cb->t[o].buf, op->bytes, cudaMemcpyDeviceToDevice, cb->stream),
            -1, "output");
  else
    KERN_CK(dpt_cuda_nhwc_to_nchw32, (cb->t[o].buf, tensor_dtype(cb, o), cb->out32, op->n, op->c,
                                      (size_t)op->h * op->w, op->c_stored, 1.0f, cb->stream), -1, "output");
  if (out) { /* the host wants the logits: wait for them (the device loss path passes NULL: no wait) */
    CUDA_CK(cudaMemcpyAsync, (out, cb->out32, n_elems(op) * 4, cudaMemcpyDeviceToHost, cb->stream), -1,
            "output");
    return dpt_cuda_stream_sync(cb, -1, "end of forward (an asynchronous fault in any layer; DPT_CUDA_SYNC_DEBUG=1 "
                       "names it)", err);
  }
  return 0;
fail:
  return rc;
}

static int cu_forward(struct dpt_backend *be, const float *x, int training, float *out,
                      struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0;
  cudaEvent_t up;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "forward");
  if (cb->gstep) return graph_forward(cb, x, NULL, NULL, training, out, err);
  cb->t[0].buf = cb->in_own; /* the input tensor is ours again (after a forward_device) */
  /* the images: staged, uploaded on the upload stream, then cast on the stream */
  if ((rc = dpt_cuda_input_stage(cb, x, &up, err))) goto fail;
  CUDA_CK(cudaStreamWaitEvent, (cb->stream, up, 0), -1, "input");
  if ((rc = dpt_cuda_input_cast(cb, 0, err))) goto fail;
  return forward_layers(cb, training, out, err);
fail:
  return rc;
}

/* ops->forward_device: x is already the input tensor (the loader wrote it in the plan's
 * layout, type and stored channels), so the layers read it in place: no upload, no cast,
 * no device-to-device copy.  The stream waits for ready (no host wait); x stays in use
 * until the first convolution's backward (its weight gradient reads it). */
static int cu_forward_device(struct dpt_backend *be, const void *x, void *ready, int training, float *out,
                             struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0;
  if (!x) return dpt_err_set(err, DPT_E_INPUT, "cuda backend: forward_device without a batch");
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "forward from device input");
  if (cb->gstep) return graph_forward(cb, NULL, x, ready, training, out, err); /* copied: one address */
  if (ready) CUDA_CK(cudaStreamWaitEvent, (cb->stream, (cudaEvent_t)ready, 0), -1, "device input ready event");
  cb->t[0].buf = (void *)x;
  return forward_layers(cb, training, out, err);
fail:
  return rc;
}

/* Mixed precision: the parameter gradients come out of the layers loss-scaled (the
 * scale lives on the device, cuDNN takes host scalars); [lo, unscaled_lo) of the slab,
 * final by now, is divided by the scale.  Other precisions: nothing to do. */
static int unscale_down_to(struct cu_backend *cb, size_t lo, struct dpt_err *err)
{
  int rc = 0;
  if (cb->plan.precision != DPT_CUDA_MIXED || lo >= cb->unscaled_lo) return 0;
  float *g = cb->pub.grads + lo;
  KERN_CK(dpt_cuda_f32_to_ds, (g, g, DPT_DT_F32, 1.0f, dscale(cb), 1, cb->unscaled_lo - lo, cb->stream), -1,
          "gradient unscale");
  cb->unscaled_lo = lo;
  return 0;
fail:
  return rc;
}

/* The backward walk's cuda part at a gradient bucket: unscale the bucket's range (mixed),
 * then an event right behind its gradients (the communicator's stream waits for it). */
static int graph_items_until(struct cu_backend *cb, int kind, int index, struct dpt_err *err);

static int cu_bucket_done(struct dpt_backend *be, int k, void **ready, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0;
  if ((rc = graph_items_until(cb, DPT_CAP_EVENT, k, err))) return rc; /* a graph step: its items so far */
  if ((rc = unscale_down_to(cb, be->buckets[k].off, err))) return rc;
  CUDA_CK(cudaEventRecord, (cb->bucket_ev[k], cb->stream), be->buckets[k].first_layer, "gradient bucket event");
  *ready = (void *)cb->bucket_ev[k];
  return 0;
fail:
  return rc;
}

/* Report the step's backward items up to and including (kind, index); kind < 0: all the rest. */
static int graph_items_until(struct cu_backend *cb, int kind, int index, struct dpt_err *err)
{
  int rc = 0, act;
  while (cb->gstep && cb->bw_done < cb->bw_n) {
    const struct dpt_cap_item *it = &cb->bw_items[cb->bw_done++];
    if ((rc = dpt_cuda_gstep_item(cb, it->kind, it->index, &act, err))) return rc;
    if (it->kind == kind && it->index == index) break;
  }
  return 0;
}

static int backward_walk(struct cu_backend *cb, const float *dout, float *dx, struct dpt_err *err);

/* backward in a graph step: the walk (eager, capture) or its items alone (replay). */
static int graph_backward(struct cu_backend *cb, const float *dout, float *dx, struct dpt_err *err)
{
  int rc = 0;
  if (dout || dx) {
    rc = dpt_err_set(err, DPT_E_INPUT, "cuda backend: a step announced for CUDA-graph capture takes its output "
                     "gradient from loss() and gives no input gradient");
    goto done;
  }
  int n = dpt_cuda_capture_call_items(&cb->step, DPT_CAPC_BACKWARD, NULL, 0);
  if (n > cb->bw_cap) {
    struct dpt_cap_item *it = realloc(cb->bw_items, (size_t)n * sizeof *it);
    if (!it) {
      rc = dpt_err_set(err, DPT_E_NOMEM, "cuda backend: out of memory for %d backward items", n);
      goto done;
    }
    cb->bw_items = it;
    cb->bw_cap = n;
  }
  cb->bw_n = dpt_cuda_capture_call_items(&cb->step, DPT_CAPC_BACKWARD, cb->bw_items, cb->bw_cap);
  cb->bw_done = 0;
  if (cb->gmode != DPT_CAPM_REPLAY) rc = backward_walk(cb, NULL, NULL, err);
  if (!rc) rc = graph_items_until(cb, -1, 0, err);
done:
  return dpt_cuda_gstep_end(cb, rc, err);
}

static int cu_backward(struct dpt_backend *be, const float *dout, float *dx, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  if (cb->gstep) return graph_backward(cb, dout, dx, err);
  return backward_walk(cb, dout, dx, err);
}

static int backward_walk(struct cu_backend *cb, const float *dout, float *dx, struct dpt_err *err)
{
  struct dpt_backend *be = &cb->pub;
  int rc = 0, o = out_tid(cb);
  const struct dpt_cuda_tensor_plan *op = &cb->plan.t[o], *ip = &cb->plan.t[0];
  if (dx && !be->opts.need_input_grad)
    return dpt_err_set(err, DPT_E_INPUT, "cuda backend: input gradient asked for but the backend "
                       "was created without need_input_grad");
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "backward");
  if (dout)
    CUDA_CK(cudaMemcpyAsync, (cb->dout32, dout, n_elems(op) * 4, cudaMemcpyHostToDevice, cb->stream),
            -1, "output gradient");
  /* else: loss() left it in dout32 */
  if (op->elem_bytes == 4 && !dscale(cb)) /* fp32 logits, no loss scale: the gradient as it is */
    CUDA_CK(cudaMemcpyAsync, (cb->t[o].diff, cb->dout32, op->bytes, cudaMemcpyDeviceToDevice, cb->stream),
            -1, "output gradient");
  else /* mixed: every gradient below carries the loss scale (read on the device) */
    KERN_CK(dpt_cuda_nchw32_to_nhwc_ds, (cb->dout32, cb->t[o].diff, tensor_dtype(cb, o), op->n, op->c,
                                         (size_t)op->h * op->w, op->c_stored, 1.0f, dscale(cb), 0, cb->stream), -1,
            "output gradient");
  cb->unscaled_lo = be->model->n_params;
  if ((rc = dpt_backend_backward_walk(be, cu_bucket_done, err)) || (rc = unscale_down_to(cb, 0, err))) goto fail;
  if (dx) {
    if (!ip->nhwc) /* NCHW fp32: no layout change, no loss scale */
      CUDA_CK(cudaMemcpyAsync, (cb->dx32, cb->t[0].diff, n_elems(ip) * 4, cudaMemcpyDeviceToDevice, cb->stream), -1,
              "input gradient");
    else
      KERN_CK(dpt_cuda_nhwc_to_nchw32_ds, (cb->t[0].diff, tensor_dtype(cb, 0), cb->dx32, ip->n, ip->c,
                                           (size_t)ip->h * ip->w, ip->c_stored, 1.0f, dscale(cb), 1, cb->stream), -1,
              "input gradient");
    CUDA_CK(cudaMemcpyAsync, (dx, cb->dx32, n_elems(ip) * 4, cudaMemcpyDeviceToHost, cb->stream), -1,
            "input gradient");
    if ((rc = dpt_cuda_stream_sync(cb, -1, "end of backward", err))) goto fail;
  }
  return 0;
fail:
  return rc;
}


static int cu_copy_slab(struct dpt_backend *be, enum dpt_slab which, float *host, int to_backend,
                        struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  if (which == DPT_SLAB_VELOCITY) return dpt_backend_cuda_copy_velocity(be, host, to_backend, err);
  if (which == DPT_SLAB_PENDING && !be->pending)
    return dpt_err_set(err, DPT_E_INPUT, "cuda backend: pending slab asked for before pending_init");
  float *s = which == DPT_SLAB_PARAMS ? be->params : which == DPT_SLAB_GRADS ? be->grads
             : which == DPT_SLAB_PENDING ? be->pending : be->state;
  size_t n = (which == DPT_SLAB_STATE ? be->model->n_state : be->model->n_params) * sizeof(float);
  const char *what = which == DPT_SLAB_PARAMS ? "parameter slab" : which == DPT_SLAB_GRADS ? "gradient slab"
                     : which == DPT_SLAB_PENDING ? "pending gradient slab" : "state slab";
  int rc = 0;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, what);
  CUDA_CK(cudaMemcpyAsync, (to_backend ? (void *)s : (void *)host, to_backend ? (void *)host : (void *)s,
                            n, to_backend ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, cb->stream),
          -1, what);
  /* new parameters: their copies in the compute type too (the fused optimizer's copy pass) */
  if (which == DPT_SLAB_PARAMS && to_backend && (rc = dpt_cuda_refresh_copies(cb, err))) return rc;
  return dpt_cuda_stream_sync(cb, -1, what, err);
fail:
  return rc;
}

static size_t cu_memory_bytes(const struct dpt_backend *be)
{
  return CB(be)->bytes;
}

static void cu_destroy(struct dpt_backend *be)
{
  struct cu_backend *cb = CB(be);
  if (!cb) return;
  if (cb->stream) cudaStreamSynchronize(cb->stream);
  if (cb->up_stream) cudaStreamSynchronize(cb->up_stream);
  if (be->layers)
    for (int i = 0; i < be->model->n_layers; i++)
      if (be->layers[i].impl) dpt_cuda_layer_destroy(&be->layers[i]);
  if (cb->t)
    for (int i = 0; i < cb->plan.n_tensors; i++)
      if (cb->t[i].desc) cudnnDestroyTensorDescriptor(cb->t[i].desc);
  for (int i = 0; i < cb->n_ev; i++)
    if (cb->bucket_ev[i]) cudaEventDestroy(cb->bucket_ev[i]);
  if (cb->stash_ev) cudaEventDestroy(cb->stash_ev);
  for (int k = 0; k < NSTAGE; k++) {
    if (cb->x_ev[k]) cudaEventDestroy(cb->x_ev[k]);
    if (cb->lab_ev[k]) cudaEventDestroy(cb->lab_ev[k]);
  }
  if (cb->in_free) cudaEventDestroy(cb->in_free);
  if (cb->lab_free) cudaEventDestroy(cb->lab_free);
  if (cb->pinned) cudaFreeHost(cb->pinned);
  if (cb->stage_mem) cudaFreeHost(cb->stage_mem);
  dpt_cuda_graphs_abort(&cb->graphs, cb->stream);
  dpt_cuda_graphs_drop(&cb->graphs, -1);
  dpt_cuda_capture_state_free(&cb->cap);
  dpt_cuda_fstep_destroy(&cb->fx);
  dpt_cuda_convg_destroy(cb);
  if (cb->ecache_open) dpt_engine_cache_close(&cb->ecache);
  if (cb->errata_loaded) dpt_cudnn_errata_free(&cb->errata);
  dpt_cuda_optim_tables_free(&cb->otab);
  dpt_cuda_lars_tables_free(&cb->ltab);
  dpt_optim_layout_free(&cb->olay);
  while (cb->n_allocs) dpt_cuda_dfree(cb, cb->allocs[0]);
  if (cb->blas) cublasDestroy(cb->blas);
  if (cb->relu) cudnnDestroyActivationDescriptor(cb->relu);
  if (cb->dnn) cudnnDestroy(cb->dnn);
  if (cb->stream) cudaStreamDestroy(cb->stream);
  if (cb->up_stream) cudaStreamDestroy(cb->up_stream);
  dpt_cuda_plan_free(&cb->plan);
  free(cb->t);
  free(cb->l);
  free(cb->algo);
  free(cb->bucket_ev);
  free(cb->bw_items);
  free(cb->legacy);
  free(be->layers);
  free(cb);
}

static int cu_sync(struct dpt_backend *be, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "sync");
  return dpt_cuda_stream_sync(cb, -1, "end of backward (an asynchronous fault in any layer; DPT_CUDA_SYNC_DEBUG=1 "
                     "names it)", err);
fail:
  return rc;
}

static size_t cu_peak_bytes(const struct dpt_backend *be)
{
  return CB(be)->peak;
}

/* Double buffering with nccl: the pending slab on the device, refilled from the
 * gradient slab on the backend's stream (after the SGD step that read it). */
static int cu_pending_init(struct dpt_backend *be, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0;
  void *p;
  if (be->pending) return 0;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "pending gradient slab");
  if ((rc = dpt_cuda_dalloc(cb, &p, be->model->n_params * sizeof(float), "pending gradient slab", err))) return rc;
  be->pending = p;
  CUDA_CK(cudaMemsetAsync, (p, 0, be->model->n_params * sizeof(float), cb->stream), -1, "pending gradient slab");
  CUDA_CK(cudaEventCreateWithFlags, (&cb->stash_ev, cudaEventDisableTiming), -1, "pending gradient event");
  return dpt_cuda_stream_sync(cb, -1, "pending gradient slab", err);
fail:
  return rc;
}

static int cu_stash_grads(struct dpt_backend *be, void **ready, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0;
  *ready = NULL;
  if (!be->pending) return dpt_err_set(err, DPT_E_INPUT, "cuda backend: stash_grads before pending_init");
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "pending gradient");
  CUDA_CK(cudaMemcpyAsync, (be->pending, be->grads, be->model->n_params * sizeof(float), cudaMemcpyDeviceToDevice,
                            cb->stream), -1, "pending gradient <- gradient slab");
  CUDA_CK(cudaEventRecord, (cb->stash_ev, cb->stream), -1, "pending gradient event");
  *ready = (void *)cb->stash_ev;
  return 0;
fail:
  return rc;
}

/* dpt_backend_set_buckets: one event per bucket (recorded in backward). */
static int cu_buckets_changed(struct dpt_backend *be, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0;
  if (be->n_buckets <= cb->n_ev) return 0;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "gradient bucket events");
  cudaEvent_t *ev = realloc(cb->bucket_ev, (size_t)be->n_buckets * sizeof *ev);
  if (!ev) return dpt_err_set(err, DPT_E_NOMEM, "cuda backend: out of memory for %d bucket events", be->n_buckets);
  cb->bucket_ev = ev;
  for (; cb->n_ev < be->n_buckets; cb->n_ev++)
    CUDA_CK(cudaEventCreateWithFlags, (&cb->bucket_ev[cb->n_ev], cudaEventDisableTiming), -1,
            "gradient bucket event");
  return 0;
fail:
  return rc;
}

static const char *cu_notes(struct dpt_backend *be)
{
  return CB(be)->notes;
}

static long cu_host_waits(const struct dpt_backend *be)
{
  return CB(be)->host_syncs;
}

/* ---- the ops table ------------------------------------------------------------ */

const struct dpt_backend_ops dpt_cuda_ops = {
    .name = "cuda",
    /* the step's walks, slabs, memory (here) */
    .forward = cu_forward, .forward_device = cu_forward_device, .backward = cu_backward, .sync = cu_sync,
    .copy_slab = cu_copy_slab, .memory_bytes = cu_memory_bytes, .peak_bytes = cu_peak_bytes,
    .host_waits = cu_host_waits, .notes = cu_notes, .destroy = cu_destroy,
    .buckets_changed = cu_buckets_changed, .pending_init = cu_pending_init, .stash_grads = cu_stash_grads,
    /* the input (dpt_backend_cuda_input.c) */
    .prefetch = dpt_cuda_input_prefetch, .input_format = dpt_cuda_input_format,
    .host_alloc = dpt_cuda_host_alloc, .host_free = dpt_cuda_host_free, .pinned_bytes = dpt_cuda_pinned_bytes,
    /* CUDA-graph steps (dpt_backend_cuda_gstep.c) */
    .step_begin = dpt_cuda_gstep_begin, .join = dpt_cuda_gstep_join,
    /* the loss and the loss scaler (dpt_backend_cuda_loss.c) */
    .loss = dpt_cuda_loss_run, .loss_totals = dpt_cuda_loss_totals, .overflow_check = dpt_backend_cuda_check_overflow,
    .scaler_get = dpt_cuda_scaler_get, .scaler_set = dpt_cuda_scaler_set,
    /* the optimizers (dpt_backend_cuda_optim.c) */
    .sgd_init = dpt_cuda_sgd_init, .sgd_step = dpt_cuda_sgd_step, .lars_init = dpt_backend_cuda_lars_init,
    .rmsw_init = dpt_backend_cuda_rmsw_init};

long dpt_backend_cuda_host_syncs(const struct dpt_backend *be)
{
  return CB(be)->host_syncs;
}

long dpt_backend_cuda_stage_waits(const struct dpt_backend *be)
{
  return CB(be)->stage_waits;
}
