/* dpt_backend_cuda.c — the CUDA backend (see dpt_backend_cuda.h).
 *
 * cuDNN 9 still ships the legacy convolution / batch-norm / activation /
 * pooling API used here (libcudnn_cnn / libcudnn_ops) and tags it deprecated
 * in favour of the graph API; the tags only become compiler attributes when
 * CUDNN_WARN_DEPRECATED is defined, which we do not, so this file builds with
 * the project's full -Wall -Wextra -Werror and no warning is silenced.
 *
 * Plan first (dpt_cuda_plan.c, host-only and tested without a GPU): tensor
 * layouts (NHWC at every precision), convolution shapes and the distinct-shape
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
#include "dpt_backend_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "dpt_cuda_kernels.h"
#include "dpt_data.h" /* struct dpt_input_format */

#define MAX_ALLOCS (DPT_CUDA_NREGIONS + 4) /* regions + workspace, search workspace, pending slab */
#define NSTAGE 2 /* pinned host staging slots for the input batch and the labels */

struct cu_tensor {
  cudnnTensorDescriptor_t desc; /* [N, c_stored, h, w], NHWC fp32 / fp16 / bf16 */
  void *buf;                    /* activation */
  void *diff;                   /* its gradient (NULL when not needed) */
};

struct cu_algo {
  int fwd, bwd_data, bwd_filter;   /* cudnnConvolution*Algo_t */
  size_t ws_fwd, ws_data, ws_filter;
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
                                       the shared weight-gradient buffer; FC (16-bit): [K, C] weights */
  void *scratch;                    /* BN+ReLU / add+ReLU backward: relu'(y) * dy [output's size] */
  void *discard;                    /* BN whose input has no gradient: its dx [input's size] */
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
  void *ws;                         /* shared convolution workspace [ws_bytes] */
  size_t ws_bytes;
  float *in32, *out32, *dout32, *dx32; /* fp32 staging: input, logits, dlogits, dinput */
  void *in_own;                     /* the input tensor's arena slot; t[0].buf is the caller's batch
                                       instead after forward_device (read in place) */
  void *dy16;                       /* 16-bit: FC output gradient cast [N, K] (FC-cast region) */
  long host_syncs;                  /* host waits on the stream so far (dpt_backend_cuda_host_syncs) */
  long stage_waits;                 /* waits for a staging slot's upload of NSTAGE steps ago that blocked */
  int overflow_armed;               /* the next sgd_step reads the device overflow flag */
  /* host -> device without host waits: pinned staging (one cudaHostAlloc), the input uploads
   * on their own stream, each slot reused only after its upload (event) of NSTAGE steps ago */
  cudaStream_t up_stream;           /* input uploads: staging -> in32, overlapping the compute */
  cudaEvent_t in_free;              /* compute stream, after the input cast: in32 may be overwritten */
  cudaEvent_t x_ev[NSTAGE], lab_ev[NSTAGE]; /* staging slot's input / labels upload done */
  int x_used[NSTAGE], lab_used[NSTAGE], x_slot, lab_slot;
  void *pinned;                     /* cudaHostAlloc: the slots, then the readback area */
  size_t pinned_bytes;
  float *stage_x[NSTAGE];           /* [N, C, H, W] host NCHW images */
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
};

#define CB(be) ((struct cu_backend *)(be))

/* The loss scale on the device (mixed precision), else NULL (= 1). */
static const float *dscale(const struct cu_backend *cb)
{
  return cb->plan.precision == DPT_CUDA_MIXED ? &cb->scaler->scale : NULL;
}

static const float one = 1.0f, zero = 0.0f;

/* ---- error reporting: call, layer, shape ---------------------------------- */

static void layer_shape(const struct cu_backend *cb, int li, char *buf, size_t len)
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

static int call_fail(struct cu_backend *cb, int li, const char *what, const char *call,
                     const char *why, struct dpt_err *err)
{
  char shape[192];
  layer_shape(cb, li, shape, sizeof shape);
  const char *name = li >= 0 && li < cb->pub.model->n_layers ? cb->pub.model->layers[li].name : what;
  return dpt_err_set(err, DPT_E_RUNTIME, "cuda backend: %s failed in layer '%s' (%s) on device %d: %s",
                     call, name, shape, cb->dev, why);
}

/* Every CUDA / cuDNN / cuBLAS call and kernel launch goes through one of these;
 * li is the layer index (or -1 with `what` naming the non-layer context). */
