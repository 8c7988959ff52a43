/* dpt-report — read "dpt.report/1" job reports.
 *
 *   dpt-report [--baseline B.json] FILE.json      terminal summary
 *   dpt-report --compare A.json B.json ...        one row per report: speed-up and efficiency
 *                                                 against the first, wire, double buffering
 *   dpt-report --html OUT.html FILE.json ...      one self-contained page with inline SVG plots
 *   dpt-report --check FILE.json ...              validate only (prints "ok FILE")
 *   dpt-report --nccl-log LOG FILE.json           the rings NCCL printed (NCCL_DEBUG=INFO) against
 *                                                 the report's plan (runtime/dpt_ncclring.h)
 *
 * Exit: 0; 2 on bad usage or input (not JSON, wrong schema version, missing
 * field: the message names the file and the field); 1 when writing fails, or
 * with --nccl-log when a ring differs from the plan. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "dpt_err.h"
#include "dpt_ncclring.h"
#include "dpt_report.h"

static void usage(FILE *f)
{
  fprintf(f, "usage: dpt-report [--baseline B.json] FILE.json\n"
             "       dpt-report --compare A.json B.json ...\n"
             "       dpt-report --html OUT.html FILE.json ...\n"
             "       dpt-report --check FILE.json ...\n"
             "       dpt-report --nccl-log LOG FILE.json\n"
             "\n"
             "Reads dpt.report/1 job reports (written by dpt-train, dpt-bench, dpt-topo plan;\n"
             "docs/schema-report.md).  Scaling efficiency e = t / (t0 * n / n0): t, t0 total\n"
             "images/s, n, n0 ranks of the report and of the baseline (ChainerMN's t / (t0 * n)\n"
             "for a 1-rank baseline).  --nccl-log: the rings NCCL printed at init in a job run with\n"
             "NCCL_DEBUG=INFO (its output, LOG) against the report's plan: each channel agrees or\n"
             "DIFFERS, with its inter-switch crossings; exit 1 when one differs.\n");
}

/* ---- access helpers ------------------------------------------------------------- */

static const json_t *at(const json_t *j, const char *path)
{
  char key[128];
  while (j && *path) {
    const char *dot = strchr(path, '.');
    size_t n = dot ? (size_t)(dot - path) : strlen(path);
    if (n >= sizeof key)
      return NULL;
    memcpy(key, path, n);
    key[n] = '\0';
    j = json_object_get(j, key);
    path += n + (dot ? 1 : 0);
  }
  return j;
}

