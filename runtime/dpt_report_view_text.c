/* dpt_report_view_text.c — dpt-report's terminal views of "dpt.report/1"
 * documents: the summary of one report (one line per part of the document,
 * in the order below) and the --compare table of several (dpt_report_view.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "dpt_report_view.h"
#include "dpt_report_view_int.h"

/* ---- summary -------------------------------------------------------------------- */

static const char *const phases[] = {"data_wait", "forward", "backward", "allreduce", "allreduce_exposed",
                                     "update", "step"};
static const char *const phase_hdr[] = {"data", "fwd", "bwd", "ar", "ar-exp", "update", "step"};

/* The job: Slurm ids, ranks, nodes, hosts, launcher, duration, exit; the command. */
static void job_lines(FILE *f, const json_t *doc)
{
  const json_t *job = json_object_get(doc, "job"), *e;
  long long ranks = integer(job, "ranks", 0);
  size_t i;

  fprintf(f, "  job       ");
  if (str(job, "slurm_job_id", NULL))
    fprintf(f, "Slurm %s%s%s, ", str(job, "slurm_job_id", ""), str(job, "slurm_step_id", NULL) ? "." : "",
            str(job, "slurm_step_id", ""));
  fprintf(f, "%lld rank%s on %lld node%s (", ranks, ranks == 1 ? "" : "s", integer(job, "n_nodes", 0),
          integer(job, "n_nodes", 0) == 1 ? "" : "s");
  json_array_foreach(json_object_get(job, "hosts"), i, e) fprintf(f, "%s%s", i ? "," : "", json_string_value(e));
  fprintf(f, ") via %s, %.1f s, exit %s%s\n", str(job, "launcher", "-"), num(job, "duration_s"),
          json_is_integer(json_object_get(job, "exit_status"))
              ? (integer(job, "exit_status", 0) ? "non-zero" : "0")
              : "unknown",
          json_is_true(json_object_get(job, "partial")) ? ", PARTIAL (not every rank reported)" : "");
  if (integer(job, "exit_status", 0) > 0)
    fprintf(f, "            exit status %lld\n", integer(job, "exit_status", 0));
  fprintf(f, "  command  ");
  json_array_foreach(json_object_get(job, "command"), i, e) fprintf(f, " %s", json_string_value(e));
  fprintf(f, "\n");
}

/* dpt's version, then every other software string and library version. */
static void software_line(FILE *f, const json_t *doc)
{
  const char *k;
  const json_t *v;

  fprintf(f, "  software  dpt %s", str(doc, "software.dpt", "?"));
  json_object_foreach((json_t *)json_object_get(doc, "software"), k, v) if (json_is_string(v) && strcmp(k, "dpt"))
      fprintf(f, ", %s %s", k, json_string_value(v));
  json_object_foreach((json_t *)at(doc, "software.libraries"), k, v) if (json_is_string(v))
      fprintf(f, ", %s %s", k, json_string_value(v));
  fprintf(f, "\n");
}

/* The embedded plan: digest, ranks, nodes in ring order (12 at most), the launcher's
 * digest, and each alternative's predicted all-reduce time. */
static void plan_lines(FILE *f, const json_t *doc)
{
  const json_t *plan = json_object_get(doc, "plan"), *job = json_object_get(doc, "job"), *e;
  char a[64], b[64];
  size_t i;

  if (!json_is_object(plan))
    return;
  size_t n_ranks = json_array_size(json_object_get(plan, "ranks"));
  size_t n_nodes = json_array_size(json_object_get(plan, "nodes"));
  fprintf(f, "  plan      digest %s, %zu rank%s on %zu node%s, ring:", str(plan, "digest", "?"), n_ranks,
          n_ranks == 1 ? "" : "s", n_nodes, n_nodes == 1 ? "" : "s");
  json_array_foreach(json_object_get(plan, "nodes"), i, e) {
    if (i >= 12) {
      fprintf(f, " ...");
      break;
    }
    fprintf(f, "%s %s (%lld)", i ? " ->" : "", str(e, "host", "?"), integer(e, "n_ranks", 0));
  }
  if (str(job, "launch_digest", NULL)) /* the same plan, as the launcher announced it to the ranks */
    fprintf(f, "; launched as %s", str(job, "launch_digest", ""));
  fmt_bytes(num(plan, "size_bytes"), a, sizeof a);
  fprintf(f, "\n            predicted all-reduce of %s:", a);
  json_array_foreach(json_object_get(plan, "alternatives"), i, e) {
    fmt_time(num(e, "predicted_s"), b, sizeof b);
    fprintf(f, "%s %s %s", i ? "," : "", str(e, "name", "?"), b);
  }
  fprintf(f, "\n");
}

