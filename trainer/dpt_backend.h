/* dpt_backend.h — a compute backend: the model's layers on one device.
 *
 * cpu  : oneDNN 2.6 (dpt_backend_cpu.c; the oracle).
 * cuda : cuDNN/cuBLAS (trainer/cuda, GPU builds): dpt_backend_create("cuda")
 *        fails with DPT_E_UNSUPPORTED without a working device (or in a build
 *        without the GPU backend); "auto" picks cuda only when a device works
 *        (dpt_backend_auto), else cpu.
 *
 * The backend owns its slabs in its memory space:
 *   params   [model->n_params]  (PyTorch layout; one buffer for broadcast)
 *   grads    [model->n_params]  (same offsets; one buffer for the all-reduce)
 *   state    [model->n_state]   (BN running mean/var)
 *   velocity [model->n_params]  (momentum of sgd_step; after sgd_init)
 *   pending  [model->n_params]  (double buffering's averaged gradient; after pending_init)
 * host_slabs = 1 means params/grads/state (and velocity) are host memory the
 * trainer may read and write directly (cpu).  A device backend sets
 * host_slabs = 0: the pointers are device memory (cuda) or NULL (the CPU
 * backend's test-only simulated device, DPT_CPU_DEVICE_SLABS=1), and the
 * trainer reaches the slabs only through copy_slab(), runs the optimizer with
 * sgd_step() and calls sync() before it hands the gradient slab to a
 * communicator that reads device memory (nccl).  dpt-train works on host
 * mirrors (broadcast, checkpoints, checksum) only through these calls, so the
 * same loop drives both kinds.
 *
 * One training step is the same list of calls on every backend, and none of
 * them waits for the device (llm.c's loop): forward(x, 1, out = NULL) (or
 * forward_device from a batch already on the device, in the backend's input_format),
 * loss(labels) (the loss, its gradient and the running totals stay on the
 * backend), backward(dout = NULL), [all-reduce], overflow_check (mixed
 * precision), sgd_step.  The host waits once per log interval, in
 * loss_totals(); host_waits() counts every wait (tests hold the loop to it). */
#ifndef DPT_BACKEND_H
#define DPT_BACKEND_H

#include <stddef.h>

#include "dpt_bucket.h"
#include "dpt_err.h"
#include "dpt_layer.h"
#include "dpt_loss_scale.h"
#include "dpt_model.h"

struct dpt_backend_opts {
  int batch;            /* images per forward (per rank) */
  int threads;          /* CPU threads for kernels (0 = leave OpenMP's default) */
  int need_input_grad;  /* 1: backward also computes dL/dinput (gradient checks) */
  float bn_momentum;    /* running-stat update factor (PyTorch: 0.1) */
  float bn_eps;         /* PyTorch: 1e-5 */
  const char *precision; /* NULL: the backend's default; "fp32" (every backend), "tf32",
                            "mixed", "bf16" (cuda only; cpu refuses them with DPT_E_UNSUPPORTED) */
  const char *fuse;      /* cuda: "on", "off", "auto" (NULL: $DPT_CUDA_FUSE, else off): the fused
                            cuDNN-graph step (dpt-train --fuse; cpu ignores it) */
  const char *cuda_graph; /* cuda: "on", "off", "auto" (NULL: $DPT_CUDA_GRAPH, else off): the
                            steady-state step captured in CUDA graphs (dpt-train --cuda-graph) */
  int deterministic;      /* 1: bitwise the same results run after run on the same GPU, cuDNN and
                            cuBLAS (dpt-train --deterministic; cuda: convolution algorithms in cuDNN's
                            heuristic order, not timed, deterministic ones only, no fused step; the
                            cpu backend is so at a fixed --threads and ignores it) */
};
void dpt_backend_opts_default(struct dpt_backend_opts *o);

enum dpt_slab { DPT_SLAB_PARAMS, DPT_SLAB_GRADS, DPT_SLAB_STATE,
                DPT_SLAB_VELOCITY /* [n_params]: sgd_init must have run */,
                DPT_SLAB_PENDING /* [n_params]: pending_init must have run */ };

