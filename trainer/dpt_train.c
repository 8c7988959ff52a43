/* dpt-train — synchronous data-parallel ResNet-50 training (ChainerMN style).
 *
 * One process per rank (dpt-launch / srun / mpirun start them); parameters are
 * broadcast from rank 0, every step's gradients are averaged with the
 * runtime's communicator (dpt_comm: mpi, ring, hierarchical; fp16 on the wire
 * optional), optionally double-buffered: step t's all-reduce runs on the
 * communicator's worker thread while step t+1 computes, and step t+1 applies
 * step t's averaged gradient.
 *
 * Preemption (Slurm's --signal=USR1@<s>, scancel's SIGTERM, dpt-launch forwards
 * both): the handler only sets a flag; every step the ranks sum their flags in a
 * 2-float all-reduce, so all of them stop after the same step even if only one
 * got the signal, write a checkpoint and exit DPT_TRAIN_EXIT_PREEMPTED.
 *
 * Exit: 0 ok, 2 bad usage/input, 1 runtime failure (also: preempted without
 * --checkpoint-dir), 3 preempted with a checkpoint written (resume with
 * --resume auto). */
#define _GNU_SOURCE
#include "dpt_train_priv.h"

static void fmt_eta(double s, char *buf, size_t n)
{
  if (s < 0 || !isfinite(s)) s = 0;
  int h = (int)(s / 3600), m = (int)(fmod(s, 3600) / 60), sec = (int)fmod(s, 60);
  if (h) snprintf(buf, n, "%dh%02dm", h, m);
  else snprintf(buf, n, "%dm%02ds", m, sec);
}

/* The next batch of loader L: host fp32 NCHW (dpt_loader_next), or with dev_input the
 * backend's input format in device memory (dpt_loader_next_device: the loader's release
 * event for it is recorded on the backend's stream at the next call, behind the backward
 * that last reads it).  Returns the real images in it, or -1 with err set. */
static int batch_next(struct run *r, struct dpt_loader *L, const void **x, const int **lab, double *wait_s,
                      struct dpt_err *err)
{
  const float *xh = NULL;
  void *xd = NULL;
  int n = r->dev_input ? dpt_loader_next_device(L, &xd, lab, r->in_fmt.stream, wait_s)
                       : dpt_loader_next(L, &xh, lab, wait_s);
  if (n < 0) {
    *err = *dpt_loader_err(L);
    return -1;
  }
  *x = r->dev_input ? (const void *)xd : (const void *)xh;
  return n;
}

/* Forward of a batch from batch_next (output left on the backend for loss()): from the
 * device batch in place, or uploaded from the host. */
static int batch_forward(struct run *r, const void *x, int training, struct dpt_err *err)
{
  return r->dev_input ? r->be->ops->forward_device(r->be, x, NULL, training, NULL, err)
                      : dpt_backend_forward(r->be, x, training, NULL, err);
}

static int announce(struct run *r, int what, struct dpt_err *err);

/* Validation: the loss and its counts on the backend, read once at the end (one host
 * wait per pass); the training totals were read by the log line of the epoch's last
 * step, which comes first. */
static int validate(struct run *r, struct val_result *out, struct dpt_err *err)
{
  struct dpt_backend *be = r->be;
  struct dpt_loader *vl = r->vl;
  float acc[4] = {0, 0, 0, 0}; /* loss sum, top1, top5, images */
  struct dpt_loss_totals t;
  const void *x;
  const int *lab;
  int n, rc;
  dpt_loader_start(vl, 0, 0);
  for (int st = 0; st < dpt_loader_steps(vl); st++) {
    if ((n = batch_next(r, vl, &x, &lab, NULL, err)) < 0) return err->code;
    if ((rc = announce(r, DPT_CAP_VALIDATION, err)) || (rc = batch_forward(r, x, 0, err)) ||
        (rc = be->ops->loss(be, lab, 0, 0, err)))
      return rc;
    acc[3] += (float)n;
  }
  if ((rc = be->ops->loss_totals(be, &t, err))) return rc;
  acc[0] = (float)t.loss_sum;
  acc[1] = (float)t.top1;
  acc[2] = (float)t.top5;
  if ((rc = dpt_train_ranks_allreduce(&r->rk, acc, 4, 0, 0, err))) return rc;
  out->n = (long)acc[3];
  out->loss = acc[3] > 0 ? acc[0] / acc[3] : 0;
  out->top1 = acc[3] > 0 ? acc[1] / acc[3] : 0;
  out->top5 = acc[3] > 0 ? acc[2] / acc[3] : 0;
  return 0;
}

