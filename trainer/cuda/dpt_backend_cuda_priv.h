/* dpt_backend_cuda_priv.h — the cuda backend's own structures, shared by its rooms:
 * dpt_backend_cuda.c (the ops table, the step's walks) with _create.c (set-up), _input.c (the
 * input's upload), _gstep.c (CUDA-graph steps), _loss.c (the loss, the scaler), _optim.c (the
 * optimizers), and
 * dpt_cuda_layers.c (the layers' legacy cuDNN / cuBLAS calls, the fused step's per-layer
 * dispatch, the convolution algorithm choice, batch norm's Ex set-up).  Not a public header. */
#ifndef DPT_BACKEND_CUDA_PRIV_H
#define DPT_BACKEND_CUDA_PRIV_H

#include "dpt_backend_cuda.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "dpt_cuda_capture.h"
#include "dpt_cuda_fstep.h"
#include "dpt_cuda_graph.h"
#include "dpt_cuda_kernels.h"
#include "dpt_cuda_optim.h"
#include "dpt_cudnn_errata.h"
#include "dpt_data.h" /* struct dpt_input_format */
#include "dpt_engine_cache.h"
#include "dpt_optim_layout.h"


/* regions + workspace, search workspace, pending slab, the fused step's tuning workspace, the
 * cuBLAS workspace (graph capture), the fused optimizer's tables */
#define MAX_ALLOCS (DPT_CUDA_NREGIONS + 8)
#define NSTAGE 2 /* pinned host staging slots for the input batch and the labels */

struct cu_tensor {
  cudnnTensorDescriptor_t desc; /* [N, c_stored, h, w], NHWC fp32 / fp16 / bf16, or NCHW fp32 (plan.nchw) */
  void *buf;                    /* activation */
  void *diff;                   /* its gradient (NULL when not needed) */
};

/* A convolution's directions (dpt_cuda_convg.c): forward, data gradient written (beta 0) or
 * accumulated (beta 1), weight gradient. */
enum { DPT_CONVG_FWD, DPT_CONVG_DGRAD, DPT_CONVG_DGRAD_ACC, DPT_CONVG_WGRAD, DPT_CONVG_N };

struct cu_algo {
  int fwd, bwd_data, bwd_filter;   /* cudnnConvolution*Algo_t */
  int math_fwd, math_data, math_filter; /* cudnnMathType_t the choice was made with (set before each call) */
  size_t ws_fwd, ws_data, ws_filter;
  struct dpt_cg_op *g[DPT_CONVG_N]; /* the cuDNN graph that runs the direction instead; NULL: the algorithm above */
  float ms_legacy[DPT_CONVG_N], ms_graph[DPT_CONVG_N]; /* their timed medians (-1: not timed) */
  size_t ws_graph;                  /* the largest workspace of g[] */
};

struct cu_backend;