/* What loss() added up on the backend since the last loss_totals(). */
struct dpt_loss_totals {
  double loss_sum;  /* sum of the per-image losses (dpt_softmax_xent's return, per call) */
  long top1, top5;  /* images whose label has the highest logit / is among the 5 highest */
  long rows;        /* images with a label in [0, K) (the others count nothing) */
};

struct dpt_backend;
struct dpt_input_format; /* dpt_data.h: a batch's layout, element type, channels, device */
struct dpt_cap_step;     /* dpt_cuda_capture.h: a step as CUDA-graph capture sees it */

struct dpt_backend_ops {
  const char *name;
  /* x: [N, C_in, H, W] host, plain NCHW; the caller may reuse x when this returns.
   * out: host, [N, C, H, W] plain of the model's output tensor (logits [N, K]),
   * or NULL: the output stays on the backend for loss() and a device backend
   * returns without waiting. */
  int (*forward)(struct dpt_backend *be, const float *x, int training, float *out,
                 struct dpt_err *err);
  /* dout: host, same shape as out, or NULL: the gradient the last loss() left on
   * the backend.  Overwrites the gradient slab.  dx: host [N, C_in, H, W] or NULL
   * (needs opts.need_input_grad). */
  int (*backward)(struct dpt_backend *be, const float *dout, float *dx, struct dpt_err *err);
  /* Softmax cross-entropy of the last forward's output (forward(out = NULL)) on the
   * backend, dpt_softmax_xent's semantics: labels host [batch] (outside [0, K):
   * ignored), smoothing, grad_scale.  Leaves the output gradient for backward(dout =
   * NULL) and adds the loss sum, top-1, top-5 and valid rows to the backend's
   * totals.  The labels may be reused when this returns; no host wait. */
  int (*loss)(struct dpt_backend *be, const int *labels, float smoothing, float grad_scale,
              struct dpt_err *err);
  /* The totals since the last call, then zeroed: a device backend waits here (the one
   * host synchronisation of a log interval). */
  int (*loss_totals)(struct dpt_backend *be, struct dpt_loss_totals *t, struct dpt_err *err);
  /* Host waits so far: cuda, its stream synchronisations; cpu, the calls that wait on
   * a device backend (sync, copy_slab, loss_totals, scaler_get, forward with out,
   * backward with dx).  The step-loop tests count them. */
  long (*host_waits)(const struct dpt_backend *be);
  /* Optional (NULL: malloc / free): host memory for buffers that cross to the backend
   * every step (cuda: pinned, cudaHostAlloc, so copies are asynchronous DMA). */
  void *(*host_alloc)(struct dpt_backend *be, size_t bytes);
  void (*host_free)(struct dpt_backend *be, void *p);
  /* Optional (NULL: none): page-locked host memory the backend holds now, its own staging and
   * host_alloc's live buffers (cuda: cudaHostAlloc bytes; the job report's
   * pinned_host_bytes_rank0). */
  size_t (*pinned_bytes)(const struct dpt_backend *be);
  /* Copy a slab between host and backend memory (to_backend = 1: host -> backend).
   * host may be the slab itself (host_slabs): then nothing is copied. */
  int (*copy_slab)(struct dpt_backend *be, enum dpt_slab which, float *host, int to_backend,
                   struct dpt_err *err);
  size_t (*memory_bytes)(const struct dpt_backend *be); /* activations + workspaces + slabs */
  void (*destroy)(struct dpt_backend *be);
  /* Momentum SGD on the backend's own slabs (torch.optim.SGD semantics of
   * dpt_sgd_step, dpt_optim.h).  sgd_init once: hyper-parameters, the
   * weight-decay mask (host [n_params], copied; NULL = decay everywhere), a
   * zero velocity slab.  sgd_step: params -= lr * ... from grads = NULL (the
   * gradient slab), be->pending (the backend's pending slab, in its own
   * memory: nothing is copied) or a HOST buffer [n_params] (the double-buffered
   * averaged gradient; a device backend uploads it into its gradient slab
   * first, so read the slab before).  cpu: dpt_sgd_step itself; cuda: its SGD
   * kernel. */
  int (*sgd_init)(struct dpt_backend *be, float momentum, float weight_decay, int nesterov,
                  const unsigned char *mask, struct dpt_err *err);
  int (*sgd_step)(struct dpt_backend *be, float lr, const float *grads, struct dpt_err *err);
  /* LARS instead of plain momentum (dpt_lars_step, dpt_optim.h), set after sgd_init: the
   * parameter tensors in slab order (dpt_model_param_segs), eta and eps; sgd_step then runs
   * LARS with sgd_init's momentum, weight decay and nesterov (the decay mask unused: LARS skips
   * BN and bias tensors itself; eps > 0: the caller turns 0 into 1e-7).  cpu: dpt_lars_step;
   * cuda: dpt_cuda_lars_step (per-tensor norms as segmented reductions, then the update). */
  int (*lars_init)(struct dpt_backend *be, const struct dpt_param_seg *seg, int n_seg, float eta, float eps,
                   struct dpt_err *err);
  /* RMSprop warm-up instead of plain momentum (dpt_rmsw_step, dpt_optim.h), set after sgd_init:
   * the momentum buffer becomes the first half of an optimizer-state slab of 2 n_params (the
   * second moment after it: be->velocity then covers both, as a checkpoint stores them);
   * sgd_step then mixes at be->opt_epoch.  cpu: dpt_rmsw_step (host slabs only); cuda:
   * dpt_cuda_rmsw_step on eager steps (refused with CUDA graphs), its velocity slab copies moving
   * both halves. */
  int (*rmsw_init)(struct dpt_backend *be, float lr_rms, float mu2, float eps, double center, double period,
                   struct dpt_err *err);
  /* Block until the work enqueued so far (backward's gradients) is complete:
   * call before another stream or a communicator reads the gradient slab. */
  int (*sync)(struct dpt_backend *be, struct dpt_err *err);
  /* Highest memory_bytes() so far, including temporary buffers (the cuda
   * algorithm search's workspace). */
  size_t (*peak_bytes)(const struct dpt_backend *be);
  /* Mixed precision: dynamic loss scaling on the backend (NULL when it has none).
   * backward() multiplies the output gradient by the scale and leaves the parameter
   * gradients unscaled.  overflow_check, after the all-reduce (so every rank decides
   * alike): looks for an inf/NaN in buf (NULL: the gradient slab; be->pending), has
   * the next sgd_step skipped when there is one and updates the scaler
   * (dpt_loss_scaler_update) — on the backend, no host wait.  scaler_get reads the
   * scaler (waits: checkpoints, the final report), scaler_set sets it (resume). */
  int (*overflow_check)(struct dpt_backend *be, const float *buf, struct dpt_err *err);
  int (*scaler_get)(struct dpt_backend *be, struct dpt_loss_scaler *s, struct dpt_err *err);
  int (*scaler_set)(struct dpt_backend *be, const struct dpt_loss_scaler *s, struct dpt_err *err);
  /* Optional: dpt_backend_set_buckets changed the bucket table (cuda: one
   * event per bucket).  NULL when the backend needs nothing. */
  int (*buckets_changed)(struct dpt_backend *be, struct dpt_err *err);
  /* Double buffering in the backend's memory (what a device communicator
   * needs: nccl all-reduces device memory).  pending_init allocates the
   * pending slab (zeros) and sets be->pending.  stash_grads enqueues pending
   * <- gradient slab after the work enqueued so far (an sgd_step that reads
   * pending included) and sets *ready to an event that completes with the copy
   * (cuda: a cudaEvent_t for dpt_comm_start_after; cpu: NULL, done on return). */
  int (*pending_init)(struct dpt_backend *be, struct dpt_err *err);
  int (*stash_grads)(struct dpt_backend *be, void **ready, struct dpt_err *err);
  /* Optional (NULL: the backend takes host batches only, as cpu): input already in device
   * memory.  input_format: the backend's own input tensor, [batch, h, w, c_stored] NHWC
   * (cuda, every precision) of its compute type (fp32 for fp32/tf32, fp16 for mixed, bf16),
   * c_stored the padded stem channels of the 16-bit precisions (dpt_cuda_stored_channels),
   * its device, and its stream (a cudaStream_t): whoever hands it batches orders the reuse
   * of a buffer on that stream (the loader records its release event there,
   * dpt_loader_next_device).  forward_device: forward() from x, a batch in exactly that
   * format on that device; ready: a cudaEvent_t the batch is complete at (the backend's
   * stream waits for it, the host does not), or NULL when it is complete already.  The
   * backend reads x in place (no copy) until the end of the next backward() (the first
   * convolution's weight gradient reads its input): x must stay unchanged until the work
   * enqueued on the stream up to then is done; a later forward() / forward_device() stops
   * the reading.  training / out as forward(). */
  int (*input_format)(struct dpt_backend *be, struct dpt_input_format *f, struct dpt_err *err);
  int (*forward_device)(struct dpt_backend *be, const void *x, void *ready, int training, float *out,
                        struct dpt_err *err);
  /* Optional (NULL: every call runs as it comes; cpu): the step about to run, so a backend
   * can capture it in CUDA graphs and replay it (cuda --cuda-graph; dpt_cuda_capture.h): s
   * says what it is (training step, micro-batch, validation batch; its communicator, buckets,
   * log step), lr its learning rate (written to the device before the step's graph runs; the
   * sgd_step that follows gets the same).  The calls of the step must then follow
   * dpt_cuda_capture_call_items; a step that cannot be captured runs as it comes. */
  int (*step_begin)(struct dpt_backend *be, const struct dpt_cap_step *s, float lr, struct dpt_err *err);
  /* Optional: the update waits for event (a cudaEvent_t a device communicator recorded after the
   * gradient all-reduces it enqueued, dpt_comm_enqueue_join): on the backend's stream, no host
   * wait; inside a captured step this joins the communicator's stream back. */
  int (*join)(struct dpt_backend *be, void *event, struct dpt_err *err);
  /* Optional: what the backend decided at start-up, one line per note (cuda: the fused step's
   * engines from the cache vs timed, the patterns that fell back to legacy calls and why, CUDA
   * graphs), for the trainer to print once; "" when nothing. */
  const char *(*notes)(struct dpt_backend *be);
  /* Optional (NULL: each forward uploads its own images; cpu): the host images x of the next
   * forward(), given ahead so that their upload runs while the work already enqueued (the current
   * step) runs: dpt-train gives the next batch before it waits for a log line's loss.  The
   * forward() with the same x then uses them; a forward() of other images in between forgets
   * them (that x is uploaded again).  x must stay unchanged until that forward() returns. */
  int (*prefetch)(struct dpt_backend *be, const float *x, struct dpt_err *err);
};

