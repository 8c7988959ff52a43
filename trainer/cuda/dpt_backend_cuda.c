/* dpt_backend_cuda.c — the CUDA backend (see dpt_backend_cuda.h): its ops, the step; its set-up
 * (options, device checks, allocations, layers, the fused step's graphs) is in
 * dpt_backend_cuda_create.c.
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
#include <errno.h>
#include <time.h>

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






/* ---- backend ops ------------------------------------------------------------ */

static int out_tid(const struct cu_backend *cb)
{
  return cb->pub.model->layers[cb->pub.model->n_layers - 1].out;
}


/* Before the host rewrites a staging slot: its upload of NSTAGE steps ago must be done.  In
 * steady state the GPU runs that far behind at most; a wait that blocks is counted
 * (stage_waits), apart from host_syncs (the waits for the work just enqueued). */
static int stage_wait(struct cu_backend *cb, cudaEvent_t ev, int *used, const char *what, struct dpt_err *err)
{
  int rc = 0;
  if (!*used) return 0;
  cudaError_t q = cudaEventQuery(ev);
  if (q == cudaErrorNotReady) {
    cb->stage_waits++;
    CUDA_CK(cudaEventSynchronize, (ev), -1, what);
  } else if (q != cudaSuccess) {
    return dpt_cuda_call_fail(cb, -1, what, "cudaEventQuery", cudaGetErrorString(q), err);
  }
  *used = 0;
  return 0;
fail:
  return rc;
}

/* ---- CUDA-graph steps (--cuda-graph; the decisions are dpt_cuda_capture's) ---------------- *
 * A step announced with ops->step_begin goes through its capture plan item by item
 * (graph_item): eager the first time its key is seen (every call does its work), captured the
 * second (the segment's work is recorded from its first item to its last, then instantiated and
 * launched), replayed after that (the calls do their host points only and launch the graphs).
 * The host points stay outside the graphs: the uploads of the batch and the labels go on the
 * upload stream and the compute stream waits for them right before it launches a segment (an
 * eager step: before the work); the learning rate is written to lr_dev before the first
 * segment; the events the uploads wait for (in_free, lab_free) are recorded inside the graph as
 * external events. */

static int pre_wait_flush(struct cu_backend *cb, struct dpt_err *err)
{
  int rc = 0;
  for (int i = 0; i < cb->n_pre_wait; i++)
    CUDA_CK(cudaStreamWaitEvent, (cb->stream, cb->pre_wait[i], 0), -1, "upload of the step's batch");
  cb->n_pre_wait = 0;
  return 0;
fail:
  return rc;
}

static void pre_wait_add(struct cu_backend *cb, cudaEvent_t ev)
{
  if (cb->n_pre_wait < (int)(sizeof cb->pre_wait / sizeof *cb->pre_wait)) cb->pre_wait[cb->n_pre_wait++] = ev;
}

/* Item (kind, index) of the announced step is next: *act, what to do with its work.  A
 * captured segment begins before its first item; its last item leaves it to graph_call_end. */
static int graph_item(struct cu_backend *cb, int kind, int index, int *act, struct dpt_err *err)
{
  int seg, first, last, rc;
  *act = DPT_CAPA_RUN;
  if (!cb->gstep) return 0;
  if ((rc = dpt_cuda_capture_item(&cb->cap, kind, index, act, &seg, &first, &last, err))) return rc;
  if (*act == DPT_CAPA_RECORD && first && (rc = dpt_cuda_graphs_begin(&cb->graphs, cb->stream, cb->gslot, seg, err)))
    return rc;
  if ((*act == DPT_CAPA_RECORD || *act == DPT_CAPA_SKIP) && last) cb->launch_seg = seg;
  if (*act == DPT_CAPA_RUN && kind < DPT_HOST_INPUT) return pre_wait_flush(cb, err); /* eager: wait now */
  return 0;
}

/* The end of a backend call in a graph step (rc: its status so far): a segment whose last item
 * it did ends (capture: instantiated) and is launched after the uploads; when the backend's
 * part of the step is done, graph mode ends.  An error drops the step and its capture. */
