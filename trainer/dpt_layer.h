/* dpt_layer.h — the layer interface every backend implements.
 *
 * A backend turns each struct dpt_layer_desc of a model into a struct
 * dpt_layer: a vtable (forward, backward, destroy) plus views of the layer's
 * parameters, gradients and state inside the backend's slabs.  The slabs are
 * in the backend's memory space (host for cpu, device for cuda); their layout
 * is the model's (PyTorch order), so the all-reduce, the optimizer, the
 * checkpoints and the CPU-vs-GPU oracle tests all see the same bytes.
 *
 * Activations and their gradients are private to the backend (the CPU
 * backend keeps oneDNN's blocked layout between layers).  Calling convention:
 * forward() runs in topological order, backward() in reverse order; backward
 * must OVERWRITE the layer's gradient block (the backend zeroes nothing) and
 * deliver (accumulate, at residual forks) the gradient of its input tensors. */
#ifndef DPT_LAYER_H
#define DPT_LAYER_H

#include "dpt_err.h"
#include "dpt_model.h"

struct dpt_layer;

struct dpt_layer_ops {
  /* training = 1: batch statistics, running-stat update, keep what backward needs. */
  int (*forward)(struct dpt_layer *l, int training, struct dpt_err *err);
  /* Gradients of parameters (overwritten) and of the inputs (delivered). */
  int (*backward)(struct dpt_layer *l, struct dpt_err *err);
  void (*destroy)(struct dpt_layer *l);
};

struct dpt_layer {
  const struct dpt_layer_desc *desc; /* shapes, names, slab offsets */
  const struct dpt_layer_ops *ops;
  float *params;  /* [desc->w_len + desc->b_len] at slab + desc->w_off: weight, then bias/beta */
  float *grads;   /* [desc->w_len + desc->b_len] same offsets in the gradient slab */
  float *state;   /* BN: [2 * c_out] running mean then running var; NULL otherwise */
  void *impl;     /* backend-private (primitives, workspaces) */
};

#endif /* DPT_LAYER_H */