static double num(const json_t *j, const char *path)
{
  const json_t *v = at(j, path);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

static const char *str(const json_t *j, const char *path, const char *dflt)
{
  const char *s = json_string_value(at(j, path));
  return s ? s : dflt;
}

static long long integer(const json_t *j, const char *path, long long dflt)
{
  const json_t *v = at(j, path);
  return json_is_integer(v) ? json_integer_value(v) : dflt;
}

/* "yes"/"no"/"-" for a config flag that may be a boolean or an integer. */
static const char *flag(const json_t *doc, const char *key)
{
  const json_t *v = json_object_get(json_object_get(doc, "config"), key);
  if (json_is_boolean(v))
    return json_is_true(v) ? "on" : "off";
  if (json_is_integer(v))
    return json_integer_value(v) ? "on" : "off";
  return "-";
}

static const char *wire(const json_t *doc)
{
  const char *w = str(doc, "software.wire", NULL);
  if (!w)
    w = str(doc, "allreduce.wire", NULL);
  return w ? w : "-";
}

static void fmt_time(double s, char *buf, size_t len)
{
  if (!isfinite(s))
    snprintf(buf, len, "-");
  else if (s >= 1)
    snprintf(buf, len, "%.2f s", s);
  else if (s >= 1e-3)
    snprintf(buf, len, "%.2f ms", s * 1e3);
  else
    snprintf(buf, len, "%.1f us", s * 1e6);
}

static void fmt_bytes(double b, char *buf, size_t len)
{
  if (!isfinite(b))
    snprintf(buf, len, "-");
  else if (b >= 1 << 20)
    snprintf(buf, len, "%.1f MiB", b / (1 << 20));
  else if (b >= 1 << 10)
    snprintf(buf, len, "%.1f KiB", b / (1 << 10));
  else
    snprintf(buf, len, "%.0f B", b);
}

static const char *basename_of(const char *p)
{
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

/* Median over ranks of a phase statistic (NAN when no rank has it). */
static double rank_median(const json_t *doc, const char *phase, const char *stat)
{
  double v[4096];
  size_t n = 0, i;
  const json_t *r;
  json_array_foreach(json_object_get(doc, "ranks"), i, r) {
    double x = num(json_object_get(json_object_get(r, "phases"), phase), stat);
    if (isfinite(x) && n < 4096)
      v[n++] = x;
  }
  if (!n)
    return NAN;
  for (size_t a = 1; a < n; a++)
    for (size_t b = a; b > 0 && v[b - 1] > v[b]; b--) {
      double t = v[b];
      v[b] = v[b - 1];
      v[b - 1] = t;
    }
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double efficiency(double t, long long n, double t0, long long n0)
{
  return dpt_report_efficiency(t, n, t0, n0); /* the writer's formula (dpt_report.c) */
}

/* ---- summary -------------------------------------------------------------------- */

static const char *const phases[] = {"data_wait", "forward", "backward", "allreduce", "allreduce_exposed",
                                     "update", "step"};
static const char *const phase_hdr[] = {"data", "fwd", "bwd", "ar", "ar-exp", "update", "step"};

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

static void summary(FILE *f, const char *file, const json_t *doc, const json_t *base, const char *base_file)
{
  char a[64], b[64];
  size_t i;
  const json_t *r, *e;
  const json_t *job = json_object_get(doc, "job");
  long long ranks = integer(job, "ranks", 0);
  double ips = num(doc, "throughput.images_per_s");

  fprintf(f, "%s report %s (%s)\n", str(doc, "program", "?"), basename_of(file), str(doc, "schema", "?"));
  /* job */
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
  fprintf(f, "\n  software  dpt %s", str(doc, "software.dpt", "?"));
  {
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)json_object_get(doc, "software"), k, v) if (json_is_string(v) &&
                                                                              strcmp(k, "dpt"))
        fprintf(f, ", %s %s", k, json_string_value(v));
    json_object_foreach((json_t *)at(doc, "software.libraries"), k, v) if (json_is_string(v))
        fprintf(f, ", %s %s", k, json_string_value(v));
  }
  fprintf(f, "\n");
  /* plan */
  const json_t *plan = json_object_get(doc, "plan");
  if (json_is_object(plan)) {
    const json_t *alts = json_object_get(plan, "alternatives");
    fprintf(f, "  plan      digest %s, %zu rank%s on %zu node%s, ring:", str(plan, "digest", "?"),
            json_array_size(json_object_get(plan, "ranks")), json_array_size(json_object_get(plan, "ranks")) == 1 ? "" : "s",
            json_array_size(json_object_get(plan, "nodes")), json_array_size(json_object_get(plan, "nodes")) == 1 ? "" : "s");
    json_array_foreach(json_object_get(plan, "nodes"), i, e) {
      if (i >= 12) {
        fprintf(f, " ...");
        break;
      }
      fprintf(f, "%s %s (%lld)", i ? " ->" : "", str(e, "host", "?"), integer(e, "n_ranks", 0));
    }
    if (str(job, "launch_digest", NULL)) /* the same plan, as the launcher announced it to the ranks */
      fprintf(f, "; launched as %s", str(job, "launch_digest", ""));
    fprintf(f, "\n            predicted all-reduce of %s:",
            (fmt_bytes(num(plan, "size_bytes"), a, sizeof a), a));
    json_array_foreach(alts, i, e) {
      fmt_time(num(e, "predicted_s"), b, sizeof b);
      fprintf(f, "%s %s %s", i ? "," : "", str(e, "name", "?"), b);
    }
    fprintf(f, "\n");
  }
  if (str(job, "oversubscribed", NULL))
    fprintf(f, "  oversub   %s\n", str(job, "oversubscribed", ""));
  /* throughput */
  fprintf(f, "  speed     ");
  if (ips > 0) {
    fprintf(f, "%.1f images/s total, %.1f per rank", ips, ips / (double)ranks);
    fmt_time(rank_median(doc, "step", "p50_s"), a, sizeof a);
    fmt_time(rank_median(doc, "step", "p99_s"), b, sizeof b);
    fprintf(f, "; step p50 %s, p99 %s (median over ranks)\n", a, b);
  } else {
    fprintf(f, "no images processed (not a training run)\n");
  }
  /* all-reduce */
  {
    const json_t *ar = json_object_get(doc, "allreduce");
    double m = num(ar, "measured_s"), p = num(ar, "predicted_s");
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
  /* scaling */
  const json_t *sc = json_object_get(doc, "scaling");
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
  /* learning curve */
  const json_t *curve = json_object_get(doc, "learning_curve");
  if (json_array_size(curve)) {
    const json_t *last = json_array_get(curve, json_array_size(curve) - 1);
    double best = -1, best_ep = 0;
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
  /* per rank */
  const json_t *rks = json_object_get(doc, "ranks");
  int any_steps = 0;
  json_array_foreach(rks, i, r) any_steps |= integer(r, "steps", 0) > 0;
  if (any_steps) {
    fprintf(f, "  per rank, mean ms per step (p99 of step):\n    %-5s %-14s %6s", "rank", "host", "steps");
    for (int p = 0; p < 7; p++)
      if (p != 3)
        fprintf(f, " %8s", phase_hdr[p]);
    fprintf(f, " %8s %9s %9s\n", "ar-tot", "step-p99", "img/s");
    double med = rank_median(doc, "step", "mean_s");
    long long slow = -1;
    double slow_v = 0;
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
      /* the straggler: the rank that spends the most time computing (step minus exposed wait) */
      if (isfinite(sm) && sm - ar > slow_v)
        slow_v = sm - ar, slow = integer(r, "rank", -1);
    }
    if (json_array_size(rks) > 1 && slow >= 0 && med > 0)
      fprintf(f, "    slowest rank (compute + data per step): %lld\n", slow);
    long long peak = 0;
    json_array_foreach(rks, i, r) if (integer(r, "peak_rss_bytes", 0) > peak) peak = integer(r, "peak_rss_bytes", 0);
    fmt_bytes((double)peak, a, sizeof a);
    fprintf(f, "  memory    peak RSS %s (largest rank)\n", a);
  }
  /* bench results */
  const json_t *bench = at(doc, "results.bench");
  if (json_is_object(bench)) {
    const json_t *res = json_object_get(bench, "results");
    double best = 0;
    const json_t *bb = NULL;
    json_array_foreach(res, i, e) if (num(e, "bytes") >= best) best = num(e, "bytes"), bb = e;
    if (bb)
      fprintf(f, "  bench     %zu measurement%s; largest %s: %s %.1f us, busbw %.3f GB/s\n", json_array_size(res),
              json_array_size(res) == 1 ? "" : "s", (fmt_bytes(best, a, sizeof a), a), str(bb, "comm", "?"),
              num(bb, "time_us"), num(bb, "busbw_gbs"));
  }
  ends(f, doc);
  /* errors */
  const json_t *errs = json_object_get(doc, "errors");
  if (!json_array_size(errs))
    fprintf(f, "  errors    none\n");
  else
    json_array_foreach(errs, i, e) fprintf(f, "  error     rank %lld on %s at %s: %s: %s\n", integer(e, "rank", -1),
                                           str(e, "host", "?"), str(e, "time", "?"), str(e, "code", "?"),
                                           str(e, "message", ""));
}

/* ---- compare -------------------------------------------------------------------- */

static void compare(FILE *f, char **files, json_t **docs, int n)
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

/* ---- HTML ----------------------------------------------------------------------- */

static void esc(FILE *f, const char *s)
{
  for (; s && *s; s++)
    switch (*s) {
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '&': fputs("&amp;", f); break;
    case '"': fputs("&quot;", f); break;
    default: fputc(*s, f);
    }
}

static const char *const palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                      "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

/* A "nice" axis maximum and tick step for data up to v: max >= v, finite, and
 * at most ~10 steps of `step` > 0.  Near DBL_MAX the rounded-up maximum
 * overflows to inf (a report with allreduce.measured_s = 1.6e305 made the
 * tick loops of --html run forever; tests/fuzz/regress/report): then the
 * axis ends at v itself. */
static void nice_axis(double v, double *max, double *step)
{
  if (!(v > 0) || !isfinite(v))
    v = 1;
  double e = pow(10, floor(log10(v))), m = v / e;
  double s = m <= 1 ? 0.2 : m <= 2 ? 0.5 : m <= 5 ? 1 : 2;
  *step = s * e;
  *max = ceil(v / *step - 1e-9) * *step;
  if (!isfinite(*max) || !(*step > 0) || !isfinite(*step) || !(*max >= v)) {
    *max = v;
    *step = v / 5;
  }
}

struct plot {
  FILE *f;
  double w, h, l, r, t, b;   /* size and margins */
  double xmin, xmax, ymax;
};

static double px(const struct plot *p, double x)
{
  return p->l + (x - p->xmin) / (p->xmax - p->xmin) * (p->w - p->l - p->r);
}
static double py(const struct plot *p, double y)
{
  return p->h - p->b - y / p->ymax * (p->h - p->t - p->b);
}

static void plot_open(struct plot *p, const char *id, const char *title, const char *xl, const char *yl,
                      double xmin, double xmax, double xstep, double ymax_data, int xcat)
{
  FILE *f = p->f;
  double ystep;
  nice_axis(ymax_data, &p->ymax, &ystep);
  p->xmin = xmin;
  p->xmax = xmax > xmin ? xmax : xmin + 1;
  fprintf(f, "<figure><svg id=\"%s\" class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
             "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" role=\"img\" aria-label=\"",
          id, p->w, p->h, p->w, p->h);
  esc(f, title);
  fprintf(f, "\">\n<title>");
  esc(f, title);
  fprintf(f, "</title>\n<text x=\"%.0f\" y=\"16\" class=\"t\">", p->w / 2);
  esc(f, title);
  fprintf(f, "</text>\n");
  /* ticks: bounded loops whatever the numbers (huge or tiny values do not advance y, x) */
  int ticks = 0;
  for (double y = 0; y <= p->ymax + ystep * 1e-6 && ticks++ < 50; y += ystep) {
    fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" class=\"g\"/>", p->l, p->w - p->r, py(p, y),
            py(p, y));
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"yl\">%g</text>\n", p->l - 4, py(p, y) + 4, y);
  }
  if (!xcat)
    for (double x = xmin, nx = 0; x <= p->xmax + xstep * 1e-6 && nx++ < 50; x += xstep)
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"xl\">%g</text>\n", px(p, x), p->h - p->b + 16, x);
  fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" class=\"ax\"/>", p->l, p->w - p->r,
          py(p, 0), py(p, 0));
  fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" class=\"ax\"/>\n", p->l, p->l, p->t,
          p->h - p->b);
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"al\">", (p->l + p->w - p->r) / 2, p->h - 6);
  esc(f, xl);
  fprintf(f, "</text><text transform=\"translate(14 %.1f) rotate(-90)\" class=\"al\">", (p->t + p->h - p->b) / 2);
  esc(f, yl);
  fprintf(f, "</text>\n");
}