static int graph_call_end(struct cu_backend *cb, int rc, struct dpt_err *err)
{
  int seg = cb->launch_seg;
  cb->launch_seg = -1;
  if (!rc && seg >= 0) {
    if (cb->gmode == DPT_CAPM_CAPTURE) rc = dpt_cuda_graphs_end(&cb->graphs, cb->stream, err);
    if (!rc) rc = pre_wait_flush(cb, err);
    if (!rc) rc = dpt_cuda_graphs_launch(&cb->graphs, cb->stream, cb->gslot, seg, err);
  }
  if (rc) {
    dpt_cuda_graphs_abort(&cb->graphs, cb->stream);
    dpt_cuda_capture_abort(&cb->cap);
    if (cb->gslot >= 0 && cb->gmode == DPT_CAPM_CAPTURE) { /* not kept: eager, then captured again */
      cb->cap.slot[cb->gslot].captured = 0;
      cb->cap.slot[cb->gslot].seen = 0;
      dpt_cuda_graphs_drop(&cb->graphs, cb->gslot);
    }
    cb->gstep = 0;
    cb->n_pre_wait = 0;
    return rc;
  }
  if (!cb->cap.in_step) cb->gstep = 0;
  return 0;
}

/* Whether x is pinned host memory (cudaHostAlloc: dpt-train's loader slots), which the upload
 * reads by DMA as it is; pageable memory answers cudaMemoryTypeUnregistered. */
static int host_pinned(const void *x)
{
  struct cudaPointerAttributes pa;
  if (cudaPointerGetAttributes(&pa, x) != cudaSuccess) {
    cudaGetLastError(); /* not an error of the step: the staging copy then */
    return 0;
  }
  return pa.type == cudaMemoryTypeHost;
}

/* The DMA of host images x into in32 on the upload stream, once the last forward has cast in32
 * (in_free): pageable x is first copied into pinned slot k (its upload of NSTAGE steps ago done),
 * pinned x (the loader's slot, host_alloc) goes up as it is.  *slot: the slot whose event (x_ev)
 * marks the upload done; *pinned: x went up in place, so the caller waits for that event before x
 * is the caller's again. */
static int upload_input(struct cu_backend *cb, const float *x, int *slot, int *pinned, struct dpt_err *err)
{
  const struct dpt_cuda_tensor_plan *ip = &cb->plan.t[0];
  int rc = 0, k = cb->x_slot, pin = host_pinned(x);
  size_t xbytes = n_elems(ip) * sizeof(float);
  if ((rc = stage_wait(cb, cb->x_ev[k], &cb->x_used[k], "input staging", err))) goto fail;
  if (!pin) memcpy(cb->stage_x[k], x, xbytes);
  CUDA_CK(cudaStreamWaitEvent, (cb->up_stream, cb->in_free, 0), -1, "input");
  CUDA_CK(cudaMemcpyAsync, (cb->in32, pin ? (const void *)x : cb->stage_x[k], xbytes, cudaMemcpyHostToDevice,
                            cb->up_stream), -1, "input");
  CUDA_CK(cudaEventRecord, (cb->x_ev[k], cb->up_stream), -1, "input");
  cb->x_used[k] = 1;
  if (!pin) cb->x_slot = (k + 1) % NSTAGE; /* pinned: the slot is waited for below, k reused */
  *slot = k;
  *pinned = pin;
  return 0;
fail:
  return rc;
}

/* The host part of a forward from host images (x is the caller's again on return): x's upload
 * (upload_input), or the one ops->prefetch started for this x while the last step ran; *done: the
 * event the compute stream waits for before the cast.  Pinned x is waited for: a 154-MB batch
 * (ResNet-50, 224 px, batch 256) cost 25 ms of host memcpy per step on the H200's host when it
 * was copied into staging, with the GPU idle whenever the host had waited for the loss; its DMA
 * (2.8 ms there) is on the GPU's path unless it was prefetched. */
static int stage_input(struct cu_backend *cb, const float *x, cudaEvent_t *done, struct dpt_err *err)
{
  int rc = 0, k, pinned;
  if (cb->pre_x && cb->pre_x == x) { /* its upload is under way since ops->prefetch */
    k = cb->pre_slot, pinned = cb->pre_pinned;
  } else if ((rc = upload_input(cb, x, &k, &pinned, err))) {
    goto fail;
  }
  cb->pre_x = NULL; /* in32 holds x now, whatever was prefetched */
  *done = cb->x_ev[k];
  if (pinned) return stage_wait(cb, cb->x_ev[k], &cb->x_used[k], "input upload", err); /* the slot, k reused */
  return 0;
fail:
  return rc;
}

