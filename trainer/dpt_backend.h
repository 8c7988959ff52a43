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
 * same loop drives both kinds. */
#ifndef DPT_BACKEND_H
#define DPT_BACKEND_H

#include <stddef.h>

#include "dpt_bucket.h"
#include "dpt_err.h"
#include "dpt_layer.h"
#include "dpt_model.h"

struct dpt_backend_opts {
  int batch;            /* images per forward (per rank) */
  int threads;          /* CPU threads for kernels (0 = leave OpenMP's default) */
  int need_input_grad;  /* 1: backward also computes dL/dinput (gradient checks) */
  float bn_momentum;    /* running-stat update factor (PyTorch: 0.1) */
  float bn_eps;         /* PyTorch: 1e-5 */
  const char *precision; /* NULL: the backend's default; "fp32" (every backend), "tf32",
                            "mixed", "bf16" (cuda only; cpu refuses them with DPT_E_UNSUPPORTED) */
};
void dpt_backend_opts_default(struct dpt_backend_opts *o);

enum dpt_slab { DPT_SLAB_PARAMS, DPT_SLAB_GRADS, DPT_SLAB_STATE,
                DPT_SLAB_VELOCITY /* [n_params]: sgd_init must have run */,
                DPT_SLAB_PENDING /* [n_params]: pending_init must have run */ };

struct dpt_backend;

struct dpt_backend_ops {
  const char *name;
  /* x: [N, C_in, H, W] host, plain NCHW.  out: host, [N, C, H, W] plain of the
   * model's output tensor (logits [N, K]). */
  int (*forward)(struct dpt_backend *be, const float *x, int training, float *out,
                 struct dpt_err *err);
  /* dout: host, same shape as out.  Overwrites the gradient slab.  dx: host
   * [N, C_in, H, W] or NULL (needs opts.need_input_grad). */
  int (*backward)(struct dpt_backend *be, const float *dout, float *dx, struct dpt_err *err);
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
  /* Block until the work enqueued so far (backward's gradients) is complete:
   * call before another stream or a communicator reads the gradient slab. */
  int (*sync)(struct dpt_backend *be, struct dpt_err *err);
  /* Highest memory_bytes() so far, including temporary buffers (the cuda
   * algorithm search's workspace). */
  size_t (*peak_bytes)(const struct dpt_backend *be);
  /* Mixed precision (NULL when the backend has none): *finite = 1 when every
   * element of buf (NULL: the gradient slab; be->pending) is finite; the loss
   * scale that backward() multiplies the output gradient by (it unscales the
   * parameter gradients). */
  int (*grads_finite)(struct dpt_backend *be, const float *buf, int *finite, struct dpt_err *err);
  void (*set_loss_scale)(struct dpt_backend *be, float scale);
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
  float *velocity;                 /* [model->n_params] after sgd_init (host_slabs), else NULL */
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
/* Backends call this after layer li's backward: runs the hook when li closes
 * a bucket (ready: see dpt_bucket_ready_fn). */
static inline int dpt_backend_bucket_closes(const struct dpt_backend *be, int li)
{
  return be->n_buckets && be->bucket_at[li] >= 0 ? be->bucket_at[li] : -1;
}
int dpt_backend_bucket_ready(struct dpt_backend *be, int bucket, void *ready, struct dpt_err *err);

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

#endif /* DPT_BACKEND_H */