static void plot_note(struct plot *p, const char *msg)
{
  fprintf(p->f, "<text x=\"%.1f\" y=\"%.1f\" class=\"note\">", (p->l + p->w - p->r) / 2, (p->t + p->h - p->b) / 2);
  esc(p->f, msg);
  fprintf(p->f, "</text>\n");
}

static void legend(struct plot *p, int i, const char *color, const char *label, int dashed)
{
  double x = p->w - p->r - 190, y = p->t + 4 + 16 * i;
  fprintf(p->f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" stroke-width=\"3\"%s/>"
                "<text x=\"%.0f\" y=\"%.0f\" class=\"lg\">",
          x, x + 18, y, y, color, dashed ? " stroke-dasharray=\"4 3\"" : "", x + 24, y + 4);
  esc(p->f, label);
  fprintf(p->f, "</text>\n");
}

static void plot_close(struct plot *p, const char *caption)
{
  fprintf(p->f, "</svg><figcaption>");
  esc(p->f, caption);
  fprintf(p->f, "</figcaption></figure>\n");
}

static void learning_curve_plot(FILE *f, char **files, json_t **docs, int n)
{
  struct plot p = {f, 640, 320, 56, 16, 28, 40, 0, 1, 1};
  double emax = 0, lmax = 0;
  size_t i;
  const json_t *e;
  int points = 0;
  for (int d = 0; d < n; d++)
    json_array_foreach(json_object_get(docs[d], "learning_curve"), i, e) {
      points++;
      if (num(e, "epoch") > emax) emax = num(e, "epoch");
      double l = isfinite(num(e, "val_loss")) ? num(e, "val_loss") : num(e, "train_loss");
      if (isfinite(l) && l > lmax) lmax = l;
    }
  double xmax, xstep;
  nice_axis(emax, &xmax, &xstep);
  plot_open(&p, "plot-learning-curve", "Learning curve: top-1 accuracy per epoch", "epoch", "top-1 (%)", 0, xmax,
            xstep, 100, 0);
  if (!points)
    plot_note(&p, "no learning curve in these reports (not training runs)");
  int li = 0;
  for (int d = 0; d < n; d++) {
    const json_t *c = json_object_get(docs[d], "learning_curve");
    const char *keys[] = {"val_top1", "train_top1"};
    for (int k = 0; k < 2; k++) {
      int have = 0;
      json_array_foreach(c, i, e) have |= isfinite(num(e, keys[k]));
      if (!have)
        continue;
      fprintf(f, "<polyline class=\"curve\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"",
              palette[d % 10], k ? " stroke-dasharray=\"4 3\"" : "");
      json_array_foreach(c, i, e) if (isfinite(num(e, keys[k])))
          fprintf(f, "%.1f,%.1f ", px(&p, num(e, "epoch")), py(&p, 100 * num(e, keys[k])));
      fprintf(f, "\"/>\n");
      json_array_foreach(c, i, e) if (isfinite(num(e, keys[k])))
          fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>epoch %g: %s %.2f%%</title></circle>\n",
                  px(&p, num(e, "epoch")), py(&p, 100 * num(e, keys[k])), palette[d % 10], num(e, "epoch"),
                  keys[k], 100 * num(e, keys[k]));
      char lab[160];
      snprintf(lab, sizeof lab, "%s %s", basename_of(files[d]), k ? "train" : "val");
      legend(&p, li++, palette[d % 10], lab, k);
    }
  }
  plot_close(&p, "Top-1 accuracy (validation solid, training dashed) at the end of each epoch.");
  (void)lmax;
}