/* Micro-batch j's forward, loss and backward: all on the backend, no host wait.  With
 * --accumulate K the micro-batches' gradients are summed on the host (backward
 * overwrites the gradient slab). */
static int micro_batch(struct run *r, int j, double *t_bwd_end, struct dpt_err *err)
{
  struct opts *o = &r->o;
  struct dpt_backend *be = r->be;
  const void *x;
  const int *lab;
  int rc;
  if (j == 0 && r->pf_have) { /* taken ahead (prefetch_next), its upload under way */
    x = r->pf_x, lab = r->pf_lab, r->pf_have = 0, r->pf_used++;
    r->tm.data += r->pf_wait;
  } else if (batch_next(r, r->tls[j], &x, &lab, &r->tm.data, err) < 0) {
    return err->code; /* a record failed to decode */
  }
  double t1 = now();
  if ((rc = batch_forward(r, x, 1, err)) ||
      (rc = be->ops->loss(be, lab, (float)o->smoothing, 1.0f / (o->batch * o->accum), err)))
    return rc;
  double t2 = now();
  if ((rc = dpt_backend_backward(be, NULL, NULL, err))) return rc;
  *t_bwd_end = now();
  if (o->accum > 1) { /* sum the micro-batches on the host */
    float *g = r->hg;
    size_t np = r->np;
    if ((rc = be->ops->sync(be, err)) || (rc = dpt_train_slab_get(be, DPT_SLAB_GRADS, g, err))) return rc;
    if (j == 0) memcpy(r->gacc, g, np * sizeof(float));
    else
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < np; i++) r->gacc[i] += g[i];
    if (j == o->accum - 1) {
      memcpy(g, r->gacc, np * sizeof(float));
      if ((rc = dpt_train_slab_put(be, DPT_SLAB_GRADS, g, err))) return rc;
    }
  }
  r->tm.fwd += t2 - t1;
  r->tm.bwd += now() - t2;
  return 0;
}

/* The gradient average and the update, double-buffered: wait for the previous step's
 * all-reduce, apply it (with its learning rate), start this step's. */
static int update_double_buffered(struct run *r, double t3, struct dpt_err *err)
{
  struct dpt_backend *be = r->be;
  int rc;
  if ((rc = dpt_train_grad_wait(&r->rk, &r->fl, err))) return rc;
  /* nothing in flight here: the flag's all-reduce cannot interleave with the gradient's */
  if ((rc = dpt_train_preempt_agree(&r->rk, &r->psig, err))) return rc;
  double t4 = now();
  r->tm.ar_exposed += t4 - t3;
  const double ep_prev = dpt_bsched_epoch(&r->bs, r->gstep - 1); /* the pending gradient's step */
  float lr_prev = (float)dpt_schedule_lr(&r->sch, ep_prev);
  if (be->pending) { /* the pending slab is the backend's (cpu: host; cuda with nccl: device) */
    void *ready;
    if (r->have_pending && (rc = dpt_train_apply_step(be, r->mixed, be->pending, lr_prev, ep_prev, err))) return rc;
    /* pending <- this step's gradient, behind the update that read it; nccl waits for the copy */
    if ((rc = be->ops->stash_grads(be, &ready, err)) ||
        (rc = dpt_train_grad_start(&r->rk, &r->fl, be->pending, r->np, r->o.fp16, ready, err)))
      return rc;
  } else { /* device slabs, host communicator: through the host */
    /* this step's gradient to the host first: a device sgd_step(pending) overwrites the slab */
    if ((rc = be->ops->sync(be, err)) || (rc = dpt_train_slab_get(be, DPT_SLAB_GRADS, r->hg, err))) return rc;
    if (r->have_pending && (rc = dpt_train_apply_step(be, r->mixed, r->pending, lr_prev, ep_prev, err))) return rc;
    memcpy(r->pending, r->hg, r->np * sizeof(float));
    if ((rc = dpt_train_grad_start(&r->rk, &r->fl, r->pending, r->np, r->o.fp16, NULL, err))) return rc;
  }
  r->have_pending = 1;
  r->tm.update += now() - t4;
  return 0;
}

/* The gradient average (buckets queued during backward, or one all-reduce now) and the
 * update with this step's learning rate. */
