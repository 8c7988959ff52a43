/* dpt_report_doc.c — rank 0's job report: the ranks' parts gathered (or each
 * rank's own when there is no gather), the ranks' error files absorbed, the
 * whole job summed up (hosts, throughput at the slowest rank's pace, the
 * all-reduce measured and predicted, scaling against a baseline), validated
 * and written.  Layout: docs/schema-report.md. */
#define _GNU_SOURCE
#include "dpt_report_int.h"
#include "dpt_ctx.h"
#include "dpt_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- rank 0: the document ----------------------------------------------------- */

/* Who started the ranks: DPT_LAUNCHER (srun --dpt, dpt-launch), else named from the
 * variables as the ranks' context names it (dpt_ctx_launcher). */
static json_t *launcher(void)
{
  return json_string(dpt_ctx_launcher_from_env());
}

/* A baseline report: valid dpt.report/1, images/s > 0, ranks >= 1 (DPT_E_INPUT otherwise). */
static int load_baseline(const char *path, json_t **doc, double *t0, json_int_t *n0, struct dpt_err *err)
{
  *doc = NULL;
  if (dpt_report_load(path, doc, err))
    return dpt_err_prefix(err, "--baseline");
  *t0 = json_number_value(json_object_get(json_object_get(*doc, "throughput"), "images_per_s"));
  *n0 = json_integer_value(json_object_get(json_object_get(*doc, "job"), "ranks"));
  if (!(*t0 > 0))
    return dpt_err_set(err, DPT_E_INPUT, "--baseline %s: throughput.images_per_s is %g; the baseline must be a "
                       "report of a run that processed images (give another report)", path, *t0);
  if (*n0 < 1)
    return dpt_err_set(err, DPT_E_INPUT, "--baseline %s: job.ranks is %lld; the baseline must be a run of "
                       ">= 1 rank (give another report)", path, (long long)*n0);
  return 0;
}

int dpt_report_check_baseline(const char *path, struct dpt_err *err)
{
  json_t *doc = NULL;
  double t0;
  json_int_t n0;
  int rc = load_baseline(path, &doc, &t0, &n0, err);
  json_decref(doc);
  return rc;
}

/* Has errors[] an entry of rank `rank` with this message? */
static int has_error(const json_t *errors, json_int_t rank, const char *msg)
{
  size_t i;
  json_t *e;
  json_array_foreach(errors, i, e) if (json_integer_value(json_object_get(e, "rank")) == rank &&
                                       !strcmp(json_string_value(json_object_get(e, "message")) ?
                                               json_string_value(json_object_get(e, "message")) : "", msg))
      return 1;
  return 0;
}

/* The ranks' error files next to the report, <path>.rank<N>.err (dpt.error/1, runtime/
 * dpt_watchdog: what a rank wrote when it failed or its watchdog fired), as errors[]
 * entries (kind, phase, step and suspect kept, file: the file's name); the files read go
 * to *files (paths, removed by the caller once the report is written).  Best effort: an
 * unreadable file is left alone. */
static json_t *absorb_error_files(const struct dpt_report *r, const char *path, json_t **files)
{
  json_t *out = json_array();
  *files = json_array();
  if (!out || !*files)
    return out;
  for (int k = 0; k < r->size; k++) {
    char ep[4200], ts[40];
    json_error_t je;
    json_t *f, *e;
    struct tm tm;
    double el = 0;
    snprintf(ep, sizeof ep, "%s.rank%d.err", path, k);
    if (access(ep, R_OK) || !(f = json_load_file(ep, 0, &je)))
      continue;
    const char *schema = json_string_value(json_object_get(f, "schema"));
    const char *msg = json_string_value(json_object_get(f, "message"));
    const char *t = json_string_value(json_object_get(f, "time"));
    if (!schema || strcmp(schema, "dpt.error/1") || !msg) {
      json_decref(f);
      continue;
    }
    memset(&tm, 0, sizeof tm);
    if (t && strptime(t, "%Y-%m-%dT%H:%M:%SZ", &tm))
      el = (double)timegm(&tm) - r->start_unix;
    dpt_report_iso_time(t && el ? r->start_unix + el : dpt_report_now_real(), ts, sizeof ts);
    e = json_pack("{s:I,s:s,s:s,s:s,s:s,s:f,s:O,s:O,s:O,s:O,s:s}", "rank",
                  json_integer_value(json_object_get(f, "rank")), "host",
                  json_string_value(json_object_get(f, "node")) ? json_string_value(json_object_get(f, "node")) : "?",
                  "code", "runtime", "message", msg, "time", ts, "elapsed_s", el > 0 ? el : 0.0, "kind",
                  json_object_get(f, "kind") ? json_object_get(f, "kind") : json_null(), "phase",
                  json_object_get(f, "phase") ? json_object_get(f, "phase") : json_null(), "step",
                  json_object_get(f, "step") ? json_object_get(f, "step") : json_null(), "suspect",
                  json_object_get(f, "suspect") ? json_object_get(f, "suspect") : json_null(), "file",
                  strrchr(ep, '/') ? strrchr(ep, '/') + 1 : ep);
    json_decref(f);
    if (!e || json_array_append_new(out, e) || json_array_append_new(*files, json_string(ep)))
      continue;
  }
  return out;
}