/* Images/s in total and per rank, the median step's p50 and p99. */
static void speed_line(FILE *f, const json_t *doc)
{
  long long ranks = integer(doc, "job.ranks", 0);
  double ips = num(doc, "throughput.images_per_s");
  char a[64], b[64];

  fprintf(f, "  speed     ");
  if (!(ips > 0)) {
    fprintf(f, "no images processed (not a training run)\n");
    return;
  }
  fprintf(f, "%.1f images/s total, %.1f per rank", ips, ips / (double)ranks);
  fmt_time(rank_median(doc, "step", "p50_s"), a, sizeof a);
  fmt_time(rank_median(doc, "step", "p99_s"), b, sizeof b);
  fprintf(f, "; step p50 %s, p99 %s (median over ranks)\n", a, b);
}

/* The all-reduced message and wire, measured against predicted, and how much of it
 * the step waited for. */
static void allreduce_line(FILE *f, const json_t *doc)
{
  const json_t *ar = json_object_get(doc, "allreduce");
  double m = num(ar, "measured_s"), p = num(ar, "predicted_s");
  char a[64], b[64];

  fmt_bytes(num(ar, "bytes"), a, sizeof a);
  fprintf(f, "  allreduce %s on the wire %s: measured ", a, wire(doc));
  fmt_time(m, b, sizeof b);
  fprintf(f, "%s, predicted ", b);
  fmt_time(p, b, sizeof b);
  fprintf(f, "%s", b);
  if (isfinite(m) && isfinite(p) && p > 0)
    fprintf(f, " (measured/predicted %.2f)", m / p);
  double tot = rank_median(doc, "allreduce", "total_s"), exp = rank_median(doc, "allreduce_exposed", "total_s");
  if (isfinite(tot) && tot > 0)
    fprintf(f, "; exposed %.0f%% of all-reduce time", 100.0 * exp / tot);
  fprintf(f, "\n");
}

/* Speed-up and efficiency against --baseline's report, else the report's own scaling. */
static void scaling_line(FILE *f, const json_t *doc, const json_t *base, const char *base_file)
{
  const json_t *sc = json_object_get(doc, "scaling");
  long long ranks = integer(doc, "job.ranks", 0);
  double ips = num(doc, "throughput.images_per_s");

  if (base) {
    double t0 = num(base, "throughput.images_per_s");
    long long n0 = integer(base, "job.ranks", 0);
    fprintf(f, "  scaling   vs %s (%lld rank%s, %.1f images/s): speed-up %.2f, efficiency %.1f%%\n",
            basename_of(base_file), n0, n0 == 1 ? "" : "s", t0, t0 > 0 ? ips / t0 : NAN,
            100 * efficiency(ips, ranks, t0, n0));
  } else if (json_is_object(sc)) {
    fprintf(f, "  scaling   vs %s (%lld rank%s, %.1f images/s): speed-up %.2f, efficiency %.1f%%\n",
            basename_of(str(sc, "baseline", "baseline")), integer(sc, "baseline_ranks", 0),
            integer(sc, "baseline_ranks", 0) == 1 ? "" : "s", num(sc, "baseline_images_per_s"), num(sc, "speedup"),
            100 * num(sc, "efficiency"));
  }
}

/* The learning curve's last point and its best validation top-1. */
static void accuracy_line(FILE *f, const json_t *doc)
{
  const json_t *curve = json_object_get(doc, "learning_curve"), *e;
  double best = -1, best_ep = 0;
  size_t i;

  if (!json_array_size(curve))
    return;
  const json_t *last = json_array_get(curve, json_array_size(curve) - 1);
  json_array_foreach(curve, i, e) if (num(e, "val_top1") > best) best = num(e, "val_top1"), best_ep = num(e, "epoch");
  fprintf(f, "  accuracy  epoch %.2f: ", num(last, "epoch"));
  if (isfinite(num(last, "val_top1")))
    fprintf(f, "val top-1 %.2f%%, ", 100 * num(last, "val_top1"));
  if (isfinite(num(last, "train_top1")))
    fprintf(f, "train top-1 %.2f%%, ", 100 * num(last, "train_top1"));
  if (isfinite(num(last, "val_loss")))
    fprintf(f, "val loss %.4f, ", num(last, "val_loss"));
  else if (isfinite(num(last, "train_loss")))
    fprintf(f, "train loss %.4f, ", num(last, "train_loss"));
  if (best >= 0)
    fprintf(f, "best val top-1 %.2f%% at epoch %.2f", 100 * best, best_ep);
  fprintf(f, " (%zu point%s)\n", json_array_size(curve), json_array_size(curve) == 1 ? "" : "s");
}