static int update(struct run *r, double t3, struct dpt_err *err)
{
  struct dpt_backend *be = r->be;
  int rc;
  if ((rc = dpt_train_preempt_agree(&r->rk, &r->psig, err))) return rc;
  if (r->n_buckets && r->graph_comm) { /* enqueued on the device: the update waits there for them */
#ifdef DPT_TRAIN_HAVE_COMM
    void *done;
    if ((rc = dpt_comm_enqueue_join(r->rk.comm, &done, err)) || (rc = be->ops->join(be, done, err))) return rc;
#endif
  } else if (r->n_buckets) { /* queued bucket by bucket during backward */
    if ((rc = dpt_train_bucket_wait_all(&r->ba, err))) return rc;
  } else if (r->R > 1) { /* one all-reduce after backward: its gradients complete first */
    if ((rc = be->ops->sync(be, err))) return rc;
    if (r->dev_comm) { /* nccl: the gradient slab itself */
      if ((rc = dpt_train_grad_allreduce(&r->rk, be->grads, r->np, r->o.fp16, err))) return rc;
    } else if ((rc = dpt_train_slab_get(be, DPT_SLAB_GRADS, r->hg, err)) ||
               (rc = dpt_train_grad_allreduce(&r->rk, r->hg, r->np, r->o.fp16, err)) ||
               (rc = dpt_train_slab_put(be, DPT_SLAB_GRADS, r->hg, err))) {
      return rc;
    }
  } /* one rank: the update follows backward on the backend's own stream, no wait */
  double t4 = now();
  r->tm.ar_exposed += t4 - t3;
  const double ep = dpt_bsched_epoch(&r->bs, r->gstep);
  if ((rc = dpt_train_apply_step(be, r->mixed, NULL, (float)dpt_schedule_lr(&r->sch, ep), ep, err)))
    return rc;
  r->tm.update += now() - t4;
  return 0;
}

/* Tell the backend what comes (a training step, a micro-batch, a validation batch) and the
 * step's learning rate: a backend with --cuda-graph captures it once and replays it
 * (dpt_cuda_capture.h); the others ignore it. */
static int announce(struct run *r, int what, struct dpt_err *err)
{
  struct dpt_backend *be = r->be;
  struct dpt_cap_step s;
  if (!be->ops->step_begin || !be->graph) return 0;
  int next_epoch, next_sie;
  dpt_bsched_locate(&r->bs, r->gstep + 1, &next_epoch, &next_sie); /* next_sie 0: this step ends an epoch */
  int log_step = what != DPT_CAP_VALIDATION && ((r->gstep + 1) % r->o.log_every == 0 || r->gstep + 1 == r->total_steps ||
                                                next_sie == 0);
  dpt_cuda_capture_step_of(&r->cap, what, log_step, &s);
  return be->ops->step_begin(be, &s, (float)dpt_schedule_lr(&r->sch, dpt_bsched_epoch(&r->bs, r->gstep)), err);
}

/* Double buffering's waiting gradient applied now, with the learning rate of its step: at the end
 * of the run, and before the batch changes (--batch-schedule). */
static int drain_pending(struct run *r, struct dpt_err *err)
{
  int rc;
  if (!r->have_pending) return 0;
  double ep = dpt_bsched_epoch(&r->bs, r->gstep - 1);
  if ((rc = dpt_train_grad_wait(&r->rk, &r->fl, err)) ||
      (rc = dpt_train_apply_step(r->be, r->mixed, r->be->pending ? r->be->pending : r->pending,
                                 (float)dpt_schedule_lr(&r->sch, ep), ep, err)))
    return rc;
  r->have_pending = 0;
  return 0;
}

/* The next step's first batch taken now, within the epoch, and its upload started (ops->prefetch)
 * before the host waits for a log line's loss: it runs while the step just enqueued runs (the input's
 * double buffering; a backend without the op, or batches already on the device, need none).  Its
 * time counts as training-step time; its wait for the loader goes to the step that uses it. */
static int prefetch_next(struct run *r, struct dpt_err *err)
{
  const void *x;
  const int *lab;
  if (!r->be->ops->prefetch || r->dev_input || r->pf_have) return 0;
  double t0 = now();
  r->pf_wait = 0;
  if (batch_next(r, r->tls[0], &x, &lab, &r->pf_wait, err) < 0) return err->code;
  r->pf_x = x, r->pf_lab = lab, r->pf_have = 1;
  int rc = r->be->ops->prefetch(r->be, (const float *)x, err);
  r->tm.steps += now() - t0;
  return rc;
}

/* One training step, llm.c's list: per micro-batch the batch, forward, loss and
 * backward; then the gradient average and the update. */