static void phase_plot(FILE *f, char **files, json_t **docs, int n)
{
  const char *ph[] = {"data_wait", "forward", "backward", "allreduce_exposed", "update"};
  const char *lab[] = {"data wait", "forward", "backward", "all-reduce (exposed)", "update"};
  const char *col[] = {"#bab0ac", "#4e79a7", "#59a14f", "#e15759", "#edc948"};
  int bars = 0;
  double ymax = 0;
  size_t i;
  const json_t *r;
  for (int d = 0; d < n; d++)
    json_array_foreach(json_object_get(docs[d], "ranks"), i, r) {
      double s = 0;
      for (int k = 0; k < 5; k++) {
        double v = num(json_object_get(json_object_get(r, "phases"), ph[k]), "mean_s");
        if (isfinite(v))
          s += v;
      }
      bars++;
      if (s * 1e3 > ymax) ymax = s * 1e3;
    }
  struct plot p = {f, 640, 340, 56, 200, 28, 64, 0, 1, 1};
  if (bars > 24)
    p.w = 440 + 18.0 * bars;
  plot_open(&p, "plot-phases", "Per-rank phase breakdown (mean per step)", "report / rank", "ms per step", 0,
            bars ? bars : 1, 1, ymax, 1);
  if (!ymax)
    plot_note(&p, "no step timings in these reports");
  double slot = (p.w - p.l - p.r) / (bars ? bars : 1), bw = slot * 0.7;
  int b = 0;
  for (int d = 0; d < n; d++) {
    int first = b;
    json_array_foreach(json_object_get(docs[d], "ranks"), i, r) {
      double x = p.l + slot * b + (slot - bw) / 2, acc = 0;
      for (int k = 0; k < 5; k++) {
        double v = 1e3 * num(json_object_get(json_object_get(r, "phases"), ph[k]), "mean_s");
        if (!isfinite(v) || v <= 0)
          continue;
        fprintf(f, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">"
                   "<title>rank %lld %s: %.3f ms</title></rect>\n",
                x, py(&p, acc + v), bw, py(&p, acc) - py(&p, acc + v), col[k], integer(r, "rank", -1), lab[k], v);
        acc += v;
      }
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"xl\">%lld</text>\n", x + bw / 2, p.h - p.b + 14,
              integer(r, "rank", -1));
      b++;
    }
    if (b > first) {
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"xl\">", p.l + slot * (first + b) / 2.0, p.h - p.b + 30);
      esc(f, basename_of(files[d]));
      fprintf(f, "</text>\n");
    }
  }
  for (int k = 0; k < 5; k++) {
    double x = p.w - p.r + 16, y = p.t + 10 + 18 * k;
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%.0f\" y=\"%.0f\" "
               "class=\"lg\">%s</text>\n",
            x, y - 10, col[k], x + 18, y, lab[k]);
  }
  plot_close(&p, "Each bar is one rank: a straggler or a slow link shows up as a taller bar or a larger red part.");
}

