/* dpt_train_state.c — dpt-train: checkpoints and state: resume (rank 0 picks, every rank gets it),
 * the learning curve kept next to the checkpoints, the backend slabs, BN statistics averaging, the
 * optimizer step. */
#define _GNU_SOURCE
#include "dpt_train_priv.h"

static void warn_ckpt(const char *msg) { fprintf(stderr, "dpt-train: warning: %s; trying an older one\n", msg); }

/* --batch-schedule: a checkpoint's step must be where this run's schedule puts it (same epoch,
 * step within it and batch), or the steps before it were not this run's. */
static int check_bsched(const char *path, const struct dpt_ckpt_meta *m, const struct dpt_bsched *bs,
                        const char *spec, struct dpt_err *err)
{
  int e, s;
  dpt_bsched_locate(bs, (long)m->global_step, &e, &s);
  if (e == m->epoch && s == m->step_in_epoch && m->batch == dpt_bsched_batch(bs, e)) return 0;
  return dpt_err_set(err, DPT_E_INPUT, "checkpoint %s was written at step %llu = epoch %d step %d with per-rank batch "
                     "%d; this run's --batch-schedule %s puts step %llu at epoch %d step %d with batch %d: resume "
                     "with the --batch-schedule, ranks, --accumulate and data set that wrote it, or use another "
                     "--checkpoint-dir", path, (unsigned long long)m->global_step, m->epoch + 1, m->step_in_epoch + 1,
                     m->batch, spec, (unsigned long long)m->global_step, e + 1, s + 1, dpt_bsched_batch(bs, e));
}

/* ---- resume ----------------------------------------------------------------
 * --resume: rank 0 alone picks the checkpoint (auto: the newest that verifies
 * in --checkpoint-dir, ChainerMN's rule; only rank 0 writes there, and another
 * rank's view of that directory may be older, empty or absent) and reads it.
 * Whether there is one, its step and its arrays then reach every rank through
 * the watched all-reduce (dpt_train_ranks_bcast), so all ranks continue from the same
 * step with the same bits.  *found = 0: nothing to resume (a fresh start).
 * path: rank 0's checkpoint ("" elsewhere). */
static int resume_agreed(struct ranks *r, const char *resume, const char *dir, const struct dpt_ckpt_meta *cm,
                         const struct dpt_bsched *bs, const char *bs_spec, float *params, float *state,
                         float *velocity, float *pending, long *step, int *found, struct dpt_ckpt_meta *got_meta,
                         char *path, size_t plen, struct dpt_err *err)
{
  /* from rank 0: failed, found, step / 2^20, step % 2^20 (exact in floats), the loss scaler
   * (scale, good steps, skipped / 2^20, skipped % 2^20) */
  float hdr[8] = {0};
  struct dpt_err be = {0};
  int rc = 0;
  *found = 0;
  *step = 0;
  path[0] = '\0';
  if (r->rank == 0) {
    int f = 1;
    if (!strcmp(resume, "auto")) f = dpt_ckpt_find_latest(dir, cm, path, plen, warn_ckpt, err);
    else snprintf(path, plen, "%s", resume);
    if (f < 0) {
      rc = f;
    } else if (f) {
      if (!(rc = dpt_ckpt_load(path, cm, got_meta, params, state, velocity, pending, err)) &&
          !(rc = bs_spec ? check_bsched(path, got_meta, bs, bs_spec, err) : 0)) {
        *found = 1;
        *step = (long)got_meta->global_step;
      }
    }
    hdr[0] = rc ? 1.0f : 0.0f;
    hdr[1] = (float)*found;
    hdr[2] = (float)(*step >> 20);
    hdr[3] = (float)(*step & 0xfffff);
    if (*found) {
      hdr[4] = got_meta->loss_scale;
      hdr[5] = (float)got_meta->scale_good_steps;
      hdr[6] = (float)(got_meta->scale_skipped >> 20);
      hdr[7] = (float)(got_meta->scale_skipped & 0xfffff);
    }
  }
  if (r->size == 1) return rc;
  if (dpt_train_ranks_bcast(r, hdr, 8, &be)) {
    if (!rc) *err = be;
    return rc ? rc : be.code;
  }
  if (rc) return rc;
  if (hdr[0] != 0.0f)
    return dpt_err_set(err, DPT_E_INPUT, "--resume %s: rank 0 could not read the checkpoint it chose (its error "
                       "is above): every rank resumes from rank 0's checkpoint, so fix or remove that one", resume);
  *found = hdr[1] != 0.0f;
  *step = ((long)hdr[2] << 20) + (long)hdr[3];
  if (!*found) return 0;
  got_meta->global_step = (uint64_t)*step;
  got_meta->loss_scale = hdr[4];
  got_meta->scale_good_steps = (int32_t)hdr[5];
  got_meta->scale_skipped = ((int64_t)hdr[6] << 20) + (int64_t)hdr[7];
  if ((rc = dpt_train_ranks_bcast(r, params, cm->n_params, err)) ||
      (rc = dpt_train_ranks_bcast(r, state, cm->n_state, err)) ||
      (rc = dpt_train_ranks_bcast(r, velocity, cm->n_opt_state ? cm->n_opt_state : cm->n_params, err)) ||
      (cm->n_pending && (rc = dpt_train_ranks_bcast(r, pending, cm->n_pending, err))))
    dpt_err_prefix(err, "--resume: sending the checkpoint of step %ld from rank 0 to the other ranks", *step);
  return rc;
}

