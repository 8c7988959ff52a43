/* dpt_train_finish.c — dpt-train: the end of a run: checksum, final lines, preemption verdict,
 * results, the job report, freeing everything. */
#define _GNU_SOURCE
#include "dpt_train_priv.h"

/* The end: parameter checksum across ranks, the final lines, decoder and skip counts,
 * the preemption verdict (*status: DPT_TRAIN_EXIT_PREEMPTED, or 1 without a checkpoint
 * directory), the report's results. */
int dpt_train_run_finish(struct run *r, int *status, struct dpt_err *err)
{
  struct opts *o = &r->o;
  struct dpt_backend *be = r->be;
  int rc, R = r->R, me = r->me;
  dpt_train_enter_phase("finish", r->gstep, err);
  { /* parameters must agree across ranks: checksum them */
    double sum = 0;
    if ((rc = dpt_train_slab_get(be, DPT_SLAB_PARAMS, r->hp, err))) return rc;
    for (size_t i = 0; i < r->np; i++) sum += r->hp[i] * (double)((i % 7) + 1);
    float s = (float)sum, smin = s;
    if (R > 1) {
      float v[2] = {s, -s};
      if ((rc = dpt_train_ranks_allreduce(&r->rk, v, 2, 1, 0, err))) return rc;
      smin = v[0];
    }
    /* img/s as the report counts it: every rank's images over the slowest rank's training steps */
    double tsteps = r->tm.steps;
    if (R > 1) {
      float *ts = calloc((size_t)R, sizeof *ts);
      if (!ts) return dpt_err_set(err, DPT_E_NOMEM, "out of memory for %d step times", R);
      ts[me] = (float)r->tm.steps;
      if ((rc = dpt_train_ranks_allreduce(&r->rk, ts, (size_t)R, 0, 0, err))) {
        free(ts);
        return rc;
      }
      for (int q = 0; q < R; q++)
        if (ts[q] > tsteps) tsteps = ts[q];
      free(ts);
    }
    if (me == 0) printf("dpt-train: done: %ld steps in %.1f s (%.1f s of training steps), %.1f img/s total; "
                        "parameter checksum %.6e%s\n", r->steps_run, r->tm.total, tsteps,
                        tsteps > 0 ? (double)r->images_run * R / tsteps : 0.0, sum,
                        R > 1 && fabsf(smin - s) > 1e-3f * fabsf(s) ? " (RANKS DISAGREE)" : "");
    if (me == 0 && !be->host_slabs) {
      printf("dpt-train: backend %s memory (rank 0): %.1f MB allocated, peak %.1f MB", be->ops->name,
             be->ops->memory_bytes(be) / 1e6, be->ops->peak_bytes(be) / 1e6);
      if (be->ops->pinned_bytes) /* cuda: the loaders' slots and the backend's staging */
        printf("; %.1f MB of pinned host memory", be->ops->pinned_bytes(be) / 1e6);
      printf("\n");
    }
    /* what the step loop waited for (tests hold it to one wait per log interval) */
    if (me == 0)
      printf("dpt-train: host waits (rank 0): %ld in %ld training step(s) and their %ld log line(s); %ld in all\n",
             r->waits_train, r->steps_run, r->n_logs, be->ops->host_waits(be));
    if (me == 0 && be->ops->prefetch && !r->dev_input)
      printf("dpt-train: input: %ld of %ld training step(s) had their batch uploaded ahead, while the step "
             "before ran\n", r->pf_used, r->steps_run);
    if (r->mixed && (rc = be->ops->scaler_get(be, &r->scaler, err))) return rc;
    if (me == 0 && r->mixed)
      printf("dpt-train: mixed precision: %ld step(s) skipped on gradient overflow, loss scale now %g\n",
             r->scaler.skipped, (double)r->scaler.scale);
  }
  if (r->train.files && me == 0) { /* imagenet: which decoders the training loader used (rank 0) */
    struct dpt_loader_stats ls;
    dpt_loader_stats(r->tls[0], &ls);
    printf("dpt-train: training loader (%s): %ld images decoded (prefetched ones included): %ld by nvJPEG's "
           "hardware decoder, %ld by its hybrid decoder, %ld by libturbojpeg (%ld of them refused by nvJPEG); "
           "%ld GPU batch(es) copied back to the host\n", dpt_loader_decoder(r->tls[0]), ls.images, ls.gpu_hw,
           ls.gpu_hybrid, ls.cpu, ls.gpu_refused, ls.host_copies);
  }
  if (r->train.files) { /* imagenet: records that failed to decode and were skipped (--skip-bad), all ranks */
    float sk[2] = {(float)(dpt_data_skipped(&r->train) - r->train.skipped),
                   o->val ? (float)(dpt_data_skipped(&r->val) - r->val.skipped) : 0};
    if ((rc = dpt_train_ranks_allreduce(&r->rk, sk, 2, 0, 0, err))) return rc;
    if (me == 0 && (sk[0] > 0 || sk[1] > 0))
      fprintf(stderr, "dpt-train: skipped %.0f training and %.0f validation images that failed to decode "
              "(--skip-bad; counted once per file and rank)\n", sk[0], sk[1]);
#ifdef DPT_TRAIN_HAVE_COMM
    if (r->rep) {
      dpt_report_set_config(r->rep, "skipped_records", json_integer(r->train.skipped + (json_int_t)sk[0]));
      dpt_report_set_config(r->rep, "skipped_val_images", json_integer((json_int_t)sk[1] + r->val.skipped));
    }
#endif
  }
  if (r->psig && r->gstep == r->total_steps) { /* the signal came during the last step: nothing left to resume */
    if (me == 0) printf("dpt-train: %s received during the last step: training is complete\n",
                        r->psig == SIGUSR1 ? "SIGUSR1" : "SIGTERM");
  } else if (r->psig) {
    const char *sn = r->psig == SIGUSR1 ? "SIGUSR1" : "SIGTERM";
    if (o->ckpt_dir) {
      if (me == 0)
        printf("dpt-train: preempted by %s at step %ld; checkpoint %s; resume with --resume auto\n", sn, r->gstep,
               r->ckpt_last);
      *status = DPT_TRAIN_EXIT_PREEMPTED;
    } else {
      if (me == 0)
        fprintf(stderr, "dpt-train: preempted by %s at step %ld, but no --checkpoint-dir was given, so no "
                "checkpoint was written and this run's %ld steps are lost; give --checkpoint-dir DIR to "
                "make the job resumable\n", sn, r->gstep, r->steps_run);
      *status = 1;
    }
    fflush(stdout);
  }
#ifdef DPT_TRAIN_HAVE_COMM
  if (r->rep) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double ips = (double)r->images_run / (r->tm.steps > 0 ? r->tm.steps : 1); /* over its steps */
    dpt_report_set_result(r->rep, "train", json_pack("{s:I,s:f,s:f,s:f,s:f,s:f,s:I,s:o}",
        "steps_run", (json_int_t)r->steps_run, "seconds", r->tm.total, "validation_seconds", r->tm.val,
        "images_per_s_rank0", ips, "final_top1", r->vr.top1, "final_top5", r->vr.top5,
        "peak_rss_bytes_rank0", (json_int_t)ru.ru_maxrss * 1024, "accuracy_curve", r->curve));
    r->curve = NULL;
    /* the backend's memory (cuda: device bytes, peak including the algorithm search) */
    json_t *mem = json_pack("{s:s,s:b,s:I,s:I}", "backend", be->ops->name, "device", !be->host_slabs,
                            "allocated_bytes_rank0", (json_int_t)be->ops->memory_bytes(be),
                            "peak_bytes_rank0", (json_int_t)be->ops->peak_bytes(be));
    if (mem && be->ops->pinned_bytes)
      json_object_set_new(mem, "pinned_host_bytes_rank0", json_integer((json_int_t)be->ops->pinned_bytes(be)));
    if (mem && r->mixed)
      json_object_update_new(mem, json_pack("{s:f,s:I}", "final_loss_scale", (double)r->scaler.scale,
                                            "skipped_steps", (json_int_t)r->scaler.skipped));
    dpt_report_set_result(r->rep, "backend_memory", mem);
  }