static void speed_plot(FILE *f, char **files, json_t **docs, int n)
{
  double rmax = 0, ymax = 0, t0 = 0;
  long long n0 = 0;
  for (int d = 0; d < n; d++) {
    long long rk = integer(docs[d], "job.ranks", 0);
    double t = num(docs[d], "throughput.images_per_s");
    if (rk > rmax) rmax = (double)rk;
    if (t > ymax) ymax = t;
    if (t > 0 && (n0 == 0 || rk < n0)) n0 = rk, t0 = t;
  }
  double xmax, xstep;
  nice_axis(rmax * 1.2, &xmax, &xstep); /* room right of the largest run */
  if (xstep < 1) xstep = 1, xmax = ceil(xmax);
  if (n0 && t0 * xmax / n0 > ymax) ymax = t0 * xmax / n0;
  struct plot p = {f, 640, 320, 64, 16, 28, 40, 0, 1, 1};
  plot_open(&p, "plot-speed", "Throughput vs ranks", "ranks", "images/s", 0, xmax, xstep, ymax, 0);
  if (!n0) {
    plot_note(&p, "no images/s in these reports (not training runs)");
  } else {
    fprintf(f, "<line class=\"ideal\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\" "
               "stroke-dasharray=\"6 4\" stroke-width=\"2\"/>\n",
            px(&p, 0), py(&p, 0), px(&p, xmax), py(&p, t0 * xmax / n0));
    legend(&p, 0, "#888", "ideal (linear from the smallest run)", 1);
    for (int d = 0; d < n; d++) {
      long long rk = integer(docs[d], "job.ranks", 0);
      double t = num(docs[d], "throughput.images_per_s");
      if (!(t > 0))
        continue;
      fprintf(f, "<circle class=\"pt\" cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"%s\"><title>%s: %lld ranks, %.1f "
                 "images/s, efficiency %.1f%%</title></circle>\n",
              px(&p, (double)rk), py(&p, t), palette[d % 10], basename_of(files[d]), rk, t,
              100 * efficiency(t, rk, t0, n0));
    }
  }
  plot_close(&p, "Total images/s per report against its number of ranks; the dashed line is perfect scaling "
                 "(efficiency e = t / (t0 * n / n0) = 100%).");
}