void dpt_train_curve_keep(struct curve_log *c, const char *dir, const struct dpt_ckpt_point *pt)
{
  struct dpt_err e = {0};
  if (c->n == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 64;
    struct dpt_ckpt_point *p = realloc(c->p, cap * sizeof *p);
    if (!p) {
      fprintf(stderr, "dpt-train: warning: out of memory for the learning curve: a resume will lack it\n");
      return;
    }
    c->p = p;
    c->cap = cap;
  }
  c->p[c->n++] = *pt;
  if (dir && dpt_ckpt_curve_save(dir, c->p, c->n, &e))
    fprintf(stderr, "dpt-train: warning: %s (a resume will lack the learning curve so far)\n", e.msg);
}

/* ---- backend slabs ----------------------------------------------------------
 * The loop touches the backend's slabs only through these and host mirrors
 * (hp, hs, hg, hv in main): for a host-slab backend (cpu) a mirror IS the slab
 * and copy_slab() returns at once, so nothing is copied; for a device backend
 * (cuda, or the cpu backend's simulated device DPT_CPU_DEVICE_SLABS=1) they are
 * separate host buffers, allocated once. */
int dpt_train_slab_get(struct dpt_backend *be, enum dpt_slab w, float *host, struct dpt_err *err)
{
  return be->ops->copy_slab(be, w, host, 0, err);
}

int dpt_train_slab_put(struct dpt_backend *be, enum dpt_slab w, float *host, struct dpt_err *err)
{
  return be->ops->copy_slab(be, w, host, 1, err);
}

/* BN running statistics are per rank during training: average them (host mirror hs). */
int dpt_train_state_average(struct ranks *rk, struct dpt_backend *be, float *hs, struct dpt_err *err)
{
  int rc;
  if (rk->size == 1) return 0;
  if ((rc = dpt_train_slab_get(be, DPT_SLAB_STATE, hs, err)) ||
      (rc = dpt_train_ranks_allreduce(rk, hs, be->model->n_state, 1, 0, err)))
    return rc;
  return dpt_train_slab_put(be, DPT_SLAB_STATE, hs, err);
}

/* One optimizer step with the averaged gradient: buf = NULL (the gradient slab),
 * be->pending (the backend's pending slab) or a HOST buffer (double buffering
 * through the host).  Mixed precision: the backend looks for an inf/NaN in it
 * (after the all-reduce: every rank decides alike), skips the step and updates
 * its loss scale (dpt_loss_scaler_update) on its side: nothing comes back.  epoch: the
 * (fractional) epoch of the step whose gradient this is. */
int dpt_train_apply_step(struct dpt_backend *be, int mixed, const float *buf, float lr, double epoch,
                         struct dpt_err *err)
{
  int rc;
  be->opt_epoch = epoch; /* rmsprop warm-up's mix follows the epoch of the gradient it applies */
  if (mixed) {
    if (buf && buf != be->pending) { /* a host buffer: into the gradient slab, checked there */
      if ((rc = dpt_train_slab_put(be, DPT_SLAB_GRADS, (float *)buf, err))) return rc;
      buf = NULL;
    }
    if ((rc = be->ops->overflow_check(be, buf, err))) return rc;
  }
  return be->ops->sgd_step(be, lr, buf, err);
}

/* The learning curve of the run(s) before this one, up to step gstep (rank 0): into
 * the report and the curve kept next to the checkpoints.  path: the checkpoint's. */