/* Gradient-bucket hook (dpt_backend_set_buckets): backward() calls it once per
 * bucket, in bucket order, as soon as the bucket's gradients are final in the
 * gradient slab (cpu: written when the hook runs, ready = NULL) or enqueued on
 * the backend's stream (cuda: ready = a cudaEvent_t recorded right after
 * them; whoever reads the range waits for it, e.g. dpt_comm_start_after).
 * Nothing writes the bucket's range again during this backward.  A non-zero
 * return stops backward with that error. */
typedef int (*dpt_bucket_ready_fn)(void *ctx, int bucket, void *ready, struct dpt_err *err);

struct dpt_backend {
  const struct dpt_backend_ops *ops;
  const struct dpt_model *model;   /* borrowed; must outlive the backend */
  struct dpt_backend_opts opts;
  int host_slabs;                  /* 1: params/grads/state below are host memory */
  float *params;                   /* [model->n_params] */
  float *grads;                    /* [model->n_params] */
  float *state;                    /* [model->n_state] */
  float *velocity;                 /* [model->n_params] after sgd_init (host_slabs), else NULL;
                                      [2 n_params] after rmsw_init (+ the second moment) */
  double opt_epoch;                /* the epoch of the gradient sgd_step applies (rmsprop warm-up) */
  float *pending;                  /* [model->n_params] after pending_init (backend memory), else NULL */
  const char *precision;           /* "fp32", "tf32", "mixed" or "bf16": what the backend runs */
  struct dpt_layer *layers;        /* [model->n_layers] */
  void *impl;
  /* gradient buckets (dpt_backend_set_buckets; n_buckets = 0: no hook) */
  struct dpt_bucket *buckets;      /* [n_buckets] (owned copy) */
  int n_buckets;
  int *bucket_at;                  /* [model->n_layers] bucket whose first_layer this is, else -1 */
  dpt_bucket_ready_fn bucket_fn;
  void *bucket_ctx;
  unsigned char *grad_written;     /* [model->n_tensors] during backward: the tensor's gradient
                                      has been delivered (dpt_backend_backward_walk) */
  int graph;                       /* 1: the backend captures steps (cuda --cuda-graph on): a device
                                      communicator's all-reduces must then be enqueued on the device
                                      (dpt_comm_enqueue_after) and joined with ops->join */
};