static int train_step(struct run *r, struct dpt_err *err)
{
  struct opts *o = &r->o;
  struct times tm0 = r->tm;
  double t_step0 = now(), t3 = t_step0;
  int rc;
  dpt_train_enter_phase("train", r->gstep, err);
  for (int j = 0; j < o->accum; j++)
    if ((rc = announce(r, o->accum > 1 ? DPT_CAP_MICRO_BATCH : DPT_CAP_TRAIN_STEP, err)) ||
        (rc = micro_batch(r, j, &t3, err)))
      return rc;
  if ((rc = dpt_train_enter_phase("allreduce", r->gstep, err))) return rc;
  if ((rc = o->dbuf ? update_double_buffered(r, t3, err) : update(r, t3, err))) return rc;
  r->gstep++;
  r->steps_run++;
  r->tm.steps += now() - t_step0;
#ifdef DPT_TRAIN_HAVE_COMM
  if (r->rep) {
    struct times *tm = &r->tm;
    struct dpt_report_step rs = {.data_wait = tm->data - tm0.data, .forward = tm->fwd - tm0.fwd,
                                 .backward = tm->bwd - tm0.bwd, .update = tm->update - tm0.update,
                                 .allreduce_exposed = tm->ar_exposed - tm0.ar_exposed,
                                 .allreduce = tm->ar_exposed - tm0.ar_exposed, .step = tm->steps - tm0.steps,
                                 .images = (long)o->batch * o->accum};
    if (o->dbuf) rs.allreduce = 0; /* overlapped: only the exposed part is measured */
    if ((rc = dpt_report_add_step(r->rep, &rs, err))) return rc;
  }
#else
  (void)tm0;
#endif
  r->ep_n += (long)o->batch * o->accum;
  r->run_n += (long)o->batch * o->accum;
  r->images_run += (long)o->batch * o->accum;
  if (o->dbuf && r->gstep == r->total_steps) return drain_pending(r, err); /* the last averaged gradient */
  return 0;
}

/* A log line: every rank reads its loss totals (the one host wait of the interval);
 * rank 0 prints the interval's loss, accuracy and speed. */
static int log_progress(struct run *r, int epoch, int sie, struct dpt_err *err)
{
  struct opts *o = &r->o;
  struct dpt_loss_totals lt;
  int rc;
  double tw = now();
  if ((rc = r->be->ops->loss_totals(r->be, &lt, err))) return rc;
  r->tm.steps += now() - tw; /* a device backend finishes the interval's steps here: their time */
  r->ep_loss += lt.loss_sum;
  r->ep_correct += lt.top1;
  r->n_logs++;
  if (r->me == 0) {
    double t = now(), ips = (double)(r->gstep - r->last_log_step) * o->batch * o->accum * r->R /
                            (r->tm.steps > r->steps_last ? r->tm.steps - r->steps_last : 1e-9);
    char eta[32];
    fmt_eta((r->total_steps - r->gstep) * (t - r->t_train0) / r->steps_run, eta, sizeof eta);
    printf("epoch %d/%d step %d/%d loss %.4f acc %.2f%% lr %.4g %.0f img/s ETA %s\n", epoch + 1,
           (int)ceil(r->total_epochs), sie + 1, dpt_bsched_spe(&r->bs, epoch), lt.loss_sum / r->run_n,
           100.0 * lt.top1 / r->run_n, dpt_schedule_lr(&r->sch, dpt_bsched_epoch(&r->bs, r->gstep)), ips, eta);
    fflush(stdout);
    r->steps_last = r->tm.steps;
  }
  r->last_log_step = r->gstep;
  r->run_n = 0;
  return 0;
}

/* A checkpoint (rank 0 writes it): parameters, BN state, momentum, the pending
 * gradient once its all-reduce is complete, the loss scaler. */