/* ops->prefetch: the next forward's images go up now, behind the current step's input cast, while
 * the step runs (dpt-train gives them before it waits for a log line's loss: the double buffering
 * of the input); the forward with the same x finds them in in32 (stage_input).  A forward of
 * other images in between overwrites in32 and forgets them. */
static int cu_prefetch(struct dpt_backend *be, const float *x, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "prefetch");
  cb->pre_x = NULL;
  if ((rc = upload_input(cb, x, &cb->pre_slot, &cb->pre_pinned, err))) goto fail;
  cb->pre_x = x;
  return 0;
fail:
  return rc;
}

/* NCHW fp32 images (in32) -> the input tensor (NHWC, channels padded in 16 bits; NCHW: a copy); in_free after
 * it (external: recorded by a captured graph's node, waited for by the next upload). */
static int cast_input(struct cu_backend *cb, int external, struct dpt_err *err)
{
  const struct dpt_cuda_tensor_plan *ip = &cb->plan.t[0];
  int rc = 0;
  if (!ip->nhwc) /* NCHW fp32 (plan.nchw): the images as they came */
    CUDA_CK(cudaMemcpyAsync, (cb->t[0].buf, cb->in32, ip->bytes, cudaMemcpyDeviceToDevice, cb->stream), -1, "input");
  else
    KERN_CK(dpt_cuda_nchw32_to_nhwc, (cb->in32, cb->t[0].buf, tensor_dtype(cb, 0), ip->n, ip->c, (size_t)ip->h * ip->w,
                                      ip->c_stored, 1.0f, cb->stream), -1, "input");
  CUDA_CK(cudaEventRecordWithFlags, (cb->in_free, cb->stream, external ? cudaEventRecordExternal : cudaEventRecordDefault),
          -1, "input");
  return 0;
fail:
  return rc;
}

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
  if ((rc = graph_item(cb, DPT_HOST_INPUT, -1, &act, err))) goto fail;
  if (xd) {
    cb->t[0].buf = cb->in_own;
    if (ready) CUDA_CK(cudaStreamWaitEvent, (cb->stream, (cudaEvent_t)ready, 0), -1, "device input ready event");
    CUDA_CK(cudaMemcpyAsync, (cb->in_own, xd, cb->plan.t[0].bytes, cudaMemcpyDeviceToDevice, cb->stream), -1,
            "device input");
  } else {
    cb->t[0].buf = cb->in_own;
    if ((rc = stage_input(cb, x, &up, err))) goto fail;
    pre_wait_add(cb, up);
  }
  if (training) {
    if ((rc = graph_item(cb, DPT_HOST_SCALARS, -1, &act, err))) goto fail;
    KERN_CK(dpt_cuda_set_f32, (cb->lr_dev, cb->step_lr, cb->stream), -1, "learning rate");
  }
  if ((rc = graph_item(cb, DPT_CAP_FORWARD, -1, &act, err))) goto fail;
  if (act != DPT_CAPA_SKIP) {
    if (!xd && (rc = cast_input(cb, act == DPT_CAPA_RECORD, err))) goto fail;
    rc = forward_layers(cb, training, NULL, err);
  }
fail:
  return graph_call_end(cb, rc, err);
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
  if ((rc = stage_input(cb, x, &up, err))) goto fail;
  CUDA_CK(cudaStreamWaitEvent, (cb->stream, up, 0), -1, "input");
  if ((rc = cast_input(cb, 0, err))) goto fail;
  return forward_layers(cb, training, out, err);
fail:
  return rc;
}

/* ops->input_format: the input tensor's plan (dpt_cuda_plan_input_format), this device and
 * stream. */
