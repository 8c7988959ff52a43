/* dpt_cuda_layers.c — the cuda backend's layers (dpt_backend_cuda_priv.h): convolution, batch norm
 * (+ ReLU; the Ex calls' set-up), ReLU, pooling, fully connected (cuBLAS), residual add, the fused
 * step's per-layer dispatch, and the convolution algorithm choice, once per distinct shape. */
#include "dpt_backend_cuda_priv.h"

/* ---- convolution ---------------------------------------------------------- */

static int conv_forward(struct dpt_layer *l, int training, struct dpt_err *err)
{
  struct cu_layer *L = l->impl;
  struct cu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  const struct dpt_cuda_conv_plan *cp = &cb->plan.conv[L->conv];
  const struct cu_algo *a = &cb->algo[cp->shape_id];
  int rc = 0, li = L->idx, ran = 0;
  const void *w = L->w16; /* KRSC copy in the compute type (written by the fused optimizer), or KCRS in the slab */
  (void)training;
  if (a->g[DPT_CONVG_FWD]) { /* the shape's cuDNN graph, where it was the faster (dpt_cuda_convg.c) */
    void *p[DPT_CG_NSLOTS] = {0};
    p[DPT_CG_X] = cb->t[d->in[0]].buf, p[DPT_CG_W] = (void *)w, p[DPT_CG_Y] = cb->t[d->out].buf;
    if ((rc = dpt_cuda_convg_exec(cb, li, DPT_CONVG_FWD, p, &ran, err))) goto fail;
    if (ran) return layer_sync(cb, li, err);
  }
  DNN_CK(cudnnSetConvolutionMathType, (L->cdesc, (cudnnMathType_t)a->math_fwd), li, "");
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
  int rc = 0, li = L->idx, ran = 0;
  void *p[DPT_CG_NSLOTS] = {0};
  if (a->g[DPT_CONVG_WGRAD]) { /* the shape's cuDNN graph, where it was the faster (dpt_cuda_convg.c) */
    p[DPT_CG_X] = in->buf, p[DPT_CG_DY] = out->diff, p[DPT_CG_DW] = L->dw16;
    if ((rc = dpt_cuda_convg_exec(cb, li, DPT_CONVG_WGRAD, p, &ran, err))) goto fail;
  }
  if (!ran) {
    DNN_CK(cudnnSetConvolutionMathType, (L->cdesc, (cudnnMathType_t)a->math_filter), li, "");
    DNN_CK(cudnnConvolutionBackwardFilter, (cb->dnn, &one, in->desc, in->buf, out->desc, out->diff,
                                            L->cdesc, (cudnnConvolutionBwdFilterAlgo_t)a->bwd_filter,
                                            cb->ws, a->ws_filter, &zero, L->fdesc, L->dw16), li, "");
  }
  /* gradient packing: KRSC -> fp32 KCRS slab (mixed: still loss-scaled; backward unscales
   * the slab by ranges, bucket by bucket); NCHW fp32 wrote the slab itself */
  if (!cb->plan.nchw)
    KERN_CK(dpt_cuda_nhwc_to_nchw32, (L->dw16, cb->dtype, l->grads, cp->k, cp->c_logical, (size_t)cp->r * cp->s,
                                      cp->c, 1.0f, cb->stream), li, "");
  if (in->diff) {
    float beta;
    void *dx = diff_target(cb, d->in[0], &beta);
    int dir = beta != 0.0f ? DPT_CONVG_DGRAD_ACC : DPT_CONVG_DGRAD;
    ran = 0;
    if (a->g[dir]) {
      memset(p, 0, sizeof p);
      p[DPT_CG_DY] = out->diff, p[DPT_CG_W] = L->w16, p[DPT_CG_DX] = dx;
      if ((rc = dpt_cuda_convg_exec(cb, li, dir, p, &ran, err))) goto fail;
      if (ran) return layer_sync(cb, li, err);
    }
    DNN_CK(cudnnSetConvolutionMathType, (L->cdesc, (cudnnMathType_t)a->math_data), li, "");
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

/* BN+ReLU as one Ex op only on fp16 data: the fused activation belongs to cuDNN's semi-persistent NHWC
 * kernel, whose tensors must all be CUDNN_DATA_HALF (cuDNN's Ex notes; NVIDIA's own NHWC BN extension
 * and TensorFlow's fused batch norm use it at half only; PyTorch never asks for it).  At tf32 and
 * bf16 the Ex call normalises (OPS_BN, PyTorch's channels_last call) and the ReLU stays a kernel. */
static int bn_ex_fuses_relu(const struct cu_backend *cb, const struct dpt_layer_desc *d)
{
  return d->relu && tensor_dtype(cb, d->out) == DPT_DT_F16;
}

static cudnnBatchNormOps_t bn_ex_ops(const struct cu_backend *cb, const struct dpt_layer_desc *d)
{
  return bn_ex_fuses_relu(cb, d) ? CUDNN_BATCHNORM_OPS_BN_ACTIVATION : CUDNN_BATCHNORM_OPS_BN;
}

/* An Ex call its size queries had accepted answered "not supported" (any of cuDNN 9's NOT_SUPPORTED_*
 * codes) or "bad parameter": nothing ran, and the layer goes back to the plain calls for good (said
 * on stderr and in the notes with cuDNN's status, once per layer).  Other statuses are failures. */
static int bn_ex_refusal(cudnnStatus_t st)
{
  return CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED || CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_BAD_PARAM;
}

static void bn_ex_refused(struct cu_backend *cb, struct cu_layer *L, const struct dpt_layer_desc *d, const char *call,
                          cudnnStatus_t st)
{
  L->bn_ex = 0;
  fprintf(stderr, "dpt: cuda backend: %s refused layer '%s' (%s): its batch norm runs on the plain calls from now "
          "on\n", call, d->name, cudnnGetErrorString(st));
  dpt_cuda_note(cb, "batch norm: %s refused layer '%s' at run time (%s): the plain calls for it", call, d->name,
                cudnnGetErrorString(st));
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
  int relu_kernel = d->relu;
  if (training && L->bn_ex) { /* as PyTorch's channels_last path: NHWC persistent kernels (fp16: ReLU inside) */
    int fuse = bn_ex_fuses_relu(cb, d);
    cudnnStatus_t st = cudnnBatchNormalizationForwardTrainingEx(
        cb->dnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, bn_ex_ops(cb, d), &one, &zero, x->desc, x->buf, NULL, NULL,
        y->desc, y->buf, L->pdesc, l->params, l->params + C, (double)cb->pub.opts.bn_momentum, l->state,
        l->state + C, eps, L->save_mean, L->save_istd, fuse ? cb->relu : NULL, cb->ws, cb->bn_ws_bytes,
        L->bn_reserve, L->bn_reserve_bytes);
    if (st == CUDNN_STATUS_SUCCESS) {
      relu_kernel = d->relu && !fuse;
      goto relu;
    }
    if (!bn_ex_refusal(st)) {
      rc = dpt_cuda_call_fail(cb, li, "", "cudnnBatchNormalizationForwardTrainingEx", cudnnGetErrorString(st), err);
      goto fail;
    }
    bn_ex_refused(cb, L, d, "cudnnBatchNormalizationForwardTrainingEx", st); /* nothing ran: the plain calls */
  }
  if (training)
    DNN_CK(cudnnBatchNormalizationForwardTraining,
           (cb->dnn, bn_train_mode(cb), &one, &zero, x->desc, x->buf, y->desc, y->buf, L->pdesc,
            l->params, l->params + C, (double)cb->pub.opts.bn_momentum, l->state, l->state + C, eps,
            L->save_mean, L->save_istd), li, "");
  else
    DNN_CK(cudnnBatchNormalizationForwardInference,
           (cb->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, x->desc, x->buf, y->desc, y->buf,
            L->pdesc, l->params, l->params + C, l->state, l->state + C, eps), li, "");
relu:
  if (relu_kernel)
    KERN_CK(dpt_cuda_relu, (y->buf, y->buf, tensor_dtype(cb, d->out), t_elems(cb, d->out), cb->stream), li, "");
  return layer_sync(cb, li, err);
fail:
  return rc;
}

/* dz = relu'(y) * dy into the layer's scratch; y > 0 exactly where the BN output was > 0 */
static int bn_relu_backward(struct cu_backend *cb, struct cu_layer *L, const struct dpt_layer_desc *d,
                            const void **dz, struct dpt_err *err)
{
  int rc = 0;
  struct cu_tensor *y = &cb->t[d->out];
  KERN_CK(dpt_cuda_relu_bwd, (y->buf, y->diff, L->scratch, tensor_dtype(cb, d->out), 0, t_elems(cb, d->out),
                              cb->stream), L->idx, "");
  *dz = L->scratch;
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
  int fuse = L->bn_ex && bn_ex_fuses_relu(cb, d); /* fp16 Ex: ReLU's backward inside (from y) */
  if (d->relu && !fuse && (rc = bn_relu_backward(cb, L, d, &dz, err))) goto fail;
  if (L->bn_ex) { /* dgamma / dbeta as below */
    int written = cb->pub.grad_written[d->in[0]];
    float b = 0.0f;
    void *dxe = x->diff ? diff_target(cb, d->in[0], &b) : L->discard;
    cudnnStatus_t st = cudnnBatchNormalizationBackwardEx(
        cb->dnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, bn_ex_ops(cb, d), &one, &b, &one, &zero, x->desc, x->buf,
        fuse ? y->desc : NULL, fuse ? y->buf : NULL, y->desc, dz, NULL, NULL, x->desc, dxe, L->pdesc, l->params,
        l->params + C, l->grads, l->grads + C, eps, L->save_mean, L->save_istd, fuse ? cb->relu : NULL, cb->ws,
        cb->bn_ws_bytes, L->bn_reserve, L->bn_reserve_bytes);
    if (st == CUDNN_STATUS_SUCCESS) return layer_sync(cb, li, err);
    if (!bn_ex_refusal(st)) {
      rc = dpt_cuda_call_fail(cb, li, "", "cudnnBatchNormalizationBackwardEx", cudnnGetErrorString(st), err);
      goto fail;
    }
    /* the plain backward reads what the Ex forward left: y = ReLU(BN(x)) and the saved statistics */
    if (x->diff) cb->pub.grad_written[d->in[0]] = written; /* diff_target's mark, undone: nothing was written */
    bn_ex_refused(cb, L, d, "cudnnBatchNormalizationBackwardEx", st);
    /* the ReLU's backward was to be inside the refused call */
    if (fuse && (rc = bn_relu_backward(cb, L, d, &dz, err))) goto fail;
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
  KERN_CK(dpt_cuda_relu, (x->buf, y->buf, tensor_dtype(cb, d->out), t_elems(cb, d->out), cb->stream), L->idx, "");
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
  const void *w = L->w16 ? L->w16 : (const void *)l->params; /* 16 bits: the fused optimizer's copy */
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

/* One pass (dpt_cuda_add_bwd): the ReLU's mask applied to the output's gradient, written to (or added
 * to) both inputs' gradients.  An add of a tensor to itself (never in ResNet) keeps the two-pass way. */
static int add_backward(struct dpt_layer *l, struct dpt_err *err)
{
  struct cu_layer *L = l->impl;
  struct cu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  struct cu_tensor *y = &cb->t[d->out];
  int rc = 0, dt = tensor_dtype(cb, d->out);
  size_t n = t_elems(cb, d->out);
  void *dx[2] = {NULL, NULL};
  int acc[2] = {0, 0};
  if (d->in[0] != d->in[1]) {
    for (int k = 0; k < 2; k++) {
      float beta;
      if (!cb->t[d->in[k]].diff) continue;
      dx[k] = diff_target(cb, d->in[k], &beta);
      acc[k] = beta != 0.0f;
    }
    KERN_CK(dpt_cuda_add_bwd, (d->relu ? y->buf : NULL, y->diff, dx[0], acc[0], dx[1], acc[1], dt, n, cb->stream),
            L->idx, "");
    return layer_sync(cb, L->idx, err);
  }
  const void *g = y->diff;
  if (d->relu) {
    KERN_CK(dpt_cuda_relu_bwd, (y->buf, y->diff, L->scratch, dt, 0, n, cb->stream), L->idx, "");
    g = L->scratch;
  }
  for (int k = 0; k < 2; k++) {
    struct cu_tensor *x = &cb->t[d->in[k]];
    if (!x->diff) continue;
    float beta;
    void *t = diff_target(cb, d->in[k], &beta);
    if (beta == 0.0f)
      CUDA_CK(cudaMemcpyAsync, (t, g, cb->plan.t[d->in[k]].bytes, cudaMemcpyDeviceToDevice, cb->stream), L->idx, "");
    else
      KERN_CK(dpt_cuda_acc, (t, g, dt, n, cb->stream), L->idx, "");
  }
  return layer_sync(cb, L->idx, err);
fail:
  return rc;
}

void dpt_cuda_layer_destroy(struct dpt_layer *l)
{
  struct cu_layer *L = l->impl;
  if (!L) return;
  if (L->fdesc) cudnnDestroyFilterDescriptor(L->fdesc);
  if (L->cdesc) cudnnDestroyConvolutionDescriptor(L->cdesc);
  if (L->pdesc) cudnnDestroyTensorDescriptor(L->pdesc);
  if (L->pool) cudnnDestroyPoolingDescriptor(L->pool);
  l->impl = NULL;
}

const struct dpt_layer_ops dpt_cuda_conv_ops = {conv_forward, conv_backward, dpt_cuda_layer_destroy};
const struct dpt_layer_ops dpt_cuda_bn_ops = {bn_forward, bn_backward, dpt_cuda_layer_destroy};
const struct dpt_layer_ops dpt_cuda_relu_ops = {relu_forward, relu_backward, dpt_cuda_layer_destroy};
const struct dpt_layer_ops dpt_cuda_pool_ops = {pool_forward, pool_backward, dpt_cuda_layer_destroy};
const struct dpt_layer_ops dpt_cuda_fc_ops = {fc_forward, fc_backward, dpt_cuda_layer_destroy};
const struct dpt_layer_ops dpt_cuda_add_ops = {add_forward, add_backward, dpt_cuda_layer_destroy};

/* ---- the fused step (--fuse): layer i runs the fusion plan's ops named after it --------- *
 * Forward: the plan's forward ops of the layer in order, a legacy op through the layer's own
 * calls.  Backward (dpt_backend_backward_walk's step of layer i): its backward ops; the
 * gradients they write are marked delivered, and so are the layer's inputs (a BN applied in
 * its consumer has no gradient tensor of its own: its consumer's ops wrote its input's). */

static int fused_forward(struct dpt_layer *l, int training, struct dpt_err *err)
{
  struct cu_layer *L = l->impl;
  struct cu_backend *cb = L->cb;
  const struct dpt_fuse_plan *fp = cb->plan.fuse;
  int rc = 0, li = L->idx;
  for (int i = fp->fwd_first[li]; fp->fwd_n[li] && i < fp->fwd_first[li] + fp->fwd_n[li]; i++) {
    if (fp->ops[i].kind == DPT_FOP_LEGACY_FWD) rc = L->legacy->forward(l, training, err);
    else rc = dpt_cuda_fstep_run(&cb->fx, i, training, err);
    if (rc) return rc;
  }
  return layer_sync(cb, li, err);
}

static int fused_backward(struct dpt_layer *l, struct dpt_err *err)
{
  struct cu_layer *L = l->impl;
  struct cu_backend *cb = L->cb;
  const struct dpt_fuse_plan *fp = cb->plan.fuse;
  const struct dpt_layer_desc *d = l->desc;
  int rc = 0, li = L->idx;
  for (int i = fp->bwd_first[li]; fp->bwd_n[li] && i < fp->bwd_first[li] + fp->bwd_n[li]; i++) {
    const struct dpt_fop *op = &fp->ops[i];
    if (op->kind == DPT_FOP_LEGACY_BWD) {
      if ((rc = L->legacy->backward(l, err))) return rc;
      continue;
    }
    if ((rc = dpt_cuda_fstep_run(&cb->fx, i, 1, err))) return rc;
    for (int k = 0; k < op->n_out; k++)
      if (op->out[k].kind == DPT_FREF_DIFF) cb->pub.grad_written[op->out[k].id] = 1;
  }
  for (int k = 0; k < (d->type == DPT_LAYER_ADD ? 2 : 1); k++) cb->pub.grad_written[d->in[k]] = 1;
  return layer_sync(cb, li, err);
}

const struct dpt_layer_ops dpt_cuda_fused_ops = {fused_forward, fused_backward, dpt_cuda_layer_destroy};

/* ---- algorithm choice, once per distinct convolution shape ------------------ */

/* The math type the algorithm search may use: fp32 FMA only (TF32 off, the oracle); tf32, fp16,
 * bf16 tensor-core math (cuDNN then lists its tensor-core kernels, and the measured search picks
 * among them).  The choice's own math type (cuDNN may list an algorithm under another) is set on
 * the descriptor before each call that runs it. */
cudnnMathType_t dpt_cuda_conv_search_math(const struct cu_backend *cb)
{
  return cb->plan.precision == DPT_CUDA_FP32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
}

/* The math type a chosen algorithm runs with: the one cuDNN listed it under, except at fp32,
 * which stays FMA (cuDNN's DEFAULT_MATH would let float convolutions use TF32). */
static cudnnMathType_t conv_run_math(const struct cu_backend *cb, cudnnMathType_t listed)
{
  return cb->plan.precision == DPT_CUDA_FP32 ? CUDNN_FMA_MATH : listed;
}

/* Whether an algorithm computes by a transform (FFT, Winograd) rather than each output as a sum of
 * products (the GEMM and direct families).  The oracle (copts.deterministic) skips them: the float64
 * bounds of the oracle tests model a sum's rounding, and a transform's error scales with whole tiles'
 * norms instead.  cuDNN lists them for NCHW float, the fp32 default since 246f1e4. */
static int fwd_transform(cudnnConvolutionFwdAlgo_t a)
{
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}

static int filter_transform(cudnnConvolutionBwdFilterAlgo_t a)
{
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

static int data_transform(cudnnConvolutionBwdDataAlgo_t a)
{
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}

/* Algorithms of convolution shape `shape`, searched on conv rep (a convolution of that shape
 * that runs on the legacy calls: its tensors exist). */
int dpt_cuda_choose_algos(struct cu_backend *cb, int shape, int rep, size_t limit, struct dpt_err *err)
{
  const struct dpt_cuda_conv_plan *cp = &cb->plan.conv[rep];
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
    DNN_CK(cudnnSetConvolutionMathType, (L->cdesc, dpt_cuda_conv_search_math(cb)), li, "");
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
                                         p[i].determinism == CUDNN_DETERMINISTIC, fwd_transform(p[i].algo)};
    if ((pick = dpt_cuda_pick_algo(c, n, limit, det)) < 0) goto none;
    a->fwd = c[pick].algo;
    a->math_fwd = (int)conv_run_math(cb, p[pick].mathType);
    a->ws_fwd = c[pick].memory;
    size_t q = 0; /* the workspace of that algorithm with that math type, as the call will run it */
    DNN_CK(cudnnSetConvolutionMathType, (L->cdesc, conv_run_math(cb, p[pick].mathType)), li, "");
    DNN_CK(cudnnGetConvolutionForwardWorkspaceSize, (cb->dnn, x->desc, L->fdesc, L->cdesc, y->desc, p[pick].algo, &q),
           li, "");
    if (q > a->ws_fwd) a->ws_fwd = q;
  }
  {
    cudnnConvolutionBwdFilterAlgoPerf_t p[REQ];
    DNN_CK(cudnnSetConvolutionMathType, (L->cdesc, dpt_cuda_conv_search_math(cb)), li, "");
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
                                         p[i].determinism == CUDNN_DETERMINISTIC, filter_transform(p[i].algo)};
    if ((pick = dpt_cuda_pick_algo(c, n, limit, det)) < 0) goto none;
    a->bwd_filter = c[pick].algo;
    a->math_filter = (int)conv_run_math(cb, p[pick].mathType);
    a->ws_filter = c[pick].memory;
    size_t q = 0;
    DNN_CK(cudnnSetConvolutionMathType, (L->cdesc, conv_run_math(cb, p[pick].mathType)), li, "");
    DNN_CK(cudnnGetConvolutionBackwardFilterWorkspaceSize, (cb->dnn, x->desc, y->desc, L->cdesc, L->fdesc,
                                                            p[pick].algo, &q), li, "");
    if (q > a->ws_filter) a->ws_filter = q;
  }
  a->bwd_data = CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
  a->math_data = a->math_filter;
  a->ws_data = 0;
  if (x->diff) {
    cudnnConvolutionBwdDataAlgoPerf_t p[REQ];
    DNN_CK(cudnnSetConvolutionMathType, (L->cdesc, dpt_cuda_conv_search_math(cb)), li, "");
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
                                         p[i].determinism == CUDNN_DETERMINISTIC, data_transform(p[i].algo)};
    if ((pick = dpt_cuda_pick_algo(c, n, limit, det)) < 0) goto none;
    a->bwd_data = c[pick].algo;
    a->math_data = (int)conv_run_math(cb, p[pick].mathType);
    a->ws_data = c[pick].memory;
    size_t q = 0;
    DNN_CK(cudnnSetConvolutionMathType, (L->cdesc, conv_run_math(cb, p[pick].mathType)), li, "");
    DNN_CK(cudnnGetConvolutionBackwardDataWorkspaceSize, (cb->dnn, L->fdesc, y->desc, L->cdesc, x->desc,
                                                          p[pick].algo, &q), li, "");
    if (q > a->ws_data) a->ws_data = q;
  }
  return 0;
none:
  return dpt_cuda_call_fail(cb, li, "", "convolution algorithm choice",
                   cb->copts.deterministic ? "no deterministic sum-of-products algorithm fits the workspace limit "
                   "(raise DPT_CUDA_WORKSPACE_MB, or lower the batch)" : "no algorithm fits the workspace limit "
                   "(raise DPT_CUDA_WORKSPACE_MB, or lower the batch)", err);
fail:
  return rc;
}


/* BN training through cudnnBatchNormalizationForwardTrainingEx / BackwardEx (issue 22), as
 * PyTorch's channels_last path runs it: NHWC, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, workspace and
 * reserve space; at fp16 BN+ReLU as one op (CUDNN_BATCHNORM_OPS_BN_ACTIVATION, bn_ex_fuses_relu) where
 * the layer has its ReLU.  The size queries are given every descriptor, as PyTorch's and NVIDIA's
 * NHWC extension give them (z as x, y in the backward's); the calls NULL where the op has none.
 * Under --fuse only the layers the fused step leaves on the legacy calls use it.  The plain calls
 * ran cuDNN's generic 1C11 kernels on NHWC: 92% of a mixed-precision ResNet-50 step on an H200
 * (bench/results/gpu-check-h200.md).  A layer whose sizes cuDNN refuses
 * keeps the plain calls (said at start); DPT_CUDA_BN=legacy keeps them all. */
int dpt_cuda_bn_ex_prepare(struct cu_backend *cb, struct dpt_err *err)
{
  const struct dpt_model *m = cb->pub.model;
  const char *env = getenv("DPT_CUDA_BN");
  const cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
  int rc = 0, n_bn = 0, n_ex = 0, n_no = 0, n_relu = 0, n_unal = 0;
  size_t total = 0;
  char *base = NULL;
  cudnnStatus_t last = CUDNN_STATUS_SUCCESS;
  const char *first_no = NULL;
  if (env && *env && strcmp(env, "ex") && strcmp(env, "legacy"))
    return dpt_err_set(err, DPT_E_INPUT, "cuda backend: DPT_CUDA_BN='%s' is not ex or legacy: unset it (ex: "
                       "cudnnBatchNormalization*Ex, the default) or set legacy (the plain calls)", env);
  int want = !(env && !strcmp(env, "legacy"));
  if (want) {
    DNN_CK(cudnnCreateActivationDescriptor, (&cb->relu), -1, "BN+ReLU activation");
    /* NaN passes, as through dpt_cuda_relu: an overflowed step must reach the loss scaler */
    DNN_CK(cudnnSetActivationDescriptor, (cb->relu, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0), -1,
           "BN+ReLU activation");
  }
  for (int li = 0; li < m->n_layers; li++) {
    const struct dpt_layer_desc *d = &m->layers[li];
    struct cu_layer *L = &cb->l[li];
    if (d->type != DPT_LAYER_BN) continue;
    if (cb->fused && cb->plan.fuse->bn_mode[li] != DPT_FBN_LEGACY) continue; /* the fused step's own */
    n_bn++;
    if (!want || cb->plan.nchw) continue; /* NCHW: the plain calls, as PyTorch's NCHW path */
    if (!dpt_cuda_bn_ex_aligned(m, li, (size_t)(L->save_mean - (float *)cb->region[DPT_CUDA_R_BN]))) {
      n_unal++; /* its 16-byte vector loads would fault ("misaligned address"): the plain calls */
      continue;
    }
    const struct cu_tensor *x = &cb->t[d->in[0]], *y = &cb->t[d->out];
    cudnnActivationDescriptor_t act = bn_ex_fuses_relu(cb, d) ? cb->relu : NULL;
    cudnnBatchNormOps_t ops = bn_ex_ops(cb, d);
    size_t wf = 0, wb = 0, rs = 0;
    cudnnStatus_t st = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(cb->dnn, mode, ops, x->desc, x->desc,
                                                                                 y->desc, L->pdesc, act, &wf);
    if (st == CUDNN_STATUS_SUCCESS)
      st = cudnnGetBatchNormalizationBackwardExWorkspaceSize(cb->dnn, mode, ops, x->desc, y->desc, y->desc, NULL,
                                                             x->desc, L->pdesc, act, &wb);
    if (st == CUDNN_STATUS_SUCCESS)
      st = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cb->dnn, mode, ops, act, x->desc, &rs);
    if (st != CUDNN_STATUS_SUCCESS) {
      if (!first_no) first_no = d->name;
      last = st;
      n_no++;
      continue;
    }
    L->bn_ex = 1;
    L->bn_reserve_bytes = rs;
    total += (rs + 255) & ~(size_t)255;
    if (wf > cb->bn_ws_bytes) cb->bn_ws_bytes = wf;
    if (wb > cb->bn_ws_bytes) cb->bn_ws_bytes = wb;
    n_ex++;
    n_relu += act != NULL;
  }
  if (total) {
    if ((rc = dpt_cuda_dalloc(cb, (void **)&base, total, "BN reserve space (cudnnBatchNormalization*Ex)", err))) goto fail;
    for (int li = 0; li < m->n_layers; li++)
      if (cb->l[li].bn_ex && cb->l[li].bn_reserve_bytes) {
        cb->l[li].bn_reserve = base;
        base += (cb->l[li].bn_reserve_bytes + 255) & ~(size_t)255;
      }
  }
  if (n_unal)
    dpt_cuda_note(cb, "batch norm: %d layer(s) on the plain calls: C not a multiple of 4 or a parameter / statistics "
                  "vector not 16-byte aligned in its slab (cudnnBatchNormalization*Ex moves them 16 bytes at a time)",
                  n_unal);
  if (!want || cb->plan.nchw)
    dpt_cuda_note(cb, "batch norm: the plain cuDNN calls for its %d layer(s) (%s)", n_bn,
                  want ? "NCHW" : "DPT_CUDA_BN=legacy");
  else if (n_no)
    dpt_cuda_note(cb, "batch norm: %d of %d layer(s) through cudnnBatchNormalization*Ex (NHWC persistent, BN+ReLU one "
         "op in %d); %d on the plain calls: cuDNN %ld refused their sizes (%s, first '%s')", n_ex, n_bn, n_relu, n_no,
         (long)cudnnGetVersion(), cudnnGetErrorString(last), first_no);
  else if (n_bn)
    dpt_cuda_note(cb, "batch norm: %d layer(s) through cudnnBatchNormalization*Ex (NHWC persistent, BN+ReLU one op in "
         "%d), reserve %.1f MB, workspace %.1f MB", n_ex, n_relu, total / 1e6, cb->bn_ws_bytes / 1e6);
  return 0;
fail:
  return rc;
}