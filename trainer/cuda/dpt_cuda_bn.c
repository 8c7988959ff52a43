/* dpt_cuda_bn.c — the cuda backend's batch norm (dpt_backend_cuda_priv.h): the plain cuDNN calls,
 * cudnnBatchNormalization*Ex as PyTorch's channels_last path runs it (NHWC persistent kernels, at
 * fp16 with the layer's ReLU inside), and at fp16 the residual add and its ReLU inside too
 * (CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION, issue 22 item 3), with their set-up. */
#include "dpt_backend_cuda_priv.h"

/* ---- batch normalisation (+ ReLU) ------------------------------------------ */

/* The options' epsilon, at least cuDNN's smallest. */
static double bn_eps(const struct cu_backend *cb)
{
  double eps = cb->pub.opts.bn_eps;
  return eps < CUDNN_BN_MIN_EPSILON ? CUDNN_BN_MIN_EPSILON : eps;
}

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

/* ---- BN + residual add + ReLU (fp16, Ex): the add's work inside the BN's calls ----------------
 *
 * A bottleneck ends BN -> ADD(+ReLU) with the BN (bn3, or the shortcut's downsample.1) right
 * before the add: the add's other input z is ready when the BN runs.  The forward writes the
 * add's output y = ReLU(BN(x) + z) (the BN's own output is never written: only the add read it);
 * the backward, right after the add's turn, reads y and dy and writes dx, dz, dgamma, dbeta.
 * That saves the add kernel and its backward pass (7 tensor passes of the block's output size
 * become 5 in the backward, 3 the forward's add).  cuDNN's dz has no beta: z's gradient must be
 * written first, which holds when no layer after the add reads z (bn_add_target).  A refusal at
 * run time puts the pair back on the BN's Ex call and the add's kernels for good (said once). */

/* The ADD+ReLU layer right after BN layer li that alone reads li's output, or -1; *z its other input. */
static int bn_add_target(const struct cu_backend *cb, int li, int *z)
{
  const struct dpt_model *m = cb->pub.model;
  const struct dpt_layer_desc *d = &m->layers[li], *a = li + 1 < m->n_layers ? &m->layers[li + 1] : NULL;
  if (d->relu || !a || a->type != DPT_LAYER_ADD || !a->relu || a->in[0] == a->in[1] ||
      (a->in[0] != d->out && a->in[1] != d->out) || tensor_dtype(cb, a->out) != DPT_DT_F16)
    return -1;
  *z = a->in[0] == d->out ? a->in[1] : a->in[0];
  if (!cb->t[*z].diff || !cb->t[d->in[0]].diff || !cb->t[a->out].diff) return -1;
  for (int j = 0; j < m->n_layers; j++) {
    const struct dpt_layer_desc *o = &m->layers[j];
    if (j != li + 1 && (o->in[0] == d->out || o->in[1] == d->out)) return -1; /* the BN's output read elsewhere */
    if (j > li + 1 && (o->in[0] == *z || o->in[1] == *z)) return -1;         /* z's gradient written before */
  }
  return li + 1;
}

static void bn_add_refused(struct cu_backend *cb, struct cu_layer *L, const struct dpt_layer_desc *d, const char *call,
                           cudnnStatus_t st)
{
  L->bn_add = 0;
  fprintf(stderr, "dpt: cuda backend: %s refused BN+add+ReLU at layer '%s' (%s): the BN and the add run apart from "
          "now on\n", call, d->name, cudnnGetErrorString(st));
  dpt_cuda_note(cb, "batch norm: %s refused BN+add+ReLU at '%s' at run time (%s): BN and add apart for it", call,
                d->name, cudnnGetErrorString(st));
}

/* Training forward of a bn_add layer: *did 1 when the Ex call wrote the add's output. */
static int bn_add_forward(struct cu_backend *cb, struct dpt_layer *l, double eps, int *did, struct dpt_err *err)
{
  struct cu_layer *L = l->impl;
  const struct dpt_layer_desc *d = l->desc;
  const struct cu_tensor *x = &cb->t[d->in[0]], *z = &cb->t[L->add_z];
  struct cu_tensor *y = &cb->t[cb->pub.model->layers[L->add_layer].out];
  int C = d->c_out;
  *did = 0;
  cudnnStatus_t st = cudnnBatchNormalizationForwardTrainingEx(
      cb->dnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION, &one, &zero, x->desc, x->buf,
      z->desc, z->buf, y->desc, y->buf, L->pdesc, l->params, l->params + C, (double)cb->pub.opts.bn_momentum, l->state,
      l->state + C, eps, L->save_mean, L->save_istd, cb->relu, cb->ws, cb->bn_ws_bytes, L->bn_reserve,
      L->bn_reserve_bytes);
  if (st == CUDNN_STATUS_SUCCESS) {
    *did = 1;
    return 0;
  }
  if (!bn_ex_refusal(st))
    return dpt_cuda_call_fail(cb, L->idx, "BN+add+ReLU", "cudnnBatchNormalizationForwardTrainingEx",
                              cudnnGetErrorString(st), err);
  bn_add_refused(cb, L, d, "cudnnBatchNormalizationForwardTrainingEx", st); /* nothing ran: the BN, then the add */
  return 0;
}