static int cu_input_format(struct dpt_backend *be, struct dpt_input_format *f, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  (void)err;
  dpt_cuda_plan_input_format(&cb->plan, f);
  f->device = cb->dev;
  f->stream = (void *)cb->stream;
  return 0;
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
    if ((rc = graph_item(cb, it->kind, it->index, &act, err))) return rc;
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
  return graph_call_end(cb, rc, err);
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

static int cu_sgd_init(struct dpt_backend *be, float momentum, float weight_decay, int nesterov,
                       const unsigned char *mask, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  size_t n = be->model->n_params;
  int rc = 0;
  void *p;
  (void)p;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "SGD set-up");
  /* velocity and mask live in the plan's SGD region: no allocation here */
  CUDA_CK(cudaMemsetAsync, (cb->velocity, 0, n * 4, cb->stream), -1, "SGD momentum buffer");
  if (mask)
    CUDA_CK(cudaMemcpyAsync, (cb->mask, mask, n, cudaMemcpyHostToDevice, cb->stream), -1,
            "weight-decay mask");
  if ((rc = dpt_cuda_stream_sync(cb, -1, "SGD set-up", err))) return rc;
  cb->sgd_momentum = momentum;
  cb->sgd_wd = weight_decay;
  cb->sgd_nesterov = nesterov;
  cb->sgd_ready = 1 + !!mask; /* 2: masked */
  return 0;
fail:
  return rc;
}

static int graph_sgd_step(struct cu_backend *cb, const float *grads, struct dpt_err *err);

static int cu_sgd_step(struct dpt_backend *be, float lr, const float *grads, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  size_t n = be->model->n_params;
  int rc = 0;
  if (!cb->sgd_ready)
    return dpt_err_set(err, DPT_E_INPUT, "cuda backend: sgd_step before sgd_init");
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "SGD");
  if (cb->gstep) return graph_sgd_step(cb, grads, err);
  const float *g = be->grads;
  if (grads && grads == be->pending) /* the double-buffered averaged gradient, already on the device */
    g = be->pending;
  else if (grads) { /* the double-buffered averaged gradient, from the host: the caller's again on
                      * return (a pinned buffer is read by DMA: wait for it) */
    CUDA_CK(cudaMemcpyAsync, (be->grads, grads, n * 4, cudaMemcpyHostToDevice, cb->stream), -1,
            "SGD gradient upload");
    if ((rc = dpt_cuda_stream_sync(cb, -1, "SGD gradient upload", err))) return rc;
  }
  /* mixed precision: the step is skipped on the device when the overflow flag that
   * dpt_backend_cuda_check_overflow set after the all-reduce says so (no host wait); the fused
   * optimizer writes the weight copies the next forward reads in the same pass */
  rc = dpt_cuda_optim_launch(cb, g, lr, NULL, cb->sgd_momentum, cb->sgd_wd, cb->sgd_nesterov,
                             cb->sgd_ready == 2 ? cb->mask : NULL,
                             cb->plan.precision == DPT_CUDA_MIXED && cb->overflow_armed ? cb->flag : NULL, 0, err);
  cb->overflow_armed = 0;
  return rc;
fail:
  return rc;
}