static int checkpoint_save(struct run *r, struct dpt_err *err)
{
  struct dpt_backend *be = r->be;
  struct dpt_ckpt_meta *cm = &r->cm;
  char path[4300];
  int rc;
  if ((rc = dpt_train_grad_wait(&r->rk, &r->fl, err))) return rc; /* pending must be complete on disk */
  if (r->me) return 0;
  cm->global_step = (uint64_t)r->gstep;
  dpt_bsched_locate(&r->bs, r->gstep, &cm->epoch, &cm->step_in_epoch);
  cm->batch = dpt_bsched_batch(&r->bs, cm->epoch); /* the batch of the epoch it continues in */
  if (r->mixed) { /* mixed precision: the loss scaler resumes where it is */
    if ((rc = be->ops->scaler_get(be, &r->scaler, err))) return rc;
    cm->loss_scale = r->scaler.scale;
    cm->scale_good_steps = r->scaler.good_steps;
    cm->scale_skipped = r->scaler.skipped;
  }
  dpt_ckpt_path(r->o.ckpt_dir, (uint64_t)r->gstep, path, sizeof path);
  if ((rc = dpt_train_slab_get(be, DPT_SLAB_PARAMS, r->hp, err)) ||
      (rc = dpt_train_slab_get(be, DPT_SLAB_STATE, r->hs, err)) ||
      (rc = dpt_train_slab_get(be, DPT_SLAB_VELOCITY, r->hv, err)) ||
      (be->pending && (rc = dpt_train_slab_get(be, DPT_SLAB_PENDING, r->pending, err))) ||
      (rc = dpt_ckpt_save(path, cm, r->hp, r->hs, r->hv, r->pending, err)))
    return rc;
  snprintf(r->ckpt_last, sizeof r->ckpt_last, "%s", path);
  dpt_ckpt_prune(r->o.ckpt_dir, 2);
  return 0;
}

/* The end of an epoch: validation, its line, the learning curve (report, and next to
 * the checkpoints), the epoch's training totals reset. */
static int validate_epoch(struct run *r, int epoch, struct dpt_err *err)
{
  struct val_result *vr = &r->vr;
  double ep_loss = r->ep_n ? r->ep_loss / r->ep_n : NAN, ep_top1 = r->ep_n ? (double)r->ep_correct / r->ep_n : NAN;
  double ep = dpt_bsched_epoch(&r->bs, r->gstep), lr = dpt_schedule_lr(&r->sch, ep);
  int rc;
  if ((rc = dpt_train_enter_phase("validation", r->gstep, err))) return rc;
  double tv = now();
  if ((rc = validate(r, vr, err))) return rc;
  r->tm.val += now() - tv;
  if (r->me == 0) {
    printf("epoch %d validation: top-1 %.2f%% top-5 %.2f%% loss %.4f (%ld images); train loss %.4f "
           "top-1 %.2f%% (rank 0) [%.1f s elapsed]\n", epoch + 1, 100 * vr->top1, 100 * vr->top5, vr->loss,
           vr->n, r->ep_n ? ep_loss : 0.0, r->ep_n ? 100.0 * ep_top1 : 0.0, now() - r->t_start);
    fflush(stdout);
    json_array_append_new(r->curve, json_pack("{s:f,s:I,s:f,s:f,s:f,s:f}", "epoch", ep, "step",
                                              (json_int_t)r->gstep, "top1", vr->top1, "top5", vr->top5,
                                              "loss", vr->loss, "elapsed_s", now() - r->t_start));
  }
#ifdef DPT_TRAIN_HAVE_COMM
  if (r->rep) {
    struct dpt_report_epoch re;
    dpt_report_epoch_init(&re);
    re.epoch = ep;
    re.step = r->gstep;
    re.train_loss = ep_loss;
    re.train_top1 = ep_top1;
    re.val_loss = vr->loss;
    re.val_top1 = vr->top1;
    re.val_top5 = vr->top5;
    re.lr = lr;
    if ((rc = dpt_report_add_epoch(r->rep, &re, err))) return rc;
  }
#endif
  if (r->me == 0) {
    struct dpt_ckpt_point pt = {ep, r->gstep, ep_loss, ep_top1, vr->loss, vr->top1, vr->top5, lr,
                                now() - r->t_start};
    dpt_train_curve_keep(&r->cl, r->o.ckpt_dir, &pt);
  }
  r->ep_loss = 0;
  r->ep_correct = r->ep_n = 0;
  return 0;
}

/* The step loop: epochs of steps; a log line every --log-every steps and at an
 * epoch's end; checkpoints; validation at an epoch's end; a stop after
 * --stop-after steps or an agreed preemption signal. */