/* name: "cpu", "cuda" or "auto".  Parameters and state are initialised with
 * dpt_model_init_params(model, model->cfg.seed). */
int dpt_backend_create(const char *name, const struct dpt_model *model,
                       const struct dpt_backend_opts *opts, struct dpt_backend **out,
                       struct dpt_err *err);
void dpt_backend_destroy(struct dpt_backend *be);

/* Call fn(ctx, k, ready, err) during every later backward() as bucket k's
 * gradients become ready (see dpt_bucket_ready_fn).  b: [n] from
 * dpt_bucket_plan for this backend's model (copied); n = 0 (or fn = NULL)
 * removes the hook.  Errors (DPT_E_INPUT): a bucket whose layers or slab range
 * do not belong to the model. */
int dpt_backend_set_buckets(struct dpt_backend *be, const struct dpt_bucket *b, int n,
                            dpt_bucket_ready_fn fn, void *ctx, struct dpt_err *err);

/* The backward pass over the layers, one walk for every backend.  The backend
 * has put the output gradient in place; the walk marks it delivered, runs the
 * layers' backward in reverse order (a layer delivers its inputs' gradients and
 * marks them in be->grad_written), refuses a layer whose output got no gradient
 * (a dead branch in the model), and after layer li, when li closes gradient
 * bucket k, calls the backend's bucket_done(be, k, &ready) (cpu: its stream is
 * done, ready = NULL; cuda: unscales the bucket's range and records its event)
 * and then the hook of dpt_backend_set_buckets with that ready.  bucket_done
 * NULL: ready = NULL. */