struct cu_layer {
  struct cu_backend *cb;
  int idx;
  int conv;                         /* index in plan.conv, -1 */
  cudnnFilterDescriptor_t fdesc;    /* conv filter [K, C_stored, R, S] */
  cudnnConvolutionDescriptor_t cdesc;
  cudnnTensorDescriptor_t pdesc;    /* BN scale/bias/mean/var [1, C, 1, 1] fp32; FC bias [1, K, 1, 1] */
  cudnnPoolingDescriptor_t pool;
  float *save_mean, *save_istd;     /* BN [C] each, from forward training */
  void *w16, *dw16;                 /* conv: KRSC weight copy [K, R, S, C_stored] in the compute type and
                                       the shared weight-gradient buffer, or (plan.nchw) the KCRS weights
                                       and gradients in the slabs; FC (16-bit): [K, C] weights */
  void *scratch;                    /* BN+ReLU / add+ReLU backward: relu'(y) * dy [output's size] */
  void *discard;                    /* BN whose input has no gradient: its dx [input's size] */
  const struct dpt_layer_ops *legacy; /* the layer's legacy calls (the fused step runs the plan's
                                       legacy ops of this layer through them) */
  float *bn_vec;                    /* fused step, BN: [7][C] sum, sum of squares, equivalent scale,
                                       bias, backward coefficients cy, cx, cb (dpt_cuda_fstep.h) */
  int bn_ex;                        /* BN training through cudnnBatchNormalization*Ex (NHWC persistent
                                       kernels, ReLU inside when the layer has one); 0: the plain calls */
  void *bn_reserve;                 /* Ex: forward -> backward reserve space [bn_reserve_bytes] */
  size_t bn_reserve_bytes;
  int bn_add;                       /* BN (Ex, fp16) right before the ADD+ReLU that alone reads its output:
                                       the add and its ReLU inside the Ex calls (BN_ADD_ACTIVATION): the
                                       forward writes the add's output from x and z, the backward reads it and
                                       its gradient and writes x's and z's (dpt_cuda_bn.c) */
  int add_layer, add_z;             /* bn_add: the add's layer index, its other input (z) */
  int did_add;                      /* bn_add: this step's forward did the add (the add's calls do nothing) */
  int add_bn;                       /* ADD: the BN layer that may do it (bn_add), -1 */
  struct dpt_cg_vp cg_vp[DPT_CONVG_N]; /* conv: the variant pack of each direction's graph for this layer's
                                       operands (its shape's op is shared: no descriptor work per step) */
};

