/* dpt_backend_cuda_optim.c — the cuda backend's optimizer (issues 15 and 23): the fused update's
 * launch (momentum SGD, LARS or RMSprop warm-up, with the weight copies in the compute type; the
 * kernels are dpt_cuda_optim.cu's), the optimizers' set-up, ops->sgd_step (eager or in a graph step)
 * and the momentum slab's copies.  The rest of the backend: dpt_backend_cuda.c and its rooms. */
#include "dpt_backend_cuda_priv.h"
#include "dpt_optim.h"

#include <string.h>

/* ---- the fused optimizer (dpt_cuda_optim.h): one launch per step --------------------------- */

/* The update from gradient g (with the learning rate lr, or lr_dev's on the device), the weight
 * copies written in the same pass; copy_only: the copies of the parameters as they are (after
 * the host put them in the slab: the first forward reads them).  skip: the overflow flag. */
int dpt_cuda_optim_launch(struct cu_backend *cb, const float *g, float lr, const float *lr_dev, float momentum,
                          float wd, int nesterov, const unsigned char *mask, const int *skip, int copy_only,
                          struct dpt_err *err)
{
  int rc = 0;
  struct dpt_cuda_optim_args a = {.w = cb->pub.params, .v = cb->velocity, .g = g, .mask = mask,
                                  .copy = cb->region[DPT_CUDA_R_WEIGHTS], .lr = lr, .lr_dev = lr_dev,
                                  .momentum = momentum, .weight_decay = wd, .nesterov = nesterov, .skip = skip,
                                  .copy_only = copy_only};
  if (cb->rmsw_ready && !copy_only) { /* eager steps only (rmsw_init refuses CUDA graphs) */
    const float al = (float)dpt_rmsw_alpha_sgd(cb->pub.opt_epoch, cb->rmsw_center, cb->rmsw_period);
    const float ar = lr > 0 ? (1.0f - al) * cb->rmsw_lr / lr : 0.0f;
    KERN_CK(dpt_cuda_rmsw_step, (&cb->otab, &a, cb->rmsw_m, al, ar, cb->rmsw_mu2, cb->rmsw_eps, cb->stream), -1,
            "RMSprop warm-up optimizer");
  } else if (cb->lars_ready && !copy_only)
    KERN_CK(dpt_cuda_lars_step, (&cb->otab, &cb->ltab, &a, cb->stream), -1, "LARS optimizer");
  else
    KERN_CK(dpt_cuda_optim_step, (&cb->otab, &a, cb->stream), -1, copy_only ? "weight copies" : "fused optimizer");
  return 0;
fail:
  return rc;
}

int dpt_cuda_refresh_copies(struct cu_backend *cb, struct dpt_err *err)
{
  return dpt_cuda_optim_launch(cb, NULL, 0.0f, NULL, 0.0f, 0.0f, 0, NULL, NULL, 1, err);
}

/* RMSprop warm-up: a second-moment slab beside the momentum; the mix is computed on the host at
 * each (eager) step from be->opt_epoch, so a captured step, which replays fixed scalars, is refused. */
int dpt_backend_cuda_rmsw_init(struct dpt_backend *be, float lr_rms, float mu2, float eps, double center, double period,
                               struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0;
  if (!cb->sgd_ready) return dpt_err_set(err, DPT_E_INPUT, "cuda backend: rmsw_init before sgd_init");
  if (be->graph)
    return dpt_err_set(err, DPT_E_UNSUPPORTED, "--optimizer rmsprop-warmup with --cuda-graph: its SGD/RMSprop mix "
                       "changes every step and a captured step replays fixed scalars: use --cuda-graph off");
  if (!(lr_rms > 0) || !(mu2 >= 0 && mu2 < 1) || !(eps > 0) || !(period > 0) || !(center >= 0))
    return dpt_err_set(err, DPT_E_INPUT, "cuda backend: RMSprop warm-up lr %g, mu2 %g, eps %g, centre %g, period %g "
                       "out of range", (double)lr_rms, (double)mu2, (double)eps, center, period);
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "RMSprop warm-up set-up");
  if (!cb->rmsw_m && (rc = dpt_cuda_dalloc(cb, (void **)&cb->rmsw_m, be->model->n_params * 4,
                                           "the RMSprop second moment", err)))
    return rc; /* zeroed by dpt_cuda_dalloc */
  cb->rmsw_lr = lr_rms, cb->rmsw_mu2 = mu2, cb->rmsw_eps = eps, cb->rmsw_center = center, cb->rmsw_period = period;
  cb->rmsw_ready = 1;
fail:
  return rc;
}

/* LARS: its tables beside the fused optimizer's (the same weight-copy rule); the update kernel
 * launch becomes dpt_cuda_lars_step's three (partial sums, trust ratios, update). */