/* sgd_step in a graph step: the update reads the learning rate the step wrote to lr_dev. */
static int graph_sgd_step(struct cu_backend *cb, const float *grads, struct dpt_err *err)
{
  int rc = 0, act;
  if (grads) {
    rc = dpt_err_set(err, DPT_E_INPUT, "cuda backend: a captured step updates from its own gradient slab");
    goto done;
  }
  if ((rc = graph_item(cb, DPT_CAP_UPDATE, -1, &act, err))) goto done;
  if (act != DPT_CAPA_SKIP)
    rc = dpt_cuda_optim_launch(cb, cb->pub.grads, 0.0f, cb->lr_dev, cb->sgd_momentum, cb->sgd_wd, cb->sgd_nesterov,
                               cb->sgd_ready == 2 ? cb->mask : NULL,
                               cb->plan.precision == DPT_CUDA_MIXED && cb->overflow_armed ? cb->flag : NULL, 0, err);
  cb->overflow_armed = 0;
done:
  return graph_call_end(cb, rc, err);
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

/* ---- the loss, its totals, the loss scaler: on the device ---------------------- */

/* Loss on the device: labels go up (from pinned staging, or the caller's buffer for the
 * blocking dpt_backend_cuda_loss), the softmax kernel writes the output gradient (dout32)
 * and the per-row loss and rank. */
static int loss_enqueue(struct cu_backend *cb, const int *labels, float smoothing, float grad_scale,
                        struct dpt_err *err)
{
  int rc = 0, N = cb->pub.opts.batch, o = out_tid(cb);
  const struct dpt_cuda_tensor_plan *op = &cb->plan.t[o];
  int K = op->c * op->h * op->w;
  CUDA_CK(cudaMemcpyAsync, (cb->labels, labels, (size_t)N * sizeof(int), cudaMemcpyHostToDevice, cb->stream), -1,
          "loss");
  KERN_CK(dpt_cuda_softmax_xent, (cb->out32, cb->labels, N, K, smoothing, grad_scale, cb->dout32, cb->loss_rows,
                                  cb->rank, cb->stream), -1, "loss");
  return 0;
fail:
  return rc;
}

/* loss in a graph step: the labels of staging slot k go up on the upload stream (a host point:
 * after the previous loss kernel read the device copy, lab_free), then the loss kernels
 * (smoothing and grad_scale are kernel arguments: the same every step of a run). */
static int graph_loss(struct cu_backend *cb, int k, float smoothing, float grad_scale, struct dpt_err *err)
{
  int rc = 0, act, N = cb->pub.opts.batch, o = out_tid(cb);
  const struct dpt_cuda_tensor_plan *op = &cb->plan.t[o];
  CUDA_CK(cudaStreamWaitEvent, (cb->up_stream, cb->lab_free, 0), -1, "labels");
  CUDA_CK(cudaMemcpyAsync, (cb->labels, cb->stage_lab[k], (size_t)N * sizeof(int), cudaMemcpyHostToDevice,
                            cb->up_stream), -1, "labels");
  CUDA_CK(cudaEventRecord, (cb->lab_ev[k], cb->up_stream), -1, "labels");
  cb->lab_used[k] = 1;
  cb->lab_slot = (k + 1) % NSTAGE;
  pre_wait_add(cb, cb->lab_ev[k]);
  if ((rc = graph_item(cb, DPT_CAP_LOSS, -1, &act, err))) goto fail;
  if (act != DPT_CAPA_SKIP) {
    KERN_CK(dpt_cuda_softmax_xent, (cb->out32, cb->labels, N, op->c * op->h * op->w, smoothing, grad_scale,
                                    cb->dout32, cb->loss_rows, cb->rank, cb->stream), -1, "loss");
    CUDA_CK(cudaEventRecordWithFlags, (cb->lab_free, cb->stream, act == DPT_CAPA_RECORD ? cudaEventRecordExternal
                                                                                        : cudaEventRecordDefault),
            -1, "loss");
    KERN_CK(dpt_cuda_loss_accumulate, (cb->loss_rows, cb->rank, N, cb->tot, cb->stream), -1, "loss totals");
  }
fail:
  return graph_call_end(cb, rc, err);
}

/* ops->join: the update waits for a device communicator's all-reduces (no host wait). */
static int cu_join(struct dpt_backend *be, void *event, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0, act;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "join");
  if ((rc = graph_item(cb, DPT_CAP_JOIN, -1, &act, err))) goto fail;
  if (act != DPT_CAPA_SKIP && event)
    CUDA_CK(cudaStreamWaitEvent, (cb->stream, (cudaEvent_t)event, 0), -1, "the communicator's all-reduces");
fail:
  return cb->gstep ? graph_call_end(cb, rc, err) : rc;
}

/* ops->step_begin: what the next calls are (dpt_cuda_capture.h) when --cuda-graph is on. */
static int cu_step_begin(struct dpt_backend *be, const struct dpt_cap_step *s, float lr, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int mode, slot, evict, rc;
  if (!be->graph) return 0;
  if (cb->graphs.capturing) dpt_cuda_graphs_abort(&cb->graphs, cb->stream); /* an unfinished step */
  cb->gstep = 0;
  cb->launch_seg = -1;
  cb->n_pre_wait = 0;
  if ((rc = dpt_cuda_capture_begin(&cb->cap, s, &mode, &slot, &evict, err))) return rc;
  if (evict >= 0) dpt_cuda_graphs_drop(&cb->graphs, evict);
  if (!cb->cap.in_step) { /* a step the backend cannot capture: as it comes, said once */
    if (!cb->said_uncaptured) {
      fprintf(stderr, "dpt-train: cuda backend: --cuda-graph: steps run uncaptured: %s\n",
              dpt_cuda_capture_unsupported(s));
      cb->said_uncaptured = 1;
    }
    return 0;
  }
  cb->gstep = 1;
  cb->gmode = mode;
  cb->gslot = slot;
  cb->step = *s;
  cb->step_lr = lr;
  return 0;
}

static const char *cu_notes(struct dpt_backend *be)
{
  return CB(be)->notes;
}