static void allreduce_plot(FILE *f, char **files, json_t **docs, int n)
{
  double ymax = 0;
  int any = 0;
  for (int d = 0; d < n; d++) {
    double m = num(docs[d], "allreduce.measured_s"), pr = num(docs[d], "allreduce.predicted_s");
    if (isfinite(m) && m * 1e3 > ymax) ymax = m * 1e3;
    if (isfinite(pr) && pr * 1e3 > ymax) ymax = pr * 1e3;
    any |= isfinite(m) || isfinite(pr);
  }
  struct plot p = {f, 640, 320, 64, 200, 28, 48, 0, 1, 1};
  plot_open(&p, "plot-allreduce", "All-reduce time: predicted by the plan vs measured", "report", "ms", 0, n, 1,
            ymax, 1);
  if (!any)
    plot_note(&p, "no all-reduce times in these reports");
  double slot = (p.w - p.l - p.r) / n, bw = slot * 0.35;
  for (int d = 0; d < n; d++) {
    double v[2] = {num(docs[d], "allreduce.predicted_s"), num(docs[d], "allreduce.measured_s")};
    const char *c[2] = {"#76b7b2", "#e15759"}, *l[2] = {"predicted", "measured"};
    for (int k = 0; k < 2; k++) {
      double x = p.l + slot * d + slot * 0.15 + bw * k;
      if (!isfinite(v[k])) {
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"xl\">n/a</text>\n", x + bw / 2, py(&p, 0) - 4);
        continue;
      }
      fprintf(f, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>%s "
                 "%s: %.3f ms</title></rect>\n",
              x, py(&p, v[k] * 1e3), bw, py(&p, 0) - py(&p, v[k] * 1e3), c[k], basename_of(files[d]), l[k],
              v[k] * 1e3);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"xl\">", p.l + slot * (d + 0.5), p.h - p.b + 16);
    esc(f, basename_of(files[d]));
    fprintf(f, "</text>\n");
  }
  for (int k = 0; k < 2; k++) {
    double x = p.w - p.r + 16, y = p.t + 10 + 18 * k;
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%.0f\" y=\"%.0f\" "
               "class=\"lg\">%s</text>\n",
            x, y - 10, k ? "#e15759" : "#76b7b2", x + 18, y, k ? "measured" : "predicted (plan)");
  }
  plot_close(&p, "Predicted: the plan's cost model for the all-reduced message; measured: the all-reduce itself "
                 "(dpt-bench) or the slowest rank's median all-reduce phase (training).");
}