int dpt_backend_cuda_lars_init(struct dpt_backend *be, const struct dpt_param_seg *seg, int n_seg, float eta, float eps,
                               struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  struct dpt_optim_lars l;
  int rc = 0;
  if (!cb->sgd_ready) return dpt_err_set(err, DPT_E_INPUT, "cuda backend: lars_init before sgd_init");
  if (!(eta > 0) || !(eps > 0))
    return dpt_err_set(err, DPT_E_INPUT, "cuda backend: LARS eta %g and eps %g must be > 0 (eps 0 is taken as 1e-7 "
                       "by the caller)", (double)eta, (double)eps);
  if ((rc = dpt_optim_lars_build(&cb->olay, seg, n_seg, 0, &l, err))) return rc;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "LARS set-up");
  dpt_cuda_lars_tables_free(&cb->ltab);
  cb->lars_ready = 0;
  int e = dpt_cuda_lars_upload(&l, eta, eps, &cb->ltab, cb->stream);
  if (e) {
    rc = dpt_cuda_call_fail(cb, -1, "LARS tables", "dpt_cuda_lars_upload", cudaGetErrorString((cudaError_t)e), err);
    goto fail;
  }
  cb->bytes += (size_t)l.n_tensor * (sizeof *l.tensor + sizeof(float)) + (size_t)l.n_chunk * (sizeof *l.chunk + 16);
  if (cb->bytes > cb->peak) cb->peak = cb->bytes;
  cb->lars_ready = 1;
fail:
  dpt_optim_lars_free(&l);
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
  if ((rc = dpt_cuda_optim_launch(cb, be->grads, lr, NULL, momentum, weight_decay, nesterov, mask ? cb->mask : NULL,
                                   NULL, 0, err)))
    return rc;
  return dpt_cuda_stream_sync(cb, -1, "SGD", err);
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
  if (cb->rmsw_ready) /* rmsprop-warmup: the optimizer state goes on with its second moment */
    CUDA_CK(cudaMemcpyAsync, (to_backend ? (void *)cb->rmsw_m : (void *)(host + be->model->n_params),
                              to_backend ? (void *)(host + be->model->n_params) : (void *)cb->rmsw_m, n,
                              to_backend ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, cb->stream),
            -1, "RMSprop second moment");
  return dpt_cuda_stream_sync(cb, -1, "SGD momentum buffer", err);
fail:
  return rc;
}

/* ---- momentum SGD: ops->sgd_init, ops->sgd_step ------------------------------------ */

int dpt_cuda_sgd_init(struct dpt_backend *be, float momentum, float weight_decay, int nesterov,
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
  if ((rc = dpt_cuda_stream_sync(cb, -1, "SGD set-up", err))) return rc;
  cb->sgd_momentum = momentum;
  cb->sgd_wd = weight_decay;
  cb->sgd_nesterov = nesterov;
  cb->sgd_ready = 1 + !!mask; /* 2: masked */
  return 0;
fail:
  return rc;
}

static int graph_sgd_step(struct cu_backend *cb, const float *grads, struct dpt_err *err);

int dpt_cuda_sgd_step(struct dpt_backend *be, float lr, const float *grads, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  size_t n = be->model->n_params;
  int rc = 0;
  if (!cb->sgd_ready)
    return dpt_err_set(err, DPT_E_INPUT, "cuda backend: sgd_step before sgd_init");
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "SGD");
  if (cb->gstep) return graph_sgd_step(cb, grads, err);
  const float *g = be->grads;
  if (grads && grads == be->pending) /* the double-buffered averaged gradient, already on the device */
    g = be->pending;
  else if (grads) { /* the double-buffered averaged gradient, from the host: the caller's again on
                      * return (a pinned buffer is read by DMA: wait for it) */
    CUDA_CK(cudaMemcpyAsync, (be->grads, grads, n * 4, cudaMemcpyHostToDevice, cb->stream), -1,
            "SGD gradient upload");
    if ((rc = dpt_cuda_stream_sync(cb, -1, "SGD gradient upload", err))) return rc;
  }
  /* mixed precision: the step is skipped on the device when the overflow flag that
   * dpt_backend_cuda_check_overflow set after the all-reduce says so (no host wait); the fused
   * optimizer writes the weight copies the next forward reads in the same pass */
  rc = dpt_cuda_optim_launch(cb, g, lr, NULL, cb->sgd_momentum, cb->sgd_wd, cb->sgd_nesterov,
                             cb->sgd_ready == 2 ? cb->mask : NULL,
                             cb->plan.precision == DPT_CUDA_MIXED && cb->overflow_armed ? cb->flag : NULL, 0, err);
  cb->overflow_armed = 0;
  return rc;
fail:
  return rc;
}

/* sgd_step in a graph step: the update reads the learning rate the step wrote to lr_dev. */
static int graph_sgd_step(struct cu_backend *cb, const float *grads, struct dpt_err *err)
{
  int rc = 0, act;
  if (grads) {
    rc = dpt_err_set(err, DPT_E_INPUT, "cuda backend: a captured step updates from its own gradient slab");
    goto done;
  }
  if ((rc = dpt_cuda_gstep_item(cb, DPT_CAP_UPDATE, -1, &act, err))) goto done;
  if (act != DPT_CAPA_SKIP)
    rc = dpt_cuda_optim_launch(cb, cb->pub.grads, 0.0f, cb->lr_dev, cb->sgd_momentum, cb->sgd_wd, cb->sgd_nesterov,
                               cb->sgd_ready == 2 ? cb->mask : NULL,
                               cb->plan.precision == DPT_CUDA_MIXED && cb->overflow_armed ? cb->flag : NULL, 0, err);
  cb->overflow_armed = 0;
done:
  return dpt_cuda_gstep_end(cb, rc, err);
}