struct cu_backend {
  struct dpt_backend pub;
  struct dpt_cuda_opts copts;
  struct dpt_cuda_plan plan;
  int dev;
  int sync_debug;
  cudaStream_t stream;
  cudnnHandle_t dnn;
  cublasHandle_t blas;
  struct cu_tensor *t;              /* [n_tensors] */
  struct cu_layer *l;               /* [n_layers] */
  struct cu_algo *algo;             /* [plan.n_shapes] */
  void *region[DPT_CUDA_NREGIONS];  /* one allocation each (plan.region[] bytes) */
  void *ws;                         /* shared convolution (and BN Ex) workspace [ws_bytes] */
  size_t bn_ws_bytes;               /* the largest BN Ex forward / backward workspace */
  cudnnActivationDescriptor_t relu; /* BN Ex: the ReLU fused into BN+ReLU layers */
  size_t ws_bytes;
  float *in32, *out32, *dout32, *dx32; /* fp32 staging: input, logits, dlogits, dinput */
  void *in_own;                     /* the input tensor's arena slot; t[0].buf is the caller's batch
                                       instead after forward_device (read in place) */
  void *dy16;                       /* 16-bit: FC output gradient cast [N, K] (FC-cast region) */
  long host_syncs;                  /* host waits on the stream so far (dpt_backend_cuda_host_syncs) */
  long stage_waits;                 /* waits for a staging slot's upload of NSTAGE steps ago that blocked */
  int overflow_armed;               /* the next sgd_step reads the device overflow flag */
  /* host -> device without host waits: pinned staging (labels; images when pageable), the uploads
   * on their own stream, each slot reused only after its upload (event) of NSTAGE steps ago */
  cudaStream_t up_stream;           /* input uploads: staging -> in32, overlapping the compute */
  cudaEvent_t in_free;              /* compute stream, after the input cast: in32 may be overwritten */
  cudaEvent_t x_ev[NSTAGE], lab_ev[NSTAGE]; /* staging slot's input / labels upload done */
  int x_used[NSTAGE], lab_used[NSTAGE], x_slot, lab_slot;
  const float *pre_x;               /* ops->prefetch: the images whose upload into in32 is under way */
  int pre_slot, pre_pinned;         /* its slot (x_ev) and whether it went up in place */
  void *pinned;                     /* cudaHostAlloc: the labels' slots, then the readback area */
  size_t pinned_bytes;
  void *stage_mem;                  /* cudaHostAlloc on the first pageable images (input.c stage_alloc):
                                       the images' slots; NULL while every batch came pinned */
  size_t stage_bytes;
  size_t host_alloc_bytes;          /* ops->host_alloc's live buffers (atomic: loader threads) */
  float *stage_x[NSTAGE];           /* [N, C, H, W] host NCHW images (in stage_mem) */
  int *stage_lab[NSTAGE];           /* [N] */
  double *tot_host;                 /* [4] loss totals read back */
  struct dpt_loss_scaler *scaler_host; /* the scaler read back / to upload */
  double *tot;                      /* device [4]: loss sum, top-1, top-5, rows since loss_totals */
  struct dpt_loss_scaler *scaler;   /* device: mixed precision's dynamic loss scaling */
  size_t unscaled_lo;               /* backward: gradient slab [unscaled_lo, n_params) is unscaled */
  int mask_ready;                   /* dpt_backend_cuda_sgd_step uploaded its mask */
  float *velocity;                  /* [n_params] SGD momentum (lazy) */
  float sgd_momentum, sgd_wd;       /* ops->sgd_init's hyper-parameters */
  int sgd_nesterov, sgd_ready;
  unsigned char *mask;              /* [n_params] weight-decay mask (lazy) */
  int *labels, *rank, *flag;        /* [N], [N], [1] */
  float *loss_rows;                 /* [N] */
  cudaEvent_t *bucket_ev;           /* [n_ev] one per gradient bucket (dpt_backend_set_buckets) */
  int n_ev;
  cudaEvent_t stash_ev;             /* double buffering: completes with pending <- grads */
  void *allocs[MAX_ALLOCS];
  size_t alloc_bytes[MAX_ALLOCS];
  int n_allocs;
  size_t bytes, peak;
  int dtype;                        /* DPT_DT_F32 / F16 / BF16: activations and weight copies */
  /* the fused optimizer (issue 15): one launch per step writes the fp32 update and the weight
   * copies in the compute type (no per-layer cast kernels) */
  struct dpt_optim_layout olay;
  struct dpt_cuda_optim_tables otab;
  struct dpt_cuda_lars_tables ltab;  /* --optimizer lars (ops->lars_init): the update runs LARS */
  int lars_ready;
  float *rmsw_m;                    /* --optimizer rmsprop-warmup (ops->rmsw_init): [n_params] second moment */
  int rmsw_ready;
  float rmsw_lr, rmsw_mu2, rmsw_eps;
  double rmsw_center, rmsw_period;  /* epochs */
  float *lr_dev;                    /* device float: the step's learning rate (graph steps) */
  /* the fused step (--fuse) */
  int fused;
  struct dpt_cuda_fstep fx;
  unsigned char *legacy;            /* [n_layers] layers kept on legacy calls (a pattern without engine) */
  struct dpt_engine_cache ecache;
  struct dpt_cudnn_errata errata;
  int ecache_open, errata_loaded;
  /* the default path's convolutions through cuDNN graphs (dpt_cuda_convg.c) */
  int convg;                        /* enum dpt_cuda_conv: the options', auto made legacy when untimed */
  struct dpt_cg_ctx cgx;            /* their executions: the handle and the shared workspace */
  struct dpt_cg_stats cg_stats;
  int cg_failed[DPT_CONVG_N];       /* shapes whose graph did not build, per direction */
  int cg_unaligned;                 /* shape-directions whose operands were not 16-byte aligned */
  char cg_first_fail[720];
  char notes[8192];                 /* ops->notes */
  /* CUDA-graph capture of announced steps (--cuda-graph) */
  struct dpt_cap_state cap;
  struct dpt_cuda_graphs graphs;
  int gstep;                        /* the current call belongs to a captured / replayed / eager graph-mode step */
  int gmode, gslot;                 /* its dpt_cap_mode and key slot */
  struct dpt_cap_step step;         /* what ops->step_begin announced */
  float step_lr;
  int launch_seg;                   /* segment to end (capture) and launch at the end of this call, -1 */
  cudaEvent_t lab_free;             /* after the loss kernel: the device labels may be overwritten */
  cudaEvent_t pre_wait[4];          /* upload events the stream waits for before the step's work */
  int n_pre_wait;
  void *blas_ws;                    /* cuBLAS workspace (captured GEMMs allocate nothing) */
  int said_uncaptured;              /* the reason a step ran uncaptured was said */
  struct dpt_cap_item *bw_items;    /* [bw_cap] the graph step's backward items, bw_done of bw_n reported */
  int bw_cap, bw_n, bw_done;
};