/* One row per rank that took steps: mean ms per phase, step p99, images/s; the
 * straggler (most time computing: step minus exposed wait) and the peak RSS. */
static void rank_table(FILE *f, const json_t *doc)
{
  const json_t *rks = json_object_get(doc, "ranks"), *r;
  int any_steps = 0;
  size_t i;
  char a[64];

  json_array_foreach(rks, i, r) any_steps |= integer(r, "steps", 0) > 0;
  if (!any_steps)
    return;
  fprintf(f, "  per rank, mean ms per step (p99 of step):\n    %-5s %-14s %6s", "rank", "host", "steps");
  for (int p = 0; p < 7; p++)
    if (p != 3)
      fprintf(f, " %8s", phase_hdr[p]);
  fprintf(f, " %8s %9s %9s\n", "ar-tot", "step-p99", "img/s");
  double med = rank_median(doc, "step", "mean_s"), slow_v = 0;
  long long slow = -1, peak = 0;
  json_array_foreach(rks, i, r) {
    const json_t *ph = json_object_get(r, "phases");
    fprintf(f, "    %-5lld %-14.14s %6lld", integer(r, "rank", -1), str(r, "host", "?"), integer(r, "steps", 0));
    for (int p = 0; p < 7; p++)
      if (p != 3)
        fprintf(f, " %8.2f", 1e3 * num(json_object_get(ph, phases[p]), "mean_s"));
    fprintf(f, " %8.2f %9.2f %9.1f\n", 1e3 * num(json_object_get(ph, "allreduce"), "mean_s"),
            1e3 * num(json_object_get(ph, "step"), "p99_s"), num(r, "images_per_s"));
    double sm = num(json_object_get(ph, "step"), "mean_s");
    double ar = num(json_object_get(ph, "allreduce_exposed"), "mean_s");
    if (isfinite(sm) && sm - ar > slow_v)
      slow_v = sm - ar, slow = integer(r, "rank", -1);
  }
  if (json_array_size(rks) > 1 && slow >= 0 && med > 0)
    fprintf(f, "    slowest rank (compute + data per step): %lld\n", slow);
  json_array_foreach(rks, i, r) if (integer(r, "peak_rss_bytes", 0) > peak) peak = integer(r, "peak_rss_bytes", 0);
  fmt_bytes((double)peak, a, sizeof a);
  fprintf(f, "  memory    peak RSS %s (largest rank)\n", a);
}

/* dpt-bench's results: how many, and the largest message's time and bus bandwidth. */
static void bench_line(FILE *f, const json_t *doc)
{
  const json_t *bench = at(doc, "results.bench"), *e, *bb = NULL;
  double best = 0;
  size_t i;
  char a[64];

  if (!json_is_object(bench))
    return;
  const json_t *res = json_object_get(bench, "results");
  json_array_foreach(res, i, e) if (num(e, "bytes") >= best) best = num(e, "bytes"), bb = e;
  if (!bb)
    return;
  fmt_bytes(best, a, sizeof a);
  fprintf(f, "  bench     %zu measurement%s; largest %s: %s %.1f us, busbw %.3f GB/s\n", json_array_size(res),
          json_array_size(res) == 1 ? "" : "s", a, str(bb, "comm", "?"), num(bb, "time_us"), num(bb, "busbw_gbs"));
}

/* How each rank's program ended (ranks[].end: a launcher supervised it) and what
 * rank 0 was handed (ranks[].env): every failing rank, and every rank of a small job. */
static void ends(FILE *f, const json_t *doc)
{
  static const char *const shown[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                      "CUDA_VISIBLE_DEVICES", "NCCL_IB_HCA", "OMP_NUM_THREADS", NULL};
  const json_t *ranks = json_object_get(doc, "ranks"), *r, *env = NULL;
  size_t i, n = 0, ok = 0;
  char a[64], b[64];

  json_array_foreach(ranks, i, r) if (json_is_object(json_object_get(r, "end"))) {
    const json_t *e = json_object_get(r, "end");
    int good = json_is_true(json_object_get(e, "started")) && integer(e, "status", -1) == 0;
    n++;
    ok += good;
    if (!env)
      env = json_object_get(r, "env");
    if (good && json_array_size(ranks) > 16)
      continue;
    fmt_time(num(e, "wall_s"), a, sizeof a);
    fmt_bytes(num(r, "peak_rss_bytes"), b, sizeof b);
    fprintf(f, "  ended     rank %lld on %s (pid %lld): %s after %s, peak RSS %s (%s)\n", integer(r, "rank", -1),
            str(r, "host", "?"), integer(r, "pid", 0), str(e, "how", "?"), a, b, str(e, "by", "?"));
  }
  if (n && json_array_size(ranks) > 16)
    fprintf(f, "  ended     %zu of %zu supervised ranks exited with status 0 (not listed)\n", ok, n);
  if (json_is_object(env)) {
    fprintf(f, "  env       rank 0 was handed");
    for (int k = 0; shown[k]; k++)
      if (json_is_string(json_object_get(env, shown[k])))
        fprintf(f, " %s=%s", shown[k], json_string_value(json_object_get(env, shown[k])));
    fprintf(f, " (%zu variables; ranks[].env in the file)\n", json_object_size(env));
    if (json_is_string(json_object_get(env, "DPT_ENV_KEPT")))
      fprintf(f, "  env       rank 0 kept the user's: %s\n", json_string_value(json_object_get(env, "DPT_ENV_KEPT")));
  }
}

