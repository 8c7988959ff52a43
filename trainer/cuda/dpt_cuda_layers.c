/* dpt_cuda_layers.c — the cuda backend's layers (dpt_backend_cuda_priv.h): convolution, ReLU,
 * pooling, fully connected (cuBLAS), residual add, the fused step's per-layer dispatch, and the
 * convolution algorithm choice, once per distinct shape.  Batch norm is dpt_cuda_bn.c's; the
 * convolutions' cuDNN graphs dpt_cuda_convg.c's. */
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
  (void)training;
  if (L->add_bn >= 0 && cb->l[L->add_bn].did_add) return 0; /* the BN before it wrote y (dpt_cuda_bn.c) */
  KERN_CK(dpt_cuda_add, (a->buf, b->buf, y->buf, tensor_dtype(cb, d->out), d->relu, t_elems(cb, d->out), cb->stream),
          L->idx, "");
  return layer_sync(cb, L->idx, err);
fail:
  return rc;
}

/* One pass (dpt_cuda_add_bwd): the ReLU's mask applied to the output's gradient, written to (or added
 * to) both inputs' gradients.  An add of a tensor to itself (never in ResNet) keeps the two-pass way. */
int dpt_cuda_add_backward_run(struct dpt_layer *l, struct dpt_err *err)
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

/* After a BN that did the add (dpt_cuda_bn.c): its backward, next, does this one's too; the BN's
 * output gradient counts as given (the walk asks for it), though the fused backward never reads it. */
static int add_backward(struct dpt_layer *l, struct dpt_err *err)
{
  struct cu_layer *L = l->impl;
  struct cu_backend *cb = L->cb;
  if (L->add_bn >= 0 && cb->l[L->add_bn].did_add) {
    cb->pub.grad_written[cb->pub.model->layers[L->add_bn].out] = 1;
    return 0;
  }
  return dpt_cuda_add_backward_run(l, err);
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