static int html(const char *out, char **files, json_t **docs, int n, struct dpt_err *err)
{
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f)
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
  fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>dpt report: ");
  for (int i = 0; i < n; i++) {
    esc(f, basename_of(files[i]));
    fputs(i + 1 < n ? ", " : "", f);
  }
  fprintf(f, "</title>\n<style>\n"
             "body{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}\n"
             "h1{font-size:20px} h2{font-size:16px;margin-top:28px}\n"
             "pre{background:#f6f6f6;padding:10px;font-size:12px;overflow-x:auto}\n"
             "figure{margin:12px 0} figcaption{font-size:12px;color:#555;max-width:640px}\n"
             "svg.plot{background:#fff;border:1px solid #ddd}\n"
             "svg text{font-size:11px;font-family:sans-serif;fill:#333}\n"
             "svg .t{text-anchor:middle;font-size:13px;font-weight:bold}\n"
             "svg .yl{text-anchor:end} svg .xl{text-anchor:middle} svg .al{text-anchor:middle;font-size:12px}\n"
             "svg .note{text-anchor:middle;fill:#999;font-size:13px}\n"
             "svg .g{stroke:#eee} svg .ax{stroke:#444}\n"
             "table{border-collapse:collapse;font-size:12px} td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\n"
             "th{background:#f0f0f0} td.l{text-align:left}\n"
             "</style></head>\n<body>\n<h1>dpt job report</h1>\n");
  /* comparison table */
  char *cmp = NULL;
  size_t cl = 0;
  FILE *c = open_memstream(&cmp, &cl);
  if (c) {
    compare(c, files, docs, n);
    fclose(c);
    fprintf(f, "<h2>Runs</h2>\n<pre id=\"compare\">");
    esc(f, cmp);
    fprintf(f, "</pre>\n");
    free(cmp);
  }
  fprintf(f, "<h2>Plots</h2>\n");
  speed_plot(f, files, docs, n);
  phase_plot(f, files, docs, n);
  learning_curve_plot(f, files, docs, n);
  allreduce_plot(f, files, docs, n);
  fprintf(f, "<h2>Summaries</h2>\n");
  for (int i = 0; i < n; i++) {
    char *s = NULL;
    size_t sl = 0;
    FILE *m = open_memstream(&s, &sl);
    if (!m)
      continue;
    summary(m, files[i], docs[i], NULL, NULL);
    fclose(m);
    fprintf(f, "<pre class=\"summary\">");
    esc(f, s);
    fprintf(f, "</pre>\n");
    free(s);
  }
  /* The page needs no script; this one only marks that it rendered (checked by the tests). */
  fprintf(f, "<script>\ndocument.body.setAttribute('data-plots', "
             "String(document.querySelectorAll('svg.plot').length));\n</script>\n</body></html>\n");
  if (fclose(f)) {
    free(text);
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory rendering %s", out);
  }
  int rc = dpt_report_write_atomic(out, text, len, err);
  free(text);
  return rc;
}