static json_t *build_doc(struct dpt_report *r, json_t *parts, int partial, json_t *absorbed,
                         struct dpt_err *err)
{
  char t0[40], t1[40];
  double end = dpt_report_now_real();
  json_t *doc = NULL, *hosts = json_array(), *topo = json_array(), *ar = NULL, *scaling = NULL,
         *errors = json_array(), *baseline = NULL;
  double ips = 0, measured = -1, slowest = 0;
  json_int_t images = 0;
  size_t i;
  json_t *p;

  if (!hosts || !topo || !errors)
    goto nomem;
  dpt_report_iso_time(r->start_unix, t0, sizeof t0);
  dpt_report_iso_time(end, t1, sizeof t1);
  json_array_foreach(parts, i, p) {
    const char *h = json_string_value(json_object_get(p, "host"));
    size_t k;
    json_t *t, *found = NULL;
    json_array_foreach(topo, k, t) if (!strcmp(json_string_value(json_object_get(t, "host")), h)) found = t;
    if (!found) {
      json_t *node = json_object_get(p, "node");
      found = json_pack("{s:s,s:[]}", "host", h, "ranks");
      if (!found || json_array_append_new(topo, found) || json_array_append_new(hosts, json_string(h)))
        goto nomem;
      if (json_is_object(node))
        json_object_update(found, node);
    }
    json_array_append_new(json_object_get(found, "ranks"), json_integer(json_integer_value(json_object_get(p, "rank"))));
    if (json_real_value(json_object_get(p, "step_time_s")) > slowest)
      slowest = json_real_value(json_object_get(p, "step_time_s"));
    images += json_integer_value(json_object_get(p, "images"));
    json_t *e;
    size_t ei;
    json_array_foreach(json_object_get(p, "errors"), ei, e) json_array_append(errors, e);
    /* the collective takes as long as its slowest rank: max of the per-rank medians */
    json_t *a = json_object_get(json_object_get(p, "phases"), "allreduce");
    if (a && json_real_value(json_object_get(a, "p50_s")) > measured)
      measured = json_real_value(json_object_get(a, "p50_s"));
  }
  {
    size_t ai;
    json_t *e;
    json_array_foreach(absorbed, ai, e) if (!has_error(errors, json_integer_value(json_object_get(e, "rank")),
                                                       json_string_value(json_object_get(e, "message"))))
        json_array_append(errors, e);
  }
  /* synchronous training: every rank does the same steps, the job goes at the
   * pace of the rank with the longest total step time */
  ips = slowest > 0 ? (double)images / slowest : 0;
  if (r->ar_measured >= 0)
    measured = r->ar_measured;
  {
    /* predicted: the plan's own cost when it is for the same message */
    double pred = NAN;
    json_t *alts = json_object_get(r->plan, "alternatives");
    if (r->plan && r->ar_bytes && r->ar_bytes == r->plan_bytes && json_array_size(alts))
      pred = json_real_value(json_object_get(json_array_get(alts, 0), "predicted_s"));
    ar = json_pack("{s:o,s:o,s:o,s:o,s:o}", "bytes", r->ar_bytes ? json_integer((json_int_t)r->ar_bytes) : json_null(),
                   "wire", dpt_report_str_or_null(json_string_value(json_object_get(r->software, "wire"))), "measured_s",
                   measured >= 0 ? json_real(measured) : json_null(), "predicted_s", dpt_report_num_or_null(pred),
                   "plan_bytes", r->plan ? json_integer((json_int_t)r->plan_bytes) : json_null());
    if (!ar)
      goto nomem;
  }
  if (r->baseline) {
    double t0v;
    json_int_t n0;
    if (load_baseline(r->baseline, &baseline, &t0v, &n0, err))
      goto fail;
    scaling = json_pack("{s:s,s:I,s:f,s:i,s:f,s:f,s:f,s:s}", "baseline", r->baseline, "baseline_ranks", n0,
                        "baseline_images_per_s", t0v, "ranks", r->size, "images_per_s", ips, "speedup",
                        ips / t0v, "efficiency", dpt_report_efficiency(ips, r->size, t0v, n0), "definition",
                        "e = t / (t0 * n / n0); ChainerMN: e = t / (t0 * n) with a 1-rank baseline");
    if (!scaling)
      goto nomem;
  }
  const char *job = dpt_env_str("SLURM_JOB_ID"), *step = dpt_env_str("SLURM_STEP_ID");
  doc = json_pack("{s:s,s:s,s:{s:O,s:o,s:o,s:o,s:o,s:i,s:i,s:i,s:s,s:s,s:f,s:o,s:b},"
                  "s:O,s:O,s:o,s:o,s:O,s:{s:f,s:I},s:o,s:O,s:O,s:o}",
                  "schema", DPT_REPORT_SCHEMA, "program", r->program, "job", "command", r->command,
                  "slurm_job_id", dpt_report_str_or_null(job), "slurm_step_id", dpt_report_str_or_null(step), "launcher",
                  launcher(), "hosts", hosts, "n_nodes", (int)json_array_size(hosts),
                  "ranks", r->size, "ranks_reporting", (int)json_array_size(parts), "start", t0, "end", t1,
                  "duration_s", dpt_report_now_mono() - r->start_mono, "exit_status",
                  r->exit_status >= 0 ? json_integer(r->exit_status) : json_null(), "partial", partial,
                  "software", r->software, "config", r->config, "topology", topo, "plan",
                  r->plan ? json_incref(r->plan) : json_null(), "ranks", parts, "throughput", "images_per_s",
                  ips, "images", images, "allreduce", ar, "learning_curve", r->curve, "results", r->results,
                  "errors", errors);
  hosts = topo = ar = errors = NULL;
  if (!doc)
    goto nomem;
  if (json_object_set_new(json_object_get(doc, "job"), "oversubscribed", dpt_report_str_or_null(r->oversubscribed)) ||
      json_object_set_new(json_object_get(doc, "job"), "launch_digest",
                          r->launch_digest[0] ? json_string(r->launch_digest) : json_null()))
    goto nomem;
  if (scaling && json_object_set_new(doc, "scaling", scaling))
    goto nomem;
  scaling = NULL;
  json_decref(baseline);
  return doc;
nomem:
  dpt_err_set(err, DPT_E_NOMEM, "report: out of memory building the document");
fail:
  json_decref(hosts);
  json_decref(topo);
  json_decref(ar);
  json_decref(errors);
  json_decref(scaling);
  json_decref(baseline);
  json_decref(doc);
  return NULL;
}