static int curve_carry_over(struct run *r, char *path, struct dpt_err *err)
{
  struct dpt_err ce = {0};
  struct curve_log *cl = &r->cl;
  char *slash = strrchr(path, '/');
  if (slash) *slash = '\0';
  if (dpt_ckpt_curve_load(slash ? path : ".", r->gstep, &cl->p, &cl->n, &ce) < 0)
    fprintf(stderr, "dpt-train: warning: %s\n", ce.msg);
  cl->cap = cl->n;
  for (size_t i = 0; i < cl->n; i++) {
    const struct dpt_ckpt_point *q = &cl->p[i];
    json_array_append_new(r->curve, json_pack("{s:f,s:I,s:f,s:f,s:f,s:f}", "epoch", q->epoch, "step",
                                              (json_int_t)q->step, "top1", q->val_top1, "top5", q->val_top5,
                                              "loss", q->val_loss, "elapsed_s", q->elapsed_s));
#ifdef DPT_TRAIN_HAVE_COMM
    struct dpt_report_epoch re;
    int rc;
    dpt_report_epoch_init(&re);
    re.epoch = q->epoch;
    re.step = q->step;
    re.train_loss = q->train_loss;
    re.train_top1 = q->train_top1;
    re.val_loss = q->val_loss;
    re.val_top1 = q->val_top1;
    re.val_top5 = q->val_top5;
    re.lr = q->lr;
    re.elapsed_s = q->elapsed_s;
    if (r->rep && (rc = dpt_report_add_epoch(r->rep, &re, err))) return rc;
#else
    (void)err;
#endif
  }
  if (cl->n) printf("dpt-train: learning curve: %zu point(s) up to step %ld carried over\n", cl->n, cl->p[cl->n - 1].step);
  return 0;
}

/* The same starting point on every rank: rank 0's parameters, or the checkpoint it
 * picked (--resume), with the loss scaler and the learning curve it had. */
int dpt_train_run_resume(struct run *r, struct dpt_err *err)
{
  struct opts *o = &r->o;
  struct dpt_backend *be = r->be;
  struct dpt_ckpt_meta *cm = &r->cm;
  size_t np = r->np;
  int rc;
  if (r->R > 1) {
    if ((rc = dpt_train_slab_get(be, DPT_SLAB_PARAMS, r->hp, err)) ||
        (rc = dpt_train_slab_get(be, DPT_SLAB_STATE, r->hs, err)) ||
        (rc = dpt_train_ranks_bcast(&r->rk, r->hp, np, err)) ||
        (rc = dpt_train_ranks_bcast(&r->rk, r->hs, r->model.n_state, err)) ||
        (rc = dpt_train_slab_put(be, DPT_SLAB_PARAMS, r->hp, err)) ||
        (rc = dpt_train_slab_put(be, DPT_SLAB_STATE, r->hs, err)))
      return rc;
  }
  cm->seed = o->seed;
  cm->world_size = r->R * o->accum; /* virtual ranks: K micro-batches stand for K ranks */
  cm->batch = o->batch_schedule ? 0 : o->batch; /* a schedule: checked against it (check_bsched) */
  cm->n_params = np;
  cm->n_state = r->model.n_state;
  cm->n_pending = o->dbuf ? np : 0;
  snprintf(cm->model, sizeof cm->model, "%s", r->model_desc);
  snprintf(cm->optimizer, sizeof cm->optimizer, "%s", o->optimizer);
  cm->n_opt_state = strcmp(o->optimizer, "rmsprop-warmup") ? np : 2 * np; /* + the second moment */
  if (o->resume) {
    char path[4300];
    int found;
    struct dpt_ckpt_meta got = {0};
    if ((rc = resume_agreed(&r->rk, o->resume, o->ckpt_dir, cm, &r->bs, o->batch_schedule, r->hp, r->hs, r->hv,
                            r->pending, &r->gstep, &found, &got, path, sizeof path, err)))
      return rc;
    if (found && r->mixed && got.loss_scale > 0) { /* mixed precision: continue with the scale the run had */
      if ((rc = be->ops->scaler_get(be, &r->scaler, err))) return rc; /* the backend's limits, then the state */
      r->scaler.scale = got.loss_scale;
      r->scaler.good_steps = got.scale_good_steps;
      r->scaler.skipped = got.scale_skipped;
      if ((rc = be->ops->scaler_set(be, &r->scaler, err))) return rc;
    }
    if (found) {
      if ((rc = dpt_train_slab_put(be, DPT_SLAB_PARAMS, r->hp, err)) ||
          (rc = dpt_train_slab_put(be, DPT_SLAB_STATE, r->hs, err)) ||
          (rc = dpt_train_slab_put(be, DPT_SLAB_VELOCITY, r->hv, err)) ||
          (be->pending && (rc = dpt_train_slab_put(be, DPT_SLAB_PENDING, r->pending, err))))
        return rc;
      r->have_pending = o->dbuf && r->gstep > 0;
      if (r->me == 0) {
        printf("dpt-train: resumed from %s at step %ld (epoch %d)\n", path, r->gstep, got.epoch + 1);
        if ((rc = curve_carry_over(r, path, err))) return rc; /* the learning curve up to that step */
      }
    } else if (r->me == 0) {
      printf("dpt-train: no checkpoint in %s yet, starting fresh\n", o->ckpt_dir);
    }
  }
  if (o->ckpt_dir && r->me == 0) mkdir(o->ckpt_dir, 0777);
  r->ckpt_every = o->ckpt_every; /* 0: at the end of every epoch */
  return 0;
}
