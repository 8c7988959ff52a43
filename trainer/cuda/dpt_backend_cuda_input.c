/* dpt_backend_cuda_input.c — the cuda backend's host -> device input: pinned staging slots, each
 * rewritten only after its upload of NSTAGE steps ago (dpt_cuda_stage_wait; the labels' slots too),
 * the images' slots allocated only when pageable images come (stage_alloc: dpt-train's batches are
 * pinned and go up in place), the images' upload on the upload stream, ops->prefetch, the cast
 * into the input tensor, ops->input_format, and the pinned host buffers of ops->host_alloc,
 * counted with the staging in ops->pinned_bytes.  The forward that reads it is
 * dpt_backend_cuda.c's. */
#include "dpt_backend_cuda_priv.h"

#include <stdint.h>

/* Before the host rewrites a staging slot: its upload of NSTAGE steps ago must be done.  In
 * steady state the GPU runs that far behind at most; a wait that blocks is counted
 * (stage_waits), apart from host_syncs (the waits for the work just enqueued). */
int dpt_cuda_stage_wait(struct cu_backend *cb, cudaEvent_t ev, int *used, const char *what, struct dpt_err *err)
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

/* The images' NSTAGE pinned slots, on the first pageable images: a batch that comes pinned (the
 * loader's slots of dpt-train, ops->host_alloc) goes up in place and never needs them, and
 * ResNet-50's (224 px, batch 256) are 2 x 154 MB of page-locked host memory per rank. */
static int stage_alloc(struct cu_backend *cb, size_t xbytes, struct dpt_err *err)
{
  size_t xb = (xbytes + 63) / 64 * 64;
  void *h = NULL;
  cudaError_t e = cudaHostAlloc(&h, NSTAGE * xb, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return dpt_err_set(err, DPT_E_NOMEM,
                       "cuda backend: %zu bytes of pinned host memory for the staging of pageable input "
                       "images (%d slots of %zu) failed: %s; give the images in pinned memory "
                       "(dpt_backend_host_alloc) to upload them in place, or lower the batch",
                       NSTAGE * xb, NSTAGE, xbytes, cudaGetErrorString(e));
  }
  cb->stage_mem = h;
  cb->stage_bytes = NSTAGE * xb;
  for (int k = 0; k < NSTAGE; k++) cb->stage_x[k] = (float *)((char *)h + k * xb);
  return 0;
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
  if (!pin && !cb->stage_mem && (rc = stage_alloc(cb, xbytes, err))) goto fail;
  if ((rc = dpt_cuda_stage_wait(cb, cb->x_ev[k], &cb->x_used[k], "input staging", err))) goto fail;
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
int dpt_cuda_input_stage(struct cu_backend *cb, const float *x, cudaEvent_t *done, struct dpt_err *err)
{
  int rc = 0, k = 0, pinned = 0; /* set by upload_input on success (gcc -O3 cannot see it) */
  if (cb->pre_x && cb->pre_x == x) { /* its upload is under way since ops->prefetch */
    k = cb->pre_slot, pinned = cb->pre_pinned;
  } else if ((rc = upload_input(cb, x, &k, &pinned, err))) {
    goto fail;
  }
  cb->pre_x = NULL; /* in32 holds x now, whatever was prefetched */
  *done = cb->x_ev[k];
  if (pinned) return dpt_cuda_stage_wait(cb, cb->x_ev[k], &cb->x_used[k], "input upload", err); /* the slot, k reused */
  return 0;
fail:
  return rc;
}

/* ops->prefetch: the next forward's images go up now, behind the current step's input cast, while
 * the step runs (dpt-train gives them before it waits for a log line's loss: the double buffering
 * of the input); the forward with the same x finds them in in32 (dpt_cuda_input_stage).  A forward of
 * other images in between overwrites in32 and forgets them. */
int dpt_cuda_input_prefetch(struct dpt_backend *be, const float *x, struct dpt_err *err)
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
int dpt_cuda_input_cast(struct cu_backend *cb, int external, struct dpt_err *err)
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

/* ops->input_format: the input tensor's plan (dpt_cuda_plan_input_format), this device and
 * stream. */
int dpt_cuda_input_format(struct dpt_backend *be, struct dpt_input_format *f, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  (void)err;
  dpt_cuda_plan_input_format(&cb->plan, f);
  f->device = cb->dev;
  f->stream = (void *)cb->stream;
  return 0;
}

/* ops->host_alloc: page-locked memory with its size in a header of HOST_HDR bytes before it
 * (host_free counts it off host_alloc_bytes); the buffer stays 64-byte aligned, and
 * cudaPointerGetAttributes sees pinned memory anywhere in it (upload_input's host_pinned). */
#define HOST_HDR 64

void *dpt_cuda_host_alloc(struct dpt_backend *be, size_t bytes)
{
  struct cu_backend *cb = CB(be);
  void *p = NULL;
  size_t n = bytes ? bytes : 1;
  if (n > SIZE_MAX - HOST_HDR) return NULL; /* no such buffer: out of memory to the caller */
  if (cudaSetDevice(cb->dev) != cudaSuccess || cudaHostAlloc(&p, HOST_HDR + n, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError(); /* the caller reports the failure; the runtime's last error is not left set */
    return NULL;
  }
  *(size_t *)p = HOST_HDR + n;
  __atomic_add_fetch(&cb->host_alloc_bytes, HOST_HDR + n, __ATOMIC_RELAXED);
  return (char *)p + HOST_HDR;
}

void dpt_cuda_host_free(struct dpt_backend *be, void *p)
{
  if (!p) return;
  char *h = (char *)p - HOST_HDR;
  __atomic_sub_fetch(&CB(be)->host_alloc_bytes, *(size_t *)h, __ATOMIC_RELAXED);
  cudaFreeHost(h);
}

/* ops->pinned_bytes: the labels' slots and readback area, the images' slots once allocated, and
 * host_alloc's live buffers. */
size_t dpt_cuda_pinned_bytes(const struct dpt_backend *be)
{
  const struct cu_backend *cb = CB(be);
  return cb->pinned_bytes + cb->stage_bytes + __atomic_load_n(&cb->host_alloc_bytes, __ATOMIC_RELAXED);
}