json_t *dpt_report_to_json(struct dpt_report *r, struct dpt_err *err)
{
  json_t *parts = json_array(), *part = dpt_report_rank_part(r), *doc = NULL;
  if (!parts || !part || json_array_append_new(parts, part)) {
    json_decref(parts);
    dpt_err_set(err, DPT_E_NOMEM, "report: out of memory");
    return NULL;
  }
  doc = build_doc(r, parts, r->size > 1, NULL, err);
  json_decref(parts);
  return doc;
}

static int write_doc(json_t *doc, const char *path, struct dpt_err *err)
{
  char *text;
  int rc;
  if ((rc = dpt_report_validate(doc, path, err))) {
    dpt_err_prefix(err, "report about to be written is invalid (a dpt bug)");
    return rc;
  }
  text = json_dumps(doc, JSON_INDENT(1) | JSON_REAL_PRECISION(9));
  if (!text)
    return dpt_err_set(err, DPT_E_NOMEM, "report: cannot render %s", path);
  size_t len = strlen(text);
  text[len] = '\n'; /* over the NUL: the file ends with a newline */
  if ((rc = dpt_report_write_atomic(path, text, len + 1, err)) < 0)
    dpt_err_prefix(err, "report (--report / DPT_REPORT)");
  free(text);
  return rc;
}

