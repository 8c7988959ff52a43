/* dpt_backend.h — a compute backend: the model's layers on one device.
 *
 * cpu  : oneDNN 2.6 (this file's only implementation today; the oracle).
 * cuda : cuDNN/cuBLAS (issue 7) plugs in through the same struct
 *        dpt_backend_ops; until it is built, dpt_backend_create("cuda")
 *        fails with DPT_E_UNSUPPORTED and says so, and "auto" picks cpu.
 *
 * The backend owns three slabs in its memory space:
 *   params [model->n_params]  (PyTorch layout; one buffer for broadcast)
 *   grads  [model->n_params]  (same offsets; one buffer for the all-reduce)
 *   state  [model->n_state]   (BN running mean/var)
 * host_slabs = 1 means the three pointers are host memory the trainer may
 * read and write directly (cpu).  A device backend sets host_slabs = 0 and
 * provides copy_slab(). */
#ifndef DPT_BACKEND_H
#define DPT_BACKEND_H

#include <stddef.h>

#include "dpt_err.h"
#include "dpt_layer.h"
#include "dpt_model.h"

struct dpt_backend_opts {
  int batch;            /* images per forward (per rank) */
  int threads;          /* CPU threads for kernels (0 = leave OpenMP's default) */
  int need_input_grad;  /* 1: backward also computes dL/dinput (gradient checks) */
  float bn_momentum;    /* running-stat update factor (PyTorch: 0.1) */
  float bn_eps;         /* PyTorch: 1e-5 */
};
void dpt_backend_opts_default(struct dpt_backend_opts *o);

enum dpt_slab { DPT_SLAB_PARAMS, DPT_SLAB_GRADS, DPT_SLAB_STATE };

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
  /* Copy a slab between host and backend memory (to_backend = 1: host -> backend). */
  int (*copy_slab)(struct dpt_backend *be, enum dpt_slab which, float *host, int to_backend,
                   struct dpt_err *err);
  size_t (*memory_bytes)(const struct dpt_backend *be); /* activations + workspaces + slabs */
  void (*destroy)(struct dpt_backend *be);
};

struct dpt_backend {
  const struct dpt_backend_ops *ops;
  const struct dpt_model *model;   /* borrowed; must outlive the backend */
  struct dpt_backend_opts opts;
  int host_slabs;                  /* 1: params/grads/state below are host memory */
  float *params;                   /* [model->n_params] */
  float *grads;                    /* [model->n_params] */
  float *state;                    /* [model->n_state] */
  struct dpt_layer *layers;        /* [model->n_layers] */
  void *impl;
};

/* name: "cpu", "cuda" or "auto".  Parameters and state are initialised with
 * dpt_model_init_params(model, model->cfg.seed). */
int dpt_backend_create(const char *name, const struct dpt_model *model,
                       const struct dpt_backend_opts *opts, struct dpt_backend **out,
                       struct dpt_err *err);
void dpt_backend_destroy(struct dpt_backend *be);

/* Which backends this build has ("cpu" or "cpu,cuda"). */
const char *dpt_backend_available(void);

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