static int train_loop(struct run *r, struct dpt_err *err)
{
  struct opts *o = &r->o;
  int rc;
  r->t_train0 = now();
  r->steps_last = r->tm.steps;
  r->last_log_step = r->gstep;
  while (r->gstep < r->total_steps && !(o->stop_after && r->steps_run == o->stop_after) && !r->psig) {
    int epoch, sie;
    dpt_bsched_locate(&r->bs, r->gstep, &epoch, &sie);
    const int spe = dpt_bsched_spe(&r->bs, epoch);
    /* --batch-schedule: a new per-rank batch.  At the change double buffering's waiting gradient
     * (of the old batch) is applied first; a run resumed after the change carries it over */
    int at_change = sie == 0 && epoch > 0 && dpt_bsched_batch(&r->bs, epoch - 1) != dpt_bsched_batch(&r->bs, epoch);
    if (dpt_bsched_batch(&r->bs, epoch) != o->batch &&
        ((at_change && (rc = drain_pending(r, err))) || (rc = dpt_train_run_rebatch(r, epoch, err))))
      return rc;
    for (int j = 0; j < o->accum; j++) dpt_loader_start(r->tls[j], epoch, sie);
    r->pf_have = 0; /* (prefetch_next never takes a batch across an epoch's end) */
    for (; sie < spe && r->gstep < r->total_steps; sie++) {
      long waits0 = r->be->ops->host_waits(r->be);
      if ((rc = dpt_train_profile_begin(r, err)) || (rc = train_step(r, err)) ||
          (rc = dpt_train_profile_end(r, err))) return rc;
      int end_epoch = sie == spe - 1 || r->gstep == r->total_steps;
      if (!end_epoch && (rc = prefetch_next(r, err))) return rc;
      if ((r->gstep % o->log_every == 0 || end_epoch) && (rc = log_progress(r, epoch, sie, err))) return rc;
      r->waits_train += r->be->ops->host_waits(r->be) - waits0;
      int stopping = (o->stop_after && r->steps_run == o->stop_after) || r->psig;
      int do_ckpt = o->ckpt_dir && ((r->ckpt_every ? r->gstep % r->ckpt_every == 0 : end_epoch) ||
                                    r->gstep == r->total_steps || stopping);
      if (do_ckpt || (end_epoch && o->val)) {
        if ((rc = dpt_train_enter_phase(do_ckpt ? "checkpoint" : "validation", r->gstep, err))) return rc;
        /* BN running statistics are per rank during training: average them */
        if ((rc = dpt_train_state_average(&r->rk, r->be, r->hs, err))) return rc;
      }
      if (do_ckpt && (rc = checkpoint_save(r, err))) return rc;
      if (end_epoch && o->val && (rc = validate_epoch(r, epoch, err))) return rc;
      if (stopping) break;
    }
  }
  r->tm.total = now() - r->t_train0;
  return 0;
}

int main(int argc, char **argv)
{
  static struct run run; /* zeroed; large (path buffers, 64 loaders): not on the stack */
  struct run *r = &run;
  struct dpt_err err = {0};
  int rc = 0, status = 0;
  r->rk.size = 1;
  r->R = 1;
  r->ba.rk = &r->rk;
  r->t_start = now();
  dpt_train_defaults(&r->o);
  if ((status = dpt_train_parse(argc, argv, &r->o))) return status;
  if (r->o.dry_run) return dpt_train_dry_run(&r->o); /* no data, ranks or GPU */
#ifdef DPT_TRAIN_HAVE_COMM
  /* a bad --baseline is refused now, not after the run (rank 0 reads it at the end) */
  if (r->o.baseline && dpt_report_check_baseline(r->o.baseline, &err)) return dpt_train_bad("%s", err.msg);
#endif
  r->curve = json_array();
  if ((rc = dpt_train_run_start(r, &argc, &argv, &err)) || (rc = dpt_train_run_model(r, &err)) ||
      (rc = dpt_train_run_backend(r, &err)) ||
      (rc = dpt_train_run_loaders(r, &err)) || (rc = dpt_train_run_schedule(r, &err)) ||
      (rc = dpt_train_run_buffers(r, &err)) ||
      (rc = dpt_train_run_resume(r, &err)))
    goto fail;
  dpt_train_run_describe(r);
  if ((rc = train_loop(r, &err)) || (rc = dpt_train_run_finish(r, &status, &err))) goto fail;
  return dpt_train_run_close(r, status, &err);
fail:
  fprintf(stderr, "dpt-train: rank %d: %s\n", r->rk.rank, err.msg);
#ifdef DPT_TRAIN_HAVE_COMM
  dpt_watchdog_write_error("error", err.msg, -1, NULL, NULL);
  dpt_watchdog_announce_failure(); /* the other ranks stop now, naming this one */
#endif
  status = dpt_err_exit_status(&err);
  if (!status) status = 1;
  return dpt_train_run_close(r, status, &err);
}