/* path + ".rank<N>": where a rank writes its own part. */
static int rank_path(char *path, size_t cap, int rank, struct dpt_err *err)
{
  size_t n = strlen(path);
  int k = snprintf(path + n, cap - n, ".rank%d", rank);
  if (k < 0 || (size_t)k >= cap - n)
    return dpt_err_set(err, DPT_E_INPUT, "report path '%s' too long", path);
  return 0;
}

int dpt_report_finish(struct dpt_report *r, const struct dpt_report_gather *g, const char *explicit_path,
                      char *out_path, struct dpt_err *err)
{
  char path[4096];
  char *mine = NULL, *all = NULL;
  size_t *lens = NULL;
  json_t *parts = NULL, *part = NULL, *doc = NULL, *absorbed = NULL, *files = NULL;
  int rc = 0, grc = 0, partial = 0;
  struct dpt_err gerr;

  dpt_err_clear(&gerr);
  if ((rc = dpt_report_path(r, explicit_path, path, sizeof path, err)) < 0)
    return rc;
  rc = 0;
  part = dpt_report_rank_part(r);
  parts = json_array();
  mine = part ? json_dumps(part, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
  if (!part || !parts || !mine) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "report: out of memory");
    goto out;
  }
  if (g && g->gather) { /* also for one rank: a launcher's hook gives its rank's part */
    grc = g->gather(g->arg, mine, strlen(mine), &all, &lens, &gerr);
    if (grc < 0) {
      dpt_err_prefix(&gerr, "report: gathering the ranks' parts failed");
      dpt_report_set_error(r, &gerr);
      json_decref(part);
      part = dpt_report_rank_part(r); /* with the gather error in it */
      partial = 1;
      if (r->rank != 0 && (rc = rank_path(path, sizeof path, r->rank, err)))
        goto out;
    } else if (r->rank != 0) {
      goto out; /* rank 0 writes */
    }
  } else if (r->size > 1) {
    /* no gather: every rank writes its own part, rank 0 at the path */
    partial = 1;
    if (r->rank != 0 && (rc = rank_path(path, sizeof path, r->rank, err)))
      goto out;
  }
  if (all && grc >= 0) {
    size_t at = 0;
    for (int i = 0; i < r->size; i++) {
      json_error_t je;
      json_t *pj;
      if (!lens[i]) { /* the hook has no part of this rank (a launcher's rank left no record) */
        partial = 1;
        continue;
      }
      pj = json_loadb(all + at, lens[i], 0, &je);
      at += lens[i];
      if (!pj || !json_is_object(pj)) {
        json_decref(pj);
        dpt_err_set(&gerr, DPT_E_RUNTIME, "report: rank %d's part is not a JSON object: %s", i, je.text);
        dpt_report_set_error(r, &gerr);
        partial = 1;
        continue;
      }
      json_array_append_new(parts, pj);
    }
  } else {
    json_array_append(parts, part);
  }
  if (r->rank == 0) /* the ranks' error files: into the report, then away */
    absorbed = absorb_error_files(r, path, &files);
  doc = build_doc(r, parts, partial, absorbed, err);
  if (!doc) {
    rc = err->code;
    goto out;
  }
  if ((rc = write_doc(doc, path, err)))
    goto out;
  {
    size_t i;
    json_t *f;
    json_array_foreach(files, i, f) unlink(json_string_value(f));
  }
  if (out_path)
    snprintf(out_path, 4096, "%s", path);
  if (r->rank == 0) {
    struct dpt_err aerr;
    dpt_err_clear(&aerr);
    dpt_report_announce(path, &aerr); /* best effort: unannounced, the launcher writes its own */
  }
  if (grc < 0) {
    *err = gerr;
    rc = grc;
  }
out:
  free(mine);
  free(all);
  free(lens);
  json_decref(part);
  json_decref(parts);
  json_decref(doc);
  json_decref(absorbed);
  json_decref(files);
  return rc;
}