#define CB(be) ((struct cu_backend *)(be))

static const float one = 1.0f, zero = 0.0f;

/* "cuda backend: <call> failed in layer '<name>' (<shape>) on device <d>: <why>" (li -1: `what` names
 * the context); returns DPT_E_RUNTIME. */
int dpt_cuda_call_fail(struct cu_backend *cb, int li, const char *what, const char *call, const char *why,
                       struct dpt_err *err);
/* Every CUDA / cuDNN / cuBLAS call and kernel launch goes through one of these;
 * li is the layer index (or -1 with `what` naming the non-layer context). */
#define CUDA_CK(fn, args, li, what)                                                 \
  do {                                                                              \
    cudaError_t e_ = fn args;                                                       \
    if (e_ != cudaSuccess) {                                                        \
      rc = dpt_cuda_call_fail(cb, (li), (what), #fn, cudaGetErrorString(e_), err);  \
      goto fail;                                                                    \
    }                                                                               \
  } while (0)
#define KERN_CK(fn, args, li, what)                                       \
  do {                                                                    \
    int e_ = fn args;                                                     \
    if (e_ != 0) {                                                        \
      rc = dpt_cuda_call_fail(cb, (li), (what), #fn " (kernel launch)",   \
                              cudaGetErrorString((cudaError_t)e_), err);  \
      goto fail;                                                          \
    }                                                                     \
  } while (0)
#define DNN_CK(fn, args, li, what)                                                   \
  do {                                                                               \
    cudnnStatus_t s_ = fn args;                                                      \
    if (s_ != CUDNN_STATUS_SUCCESS) {                                                \
      rc = dpt_cuda_call_fail(cb, (li), (what), #fn, cudnnGetErrorString(s_), err);  \
      goto fail;                                                                     \
    }                                                                                \
  } while (0)
#define BLAS_CK(fn, args, li, what)                                                    \
  do {                                                                                 \
    cublasStatus_t s_ = fn args;                                                       \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
      rc = dpt_cuda_call_fail(cb, (li), (what), #fn, cublasGetStatusString(s_), err);  \
      goto fail;                                                                       \
    }                                                                                  \
  } while (0)

/* A device allocation of ours (zeroed, counted in the backend's bytes and peak). */
int dpt_cuda_dalloc(struct cu_backend *cb, void **p, size_t bytes, const char *what, struct dpt_err *err);
/* Every host wait on the stream (counted; refused inside a graph capture). */
int dpt_cuda_stream_sync(struct cu_backend *cb, int li, const char *what, struct dpt_err *err);
/* A line of what the backend decided at start (dpt-train prints them). */
int dpt_cuda_note(struct cu_backend *cb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static inline int layer_sync(struct cu_backend *cb, int li, struct dpt_err *err)
{
  return cb->sync_debug ? dpt_cuda_stream_sync(cb, li, "sync", err) : 0;
}

static inline size_t t_elems(const struct cu_backend *cb, int tid)
{
  const struct dpt_cuda_tensor_plan *p = &cb->plan.t[tid];
  return (size_t)p->n * p->c_stored * p->h * p->w;
}

/* Input gradient target of a layer: beta 0 first, 1 when accumulating. */
static inline void *diff_target(struct cu_backend *cb, int tid, float *beta)
{
  *beta = cb->pub.grad_written[tid] ? 1.0f : 0.0f;
  cb->pub.grad_written[tid] = 1;
  return cb->t[tid].diff;
}

static inline int tensor_dtype(const struct cu_backend *cb, int tid)
{
  return cb->plan.t[tid].elem_bytes == 4 ? DPT_DT_F32 : cb->dtype;
}


/* dpt_cuda_layers.c (dpt_cuda_bn_ops: dpt_cuda_bn.c) */
extern const struct dpt_layer_ops dpt_cuda_conv_ops, dpt_cuda_bn_ops, dpt_cuda_relu_ops, dpt_cuda_pool_ops,
    dpt_cuda_fc_ops, dpt_cuda_add_ops, dpt_cuda_fused_ops;
void dpt_cuda_layer_destroy(struct dpt_layer *l);
cudnnMathType_t dpt_cuda_conv_search_math(const struct cu_backend *cb);
int dpt_cuda_choose_algos(struct cu_backend *cb, int shape, int rep, size_t limit, struct dpt_err *err);
int dpt_cuda_bn_ex_prepare(struct cu_backend *cb, struct dpt_err *err);
/* The residual add's own backward (its ReLU's mask, both inputs' gradients): dpt_cuda_layers.c's, for
 * a BN that did the add in the forward but whose fused backward cuDNN refused (dpt_cuda_bn.c). */
int dpt_cuda_add_backward_run(struct dpt_layer *l, struct dpt_err *err);

/* dpt_cuda_convg.c: per shape and direction, cudnnFind's algorithm or a timed cuDNN graph engine */
/* After cudnnFind chose for shape `shape` (conv rep's buffers): the graphs, timed against it in ws
 * (limit bytes: the most a graph may use; NULL when 0).  Only CUDA failures are errors. */
int dpt_cuda_convg_choose(struct cu_backend *cb, int shape, int rep, void *ws, size_t limit, struct dpt_err *err);
void dpt_cuda_convg_note(struct cu_backend *cb, double seconds); /* the start line: what was chosen, its cost */
/* Run direction dir of conv layer li through its shape's graph with operands p (DPT_CG_* slots):
 * *ran 0 when there is none (or cuDNN refused it: then never again), the caller's legacy call. */
int dpt_cuda_convg_exec(struct cu_backend *cb, int li, int dir, void *const *p, int *ran, struct dpt_err *err);
void dpt_cuda_convg_destroy(struct cu_backend *cb);
/* dpt_backend_cuda_create.c: the engine cache and the cuDNN errata, opened once (the fused step and
 * the convolutions' graphs share them) */
int dpt_cuda_engines_open(struct cu_backend *cb, struct dpt_err *err);

/* dpt_backend_cuda.c: the backend's ops table (the step); dpt_backend_cuda_create.c sets it up */
extern const struct dpt_backend_ops dpt_cuda_ops;
void dpt_cuda_layer_shape(const struct cu_backend *cb, int li, char *buf, size_t len); /* for error messages */
void dpt_cuda_dfree(struct cu_backend *cb, void *p); /* one of dpt_cuda_dalloc's, counted off */

/* dpt_backend_cuda_input.c: host -> device input */
/* Before the host rewrites staging slot `used` (its upload recorded ev): wait for that upload
 * (counted in stage_waits when it blocks). */
int dpt_cuda_stage_wait(struct cu_backend *cb, cudaEvent_t ev, int *used, const char *what, struct dpt_err *err);
/* Host images x on their way into in32 (x is the caller's again on return); *done: the event the
 * compute stream waits for before dpt_cuda_input_cast. */
int dpt_cuda_input_stage(struct cu_backend *cb, const float *x, cudaEvent_t *done, struct dpt_err *err);
/* in32 -> the input tensor, then in_free (external: recorded as a captured graph's event node). */
int dpt_cuda_input_cast(struct cu_backend *cb, int external, struct dpt_err *err);
/* ops->prefetch, ops->input_format, ops->host_alloc, ops->host_free, ops->pinned_bytes */
int dpt_cuda_input_prefetch(struct dpt_backend *be, const float *x, struct dpt_err *err);
int dpt_cuda_input_format(struct dpt_backend *be, struct dpt_input_format *f, struct dpt_err *err);
void *dpt_cuda_host_alloc(struct dpt_backend *be, size_t bytes);
void dpt_cuda_host_free(struct dpt_backend *be, void *p);
size_t dpt_cuda_pinned_bytes(const struct dpt_backend *be);

/* dpt_backend_cuda_gstep.c: a call's part in a CUDA-graph step (cb->gstep) */
/* Item (kind, index) of the announced step is next: *act (DPT_CAPA_*), what to do with its work. */
int dpt_cuda_gstep_item(struct cu_backend *cb, int kind, int index, int *act, struct dpt_err *err);
/* The end of a backend call in a graph step (rc: its status so far): a finished segment ends and
 * is launched; an error drops the step and its capture.  Returns rc or the new error. */
int dpt_cuda_gstep_end(struct cu_backend *cb, int rc, struct dpt_err *err);
/* An upload event the compute stream waits for right before the step's next segment (or work). */
void dpt_cuda_gstep_wait(struct cu_backend *cb, cudaEvent_t ev);
/* ops->step_begin, ops->join */
int dpt_cuda_gstep_begin(struct dpt_backend *be, const struct dpt_cap_step *s, float lr, struct dpt_err *err);
int dpt_cuda_gstep_join(struct dpt_backend *be, void *event, struct dpt_err *err);

/* dpt_backend_cuda_loss.c: the loss and the loss scaler (ops->loss, loss_totals, scaler_get / set;
 * ops->overflow_check is dpt_backend_cuda_check_overflow) */
int dpt_cuda_loss_run(struct dpt_backend *be, const int *labels, float smoothing, float grad_scale,
                      struct dpt_err *err);
int dpt_cuda_loss_totals(struct dpt_backend *be, struct dpt_loss_totals *t, struct dpt_err *err);
int dpt_cuda_scaler_get(struct dpt_backend *be, struct dpt_loss_scaler *s, struct dpt_err *err);
int dpt_cuda_scaler_set(struct dpt_backend *be, const struct dpt_loss_scaler *s, struct dpt_err *err);

/* The model's output tensor (the logits). */
static inline int out_tid(const struct cu_backend *cb)
{
  return cb->pub.model->layers[cb->pub.model->n_layers - 1].out;
}

static inline cudnnDataType_t tensor_type(const struct cu_backend *cb, const struct dpt_cuda_tensor_plan *p)
{
  return p->elem_bytes == 4 ? CUDNN_DATA_FLOAT : cb->dtype == DPT_DT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
}

/* elements of a tensor as the model sees it (c, not c_stored) */
static inline size_t n_elems(const struct dpt_cuda_tensor_plan *p)
{
  return (size_t)p->n * p->c * p->h * p->w;
}

/* dpt_backend_cuda_optim.c: the update's launch (sgd, LARS or RMSprop warm-up by the backend's
 * set-up; copy_only: the weight copies of the parameters as they are), the optimizers' set-up
 * (ops->sgd_init, ops->lars_init, ops->rmsw_init) and ops->sgd_step. */
int dpt_cuda_optim_launch(struct cu_backend *cb, const float *g, float lr, const float *lr_dev, float momentum,
                          float wd, int nesterov, const unsigned char *mask, const int *skip, int copy_only,
                          struct dpt_err *err);
int dpt_cuda_refresh_copies(struct cu_backend *cb, struct dpt_err *err);
int dpt_backend_cuda_lars_init(struct dpt_backend *be, const struct dpt_param_seg *seg, int n_seg, float eta, float eps,
                               struct dpt_err *err);
int dpt_backend_cuda_rmsw_init(struct dpt_backend *be, float lr_rms, float mu2, float eps, double center, double period,
                               struct dpt_err *err);
int dpt_cuda_sgd_init(struct dpt_backend *be, float momentum, float weight_decay, int nesterov,
                      const unsigned char *mask, struct dpt_err *err);
int dpt_cuda_sgd_step(struct dpt_backend *be, float lr, const float *grads, struct dpt_err *err);

#endif
