/* dpt_backend_cuda_loss.c — the cuda backend's loss on the device (softmax cross-entropy with
 * label smoothing, its totals read back only at log lines), mixed precision's loss scaler and
 * overflow check, and the tests' blocking variants.  The forward that makes the logits and the
 * backward that reads their gradient are dpt_backend_cuda.c's. */
#include "dpt_backend_cuda_priv.h"

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

/* loss in a graph step: the labels of staging slot k go up on the upload stream (a host point:
 * after the previous loss kernel read the device copy, lab_free), then the loss kernels
 * (smoothing and grad_scale are kernel arguments: the same every step of a run). */
static int graph_loss(struct cu_backend *cb, int k, float smoothing, float grad_scale, struct dpt_err *err)
{
  int rc = 0, act, N = cb->pub.opts.batch, o = out_tid(cb);
  const struct dpt_cuda_tensor_plan *op = &cb->plan.t[o];
  CUDA_CK(cudaStreamWaitEvent, (cb->up_stream, cb->lab_free, 0), -1, "labels");
  CUDA_CK(cudaMemcpyAsync, (cb->labels, cb->stage_lab[k], (size_t)N * sizeof(int), cudaMemcpyHostToDevice,
                            cb->up_stream), -1, "labels");
  CUDA_CK(cudaEventRecord, (cb->lab_ev[k], cb->up_stream), -1, "labels");
  cb->lab_used[k] = 1;
  cb->lab_slot = (k + 1) % NSTAGE;
  dpt_cuda_gstep_wait(cb, cb->lab_ev[k]);
  if ((rc = dpt_cuda_gstep_item(cb, DPT_CAP_LOSS, -1, &act, err))) goto fail;
  if (act != DPT_CAPA_SKIP) {
    KERN_CK(dpt_cuda_softmax_xent, (cb->out32, cb->labels, N, op->c * op->h * op->w, smoothing, grad_scale,
                                    cb->dout32, cb->loss_rows, cb->rank, cb->stream), -1, "loss");
    CUDA_CK(cudaEventRecordWithFlags, (cb->lab_free, cb->stream, act == DPT_CAPA_RECORD ? cudaEventRecordExternal
                                                                                        : cudaEventRecordDefault),
            -1, "loss");
    KERN_CK(dpt_cuda_loss_accumulate, (cb->loss_rows, cb->rank, N, cb->tot, cb->stream), -1, "loss totals");
  }
fail:
  return dpt_cuda_gstep_end(cb, rc, err);
}

int dpt_cuda_loss_run(struct dpt_backend *be, const int *labels, float smoothing, float grad_scale,
                      struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0, k = cb->lab_slot, N = be->opts.batch;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "loss");
  if ((rc = dpt_cuda_stage_wait(cb, cb->lab_ev[k], &cb->lab_used[k], "label staging", err))) return rc;
  memcpy(cb->stage_lab[k], labels, (size_t)N * sizeof(int));
  if (cb->gstep) return graph_loss(cb, k, smoothing, grad_scale, err);
  if ((rc = loss_enqueue(cb, cb->stage_lab[k], smoothing, grad_scale, err))) return rc;
  CUDA_CK(cudaEventRecord, (cb->lab_ev[k], cb->stream), -1, "loss");
  cb->lab_used[k] = 1;
  cb->lab_slot = (k + 1) % NSTAGE;
  KERN_CK(dpt_cuda_loss_accumulate, (cb->loss_rows, cb->rank, N, cb->tot, cb->stream), -1, "loss totals");
  return 0;
fail:
  return rc;
}

int dpt_cuda_loss_totals(struct dpt_backend *be, struct dpt_loss_totals *t, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "loss totals");
  CUDA_CK(cudaMemcpyAsync, (cb->tot_host, cb->tot, 4 * sizeof(double), cudaMemcpyDeviceToHost, cb->stream), -1,
          "loss totals");
  CUDA_CK(cudaMemsetAsync, (cb->tot, 0, 4 * sizeof(double), cb->stream), -1, "loss totals");
  if ((rc = dpt_cuda_stream_sync(cb, -1, "loss totals (an asynchronous fault in the steps since the last ones; "
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

static int need_mixed(struct cu_backend *cb, const char *what, struct dpt_err *err)
{
  if (cb->plan.precision == DPT_CUDA_MIXED) return 0;
  return dpt_err_set(err, DPT_E_INPUT, "cuda backend: %s is mixed precision's (this backend runs %s)", what,
                     cb->pub.precision);
}

int dpt_cuda_scaler_get(struct dpt_backend *be, struct dpt_loss_scaler *s, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0;
  if ((rc = need_mixed(cb, "the loss scaler", err))) return rc;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "loss scaler");
  CUDA_CK(cudaMemcpyAsync, (cb->scaler_host, cb->scaler, sizeof *s, cudaMemcpyDeviceToHost, cb->stream), -1,
          "loss scaler");
  if ((rc = dpt_cuda_stream_sync(cb, -1, "loss scaler", err))) return rc;
  *s = *cb->scaler_host;
  return 0;
fail:
  return rc;
}

int dpt_cuda_scaler_set(struct dpt_backend *be, const struct dpt_loss_scaler *s, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0;
  if ((rc = need_mixed(cb, "the loss scaler", err))) return rc;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "loss scaler");
  *cb->scaler_host = *s; /* no copy into it is in flight: scaler_get waits for its own */
  CUDA_CK(cudaMemcpyAsync, (cb->scaler, cb->scaler_host, sizeof *s, cudaMemcpyHostToDevice, cb->stream), -1,
          "loss scaler");
  return dpt_cuda_stream_sync(cb, -1, "loss scaler", err);
fail:
  return rc;
}

/* ---- the step-side extras (the tests' direct calls) ----------------------------- */

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
  if ((rc = dpt_cuda_stream_sync(cb, -1, "loss", err))) goto fail;
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


int dpt_backend_cuda_grads_finite(struct dpt_backend *be, const float *buf, int *finite, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0, flag = 0;
  CUDA_CK(cudaMemsetAsync, (cb->flag, 0, sizeof(int), cb->stream), -1, "gradient check");
  KERN_CK(dpt_cuda_nonfinite, (buf ? buf : be->grads, be->model->n_params, cb->flag, cb->stream), -1,
          "gradient check");
  CUDA_CK(cudaMemcpyAsync, (&flag, cb->flag, sizeof flag, cudaMemcpyDeviceToHost, cb->stream), -1,
          "gradient check");
  if ((rc = dpt_cuda_stream_sync(cb, -1, "gradient check", err))) return rc;
  *finite = !flag;
  return 0;
fail:
  return rc;
}

int dpt_backend_cuda_check_overflow(struct dpt_backend *be, const float *buf, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0;
  int act;
  if ((rc = need_mixed(cb, "the overflow check", err))) return rc;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "gradient check");
  if ((rc = dpt_cuda_gstep_item(cb, DPT_CAP_OVERFLOW, -1, &act, err))) goto fail;
  if (act != DPT_CAPA_SKIP) {
    CUDA_CK(cudaMemsetAsync, (cb->flag, 0, sizeof(int), cb->stream), -1, "gradient check");
    KERN_CK(dpt_cuda_nonfinite, (buf ? buf : be->grads, be->model->n_params, cb->flag, cb->stream), -1,
            "gradient check");
    KERN_CK(dpt_cuda_scaler_update, (cb->scaler, cb->flag, cb->stream), -1, "loss scaler");
  }
  cb->overflow_armed = 1;
fail:
  return cb->gstep ? dpt_cuda_gstep_end(cb, rc, err) : rc;
}