typedef int (*dpt_bucket_done_fn)(struct dpt_backend *be, int bucket, void **ready, struct dpt_err *err);
int dpt_backend_backward_walk(struct dpt_backend *be, dpt_bucket_done_fn bucket_done, struct dpt_err *err);

/* Which backends this build has ("cpu" or "cpu,cuda"). */
const char *dpt_backend_available(void);

/* What "auto" picks: "cuda" when this build has the GPU backend and a device
 * really works (cudaSetDevice and a small cudaMalloc/cudaFree succeed), else
 * "cpu" with why[] saying what failed ("" when the build has no GPU backend). */
const char *dpt_backend_auto(char *why, size_t why_len);

/* Per-backend constructors (dpt_backend_create dispatches). */
int dpt_backend_cpu_create(const struct dpt_model *model, const struct dpt_backend_opts *opts,
                           struct dpt_backend **out, struct dpt_err *err);

static inline int dpt_backend_forward(struct dpt_backend *be, const float *x, int training,
                                      float *out, struct dpt_err *err)
{
  return be->ops->forward(be, x, training, out, err);
}
static inline int dpt_backend_backward(struct dpt_backend *be, const float *dout, float *dx,
                                       struct dpt_err *err)
{
  return be->ops->backward(be, dout, dx, err);
}
/* Host buffers that cross to the backend every step (pinned on cuda; malloc'd otherwise).
 * Free them before the backend. */
void *dpt_backend_host_alloc(struct dpt_backend *be, size_t bytes);
void dpt_backend_host_free(struct dpt_backend *be, void *p);

#endif /* DPT_BACKEND_H */
