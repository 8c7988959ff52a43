/* dpt_cpu_priv.h — the CPU backend's private structures and helpers, shared by
 * dpt_backend_cpu.c (the backend: slabs, forward / backward walks, memory plans, edges) and
 * dpt_cpu_layers.c (one section per layer type: convolution, BN, ReLU, pooling, FC, add). */
#ifndef DPT_CPU_PRIV_H
#define DPT_CPU_PRIV_H

#include <oneapi/dnnl/dnnl.h>

#include "dpt_backend.h"
#include "dpt_cpu_impl.h"
#include "dpt_optim.h"
#include "dpt_wino.h"

struct cpu_tensor {
  dnnl_memory_desc_t md; /* physical layout of [N, c, h, w] (2-D [N, c] after FC) */
  int has_md;
  size_t bytes;          /* dnnl_memory_desc_get_size(md) */
  float *buf;            /* activation, layout md */
  dnnl_memory_t mem;
  float *diff;           /* gradient, layout md (NULL when not needed) */
  dnnl_memory_t diff_mem;
  int need_diff;
  int pooled;            /* buf belongs to cb->apool */
};

struct cpu_backend;

struct cpu_layer {
  struct cpu_backend *cb;
  int idx;
  dnnl_primitive_t fwd, fwd_inf, bwd, bwd_w;
  /* weights: plain user view in the slab, blocked copy for fwd, maybe another for bwd-data */
  dnnl_primitive_t w_reorder, w_reorder_bwd, dw_reorder;
  dnnl_memory_t w_user, w_prim, w_prim_bwd, dw_user, dw_prim;
  dnnl_memory_t b_mem, db_mem;        /* BN shift / FC bias and their gradients (slab) */
  dnnl_memory_t mean_mem, var_mem;    /* BN batch statistics [c] */
  dnnl_memory_t rmean_mem, rvar_mem;  /* BN running statistics (state slab) */
  dnnl_memory_t ws_mem;               /* BN+ReLU / max-pool workspace */
  dnnl_memory_t scratch_mem;          /* diff scratch with the input tensor's layout */
  dnnl_memory_t scratch_mem1;         /* ADD: second input's layout */
  dnnl_memory_t g_mem;                /* ADD: gradient in the output's layout (scratch2) */
  dnnl_primitive_t g_reorder[2];      /* ADD: output layout -> input k layout, when they differ */
  float *mean;  /* [c] */
  float *var;   /* [c] */
  void *ws;
  float *w_blk, *w_blk_bwd, *dw_blk;  /* blocked weight buffers */
  /* CONV whose kernel wants another input layout than the tensor has (e.g. 8
   * channels: nChw8c for the AVX2 JIT instead of a padded nChw16c that only the
   * reference code accepts): a private copy of the input in the conv's layout. */
  dnnl_primitive_t src_reorder, dsrc_reorder;
  dnnl_memory_t src_priv, dsrc_priv;
  float *src_buf, *dsrc_buf;
  /* CONV 3x3, stride 1 or 2, by Winograd (dpt_wino; none of the primitives above) */
  int use_wino;
  struct dpt_wino wino;
};