/* Backward of a bn_add layer whose forward did the add: *done 1 when the Ex call wrote dx, dz and the
 * parameters' gradients; else (a refusal) the add's own backward ran and the caller's BN backward follows. */
static int bn_add_backward(struct cu_backend *cb, struct dpt_layer *l, double eps, int *done, struct dpt_err *err)
{
  struct cu_layer *L = l->impl;
  const struct dpt_layer_desc *d = l->desc;
  const struct cu_tensor *x = &cb->t[d->in[0]], *z = &cb->t[L->add_z];
  const struct cu_tensor *y = &cb->t[cb->pub.model->layers[L->add_layer].out];
  unsigned char wz = cb->pub.grad_written[L->add_z], wx = cb->pub.grad_written[d->in[0]];
  int C = d->c_out;
  float bz, bx;
  void *dz = diff_target(cb, L->add_z, &bz), *dx = diff_target(cb, d->in[0], &bx);
  *done = 0;
  if (bz == 0.0f) { /* (bn_add_target made sure) */
    cudnnStatus_t st = cudnnBatchNormalizationBackwardEx(
        cb->dnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION, &one, &bx, &one, &zero,
        x->desc, x->buf, y->desc, y->buf, y->desc, y->diff, z->desc, dz, x->desc, dx, L->pdesc, l->params,
        l->params + C, l->grads, l->grads + C, eps, L->save_mean, L->save_istd, cb->relu, cb->ws, cb->bn_ws_bytes,
        L->bn_reserve, L->bn_reserve_bytes);
    if (st == CUDNN_STATUS_SUCCESS) {
      *done = 1;
      return 0;
    }
    if (!bn_ex_refusal(st))
      return dpt_cuda_call_fail(cb, L->idx, "BN+add+ReLU", "cudnnBatchNormalizationBackwardEx",
                                cudnnGetErrorString(st), err);
    bn_add_refused(cb, L, d, "cudnnBatchNormalizationBackwardEx", st);
  }
  /* nothing written: the marks undone, the add's backward (from y, dy: its mask, dz and the BN's dy) */
  cb->pub.grad_written[L->add_z] = wz;
  cb->pub.grad_written[d->in[0]] = wx;
  return dpt_cuda_add_backward_run(&cb->pub.layers[L->add_layer], err);
}