/* Every error the job recorded, or "none". */
static void error_lines(FILE *f, const json_t *doc)
{
  const json_t *errs = json_object_get(doc, "errors"), *e;
  size_t i;

  if (!json_array_size(errs))
    fprintf(f, "  errors    none\n");
  else
    json_array_foreach(errs, i, e) fprintf(f, "  error     rank %lld on %s at %s: %s: %s\n", integer(e, "rank", -1),
                                           str(e, "host", "?"), str(e, "time", "?"), str(e, "code", "?"),
                                           str(e, "message", ""));
}

void dpt_report_view_summary(FILE *f, const char *file, const json_t *doc, const json_t *base,
                             const char *base_file)
{
  fprintf(f, "%s report %s (%s)\n", str(doc, "program", "?"), basename_of(file), str(doc, "schema", "?"));
  job_lines(f, doc);
  software_line(f, doc);
  plan_lines(f, doc);
  if (str(doc, "job.oversubscribed", NULL))
    fprintf(f, "  oversub   %s\n", str(doc, "job.oversubscribed", ""));
  speed_line(f, doc);
  allreduce_line(f, doc);
  scaling_line(f, doc, base, base_file);
  accuracy_line(f, doc);
  rank_table(f, doc);
  bench_line(f, doc);
  ends(f, doc);
  error_lines(f, doc);
}

/* ---- compare -------------------------------------------------------------------- */

void dpt_report_view_compare(FILE *f, char **files, json_t **docs, int n)
{
  double t0 = num(docs[0], "throughput.images_per_s");
  long long n0 = integer(docs[0], "job.ranks", 0);
  fprintf(f, "%-28s %-16s %5s %-12s %-5s %-5s %10s %8s %6s %10s %10s %10s %8s\n", "report", "program", "ranks",
          "comm", "wire", "dbuf", "images/s", "speedup", "eff", "step p50", "ar meas", "ar pred", "val top1");
  for (int i = 0; i < n; i++) {
    const json_t *d = docs[i];
    double t = num(d, "throughput.images_per_s");
    long long rk = integer(d, "job.ranks", 0);
    char sp[16] = "-", ef[16] = "-", st[24], am[24], ap[24], top[16] = "-";
    if (t0 > 0 && t > 0) {
      snprintf(sp, sizeof sp, "%.2f", t / t0);
      snprintf(ef, sizeof ef, "%.0f%%", 100 * efficiency(t, rk, t0, n0));
    }
    fmt_time(rank_median(d, "step", "p50_s"), st, sizeof st);
    fmt_time(num(d, "allreduce.measured_s"), am, sizeof am);
    fmt_time(num(d, "allreduce.predicted_s"), ap, sizeof ap);
    const json_t *curve = json_object_get(d, "learning_curve");
    if (json_array_size(curve)) {
      double v = num(json_array_get(curve, json_array_size(curve) - 1), "val_top1");
      if (isfinite(v))
        snprintf(top, sizeof top, "%.2f%%", 100 * v);
    }
    const char *comm = str(d, "software.comm", NULL);
    if (!comm)
      comm = str(d, "config.comm", "-");
    fprintf(f, "%-28.28s %-16.16s %5lld %-12.12s %-5.5s %-5.5s %10.1f %8s %6s %10s %10s %10s %8s\n",
            basename_of(files[i]), str(d, "program", "?"), rk, comm, wire(d), flag(d, "double_buffering"), t, sp, ef,
            st, am, ap, top);
  }
  fprintf(f, "speed-up = t / t0, efficiency e = t / (t0 * n / n0) against the first report (%s: %lld rank%s, "
             "%.1f images/s)\n",
          basename_of(files[0]), n0, n0 == 1 ? "" : "s", t0);
}