#endif
  return 0;
}

/* The report written (rank 0 gathers), then everything freed: the communicators
 * first (their worker finishes what is queued: a failed step may leave gradient
 * buckets or the pending all-reduce in flight), the backend's host buffers before
 * the backend.  Returns the exit status. */
int dpt_train_run_close(struct run *r, int status, const struct dpt_err *err)
{
#ifdef DPT_TRAIN_HAVE_COMM
  if (r->rep) {
    struct dpt_err re = {0};
    MPI_Comm mc = r->rk.comm ? dpt_comm_mpi(r->rk.comm) : MPI_COMM_NULL;
    struct dpt_report_gather g = {dpt_report_gather_mpi, &mc};
    char path[4096];
    if (status && err->code) dpt_report_set_error(r->rep, err);
    dpt_report_set_exit_status(r->rep, status);
    if (dpt_report_finish(r->rep, r->R > 1 ? &g : NULL, r->o.report, path, &re) < 0) {
      fprintf(stderr, "dpt-train: rank %d: report: %s\n", r->rk.rank, re.msg);
      if (!status) status = dpt_err_exit_status(&re);
    } else if (r->me == 0) {
      printf("dpt-train: report %s\n", path);
    }
    dpt_report_destroy(r->rep);
  }
#else
  (void)err;
#endif
#ifdef DPT_HAVE_CUPTI
  if (r->prof) { /* stopped in the middle of the recorded steps: the recorder is given back */
    struct dpt_krec *recs = NULL;
    size_t n = 0, dropped = 0;
    struct dpt_err pe = {0};
    if (!dpt_cupti_stop(r->prof, &recs, &n, &dropped, &pe)) dpt_cupti_free(r->prof, recs, n);
    r->prof = NULL;
  }
#endif
  dpt_train_ranks_fini(&r->rk);
  json_decref(r->curve);
  free(r->cl.p);
  dpt_train_run_release(r);
  dpt_model_free(&r->model);
  dpt_data_free(&r->train);
  dpt_data_free(&r->val);
  return status;
}