/* ---- main ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
  struct dpt_err err;
  const char *mode = "summary", *out = NULL, *base_file = NULL, *nccl_log = NULL;
  char **files = NULL;
  json_t **docs = NULL, *base = NULL;
  int n = 0, status = 0, i;

  dpt_err_clear(&err);
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--compare") || !strcmp(a, "--check")) {
      mode = a + 2;
    } else if (!strcmp(a, "--html") || !strcmp(a, "--baseline") || !strcmp(a, "--nccl-log")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "dpt-report: %s needs a file\n", a);
        return 2;
      }
      if (!strcmp(a, "--nccl-log")) {
        mode = "nccl";
        nccl_log = argv[++i];
      } else if (!strcmp(a, "--html")) {
        mode = "html";
        out = argv[++i];
      } else {
        base_file = argv[++i];
      }
    } else if (!strcmp(a, "--")) {
      i++;
      break;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "dpt-report: unknown option %s (see dpt-report --help)\n", a);
      return 2;
    } else {
      break;
    }
  }
  files = argv + i;
  n = argc - i;
  if (n < 1) {
    fprintf(stderr, "dpt-report: no report given (see dpt-report --help)\n");
    return 2;
  }
  if (!strcmp(mode, "nccl") && n != 1) {
    fprintf(stderr, "dpt-report: --nccl-log LOG compares with one report's plan; %d given\n", n);
    return 2;
  }
  if (!strcmp(mode, "summary") && n != 1) {
    fprintf(stderr, "dpt-report: %d reports given: summarise one, or use --compare / --html for several\n", n);
    return 2;
  }
  if (!strcmp(mode, "compare") && n < 2) {
    fprintf(stderr, "dpt-report: --compare needs at least two reports\n");
    return 2;
  }
  if (base_file && strcmp(mode, "summary")) {
    fprintf(stderr, "dpt-report: --baseline goes with the summary of one report (--compare uses the first)\n");
    return 2;
  }
  docs = calloc((size_t)n, sizeof *docs);
  if (!docs)
    return 1;
  for (int k = 0; k < n; k++) {
    if (dpt_report_load(files[k], &docs[k], &err)) {
      fprintf(stderr, "dpt-report: %s\n", err.msg);
      status = dpt_err_exit_status(&err);
      if (strcmp(mode, "check"))
        goto out;
      continue;
    }
    if (!strcmp(mode, "check"))
      printf("ok %s\n", files[k]);
  }
  if (!strcmp(mode, "check"))
    goto out;
  if (base_file && dpt_report_load(base_file, &base, &err)) {
    fprintf(stderr, "dpt-report: --baseline: %s\n", err.msg);
    status = 2;
    goto out;
  }
  if (!strcmp(mode, "nccl")) {
    FILE *lf = fopen(nccl_log, "r");
    int k;
    if (!lf) {
      fprintf(stderr, "dpt-report: --nccl-log %s: cannot open: %s\n", nccl_log, strerror(errno));
      status = 2;
      goto out;
    }
    k = dpt_ncclring_check(lf, nccl_log, json_object_get(docs[0], "plan"), stdout, &err);
    fclose(lf);
    if (k < 0) {
      fprintf(stderr, "dpt-report: --nccl-log: %s: %s\n", files[0], err.msg);
      status = dpt_err_exit_status(&err);
      goto out;
    }
    status = k; /* 1: a ring differs from the plan */
  } else if (!strcmp(mode, "summary")) {
    summary(stdout, files[0], docs[0], base, base_file);
  } else if (!strcmp(mode, "compare")) {
    compare(stdout, files, docs, n);
  } else if (html(out, files, docs, n, &err)) {
    fprintf(stderr, "dpt-report: --html %s: %s\n", out, err.msg);
    status = dpt_err_exit_status(&err);
    goto out;
  }
  if (fflush(stdout)) {
    fprintf(stderr, "dpt-report: cannot write to stdout: %s\n", strerror(errno));
    status = 1;
  }
out:
  for (int k = 0; k < n; k++)
    json_decref(docs[k]);
  free(docs);
  json_decref(base);
  return status;
}