#define CUDA_CK(fn, args, li, what)                                                               \
  do {                                                                                            \
    cudaError_t e_ = fn args;                                                                     \
    if (e_ != cudaSuccess) {                                                                      \
      rc = call_fail(cb, (li), (what), #fn, cudaGetErrorString(e_), err);                         \
      goto fail;                                                                                  \
    }                                                                                             \
  } while (0)
#define KERN_CK(fn, args, li, what)                                                               \
  do {                                                                                            \
    int e_ = fn args;                                                                             \
    if (e_ != 0) {                                                                                \
      rc = call_fail(cb, (li), (what), #fn " (kernel launch)",                                    \
                     cudaGetErrorString((cudaError_t)e_), err);                                   \
      goto fail;                                                                                  \
    }                                                                                             \
  } while (0)
#define DNN_CK(fn, args, li, what)                                                                \
  do {                                                                                            \
    cudnnStatus_t s_ = fn args;                                                                   \
    if (s_ != CUDNN_STATUS_SUCCESS) {                                                             \
      rc = call_fail(cb, (li), (what), #fn, cudnnGetErrorString(s_), err);                        \
      goto fail;                                                                                  \
    }                                                                                             \
  } while (0)
#define BLAS_CK(fn, args, li, what)                                                               \
  do {                                                                                            \
    cublasStatus_t s_ = fn args;                                                                  \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                            \
      rc = call_fail(cb, (li), (what), #fn, cublasGetStatusString(s_), err);                      \
      goto fail;                                                                                  \
    }                                                                                             \
  } while (0)

static int dalloc(struct cu_backend *cb, void **p, size_t bytes, const char *what, struct dpt_err *err)
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

static void dfree(struct cu_backend *cb, void *p)
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
static int stream_sync(struct cu_backend *cb, int li, const char *what, struct dpt_err *err)
{
  int rc = 0;
  cb->host_syncs++;
  CUDA_CK(cudaStreamSynchronize, (cb->stream), li, what);
  return 0;
fail:
  return rc;
}

static int layer_sync(struct cu_backend *cb, int li, struct dpt_err *err)
{
  return cb->sync_debug ? stream_sync(cb, li, "sync", err) : 0;
}

static size_t t_elems(const struct cu_backend *cb, int tid)
{
  const struct dpt_cuda_tensor_plan *p = &cb->plan.t[tid];
  return (size_t)p->n * p->c_stored * p->h * p->w;
}

/* Input gradient target of a layer: beta 0 first, 1 when accumulating. */
static void *diff_target(struct cu_backend *cb, int tid, float *beta)
{
  *beta = cb->pub.grad_written[tid] ? 1.0f : 0.0f;
  cb->pub.grad_written[tid] = 1;
  return cb->t[tid].diff;
}

static cudnnDataType_t tensor_type(const struct cu_backend *cb, const struct dpt_cuda_tensor_plan *p)
{
  return p->elem_bytes == 4 ? CUDNN_DATA_FLOAT : cb->dtype == DPT_DT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
}

static int tensor_dtype(const struct cu_backend *cb, int tid)
{
  return cb->plan.t[tid].elem_bytes == 4 ? DPT_DT_F32 : cb->dtype;
}

/* ---- convolution ---------------------------------------------------------- */

static int conv_forward(struct dpt_layer *l, int training, struct dpt_err *err)
{
  struct cu_layer *L = l->impl;
  struct cu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  const struct dpt_cuda_conv_plan *cp = &cb->plan.conv[L->conv];
  const struct cu_algo *a = &cb->algo[cp->shape_id];
  int rc = 0, li = L->idx;
  const void *w = L->w16; /* KRSC copy in the compute type, cast from the fp32 master weights */
  KERN_CK(dpt_cuda_nchw32_to_nhwc, (l->params, L->w16, cb->dtype, cp->k, cp->c_logical, (size_t)cp->r * cp->s,
                                    cp->c, 1.0f, cb->stream), li, "");
  DNN_CK(cudnnConvolutionForward, (cb->dnn, &one, cb->t[d->in[0]].desc, cb->t[d->in[0]].buf,
                                   L->fdesc, w, L->cdesc, (cudnnConvolutionFwdAlgo_t)a->fwd, cb->ws,
                                   a->ws_fwd, &zero, cb->t[d->out].desc, cb->t[d->out].buf), li, "");
  return layer_sync(cb, li, err);
fail:
  return rc;
}

static int conv_backward(struct dpt_layer *l, struct dpt_err *err)
{
  struct cu_layer *L = l->impl;
  struct cu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  const struct dpt_cuda_conv_plan *cp = &cb->plan.conv[L->conv];
  const struct cu_algo *a = &cb->algo[cp->shape_id];
  struct cu_tensor *in = &cb->t[d->in[0]], *out = &cb->t[d->out];
  int rc = 0, li = L->idx;
  DNN_CK(cudnnConvolutionBackwardFilter, (cb->dnn, &one, in->desc, in->buf, out->desc, out->diff,
                                          L->cdesc, (cudnnConvolutionBwdFilterAlgo_t)a->bwd_filter,
                                          cb->ws, a->ws_filter, &zero, L->fdesc, L->dw16), li, "");
  /* gradient packing: KRSC -> fp32 KCRS slab (mixed: still loss-scaled; backward unscales
   * the slab by ranges, bucket by bucket) */
  KERN_CK(dpt_cuda_nhwc_to_nchw32, (L->dw16, cb->dtype, l->grads, cp->k, cp->c_logical, (size_t)cp->r * cp->s,
                                    cp->c, 1.0f, cb->stream), li, "");
  if (in->diff) {
    float beta;
    void *dx = diff_target(cb, d->in[0], &beta);
    DNN_CK(cudnnConvolutionBackwardData, (cb->dnn, &one, L->fdesc, L->w16,
                                          out->desc, out->diff, L->cdesc,
                                          (cudnnConvolutionBwdDataAlgo_t)a->bwd_data, cb->ws,
                                          a->ws_data, &beta, in->desc, dx), li, "");
  }
  return layer_sync(cb, li, err);
fail:
  return rc;
}

/* ---- batch normalisation (+ ReLU) ------------------------------------------ */

static cudnnBatchNormMode_t bn_train_mode(const struct cu_backend *cb)
{
  return cb->plan.bn_persistent_train ? CUDNN_BATCHNORM_SPATIAL_PERSISTENT : CUDNN_BATCHNORM_SPATIAL;
}

static int bn_forward(struct dpt_layer *l, int training, struct dpt_err *err)
{
  struct cu_layer *L = l->impl;
  struct cu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  struct cu_tensor *x = &cb->t[d->in[0]], *y = &cb->t[d->out];
  int rc = 0, li = L->idx, C = d->c_out;
  double eps = cb->pub.opts.bn_eps;
  if (eps < CUDNN_BN_MIN_EPSILON) eps = CUDNN_BN_MIN_EPSILON;
  if (training)
    DNN_CK(cudnnBatchNormalizationForwardTraining,
           (cb->dnn, bn_train_mode(cb), &one, &zero, x->desc, x->buf, y->desc, y->buf, L->pdesc,
            l->params, l->params + C, (double)cb->pub.opts.bn_momentum, l->state, l->state + C, eps,
            L->save_mean, L->save_istd), li, "");
  else
    DNN_CK(cudnnBatchNormalizationForwardInference,
           (cb->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, x->desc, x->buf, y->desc, y->buf,
            L->pdesc, l->params, l->params + C, l->state, l->state + C, eps), li, "");
  if (d->relu)
    KERN_CK(dpt_cuda_relu, (y->buf, y->buf, tensor_dtype(cb, d->out), t_elems(cb, d->out), cb->stream), li, "");
  return layer_sync(cb, li, err);
fail:
  return rc;
}

static int bn_backward(struct dpt_layer *l, struct dpt_err *err)
{
  struct cu_layer *L = l->impl;
  struct cu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  struct cu_tensor *x = &cb->t[d->in[0]], *y = &cb->t[d->out];
  int rc = 0, li = L->idx, C = d->c_out;
  double eps = cb->pub.opts.bn_eps;
  if (eps < CUDNN_BN_MIN_EPSILON) eps = CUDNN_BN_MIN_EPSILON;
  const void *dz = y->diff;
  if (d->relu) { /* dz = relu'(y) * dy; y > 0 exactly where the BN output was > 0 */
    KERN_CK(dpt_cuda_relu_bwd, (y->buf, y->diff, L->scratch, tensor_dtype(cb, d->out), 0, t_elems(cb, d->out),
                                cb->stream), li, "");
    dz = L->scratch;
  }
  float beta = 0.0f;
  void *dx = x->diff ? diff_target(cb, d->in[0], &beta) : L->discard;
  /* dgamma / dbeta in fp32, loss-scaled like every parameter gradient until backward's
   * range unscale (the scale lives on the device: no host scalar to give cuDNN) */
  DNN_CK(cudnnBatchNormalizationBackward,
         (cb->dnn, bn_train_mode(cb), &one, &beta, &one, &zero, x->desc, x->buf, y->desc, dz,
          x->desc, dx, L->pdesc, l->params, l->grads, l->grads + C, eps, L->save_mean, L->save_istd),
         li, "");
  return layer_sync(cb, li, err);
fail:
  return rc;
}

/* ---- ReLU ------------------------------------------------------------------ */

static int relu_forward(struct dpt_layer *l, int training, struct dpt_err *err)
{
  struct cu_layer *L = l->impl;
  struct cu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  struct cu_tensor *x = &cb->t[d->in[0]], *y = &cb->t[d->out];
  int rc = 0;
  (void)x;
  KERN_CK(dpt_cuda_relu, (cb->t[d->in[0]].buf, y->buf, tensor_dtype(cb, d->out), t_elems(cb, d->out), cb->stream),
          L->idx, "");
  return layer_sync(cb, L->idx, err);
fail:
  return rc;
}

static int relu_backward(struct dpt_layer *l, struct dpt_err *err)
{
  struct cu_layer *L = l->impl;
  struct cu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  struct cu_tensor *x = &cb->t[d->in[0]], *y = &cb->t[d->out];
  int rc = 0;
  if (!x->diff) return 0;
  float beta;
  void *dx = diff_target(cb, d->in[0], &beta);
  KERN_CK(dpt_cuda_relu_bwd, (y->buf, y->diff, dx, tensor_dtype(cb, d->out), beta != 0.0f, t_elems(cb, d->out),
                              cb->stream), L->idx, "");
  return layer_sync(cb, L->idx, err);
fail:
  return rc;
}

/* ---- pooling (max, global average) ----------------------------------------- */

static int pool_forward(struct dpt_layer *l, int training, struct dpt_err *err)
{
  struct cu_layer *L = l->impl;
  struct cu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  struct cu_tensor *x = &cb->t[d->in[0]], *y = &cb->t[d->out];
  int rc = 0;
  DNN_CK(cudnnPoolingForward, (cb->dnn, L->pool, &one, x->desc, x->buf, &zero, y->desc, y->buf),
         L->idx, "");
  return layer_sync(cb, L->idx, err);
fail:
  return rc;
}

static int pool_backward(struct dpt_layer *l, struct dpt_err *err)
{
  struct cu_layer *L = l->impl;
  struct cu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  struct cu_tensor *x = &cb->t[d->in[0]], *y = &cb->t[d->out];
  int rc = 0;
  if (!x->diff) return 0;
  float beta;
  void *dx = diff_target(cb, d->in[0], &beta);
  DNN_CK(cudnnPoolingBackward, (cb->dnn, L->pool, &one, y->desc, y->buf, y->desc, y->diff, x->desc,
                                x->buf, &beta, x->desc, dx), L->idx, "");
  return layer_sync(cb, L->idx, err);
fail:
  return rc;
}

/* ---- fully connected (cuBLAS) ---------------------------------------------- *
 * Row-major x [N, D], W [K, D], y [N, K] are column-major x^T, W^T, y^T:
 *   y^T  = W  x^T      gemm(T, N, K, N, D)
 *   dW^T = x^T dy      gemm(N, T, D, K, N)     (dW row-major [K, D])
 *   dx^T = W^T dy^T    gemm(N, N, D, N, K)                                    */

static cublasComputeType_t fc_compute(const struct cu_backend *cb)
{
  return cb->plan.precision == DPT_CUDA_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

static cudaDataType_t fc_type(const struct cu_backend *cb)
{
  return cb->dtype == DPT_DT_F16 ? CUDA_R_16F : cb->dtype == DPT_DT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static int fc_forward(struct dpt_layer *l, int training, struct dpt_err *err)
{
  struct cu_layer *L = l->impl;
  struct cu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  struct cu_tensor *x = &cb->t[d->in[0]], *y = &cb->t[d->out];
  int rc = 0, li = L->idx, N = cb->pub.opts.batch, K = d->c_out, D = (int)(d->w_len / (size_t)K);
  cudaDataType_t xt = fc_type(cb);
  const void *w = l->params;
  if (L->w16) {
    KERN_CK(dpt_cuda_f32_to, (l->params, L->w16, cb->dtype, 1.0f, d->w_len, cb->stream), li, "");
    w = L->w16;
  }
  BLAS_CK(cublasGemmEx, (cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, K, N, D, &one, w, xt, D, x->buf, xt, D,
                         &zero, y->buf, CUDA_R_32F, K, fc_compute(cb), CUBLAS_GEMM_DEFAULT), li, "");
  DNN_CK(cudnnAddTensor, (cb->dnn, &one, L->pdesc, l->params + d->w_len, &one, y->desc, y->buf), li, "");
  return layer_sync(cb, li, err);
fail:
  return rc;
}

static int fc_backward(struct dpt_layer *l, struct dpt_err *err)
{
  struct cu_layer *L = l->impl;
  struct cu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  struct cu_tensor *x = &cb->t[d->in[0]], *y = &cb->t[d->out];
  int rc = 0, li = L->idx, N = cb->pub.opts.batch, K = d->c_out, D = (int)(d->w_len / (size_t)K);
  cudaDataType_t xt = fc_type(cb);
  const void *dy = y->diff; /* mixed: already loss-scaled (backward scales the output gradient) */
  if (L->w16) { /* the fp32 output gradient enters the 16-bit graph */
    KERN_CK(dpt_cuda_f32_to, (y->diff, cb->dy16, cb->dtype, 1.0f, (size_t)N * K, cb->stream), li, "");
    dy = cb->dy16;
  }
  BLAS_CK(cublasGemmEx, (cb->blas, CUBLAS_OP_N, CUBLAS_OP_T, D, K, N, &one, x->buf, xt, D, dy, xt,
                         K, &zero, l->grads, CUDA_R_32F, D, fc_compute(cb), CUBLAS_GEMM_DEFAULT), li, "");
  DNN_CK(cudnnConvolutionBackwardBias, (cb->dnn, &one, y->desc, y->diff, &zero, L->pdesc,
                                        l->grads + d->w_len), li, "");
  if (x->diff) {
    float beta;
    void *dx = diff_target(cb, d->in[0], &beta);
    BLAS_CK(cublasGemmEx, (cb->blas, CUBLAS_OP_N, CUBLAS_OP_N, D, N, K, &one,
                           L->w16 ? L->w16 : (const void *)l->params, xt, D, dy, xt, K, &beta, dx, xt,
                           D, fc_compute(cb), CUBLAS_GEMM_DEFAULT), li, "");
  }
  return layer_sync(cb, li, err);
fail:
  return rc;
}

/* ---- residual add (+ ReLU) ------------------------------------------------- */

static int add_forward(struct dpt_layer *l, int training, struct dpt_err *err)
{
  struct cu_layer *L = l->impl;
  struct cu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  struct cu_tensor *a = &cb->t[d->in[0]], *b = &cb->t[d->in[1]], *y = &cb->t[d->out];
  int rc = 0;
  KERN_CK(dpt_cuda_add, (a->buf, b->buf, y->buf, tensor_dtype(cb, d->out), d->relu, t_elems(cb, d->out), cb->stream),
          L->idx, "");
  return layer_sync(cb, L->idx, err);
fail:
  return rc;
}

static int add_backward(struct dpt_layer *l, struct dpt_err *err)
{
  struct cu_layer *L = l->impl;
  struct cu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  struct cu_tensor *y = &cb->t[d->out];
  int rc = 0;
  const void *g = y->diff;
  int dt = tensor_dtype(cb, d->out);
  if (d->relu) {
    KERN_CK(dpt_cuda_relu_bwd, (y->buf, y->diff, L->scratch, dt, 0, t_elems(cb, d->out), cb->stream), L->idx, "");
    g = L->scratch;
  }
  for (int k = 0; k < 2; k++) {
    struct cu_tensor *x = &cb->t[d->in[k]];
    if (!x->diff) continue;
    float beta;
    void *dx = diff_target(cb, d->in[k], &beta);
    if (beta == 0.0f)
      CUDA_CK(cudaMemcpyAsync, (dx, g, cb->plan.t[d->in[k]].bytes, cudaMemcpyDeviceToDevice,
                                cb->stream), L->idx, "");
    else
      KERN_CK(dpt_cuda_acc, (dx, g, dt, t_elems(cb, d->out), cb->stream), L->idx, "");
  }
  return layer_sync(cb, L->idx, err);
fail:
  return rc;
}

static void layer_destroy(struct dpt_layer *l)
{
  struct cu_layer *L = l->impl;
  if (!L) return;
  if (L->fdesc) cudnnDestroyFilterDescriptor(L->fdesc);
  if (L->cdesc) cudnnDestroyConvolutionDescriptor(L->cdesc);
  if (L->pdesc) cudnnDestroyTensorDescriptor(L->pdesc);
  if (L->pool) cudnnDestroyPoolingDescriptor(L->pool);
  l->impl = NULL;
}

static const struct dpt_layer_ops conv_ops = {conv_forward, conv_backward, layer_destroy};
static const struct dpt_layer_ops bn_ops = {bn_forward, bn_backward, layer_destroy};
static const struct dpt_layer_ops relu_ops = {relu_forward, relu_backward, layer_destroy};
static const struct dpt_layer_ops pool_ops = {pool_forward, pool_backward, layer_destroy};
static const struct dpt_layer_ops fc_ops = {fc_forward, fc_backward, layer_destroy};
static const struct dpt_layer_ops add_ops = {add_forward, add_backward, layer_destroy};

/* ---- algorithm choice, once per distinct convolution shape ------------------ */

static int choose_algos(struct cu_backend *cb, int shape, size_t limit, struct dpt_err *err)
{
  const struct dpt_cuda_conv_plan *cp = &cb->plan.conv[cb->plan.shape_rep[shape]];
  int li = cp->layer, rc = 0, n = 0, pick;
  const struct dpt_layer_desc *d = &cb->pub.model->layers[li];
  struct cu_layer *L = &cb->l[li];
  struct cu_tensor *x = &cb->t[d->in[0]], *y = &cb->t[d->out];
  const void *w = L->w16;
  void *dw = L->dw16;
  void *dx = x->diff;
  struct cu_algo *a = &cb->algo[shape];
  struct dpt_cuda_algo_cand c[16];
  int det = cb->copts.deterministic;
  enum { REQ = 16 };
  {
    cudnnConvolutionFwdAlgoPerf_t p[REQ];
    if (cb->copts.algo_search)
      DNN_CK(cudnnFindConvolutionForwardAlgorithmEx, (cb->dnn, x->desc, x->buf, L->fdesc, w, L->cdesc,
                                                      y->desc, y->buf, REQ, &n, p, cb->ws, limit), li,
             "");
    else
      DNN_CK(cudnnGetConvolutionForwardAlgorithm_v7, (cb->dnn, x->desc, L->fdesc, L->cdesc, y->desc,
                                                      REQ, &n, p), li, "");
    for (int i = 0; i < n; i++)
      c[i] = (struct dpt_cuda_algo_cand){(int)p[i].algo, p[i].status == CUDNN_STATUS_SUCCESS,
                                         cb->copts.algo_search ? p[i].time : -1.0f, p[i].memory,
                                         p[i].determinism == CUDNN_DETERMINISTIC};
    if ((pick = dpt_cuda_pick_algo(c, n, limit, det)) < 0) goto none;
    a->fwd = c[pick].algo;
    a->ws_fwd = c[pick].memory;
  }
  {
    cudnnConvolutionBwdFilterAlgoPerf_t p[REQ];
    if (cb->copts.algo_search)
      DNN_CK(cudnnFindConvolutionBackwardFilterAlgorithmEx, (cb->dnn, x->desc, x->buf, y->desc, y->diff,
                                                             L->cdesc, L->fdesc, dw, REQ, &n, p,
                                                             cb->ws, limit), li, "");
    else
      DNN_CK(cudnnGetConvolutionBackwardFilterAlgorithm_v7, (cb->dnn, x->desc, y->desc, L->cdesc,
                                                             L->fdesc, REQ, &n, p), li, "");
    for (int i = 0; i < n; i++)
      c[i] = (struct dpt_cuda_algo_cand){(int)p[i].algo, p[i].status == CUDNN_STATUS_SUCCESS,
                                         cb->copts.algo_search ? p[i].time : -1.0f, p[i].memory,
                                         p[i].determinism == CUDNN_DETERMINISTIC};
    if ((pick = dpt_cuda_pick_algo(c, n, limit, det)) < 0) goto none;
    a->bwd_filter = c[pick].algo;
    a->ws_filter = c[pick].memory;
  }
  a->bwd_data = CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
  a->ws_data = 0;
  if (x->diff) {
    cudnnConvolutionBwdDataAlgoPerf_t p[REQ];
    if (cb->copts.algo_search)
      DNN_CK(cudnnFindConvolutionBackwardDataAlgorithmEx, (cb->dnn, L->fdesc, w, y->desc, y->diff,
                                                           L->cdesc, x->desc, dx, REQ, &n, p, cb->ws,
                                                           limit), li, "");
    else
      DNN_CK(cudnnGetConvolutionBackwardDataAlgorithm_v7, (cb->dnn, L->fdesc, y->desc, L->cdesc,
                                                           x->desc, REQ, &n, p), li, "");
    for (int i = 0; i < n; i++)
      c[i] = (struct dpt_cuda_algo_cand){(int)p[i].algo, p[i].status == CUDNN_STATUS_SUCCESS,
                                         cb->copts.algo_search ? p[i].time : -1.0f, p[i].memory,
                                         p[i].determinism == CUDNN_DETERMINISTIC};
    if ((pick = dpt_cuda_pick_algo(c, n, limit, det)) < 0) goto none;
    a->bwd_data = c[pick].algo;
    a->ws_data = c[pick].memory;
  }
  return 0;
none:
  return call_fail(cb, li, "", "convolution algorithm choice",
                   "no algorithm fits the workspace limit (raise workspace_cap, lower the batch, "
                   "or allow non-deterministic algorithms)", err) ;
fail:
  return rc;
}

/* ---- backend ops ------------------------------------------------------------ */

static int out_tid(const struct cu_backend *cb)
{
  return cb->pub.model->layers[cb->pub.model->n_layers - 1].out;
}

static size_t n_elems(const struct dpt_cuda_tensor_plan *p)
{
  return (size_t)p->n * p->c * p->h * p->w;
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
    return call_fail(cb, -1, what, "cudaEventQuery", cudaGetErrorString(q), err);
  }
  *used = 0;
  return 0;
fail:
  return rc;
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
    return stream_sync(cb, -1, "end of forward (an asynchronous fault in any layer; DPT_CUDA_SYNC_DEBUG=1 "
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
  const struct dpt_cuda_tensor_plan *ip = &cb->plan.t[0];
  int rc = 0, k = cb->x_slot;
  size_t xbytes = n_elems(ip) * sizeof(float);
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "forward");
  cb->t[0].buf = cb->in_own; /* the input tensor is ours again (after a forward_device) */
  /* the images: host copy into pinned slot k (x is the caller's again on return), DMA on the
   * upload stream once the previous forward has cast in32, then the cast on the stream */
  if ((rc = stage_wait(cb, cb->x_ev[k], &cb->x_used[k], "input staging", err))) goto fail;
  memcpy(cb->stage_x[k], x, xbytes);
  CUDA_CK(cudaStreamWaitEvent, (cb->up_stream, cb->in_free, 0), -1, "input");
  CUDA_CK(cudaMemcpyAsync, (cb->in32, cb->stage_x[k], xbytes, cudaMemcpyHostToDevice, cb->up_stream), -1, "input");
  CUDA_CK(cudaEventRecord, (cb->x_ev[k], cb->up_stream), -1, "input");
  cb->x_used[k] = 1;
  cb->x_slot = (k + 1) % NSTAGE;
  CUDA_CK(cudaStreamWaitEvent, (cb->stream, cb->x_ev[k], 0), -1, "input");
  /* NCHW fp32 images -> the NHWC input tensor (channels padded in 16 bits) */
  KERN_CK(dpt_cuda_nchw32_to_nhwc, (cb->in32, cb->t[0].buf, tensor_dtype(cb, 0), ip->n, ip->c, (size_t)ip->h * ip->w,
                                    ip->c_stored, 1.0f, cb->stream), -1, "input");
  CUDA_CK(cudaEventRecord, (cb->in_free, cb->stream), -1, "input");
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
static int cu_bucket_done(struct dpt_backend *be, int k, void **ready, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0;
  if ((rc = unscale_down_to(cb, be->buckets[k].off, err))) return rc;
  CUDA_CK(cudaEventRecord, (cb->bucket_ev[k], cb->stream), be->buckets[k].first_layer, "gradient bucket event");
  *ready = (void *)cb->bucket_ev[k];
  return 0;
fail:
  return rc;
}

static int cu_backward(struct dpt_backend *be, const float *dout, float *dx, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
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
    KERN_CK(dpt_cuda_nhwc_to_nchw32_ds, (cb->t[0].diff, tensor_dtype(cb, 0), cb->dx32, ip->n, ip->c,
                                         (size_t)ip->h * ip->w, ip->c_stored, 1.0f, dscale(cb), 1, cb->stream), -1,
            "input gradient");
    CUDA_CK(cudaMemcpyAsync, (dx, cb->dx32, n_elems(ip) * 4, cudaMemcpyDeviceToHost, cb->stream), -1,
            "input gradient");
    if ((rc = stream_sync(cb, -1, "end of backward", err))) goto fail;
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
  return stream_sync(cb, -1, what, err);
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
      if (be->layers[i].impl) layer_destroy(&be->layers[i]);
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
  if (cb->pinned) cudaFreeHost(cb->pinned);
  while (cb->n_allocs) dfree(cb, cb->allocs[0]);
  if (cb->blas) cublasDestroy(cb->blas);
  if (cb->dnn) cudnnDestroy(cb->dnn);
  if (cb->stream) cudaStreamDestroy(cb->stream);
  if (cb->up_stream) cudaStreamDestroy(cb->up_stream);
  dpt_cuda_plan_free(&cb->plan);
  free(cb->t);
  free(cb->l);
  free(cb->algo);
  free(cb->bucket_ev);
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
  if ((rc = stream_sync(cb, -1, "SGD set-up", err))) return rc;
  cb->sgd_momentum = momentum;
  cb->sgd_wd = weight_decay;
  cb->sgd_nesterov = nesterov;
  cb->sgd_ready = 1 + !!mask; /* 2: masked */
  return 0;
fail:
  return rc;
}

static int cu_sgd_step(struct dpt_backend *be, float lr, const float *grads, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  size_t n = be->model->n_params;
  int rc = 0;
  if (!cb->sgd_ready)
    return dpt_err_set(err, DPT_E_INPUT, "cuda backend: sgd_step before sgd_init");
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "SGD");
  const float *g = be->grads;
  if (grads && grads == be->pending) /* the double-buffered averaged gradient, already on the device */
    g = be->pending;
  else if (grads) { /* the double-buffered averaged gradient, from the host: the caller's again on
                      * return (a pinned buffer is read by DMA: wait for it) */
    CUDA_CK(cudaMemcpyAsync, (be->grads, grads, n * 4, cudaMemcpyHostToDevice, cb->stream), -1,
            "SGD gradient upload");
    if ((rc = stream_sync(cb, -1, "SGD gradient upload", err))) return rc;
  }
  /* mixed precision: the step is skipped on the device when the overflow flag that
   * dpt_backend_cuda_check_overflow set after the all-reduce says so (no host wait) */
  KERN_CK(dpt_cuda_sgd_unless, (be->params, cb->velocity, g, cb->sgd_ready == 2 ? cb->mask : NULL, lr,
                                cb->sgd_momentum, cb->sgd_wd, cb->sgd_nesterov, n,
                                cb->plan.precision == DPT_CUDA_MIXED && cb->overflow_armed ? cb->flag : NULL,
                                cb->stream), -1, "SGD");
  cb->overflow_armed = 0;
  return 0;
fail:
  return rc;
}

static int cu_sync(struct dpt_backend *be, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "sync");
  return stream_sync(cb, -1, "end of backward (an asynchronous fault in any layer; DPT_CUDA_SYNC_DEBUG=1 "
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
  if ((rc = dalloc(cb, &p, be->model->n_params * sizeof(float), "pending gradient slab", err))) return rc;
  be->pending = p;
  CUDA_CK(cudaMemsetAsync, (p, 0, be->model->n_params * sizeof(float), cb->stream), -1, "pending gradient slab");
  CUDA_CK(cudaEventCreateWithFlags, (&cb->stash_ev, cudaEventDisableTiming), -1, "pending gradient event");
  return stream_sync(cb, -1, "pending gradient slab", err);
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

static int cu_loss(struct dpt_backend *be, const int *labels, float smoothing, float grad_scale,
                   struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0, k = cb->lab_slot, N = be->opts.batch;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "loss");
  if ((rc = stage_wait(cb, cb->lab_ev[k], &cb->lab_used[k], "label staging", err))) return rc;
  memcpy(cb->stage_lab[k], labels, (size_t)N * sizeof(int));
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
  if ((rc = stream_sync(cb, -1, "loss totals (an asynchronous fault in the steps since the last ones; "
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
  if ((rc = stream_sync(cb, -1, "loss scaler", err))) return rc;
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
  return stream_sync(cb, -1, "loss scaler", err);
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

static const struct dpt_backend_ops cuda_ops = {
    .name = "cuda", .forward = cu_forward, .backward = cu_backward, .copy_slab = cu_copy_slab,
    .memory_bytes = cu_memory_bytes, .destroy = cu_destroy, .sgd_init = cu_sgd_init,
    .sgd_step = cu_sgd_step, .sync = cu_sync, .peak_bytes = cu_peak_bytes,
    .overflow_check = dpt_backend_cuda_check_overflow, .scaler_get = cu_scaler_get, .scaler_set = cu_scaler_set,
    .buckets_changed = cu_buckets_changed, .pending_init = cu_pending_init, .stash_grads = cu_stash_grads,
    .loss = cu_loss, .loss_totals = cu_loss_totals, .host_waits = cu_host_waits, .host_alloc = cu_host_alloc,
    .host_free = cu_host_free, .input_format = cu_input_format, .forward_device = cu_forward_device};

/* ---- creation --------------------------------------------------------------- */

void dpt_cuda_opts_default(struct dpt_cuda_opts *o)
{
  const char *p = getenv("DPT_CUDA_PRECISION");
  int prec = dpt_cuda_precision_parse(p);
  o->precision = prec >= 0 ? (enum dpt_cuda_precision)prec : DPT_CUDA_FP32;
  o->device = -1;
  o->workspace_cap = (size_t)512 << 20;
  o->algo_search = 1;
  o->deterministic = 0;
  o->loss_scale = 65536.0f;
}

int dpt_cuda_device_usable(char *why, size_t why_len)
{
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) snprintf(why, why_len, "cudaGetDeviceCount failed: %s (%s)", cudaGetErrorString(e),
                      cudaGetErrorName(e));
    return 0;
  }
  if (n < 1) {
    if (why) snprintf(why, why_len, "cudaGetDeviceCount found 0 devices");
    return 0;
  }
  if (why && why_len) why[0] = 0;
  return 1;
}

int dpt_cuda_device_works(char *why, size_t why_len)
{
  if (!dpt_cuda_device_usable(why, why_len)) return 0;
  int dev = getenv("DPT_CUDA_DEVICE") ? atoi(getenv("DPT_CUDA_DEVICE")) : 0;
  void *p = NULL;
  cudaError_t e = cudaSetDevice(dev);
  const char *call = "cudaSetDevice";
  if (e == cudaSuccess) {
    call = "cudaMalloc(256 bytes)";
    e = cudaMalloc(&p, 256);
  }
  if (e == cudaSuccess) {
    call = "cudaFree";
    e = cudaFree(p);
  }
  if (e != cudaSuccess) {
    if (why) snprintf(why, why_len, "%s on device %d failed: %s (%s)", call, dev, cudaGetErrorString(e),
                      cudaGetErrorName(e));
    cudaGetLastError(); /* reset the runtime's last error: the cpu run that follows starts clean */
    return 0;
  }
  return 1;
}

int dpt_backend_cuda_create(const struct dpt_model *model, const struct dpt_backend_opts *opts,
                            struct dpt_backend **out, struct dpt_err *err)
{
  struct dpt_cuda_opts co;
  dpt_cuda_opts_default(&co);
  if (opts && opts->precision) { /* dpt-train --precision: wins over DPT_CUDA_PRECISION */
    int p = dpt_cuda_precision_parse(opts->precision);
    if (p < 0) {
      *out = NULL;
      return dpt_err_set(err, DPT_E_INPUT, "cuda backend: precision '%s': expected fp32, tf32, mixed or bf16",
                         opts->precision);
    }
    co.precision = (enum dpt_cuda_precision)p;
  } else if (getenv("DPT_CUDA_PRECISION") && dpt_cuda_precision_parse(getenv("DPT_CUDA_PRECISION")) < 0) {
    *out = NULL;
    return dpt_err_set(err, DPT_E_INPUT, "DPT_CUDA_PRECISION='%s': expected fp32, tf32, mixed or bf16",
                       getenv("DPT_CUDA_PRECISION"));
  }
  return dpt_backend_cuda_create_ex(model, opts, &co, out, err);
}

static int set_tensor_desc(struct cu_backend *cb, cudnnTensorDescriptor_t d,
                           const struct dpt_cuda_tensor_plan *p, int li, struct dpt_err *err)
{
  int rc = 0;
  DNN_CK(cudnnSetTensor4dDescriptor, (d, p->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                      tensor_type(cb, p), p->n, p->c_stored, p->h, p->w), li, "tensor");
  return 0;
fail:
  return rc;
}

static int layer_create(struct cu_backend *cb, int li, struct dpt_err *err)
{
  const struct dpt_model *m = cb->pub.model;
  const struct dpt_layer_desc *d = &m->layers[li];
  struct dpt_layer *l = &cb->pub.layers[li];
  struct cu_layer *L = &cb->l[li];
  const struct dpt_cuda_tensor_plan *x = &cb->plan.t[d->in[0]];
  int rc = 0, half = dpt_cuda_precision_half(cb->plan.precision);
  char *arena = cb->region[DPT_CUDA_R_ARENA], *wr = cb->region[DPT_CUDA_R_WEIGHTS];
  cudnnDataType_t ct = cb->dtype == DPT_DT_BF16 ? CUDNN_DATA_BFLOAT16 : half ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
  L->cb = cb;
  if (cb->plan.scratch_off[li] != (size_t)-1) L->scratch = arena + cb->plan.scratch_off[li];
  if (cb->plan.discard_off[li] != (size_t)-1) L->discard = arena + cb->plan.discard_off[li];
  L->idx = li;
  L->conv = -1;
  l->desc = d;
  l->impl = L;
  l->params = cb->pub.params + d->w_off;
  l->grads = cb->pub.grads + d->w_off;
  l->state = d->type == DPT_LAYER_BN ? cb->pub.state + d->s_off : NULL;
  switch (d->type) {
  case DPT_LAYER_CONV: {
    l->ops = &conv_ops;
    for (int c = 0; c < cb->plan.n_conv; c++)
      if (cb->plan.conv[c].layer == li) L->conv = c;
    const struct dpt_cuda_conv_plan *cp = &cb->plan.conv[L->conv];
    DNN_CK(cudnnCreateFilterDescriptor, (&L->fdesc), li, "");
    DNN_CK(cudnnSetFilter4dDescriptor, (L->fdesc, ct, CUDNN_TENSOR_NHWC, cp->k, cp->c, cp->r, cp->s), li, "");
    DNN_CK(cudnnCreateConvolutionDescriptor, (&L->cdesc), li, "");
    DNN_CK(cudnnSetConvolution2dDescriptor, (L->cdesc, cp->pad, cp->pad, cp->stride, cp->stride, 1, 1,
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT), li, "");
    /* fp32: FMA only (TF32 off, the oracle); tf32, fp16, bf16: tensor-core math
     * (cuDNN then lists its tensor-core kernels, and the measured search picks among them) */
    DNN_CK(cudnnSetConvolutionMathType, (L->cdesc, cb->plan.precision == DPT_CUDA_FP32 ? CUDNN_FMA_MATH
                                         : CUDNN_TENSOR_OP_MATH), li, "");
    int dims[4];
    DNN_CK(cudnnGetConvolution2dForwardOutputDim, (L->cdesc, cb->t[d->in[0]].desc, L->fdesc, &dims[0],
                                                   &dims[1], &dims[2], &dims[3]), li, "");
    if (dims[0] != cp->n || dims[1] != cp->k || dims[2] != cp->p || dims[3] != cp->q) {
      char shape[192];
      layer_shape(cb, li, shape, sizeof shape);
      return dpt_err_set(err, DPT_E_RUNTIME, "cuda backend: cuDNN says convolution '%s' (%s) outputs "
                         "[%d,%d,%d,%d], the plan says [%d,%d,%d,%d]", d->name, shape, dims[0],
                         dims[1], dims[2], dims[3], cp->n, cp->k, cp->p, cp->q);
    }
    /* the KRSC weight copy and the shared weight-gradient buffer: the plan's weight region */
    L->w16 = wr + cb->plan.wcopy_off[li];
    L->dw16 = wr + cb->plan.wgrad_off;
    break;
  }
  case DPT_LAYER_BN:
    l->ops = &bn_ops;
    DNN_CK(cudnnCreateTensorDescriptor, (&L->pdesc), li, "");
    DNN_CK(cudnnDeriveBNTensorDescriptor, (L->pdesc, cb->t[d->in[0]].desc, CUDNN_BATCHNORM_SPATIAL), li, "");
    break;
  case DPT_LAYER_RELU: l->ops = &relu_ops; break;
  case DPT_LAYER_MAXPOOL:
  case DPT_LAYER_GAP: {
    l->ops = &pool_ops;
    int maxp = d->type == DPT_LAYER_MAXPOOL;
    DNN_CK(cudnnCreatePoolingDescriptor, (&L->pool), li, "");
    DNN_CK(cudnnSetPooling2dDescriptor, (L->pool, maxp ? CUDNN_POOLING_MAX_DETERMINISTIC
                                         : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
                                         CUDNN_PROPAGATE_NAN, maxp ? d->kernel : x->h,
                                         maxp ? d->kernel : x->w, maxp ? d->pad : 0, maxp ? d->pad : 0,
                                         maxp ? d->stride : 1, maxp ? d->stride : 1), li, "");
    break;
  }
  case DPT_LAYER_FC:
    l->ops = &fc_ops;
    if (x->h * x->w != 1 || x->c_stored != x->c) {
      char shape[192];
      layer_shape(cb, li, shape, sizeof shape);
      return dpt_err_set(err, DPT_E_UNSUPPORTED, "cuda backend: FC layer '%s' (%s) needs an [N, C, 1, 1] "
                         "input (global average pool before it: NHWC and NCHW agree only there)", d->name, shape);
    }
    DNN_CK(cudnnCreateTensorDescriptor, (&L->pdesc), li, "");
    DNN_CK(cudnnSetTensor4dDescriptor, (L->pdesc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, d->c_out, 1, 1),
           li, "");
    if (half) L->w16 = wr + cb->plan.wcopy_off[li];
    break;
  case DPT_LAYER_ADD: l->ops = &add_ops; break;
  default:
    return dpt_err_set(err, DPT_E_INPUT, "cuda backend: layer %d '%s' has unknown type %d", li, d->name,
                       d->type);
  }
  return 0;
fail:
  return rc;
}

int dpt_backend_cuda_create_ex(const struct dpt_model *m, const struct dpt_backend_opts *opts,
                               const struct dpt_cuda_opts *copts, struct dpt_backend **out,
                               struct dpt_err *err)
{
  int rc = 0, ndev = 0;
  char why[256];
  *out = NULL;
  /* First: is there a device at all?  Nothing else is touched without one. */
  if (!dpt_cuda_device_usable(why, sizeof why))
    return dpt_err_set(err, DPT_E_UNSUPPORTED, "backend cuda: no usable CUDA device (%s); use "
                       "--backend cpu, or --backend auto to pick the GPU only when one works", why);
  if (!m || !opts || m->n_layers < 1)
    return dpt_err_set(err, DPT_E_INPUT, "cuda backend: no model or options given (the model has no layers)");
  if (opts->batch < 1) return dpt_err_set(err, DPT_E_INPUT, "cuda backend: batch size %d < 1", opts->batch);
  struct cu_backend *cb = calloc(1, sizeof *cb);
  if (!cb) return dpt_err_set(err, DPT_E_NOMEM, "cuda backend: out of memory");
  struct dpt_backend *be = &cb->pub;
  be->ops = &cuda_ops;
  be->model = m;
  be->opts = *opts;
  be->host_slabs = 0;
  be->precision = dpt_cuda_precision_name(copts->precision);
  cb->copts = *copts;
  cb->dtype = copts->precision == DPT_CUDA_MIXED ? DPT_DT_F16 : copts->precision == DPT_CUDA_BF16 ? DPT_DT_BF16
                                                                                                  : DPT_DT_F32;
  cb->sync_debug = getenv("DPT_CUDA_SYNC_DEBUG") && atoi(getenv("DPT_CUDA_SYNC_DEBUG")) > 0;
  cb->dev = copts->device;
  if (cb->dev < 0) cb->dev = getenv("DPT_CUDA_DEVICE") ? atoi(getenv("DPT_CUDA_DEVICE")) : 0;
  if ((rc = dpt_cuda_plan_build(m, opts->batch, copts->precision, opts->need_input_grad, &cb->plan, err)))
    goto fail;
  cudaGetDeviceCount(&ndev);
  if (cb->dev < 0 || cb->dev >= ndev) {
    rc = dpt_err_set(err, DPT_E_INPUT, "cuda backend: device %d requested (DPT_CUDA_DEVICE or "
                     "option) but only %d visible (CUDA_VISIBLE_DEVICES)", cb->dev, ndev);
    goto fail;
  }
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "device");
  CUDA_CK(cudaStreamCreateWithFlags, (&cb->stream, cudaStreamNonBlocking), -1, "stream");
  CUDA_CK(cudaStreamCreateWithFlags, (&cb->up_stream, cudaStreamNonBlocking), -1, "upload stream");
  CUDA_CK(cudaEventCreateWithFlags, (&cb->in_free, cudaEventDisableTiming), -1, "input event");
  for (int k = 0; k < NSTAGE; k++) {
    CUDA_CK(cudaEventCreateWithFlags, (&cb->x_ev[k], cudaEventDisableTiming), -1, "input staging event");
    CUDA_CK(cudaEventCreateWithFlags, (&cb->lab_ev[k], cudaEventDisableTiming), -1, "label staging event");
  }
  DNN_CK(cudnnCreate, (&cb->dnn), -1, "cuDNN handle");
  DNN_CK(cudnnSetStream, (cb->dnn, cb->stream), -1, "cuDNN handle");
  BLAS_CK(cublasCreate, (&cb->blas), -1, "cuBLAS handle");
  BLAS_CK(cublasSetStream, (cb->blas, cb->stream), -1, "cuBLAS handle");
  BLAS_CK(cublasSetMathMode, (cb->blas, cb->plan.precision == DPT_CUDA_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH
                              : CUBLAS_DEFAULT_MATH), -1, "cuBLAS handle");
  /* Does the plan fit?  Its regions plus a reserve for the workspace, cuDNN and cuBLAS. */
  {
    size_t fr = 0, tot = 0, need = 0, reserve = dpt_cuda_memory_reserve(copts->workspace_cap);
    CUDA_CK(cudaMemGetInfo, (&fr, &tot), -1, "memory check");
    if (cb->plan.total_bytes + reserve > fr) {
      int fit = dpt_cuda_plan_fit(m, copts->precision, opts->need_input_grad, opts->batch, fr, reserve, &need, err);
      rc = dpt_err_set(err, DPT_E_NOMEM, "cuda backend: batch %d needs %zu bytes on device %d (%zu planned: "
                       "activations, gradients and slabs; + %zu reserved for the convolution workspace, cuDNN "
                       "and cuBLAS) but %zu of %zu are free; the largest batch that fits is %d: use "
                       "--batch-size %d or less%s", opts->batch, cb->plan.total_bytes + reserve, cb->dev,
                       cb->plan.total_bytes, reserve, fr, tot, fit > 0 ? fit : 0, fit > 0 ? fit : 1,
                       fit > 0 ? "" : " (not even batch 1 fits: free the GPU or use a smaller --width)");
      goto fail;
    }
  }
  size_t np = m->n_params;
  int N = opts->batch, o = m->layers[m->n_layers - 1].out;
  for (int r = 0; r < DPT_CUDA_NREGIONS; r++) /* one allocation per region: a fixed handful */
    if ((rc = dalloc(cb, &cb->region[r], cb->plan.region[r], dpt_cuda_region_name(r), err))) goto fail;
  be->params = cb->region[DPT_CUDA_R_PARAMS];
  be->grads = cb->region[DPT_CUDA_R_GRADS];
  be->state = cb->region[DPT_CUDA_R_STATE];
  cb->velocity = cb->region[DPT_CUDA_R_SGD];
  cb->mask = (unsigned char *)cb->region[DPT_CUDA_R_SGD] + (np * 4 + 255) / 256 * 256;
  cb->dy16 = cb->region[DPT_CUDA_R_SCRATCH];
  cb->t = calloc((size_t)cb->plan.n_tensors, sizeof *cb->t);
  cb->l = calloc((size_t)m->n_layers, sizeof *cb->l);
  be->layers = calloc((size_t)m->n_layers, sizeof *be->layers);
  cb->algo = calloc((size_t)(cb->plan.n_shapes ? cb->plan.n_shapes : 1), sizeof *cb->algo);
  if (!cb->t || !cb->l || !be->layers || !cb->algo) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "cuda backend: out of memory for %d layers", m->n_layers);
    goto fail;
  }
  /* activations and their gradients: the liveness arena, at the plan's offsets */
  char *arena = cb->region[DPT_CUDA_R_ARENA];
  for (int i = 0; i < cb->plan.n_tensors; i++) {
    const struct dpt_cuda_tensor_plan *tp = &cb->plan.t[i];
    DNN_CK(cudnnCreateTensorDescriptor, (&cb->t[i].desc), -1, "tensor");
    if ((rc = set_tensor_desc(cb, cb->t[i].desc, tp, -1, err))) goto fail;
    cb->t[i].buf = arena + tp->act_off;
    cb->t[i].diff = tp->diff_lo <= tp->diff_hi ? arena + tp->diff_off : NULL;
  }
  cb->in_own = cb->t[0].buf;
  {
    size_t nin = n_elems(&cb->plan.t[0]), nout = n_elems(&cb->plan.t[o]);
    cb->in32 = cb->region[DPT_CUDA_R_STAGING];
    cb->out32 = cb->in32 + nin;
    cb->dout32 = cb->out32 + nout;
    cb->dx32 = opts->need_input_grad ? cb->dout32 + nout : NULL;
  }
  {
    float *bn = cb->region[DPT_CUDA_R_BN];
    for (int i = 0; i < m->n_layers; i++)
      if (m->layers[i].type == DPT_LAYER_BN) {
        cb->l[i].save_mean = bn;
        cb->l[i].save_istd = bn + m->layers[i].c_out;
        bn += 2 * m->layers[i].c_out;
      }
  }
  { /* the loss region: labels, ranks, row losses [N] each; at a 16-byte boundary the overflow
     * flag, 16 bytes on the totals [4] (doubles), 32 on the scaler (dpt_cuda_plan's loss_bytes) */
    char *lr = cb->region[DPT_CUDA_R_LOSS];
    size_t tail = ((size_t)N * 12 + 15) / 16 * 16;
    _Static_assert(48 + sizeof(struct dpt_loss_scaler) <= 256, "the loss region's tail holds the scaler");
    cb->labels = (int *)lr;
    cb->rank = cb->labels + N;
    cb->loss_rows = (float *)(cb->rank + N);
    cb->flag = (int *)(lr + tail);
    cb->tot = (double *)(lr + tail + 16);
    cb->scaler = (struct dpt_loss_scaler *)(lr + tail + 48);
  }
  { /* pinned host memory: NSTAGE staging slots (images, labels), the readback area */
    size_t xb = (n_elems(&cb->plan.t[0]) * sizeof(float) + 63) / 64 * 64, lb = ((size_t)N * sizeof(int) + 63) / 64 * 64;
    cb->pinned_bytes = NSTAGE * (xb + lb) + 64 + 64;
    CUDA_CK(cudaHostAlloc, (&cb->pinned, cb->pinned_bytes, cudaHostAllocPortable), -1, "pinned staging");
    char *h = cb->pinned;
    for (int k = 0; k < NSTAGE; k++, h += xb + lb) {
      cb->stage_x[k] = (float *)h;
      cb->stage_lab[k] = (int *)(h + xb);
    }
    cb->tot_host = (double *)h;
    cb->scaler_host = (struct dpt_loss_scaler *)(h + 64);
    /* the scaler's start: the initial scale of the options (used by mixed precision only) */
    dpt_loss_scaler_init(cb->scaler_host);
    cb->scaler_host->scale = copts->loss_scale;
    CUDA_CK(cudaMemcpyAsync, (cb->scaler, cb->scaler_host, sizeof *cb->scaler, cudaMemcpyHostToDevice, cb->stream), -1,
            "loss scaler");
  }
  for (int i = 0; i < m->n_layers; i++) {
    if ((rc = layer_create(cb, i, err))) {
      dpt_err_prefix(err, "creating layer %d '%s' (%s) at batch %d", i, m->layers[i].name,
                     dpt_layer_type_name(m->layers[i].type), N);
      goto fail;
    }
  }
  /* initial parameters: the same bytes as every other backend */
  {
    size_t ns = m->n_state ? m->n_state : 1;
    float *hp = malloc((np ? np : 1) * 4), *hs = malloc(ns * 4);
    if (!hp || !hs) {
      free(hp);
      free(hs);
      rc = dpt_err_set(err, DPT_E_NOMEM, "cuda backend: out of host memory for %zu parameters", np);
      goto fail;
    }
    dpt_model_init_params(m, m->cfg.seed, hp, hs);
    rc = cu_copy_slab(be, DPT_SLAB_PARAMS, hp, 1, err);
    if (!rc) rc = cu_copy_slab(be, DPT_SLAB_STATE, hs, 1, err);
    free(hp);
    free(hs);
    if (rc) goto fail;
  }
  /* algorithms: once per distinct shape, under the workspace limit; the weight copies are
   * filled first (the measured search runs the convolutions on them) */
  for (int i = 0; i < m->n_layers; i++)
    if (m->layers[i].type == DPT_LAYER_CONV) {
      const struct dpt_cuda_conv_plan *cp = &cb->plan.conv[cb->l[i].conv];
      KERN_CK(dpt_cuda_nchw32_to_nhwc, (be->layers[i].params, cb->l[i].w16, cb->dtype, cp->k, cp->c_logical,
                                        (size_t)cp->r * cp->s, cp->c, 1.0f, cb->stream), i, "");
    }
  {
    size_t fr = 0, tot = 0;
    CUDA_CK(cudaMemGetInfo, (&fr, &tot), -1, "workspace sizing");
    size_t limit = dpt_cuda_workspace_limit(fr, 0, copts->workspace_cap);
    if (copts->algo_search && limit) {
      if ((rc = dalloc(cb, &cb->ws, limit, "algorithm search workspace", err))) goto fail;
    }
    for (int s = 0; s < cb->plan.n_shapes; s++)
      if ((rc = choose_algos(cb, s, limit, err))) goto fail;
    if (cb->ws) dfree(cb, cb->ws);
    cb->ws = NULL;
    for (int s = 0; s < cb->plan.n_shapes; s++) {
      const struct cu_algo *a = &cb->algo[s];
      if (a->ws_fwd > cb->ws_bytes) cb->ws_bytes = a->ws_fwd;
      if (a->ws_data > cb->ws_bytes) cb->ws_bytes = a->ws_data;
      if (a->ws_filter > cb->ws_bytes) cb->ws_bytes = a->ws_filter;
    }
    if (cb->ws_bytes && (rc = dalloc(cb, &cb->ws, cb->ws_bytes, "convolution workspace", err))) goto fail;
  }
  /* the algorithm search ran on the arena: every buffer is rewritten by its first writer in
   * a step, but the pooled memory starts clean for compute-sanitizer's initcheck */
  CUDA_CK(cudaMemsetAsync, (cb->region[DPT_CUDA_R_ARENA], 0, cb->plan.region[DPT_CUDA_R_ARENA], cb->stream), -1,
          "arena");
  if ((rc = stream_sync(cb, -1, "creation", err))) goto fail;
  *out = be;
  return 0;
fail:
  cu_destroy(be);
  return rc;
}

/* ---- extras ------------------------------------------------------------------ */

const struct dpt_cuda_plan *dpt_backend_cuda_plan(const struct dpt_backend *be)
{
  return &CB(be)->plan;
}

int dpt_backend_cuda_algos(const struct dpt_backend *be, int shape, int algo[3], size_t ws[3])
{
  const struct cu_backend *cb = CB(be);
  if (shape < 0 || shape >= cb->plan.n_shapes) return DPT_E_INPUT;
  const struct cu_algo *a = &cb->algo[shape];
  algo[0] = a->fwd, algo[1] = a->bwd_data, algo[2] = a->bwd_filter;
  ws[0] = a->ws_fwd, ws[1] = a->ws_data, ws[2] = a->ws_filter;
  return 0;
}

size_t dpt_backend_cuda_peak_bytes(const struct dpt_backend *be)
{
  return CB(be)->peak;
}

size_t dpt_backend_cuda_workspace_bytes(const struct dpt_backend *be)
{
  return CB(be)->ws_bytes;
}

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
  if ((rc = stream_sync(cb, -1, "loss", err))) goto fail;
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

int dpt_backend_cuda_sgd_step(struct dpt_backend *be, float lr, float momentum, float weight_decay,
                              int nesterov, const unsigned char *mask, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  size_t n = be->model->n_params;
  int rc = 0;
  if (mask && !cb->mask_ready) {
    CUDA_CK(cudaMemcpyAsync, (cb->mask, mask, n, cudaMemcpyHostToDevice, cb->stream), -1, "SGD");
    cb->mask_ready = 1;
  }
  KERN_CK(dpt_cuda_sgd, (be->params, cb->velocity, be->grads, mask ? cb->mask : NULL, lr, momentum,
                         weight_decay, nesterov, n, cb->stream), -1, "SGD");
  return stream_sync(cb, -1, "SGD", err);
fail:
  return rc;
}

int dpt_backend_cuda_copy_velocity(struct dpt_backend *be, float *host, int to_backend,
                                   struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  size_t n = be->model->n_params * 4;
  int rc = 0;
  CUDA_CK(cudaMemcpyAsync, (to_backend ? (void *)cb->velocity : (void *)host,
                            to_backend ? (void *)host : (void *)cb->velocity, n,
                            to_backend ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, cb->stream),
          -1, "SGD momentum buffer");
  return stream_sync(cb, -1, "SGD momentum buffer", err);
fail:
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
  if ((rc = stream_sync(cb, -1, "gradient check", err))) return rc;
  *finite = !flag;
  return 0;
fail:
  return rc;
}

int dpt_backend_cuda_check_overflow(struct dpt_backend *be, const float *buf, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0;
  if ((rc = need_mixed(cb, "the overflow check", err))) return rc;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "gradient check");
  CUDA_CK(cudaMemsetAsync, (cb->flag, 0, sizeof(int), cb->stream), -1, "gradient check");
  KERN_CK(dpt_cuda_nonfinite, (buf ? buf : be->grads, be->model->n_params, cb->flag, cb->stream), -1,
          "gradient check");
  KERN_CK(dpt_cuda_scaler_update, (cb->scaler, cb->flag, cb->stream), -1, "loss scaler");
  cb->overflow_armed = 1;
  return 0;
fail:
  return rc;
}

long dpt_backend_cuda_host_syncs(const struct dpt_backend *be)
{
  return CB(be)->host_syncs;
}

long dpt_backend_cuda_stage_waits(const struct dpt_backend *be)
{
  return CB(be)->stage_waits;
}

size_t dpt_cuda_memory_reserve(size_t workspace_cap)
{
  /* the convolution workspace (at most the cap; 512 MiB if uncapped) and 256 MiB for the
   * cuDNN / cuBLAS handles and the context's own allocations */
  return (workspace_cap ? workspace_cap : (size_t)512 << 20) + ((size_t)256 << 20);
}