struct cpu_backend {
  struct dpt_backend pub;
  dnnl_engine_t eng;
  dnnl_stream_t strm;
  int n_tensors;
  struct cpu_tensor *t;   /* [n_tensors] */
  struct cpu_layer *l;    /* [n_layers] */
  float *scratch;         /* max tensor bytes: diff accumulation */
  float *scratch2;        /* max tensor bytes: residual-add gradient */
  float *dw_shared;       /* blocked weight gradients, shared (largest layer) */
  size_t dw_bytes;
  int n_apool;
  float **apool;          /* [n_apool] activation buffers shared by tensors that backward
                             never reads (act_plan) */
  int n_pool;
  float **pool;           /* [n_pool] gradient buffers shared by tensors whose gradients
                             are never live at the same time (diff_plan) */
  size_t scratch_bytes;
  dnnl_memory_t in_user, out_user, dout_user, dx_user; /* plain edge views */
  dnnl_primitive_t in_reorder, out_reorder, dout_reorder, dx_reorder;
  size_t bytes_total;
  int conv_mode;          /* DPT_CPU_CONV: auto (Winograd where it pays), direct, winograd (wherever it can) */
  int wino_m;             /* Winograd output tile: F(4x4,3x3) (DPT_CPU_WINO_TILE=2: F(2x2,3x3)) */
  void *wino_ws;          /* [wino_bytes] the Winograd convolutions' workspace, shared */
  size_t wino_bytes;
  int nhwc;               /* 1: channels-last everywhere (DPT_CPU_LAYOUT=nhwc, for
                             experiments); default: oneDNN's choice (blocked) */
  float *params, *grads;  /* [n_params] each: the slabs (be->params / grads point here, */
  float *state;           /* [n_state]      or are NULL with device_slabs) */
  float *pending;         /* [n_params] after pending_init (be->pending, or its token with device_slabs) */
  void *pending_token;    /* device_slabs: be->pending, one PROT_NONE page standing for cb->pending */
  struct dpt_sgd sgd;     /* ops->sgd_init / sgd_step; velocity [n_params] */
  int sgd_ready;
  struct dpt_lars lars;   /* ops->lars_init: sgd_step runs LARS when lars_ready */
  int lars_ready;
  struct dpt_rmsw rmsw;   /* ops->rmsw_init: sgd_step runs RMSprop warm-up when rmsw_ready; its m is
                             the second half of sgd.velocity [2 n_params] */
  int rmsw_ready;
  int device_slabs;       /* DPT_CPU_DEVICE_SLABS=1: simulated device (host_slabs = 0) */
  const float *pre_x;     /* device_slabs, ops->prefetch: the batch taken ahead, and its copy */
  float *pre_buf;         /* [N, C, H, W] */
  float *last_out;        /* [N, K] plain: the last forward's output (forward(out = NULL)) */
  float *last_dout;       /* [N, K] plain: its gradient from loss() (backward(dout = NULL)) */
  size_t n_out;           /* N * K */
  int n_classes;          /* K: the output tensor's c * h * w */
  struct dpt_loss_totals tot; /* loss() since the last loss_totals() */
  long waits;             /* calls that wait on a device backend (host_waits) */
  struct dpt_cpu_impl_log impls; /* every primitive's implementation; the reference ones said (notes) */
};

#define CB(be) ((struct cpu_backend *)(be))

enum { DPT_CPU_CONV_AUTO, DPT_CPU_CONV_DIRECT, DPT_CPU_CONV_WINOGRAD };

/* Run a oneDNN call in a function with `int rc`, `struct dpt_err *err` and a `fail:` label. */
#define DN(call, layer)                                                                           \
  do {                                                                                            \
    dnnl_status_t st_ = (call);                                                                   \
    if (st_ != dnnl_success) {                                                                    \
      rc = dpt_cpu_fail(err, st_, #call, (layer));                                                \
      goto fail;                                                                                  \
    }                                                                                             \
  } while (0)

int dpt_cpu_fail(struct dpt_err *err, dnnl_status_t st, const char *call, const char *layer);
dnnl_status_t dpt_cpu_prim_create(struct cpu_backend *cb, dnnl_primitive_t *prim,
                                  const_dnnl_primitive_desc_t pd, const char *layer);
void *dpt_cpu_alloc(struct cpu_backend *cb, size_t bytes);
const dnnl_memory_desc_t *dpt_cpu_query_md(const_dnnl_primitive_desc_t pd, dnnl_query_t what, int i);
void dpt_cpu_md_plain(dnnl_memory_desc_t *md, int n, int c, int h, int w, int two_d);
int dpt_cpu_is_2d(const struct dpt_model *m, int tid);
int dpt_cpu_exec(struct cpu_backend *cb, dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args,
                 const char *what, const char *layer, struct dpt_err *err);
int dpt_cpu_tensor_set(struct cpu_backend *cb, int tid, const dnnl_memory_desc_t *md, struct dpt_err *err);
dnnl_memory_t dpt_cpu_diff_target(struct cpu_backend *cb, int tid, dnnl_memory_t scratch_mem, int *acc);
void dpt_cpu_diff_accumulate(struct cpu_backend *cb, int tid, const float *s);
int dpt_cpu_weights_setup(struct cpu_backend *cb, struct cpu_layer *L, const char *name,
                          const dnnl_memory_desc_t *user_md, const dnnl_memory_desc_t *fwd_md,
                          const dnnl_memory_desc_t *bwd_md, const dnnl_memory_desc_t *dw_md, float *w_slab,
                          float *dw_slab, struct dpt_err *err);
int dpt_cpu_scratch_mem(struct cpu_backend *cb, dnnl_memory_t *m, int tid, const char *name,
                        struct dpt_err *err);

/* dpt_cpu_layers.c */
int dpt_cpu_layer_create(struct cpu_backend *cb, struct cpu_layer *L, struct dpt_layer *l, struct dpt_err *err);
void dpt_cpu_layer_destroy(struct dpt_layer *l);

#endif