static int cu_loss(struct dpt_backend *be, const int *labels, float smoothing, float grad_scale,
                   struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0, k = cb->lab_slot, N = be->opts.batch;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "loss");
  if ((rc = stage_wait(cb, cb->lab_ev[k], &cb->lab_used[k], "label staging", err))) return rc;
  memcpy(cb->stage_lab[k], labels, (size_t)N * sizeof(int));
  if (cb->gstep) return graph_loss(cb, k, smoothing, grad_scale, err);
  if ((rc = loss_enqueue(cb, cb->stage_lab[k], smoothing, grad_scale, err))) return rc;
  CUDA_CK(cudaEventRecord, (cb->lab_ev[k], cb->stream), -1, "loss");
  cb->lab_used[k] = 1;
  cb->lab_slot = (k + 1) % NSTAGE;
  KERN_CK(dpt_cuda_loss_accumulate, (cb->loss_rows, cb->rank, N, cb->tot, cb->stream), -1, "loss totals");
  return 0;
fail:
  return rc;
}

static int cu_loss_totals(struct dpt_backend *be, struct dpt_loss_totals *t, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "loss totals");
  CUDA_CK(cudaMemcpyAsync, (cb->tot_host, cb->tot, 4 * sizeof(double), cudaMemcpyDeviceToHost, cb->stream), -1,
          "loss totals");
  CUDA_CK(cudaMemsetAsync, (cb->tot, 0, 4 * sizeof(double), cb->stream), -1, "loss totals");
  if ((rc = dpt_cuda_stream_sync(cb, -1, "loss totals (an asynchronous fault in the steps since the last ones; "
                        "DPT_CUDA_SYNC_DEBUG=1 names its layer)", err)))
    return rc;
  t->loss_sum = cb->tot_host[0];
  t->top1 = (long)cb->tot_host[1];
  t->top5 = (long)cb->tot_host[2];
  t->rows = (long)cb->tot_host[3];
  return 0;
fail:
  return rc;
}

static long cu_host_waits(const struct dpt_backend *be)
{
  return CB(be)->host_syncs;
}

static int need_mixed(struct cu_backend *cb, const char *what, struct dpt_err *err)
{
  if (cb->plan.precision == DPT_CUDA_MIXED) return 0;
  return dpt_err_set(err, DPT_E_INPUT, "cuda backend: %s is mixed precision's (this backend runs %s)", what,
                     cb->pub.precision);
}

static int cu_scaler_get(struct dpt_backend *be, struct dpt_loss_scaler *s, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0;
  if ((rc = need_mixed(cb, "the loss scaler", err))) return rc;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "loss scaler");
  CUDA_CK(cudaMemcpyAsync, (cb->scaler_host, cb->scaler, sizeof *s, cudaMemcpyDeviceToHost, cb->stream), -1,
          "loss scaler");
  if ((rc = dpt_cuda_stream_sync(cb, -1, "loss scaler", err))) return rc;
  *s = *cb->scaler_host;
  return 0;
fail:
  return rc;
}

static int cu_scaler_set(struct dpt_backend *be, const struct dpt_loss_scaler *s, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0;
  if ((rc = need_mixed(cb, "the loss scaler", err))) return rc;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "loss scaler");
  *cb->scaler_host = *s; /* no copy into it is in flight: scaler_get waits for its own */
  CUDA_CK(cudaMemcpyAsync, (cb->scaler, cb->scaler_host, sizeof *s, cudaMemcpyHostToDevice, cb->stream), -1,
          "loss scaler");
  return dpt_cuda_stream_sync(cb, -1, "loss scaler", err);
fail:
  return rc;
}

static void *cu_host_alloc(struct dpt_backend *be, size_t bytes)
{
  void *p = NULL;
  if (cudaSetDevice(CB(be)->dev) != cudaSuccess || cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError(); /* the caller reports the failure; the runtime's last error is not left set */
    return NULL;
  }
  return p;
}

static void cu_host_free(struct dpt_backend *be, void *p)
{
  (void)be;
  cudaFreeHost(p);
}