static int bn_forward(struct dpt_layer *l, int training, struct dpt_err *err)
{
  struct cu_layer *L = l->impl;
  struct cu_backend *cb = L->cb;
  const struct dpt_layer_desc *d = l->desc;
  struct cu_tensor *x = &cb->t[d->in[0]], *y = &cb->t[d->out];
  int rc = 0, li = L->idx, C = d->c_out;
  double eps = bn_eps(cb);
  int relu_kernel = d->relu;
  L->did_add = 0;
  if (training && L->bn_ex && L->bn_add) { /* the residual add and its ReLU inside (fp16) */
    if ((rc = bn_add_forward(cb, l, eps, &L->did_add, err))) goto fail;
    if (L->did_add) return layer_sync(cb, li, err);
  }
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
  double eps = bn_eps(cb);
  const void *dz = y->diff;
  int ex = L->bn_ex;
  if (L->did_add) { /* the forward did the add: its backward too, or (refused) the add's own then ours */
    int done = 0;
    L->did_add = 0;
    if ((rc = bn_add_backward(cb, l, eps, &done, err))) goto fail;
    if (done) return layer_sync(cb, li, err);
    ex = 0; /* the reserve space is the BN+add forward's, not the BN's own Ex op's: this step the plain call */
  }
  int fuse = ex && bn_ex_fuses_relu(cb, d); /* fp16 Ex: ReLU's backward inside (from y) */
  if (d->relu && !fuse && (rc = bn_relu_backward(cb, L, d, &dz, err))) goto fail;
  if (ex) { /* dgamma / dbeta as below */
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

/* BN training through cudnnBatchNormalizationForwardTrainingEx / BackwardEx (issue 22), as
 * PyTorch's channels_last path runs it: NHWC, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, workspace and
 * reserve space; at fp16 BN+ReLU as one op (CUDNN_BATCHNORM_OPS_BN_ACTIVATION, bn_ex_fuses_relu) where
 * the layer has its ReLU.  The size queries are given every descriptor, as PyTorch's and NVIDIA's
 * NHWC extension give them (z as x, y in the backward's); the calls NULL where the op has none.
 * Under --fuse only the layers the fused step leaves on the legacy calls use it.  The plain calls
 * ran cuDNN's generic 1C11 kernels on NHWC: 92% of a mixed-precision ResNet-50 step on an H200
 * (bench/results/gpu-check-h200.md).  A layer whose sizes cuDNN refuses
 * keeps the plain calls (said at start); DPT_CUDA_BN=legacy keeps them all.  At fp16 a BN right
 * before its block's ADD+ReLU does the add too (BN_ADD_ACTIVATION, above) where cuDNN sizes it
 * (else the BN's own Ex op); DPT_CUDA_BN=ex-noadd keeps the adds apart. */

/* The Ex calls' workspace (forward, backward) and reserve space for ops on these tensors. */
static cudnnStatus_t bn_ex_sizes(const struct cu_backend *cb, cudnnBatchNormOps_t ops, cudnnActivationDescriptor_t act,
                                 cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t z, cudnnTensorDescriptor_t y,
                                 cudnnTensorDescriptor_t p, size_t *wf, size_t *wb, size_t *rs)
{
  const cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
  int add = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
  cudnnStatus_t st = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(cb->dnn, mode, ops, x, z, y, p, act, wf);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnGetBatchNormalizationBackwardExWorkspaceSize(cb->dnn, mode, ops, x, y, y, add ? z : NULL, x, p, act, wb);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cb->dnn, mode, ops, act, x, rs);
  return st;
}

int dpt_cuda_bn_ex_prepare(struct cu_backend *cb, struct dpt_err *err)
{
  const struct dpt_model *m = cb->pub.model;
  const char *env = getenv("DPT_CUDA_BN");
  int rc = 0, n_bn = 0, n_ex = 0, n_no = 0, n_relu = 0, n_unal = 0, n_add = 0, n_add_no = 0;
  size_t total = 0;
  char *base = NULL;
  cudnnStatus_t last = CUDNN_STATUS_SUCCESS;
  const char *first_no = NULL;
  if (env && *env && strcmp(env, "ex") && strcmp(env, "ex-noadd") && strcmp(env, "legacy"))
    return dpt_err_set(err, DPT_E_INPUT, "cuda backend: DPT_CUDA_BN='%s' is not ex, ex-noadd or legacy: unset it (ex: "
                       "cudnnBatchNormalization*Ex, at fp16 with the residual add inside, the default), or set "
                       "ex-noadd (the adds apart) or legacy (the plain calls)", env);
  int want = !(env && !strcmp(env, "legacy")), want_add = want && !(env && !strcmp(env, "ex-noadd")) && !cb->fused;
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
    size_t wf = 0, wb = 0, rs = 0;
    int z = -1, al = want_add ? bn_add_target(cb, li, &z) : -1;
    if (al >= 0) { /* the block's add and ReLU inside: y is the add's output, z its other input */
      cudnnStatus_t sa = bn_ex_sizes(cb, CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION, cb->relu, x->desc, cb->t[z].desc,
                                     cb->t[m->layers[al].out].desc, L->pdesc, &wf, &wb, &rs);
      if (sa == CUDNN_STATUS_SUCCESS) {
        L->bn_add = 1, L->add_layer = al, L->add_z = z;
        cb->l[al].add_bn = li;
        n_add++;
      } else {
        n_add_no++;
      }
    }
    /* the BN's own Ex op too: the BN+add op's run-time refusal falls back on it, in the same buffers */
    size_t wf1 = 0, wb1 = 0, rs1 = 0;
    cudnnStatus_t st = bn_ex_sizes(cb, bn_ex_ops(cb, d), act, x->desc, x->desc, y->desc, L->pdesc, &wf1, &wb1, &rs1);
    if (st != CUDNN_STATUS_SUCCESS && L->bn_add) { /* (not seen: then the plain calls are its fallback) */
      L->bn_add = 0, cb->l[al].add_bn = -1;
      n_add--, n_add_no++;
    }
    wf = wf > wf1 ? wf : wf1, wb = wb > wb1 ? wb : wb1, rs = rs > rs1 ? rs : rs1;
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
  if (want && !cb->plan.nchw && (n_add || n_add_no))
    dpt_cuda_note(cb, "batch norm: BN+add+ReLU one op (CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION) at %d residual add(s)%s",
                  n_add, n_add_no ? "; cuDNN refused the sizes of the others (their BN's own Ex op, then the add)" : "");
  return 0;
fail:
  return rc;
}
const struct dpt_layer_ops dpt_cuda_bn_ops = {bn_forward, bn_backward, dpt_cuda_layer_destroy};
