/* dpt_train_profile.c — dpt-train: --profile-steps: the kernel breakdown of N steps (rank 0,
 * CUPTI). */
#define _GNU_SOURCE
#include "dpt_train_priv.h"

/* ---- --profile-steps: the kernel breakdown of N steps (rank 0, CUPTI: dpt_cupti.h, dpt_kprof.h) --
 * The N steps before the run's last one (steady state: after the warm-up, the algorithm search and
 * the graphs' capture), each an external correlation id: every kernel, copy and set their calls
 * start, a graph's replay included.  Then the breakdown (kernels per step, time per class, busy /
 * idle between kernels, medians) as JSON and the records as TSV. */
void dpt_train_profile_paths(struct run *r)
{
  struct opts *o = &r->o;
  if (o->profile_out) {
    snprintf(r->prof_path, sizeof r->prof_path, "%s", o->profile_out);
    return;
  }
  r->prof_path[0] = '\0';
#ifdef DPT_TRAIN_HAVE_COMM
  if (r->rep) {
    struct dpt_err pe = {0};
    char rp[4096];
    if (dpt_report_path(r->rep, o->report, rp, sizeof rp, &pe) > 0) {
      size_t n = strlen(rp);
      if (n > 5 && !strcmp(rp + n - 5, ".json")) rp[n - 5] = '\0';
      snprintf(r->prof_path, sizeof r->prof_path, "%s.kernels.json", rp);
    }
  }
#endif
  if (!r->prof_path[0]) snprintf(r->prof_path, sizeof r->prof_path, "dpt-kernels-%d.json", (int)getpid());
}

int dpt_train_profile_begin(struct run *r, struct dpt_err *err)
{
  if (r->prof_first < 0 || r->me || r->gstep < r->prof_first || r->gstep >= r->prof_first + r->o.profile_steps)
    return 0;
#ifdef DPT_HAVE_CUPTI
  int rc;
  if (!r->prof) {
    struct dpt_cupti *rec;
    if ((rc = r->be->ops->sync(r->be, err))) return rc; /* the steps before are not in the first one */
    if ((rc = dpt_cupti_start(&rec, err))) return dpt_err_prefix(err, "--profile-steps");
    r->prof = rec;
  }
  return dpt_cupti_step_begin(r->prof, (int)(r->gstep - r->prof_first), err);
#else
  (void)err;
  return 0;
#endif
}

int dpt_train_profile_end(struct run *r, struct dpt_err *err)
{
#ifdef DPT_HAVE_CUPTI
  if (!r->prof) return 0;
  int rc, last = r->gstep == r->prof_first + r->o.profile_steps; /* train_step counted it */
  if ((rc = dpt_cupti_step_end(r->prof, err))) return rc;
  if (!last) return 0;
  if ((rc = r->be->ops->sync(r->be, err))) return rc; /* every recorded kernel has run */
  struct dpt_krec *recs = NULL;
  size_t n = 0, dropped = 0;
  struct dpt_kclasses kc;
  struct dpt_kbreakdown b;
  struct dpt_cupti *rec = r->prof;
  r->prof = NULL;
  if ((rc = dpt_cupti_stop(rec, &recs, &n, &dropped, err))) return rc;
  int have_kc = !(rc = dpt_kclasses_builtin(&kc, err));
  if (!rc && !(rc = dpt_kprof_breakdown(&kc, recs, n, &b, err))) {
    char tsv[4400], label[160];
    snprintf(tsv, sizeof tsv, "%s", r->prof_path);
    size_t len = strlen(tsv);
    if (len > 5 && !strcmp(tsv + len - 5, ".json")) tsv[len - 5] = '\0';
    strncat(tsv, ".tsv", sizeof tsv - strlen(tsv) - 1);
    snprintf(label, sizeof label, "dpt-train %s %s batch %d, %s", r->be->ops->name, r->be->precision, r->o.batch,
             r->be->ops->notes && strstr(r->be->ops->notes(r->be), "fused step:") ? "fused" : "unfused");
    if (r->be->graph) strncat(label, ", CUDA graphs", sizeof label - strlen(label) - 1);
    FILE *fj = fopen(r->prof_path, "w"), *ft = fj ? fopen(tsv, "w") : NULL;
    if (!fj || !ft)
      rc = dpt_err_set(err, DPT_E_RUNTIME, "--profile-steps: cannot write %s: %s", !fj ? r->prof_path : tsv,
                       strerror(errno));
    if (!rc) rc = dpt_kprof_write_json(&b, label, fj, err);
    if (!rc && dpt_kprof_write_records(recs, n, ft))
      rc = dpt_err_set(err, DPT_E_RUNTIME, "--profile-steps: writing %s failed: %s", tsv, strerror(errno));
    if (fj && fclose(fj) && !rc) rc = dpt_err_set(err, DPT_E_RUNTIME, "--profile-steps: closing %s: %s", r->prof_path, strerror(errno));
    if (ft && fclose(ft) && !rc) rc = dpt_err_set(err, DPT_E_RUNTIME, "--profile-steps: closing %s: %s", tsv, strerror(errno));
    const struct dpt_kstep *md = &b.median;
    if (!rc)
      printf("dpt-train: kernel breakdown of %d step(s) (median): %.0f kernels per step, %.2f ms on the GPU of which "
             "%.1f%% idle between kernels (%.1f%% between steps)%s; %s and %s\n", b.n_steps, md->kernels,
             md->span_ns / 1e6, md->span_ns > 0 ? 100.0 * md->idle_ns / md->span_ns : 0.0,
             md->span_ns > 0 ? 100.0 * md->gap_ns / md->span_ns : 0.0, dropped ? " (CUPTI dropped records: undercounted)" : "", r->prof_path, tsv);
    dpt_kprof_free(&b);
  }
  if (have_kc) dpt_kclasses_free(&kc);
  dpt_cupti_free(rec, recs, n);
  fflush(stdout);
  return rc;
#else
  (void)r, (void)err;
  return 0;
#endif
}