const struct dpt_backend_ops dpt_cuda_ops = {
    .name = "cuda", .forward = cu_forward, .backward = cu_backward, .copy_slab = cu_copy_slab,
    .memory_bytes = cu_memory_bytes, .destroy = cu_destroy, .sgd_init = cu_sgd_init, .lars_init = dpt_backend_cuda_lars_init, .rmsw_init = dpt_backend_cuda_rmsw_init,
    .sgd_step = cu_sgd_step, .sync = cu_sync, .peak_bytes = cu_peak_bytes,
    .overflow_check = dpt_backend_cuda_check_overflow, .scaler_get = cu_scaler_get, .scaler_set = cu_scaler_set,
    .buckets_changed = cu_buckets_changed, .pending_init = cu_pending_init, .stash_grads = cu_stash_grads,
    .loss = cu_loss, .loss_totals = cu_loss_totals, .host_waits = cu_host_waits, .host_alloc = cu_host_alloc,
    .host_free = cu_host_free, .input_format = cu_input_format, .forward_device = cu_forward_device,
    .step_begin = cu_step_begin, .join = cu_join, .notes = cu_notes, .prefetch = cu_prefetch};

/* ---- the step-side extras (the tests' direct calls) ----------------------------- */

int dpt_backend_cuda_loss(struct dpt_backend *be, const int *labels, float smoothing,
                          float grad_scale, double *loss_sum, int *top1, int *top5,
                          struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0, N = be->opts.batch;
  float *loss = malloc((size_t)N * sizeof *loss);
  int *rank = malloc((size_t)N * sizeof *rank);
  if (!loss || !rank) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "cuda backend: out of memory");
    goto fail;
  }
  if ((rc = loss_enqueue(cb, labels, smoothing, grad_scale, err))) goto fail;
  CUDA_CK(cudaMemcpyAsync, (loss, cb->loss_rows, (size_t)N * 4, cudaMemcpyDeviceToHost, cb->stream), -1, "loss");
  CUDA_CK(cudaMemcpyAsync, (rank, cb->rank, (size_t)N * 4, cudaMemcpyDeviceToHost, cb->stream), -1, "loss");
  if ((rc = dpt_cuda_stream_sync(cb, -1, "loss", err))) goto fail;
  double s = 0;
  int t1 = 0, t5 = 0;
  for (int i = 0; i < N; i++) {
    s += loss[i];
    t1 += rank[i] == 0;
    t5 += rank[i] >= 0 && rank[i] < 5;
  }
  *loss_sum = s;
  if (top1) *top1 = t1;
  if (top5) *top5 = t5;
fail:
  free(loss);
  free(rank);
  return rc;
}


int dpt_backend_cuda_grads_finite(struct dpt_backend *be, const float *buf, int *finite, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0, flag = 0;
  CUDA_CK(cudaMemsetAsync, (cb->flag, 0, sizeof(int), cb->stream), -1, "gradient check");
  KERN_CK(dpt_cuda_nonfinite, (buf ? buf : be->grads, be->model->n_params, cb->flag, cb->stream), -1,
          "gradient check");
  CUDA_CK(cudaMemcpyAsync, (&flag, cb->flag, sizeof flag, cudaMemcpyDeviceToHost, cb->stream), -1,
          "gradient check");
  if ((rc = dpt_cuda_stream_sync(cb, -1, "gradient check", err))) return rc;
  *finite = !flag;
  return 0;
fail:
  return rc;
}

int dpt_backend_cuda_check_overflow(struct dpt_backend *be, const float *buf, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0;
  int act;
  if ((rc = need_mixed(cb, "the overflow check", err))) return rc;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "gradient check");
  if ((rc = graph_item(cb, DPT_CAP_OVERFLOW, -1, &act, err))) goto fail;
  if (act != DPT_CAPA_SKIP) {
    CUDA_CK(cudaMemsetAsync, (cb->flag, 0, sizeof(int), cb->stream), -1, "gradient check");
    KERN_CK(dpt_cuda_nonfinite, (buf ? buf : be->grads, be->model->n_params, cb->flag, cb->stream), -1,
            "gradient check");
    KERN_CK(dpt_cuda_scaler_update, (cb->scaler, cb->flag, cb->stream), -1, "loss scaler");
  }
  cb->overflow_armed = 1;
fail:
  return cb->gstep ? graph_call_end(cb, rc, err) : rc;
}

long dpt_backend_cuda_host_syncs(const struct dpt_backend *be)
{
  return CB(be)->host_syncs;
}

long dpt_backend_cuda_stage_waits(const struct dpt_backend *be)
{
  return CB(be)->stage_waits;
}
