/* dpt_report_validate.c — reading job reports: the dpt.report/1 checker
 * (dpt_report_validate: every required field and its type, messages naming
 * the file and the field path) and dpt_report_load.  The writer
 * (dpt_report_doc.c) validates every document before writing it with the same
 * code; docs/schema-report.md is the prose schema. */
#define _GNU_SOURCE
#include "dpt_report.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int load_json(const char *path, json_t **out, struct dpt_err *err)
{
  json_error_t je;
  json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
  *out = NULL;
  if (!doc) {
    if (je.line < 0 || je.position == 0)
      return dpt_err_set(err, DPT_E_INPUT, "%s: cannot read: %s", path, je.text);
    return dpt_err_set(err, DPT_E_INPUT, "%s:%d:%d: not JSON: %s", path, je.line, je.column, je.text);
  }
  *out = doc;
  return 0;
}

/* ---- validation ------------------------------------------------------------------ */

enum vt { T_STR = 1, T_INT = 2, T_NUM = 4, T_BOOL = 8, T_OBJ = 16, T_ARR = 32, T_NULL = 64 };

struct vctx {
  const char *file;
  struct dpt_err *err;
  char path[512];
};

static const char *type_name(const json_t *j)
{
  switch (json_typeof(j)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a number";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  default: return "null";
  }
}

static const char *want_name(unsigned t)
{
  static char b[128];
  b[0] = '\0';
  const char *names[] = {"string", "integer", "number", "boolean", "object", "array", "null"};
  for (int i = 0; i < 7; i++)
    if (t & (1u << i)) {
      if (b[0])
        strcat(b, " or ");
      strcat(b, names[i]);
    }
  return b;
}

static int type_ok(const json_t *j, unsigned t)
{
  return ((t & T_STR) && json_is_string(j)) || ((t & T_INT) && json_is_integer(j)) ||
         ((t & T_NUM) && json_is_number(j)) || ((t & T_BOOL) && json_is_boolean(j)) ||
         ((t & T_OBJ) && json_is_object(j)) || ((t & T_ARR) && json_is_array(j)) ||
         ((t & T_NULL) && json_is_null(j));
}

/* The field `key` of object o (at v->path) must exist with type t. */
static const json_t *need(struct vctx *v, const json_t *o, const char *key, unsigned t)
{
  const json_t *j = json_object_get(o, key);
  if (v->err->code)
    return NULL;
  if (!j) {
    dpt_err_set(v->err, DPT_E_INPUT, "%s: missing field %s%s%s (a dpt.report/1 has it; was the file written "
                "by dpt?)", v->file, v->path, v->path[0] ? "." : "", key);
    return NULL;
  }
  if (!type_ok(j, t)) {
    dpt_err_set(v->err, DPT_E_INPUT, "%s: field %s%s%s is %s, expected %s", v->file, v->path,
                v->path[0] ? "." : "", key, type_name(j), want_name(t));
    return NULL;
  }
  return j;
}

static void push(struct vctx *v, size_t *mark, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void push(struct vctx *v, size_t *mark, const char *fmt, ...)
{
  va_list ap;
  *mark = strlen(v->path);
  va_start(ap, fmt);
  vsnprintf(v->path + *mark, sizeof v->path - *mark, fmt, ap);
  va_end(ap);
}

static void pop(struct vctx *v, size_t mark) { v->path[mark] = '\0'; }

static void check_stats(struct vctx *v, const json_t *phases)
{
  const char *k;
  const json_t *s;
  size_t m;
  json_object_foreach((json_t *)phases, k, s) {
    push(v, &m, ".%s", k);
    if (!json_is_object(s)) {
      dpt_err_set(v->err, DPT_E_INPUT, "%s: field %s is %s, expected object", v->file, v->path, type_name(s));
      return;
    }
    const char *f[] = {"total_s", "mean_s", "p50_s", "p90_s", "p99_s", "max_s"};
    for (int i = 0; i < 6; i++)
      need(v, s, f[i], T_NUM);
    pop(v, m);
  }
}

/* ranks[].end and ranks[].env: how a supervised program ended, what it was handed. */
static void check_end(struct vctx *v, const json_t *rank)
{
  size_t m;
  const json_t *e = need(v, rank, "end", T_OBJ), *env = need(v, rank, "env", T_OBJ), *x;
  const char *k;
  if (e) {
    push(v, &m, ".end");
    need(v, e, "by", T_STR);
    need(v, e, "started", T_BOOL);
    need(v, e, "status", T_INT | T_NULL);
    need(v, e, "signal", T_INT | T_NULL);
    need(v, e, "signal_name", T_STR | T_NULL);
    need(v, e, "forwarded", T_BOOL);
    need(v, e, "how", T_STR);
    need(v, e, "start", T_STR);
    need(v, e, "end", T_STR);
    need(v, e, "wall_s", T_NUM);
    if (json_object_get(e, "command"))
      need(v, e, "command", T_ARR);
    pop(v, m);
  }
  if (env) {
    push(v, &m, ".env");
    json_object_foreach((json_t *)env, k, x) need(v, env, k, T_STR);
    pop(v, m);
  }
}

int dpt_report_validate(const json_t *doc, const char *file, struct dpt_err *err)
{
  struct vctx v = {file ? file : "(report)", err, ""};
  const json_t *j, *a, *e;
  size_t i, m;
  const char *s;

  dpt_err_clear(err);
  if (!json_is_object(doc))
    return dpt_err_set(err, DPT_E_INPUT, "%s: not a JSON object (a dpt.report/1 document is one)", v.file);
  if (!(j = need(&v, doc, "schema", T_STR)))
    return err->code;
  s = json_string_value(j);
  if (strncmp(s, "dpt.report/", 11))
    return dpt_err_set(err, DPT_E_INPUT, "%s: field schema is \"%s\", not a job report (expected \"%s\")", v.file,
                       s, DPT_REPORT_SCHEMA);
  if (strcmp(s + 11, "1"))
    return dpt_err_set(err, DPT_E_INPUT, "%s: field schema is \"%s\": unsupported version (this dpt reads %s)",
                       v.file, s, DPT_REPORT_SCHEMA);
  need(&v, doc, "program", T_STR);
  if ((j = need(&v, doc, "job", T_OBJ))) {
    push(&v, &m, "job");
    if ((a = need(&v, j, "command", T_ARR)))
      json_array_foreach(a, i, e) if (!json_is_string(e) && !err->code)
        dpt_err_set(err, DPT_E_INPUT, "%s: field job.command[%zu] is %s, expected string", v.file, i, type_name(e));
    need(&v, j, "slurm_job_id", T_STR | T_NULL);
    need(&v, j, "slurm_step_id", T_STR | T_NULL);
    need(&v, j, "launcher", T_STR | T_NULL);
    need(&v, j, "hosts", T_ARR);
    need(&v, j, "n_nodes", T_INT);
    const json_t *rk = need(&v, j, "ranks", T_INT);
    if (rk && json_integer_value(rk) < 1 && !err->code)
      dpt_err_set(err, DPT_E_INPUT, "%s: field job.ranks is %lld, expected >= 1", v.file,
                  (long long)json_integer_value(rk));
    need(&v, j, "ranks_reporting", T_INT);
    need(&v, j, "start", T_STR);
    need(&v, j, "end", T_STR);
    need(&v, j, "duration_s", T_NUM);
    need(&v, j, "exit_status", T_INT | T_NULL);
    need(&v, j, "partial", T_BOOL);
    pop(&v, m);
  }
  if ((j = need(&v, doc, "software", T_OBJ))) {
    push(&v, &m, "software");
    need(&v, j, "dpt", T_STR);
    need(&v, j, "libraries", T_OBJ);
    pop(&v, m);
  }
  need(&v, doc, "config", T_OBJ);
  if ((a = need(&v, doc, "topology", T_ARR)))
    json_array_foreach(a, i, e) {
      push(&v, &m, "topology[%zu]", i);
      if (json_is_object(e)) {
        need(&v, e, "host", T_STR);
        need(&v, e, "ranks", T_ARR);
      } else if (!err->code)
        dpt_err_set(err, DPT_E_INPUT, "%s: field %s is %s, expected object", v.file, v.path, type_name(e));
      pop(&v, m);
    }
  if ((j = need(&v, doc, "plan", T_OBJ | T_NULL)) && json_is_object(j)) {
    push(&v, &m, "plan");
    const json_t *ps = need(&v, j, "schema", T_STR);
    if (ps && strcmp(json_string_value(ps), "dpt.plan/1") && !err->code)
      dpt_err_set(err, DPT_E_INPUT, "%s: field plan.schema is \"%s\", expected \"dpt.plan/1\"", v.file,
                  json_string_value(ps));
    need(&v, j, "digest", T_STR);
    need(&v, j, "nodes", T_ARR);
    need(&v, j, "ranks", T_ARR);
    need(&v, j, "alternatives", T_ARR);
    pop(&v, m);
  }
  if ((a = need(&v, doc, "ranks", T_ARR)))
    json_array_foreach(a, i, e) {
      push(&v, &m, "ranks[%zu]", i);
      if (!json_is_object(e)) {
        if (!err->code)
          dpt_err_set(err, DPT_E_INPUT, "%s: field %s is %s, expected object", v.file, v.path, type_name(e));
      } else {
        need(&v, e, "rank", T_INT);
        need(&v, e, "host", T_STR);
        const json_t *b = need(&v, e, "binding", T_OBJ);
        if (b) {
          size_t m2;
          push(&v, &m2, ".binding");
          need(&v, b, "cpus_allowed", T_STR);
          const char *bs[] = {"applied", "cpuset", "numa", "cuda_visible_devices", "omp_num_threads"};
          for (int k = 0; k < 5; k++)
            need(&v, b, bs[k], T_STR | T_NULL);
          const char *opt[] = {"cuda_device", "nccl_ib_hca"}; /* newer reports */
          for (int k = 0; k < 2; k++)
            if (json_object_get(b, opt[k]))
              need(&v, b, opt[k], T_STR | T_NULL);
          pop(&v, m2);
        }
        need(&v, e, "node", T_OBJ | T_NULL);
        need(&v, e, "steps", T_INT);
        need(&v, e, "images", T_INT);
        need(&v, e, "step_time_s", T_NUM);
        need(&v, e, "images_per_s", T_NUM);
        need(&v, e, "peak_rss_bytes", T_INT);
        need(&v, e, "errors", T_ARR);
        if (json_object_get(e, "end")) /* a supervised program's part (newer reports) */
          check_end(&v, e);
        const json_t *ph = need(&v, e, "phases", T_OBJ);
        if (ph) {
          size_t m2;
          push(&v, &m2, ".phases");
          check_stats(&v, ph);
          pop(&v, m2);
        }
      }
      pop(&v, m);
    }
  if ((j = need(&v, doc, "throughput", T_OBJ))) {
    push(&v, &m, "throughput");
    need(&v, j, "images_per_s", T_NUM);
    need(&v, j, "images", T_INT);
    pop(&v, m);
  }
  if ((j = need(&v, doc, "allreduce", T_OBJ))) {
    push(&v, &m, "allreduce");
    need(&v, j, "bytes", T_INT | T_NULL);
    need(&v, j, "measured_s", T_NUM | T_NULL);
    need(&v, j, "predicted_s", T_NUM | T_NULL);
    pop(&v, m);
  }
  if ((a = need(&v, doc, "learning_curve", T_ARR)))
    json_array_foreach(a, i, e) {
      push(&v, &m, "learning_curve[%zu]", i);
      if (!json_is_object(e)) {
        if (!err->code)
          dpt_err_set(err, DPT_E_INPUT, "%s: field %s is %s, expected object", v.file, v.path, type_name(e));
      } else {
        need(&v, e, "epoch", T_NUM);
        const char *f[] = {"train_loss", "train_top1", "val_loss", "val_top1", "val_top5"};
        for (int k = 0; k < 5; k++)
          need(&v, e, f[k], T_NUM | T_NULL);
      }
      pop(&v, m);
    }
  need(&v, doc, "results", T_OBJ);
  if ((a = need(&v, doc, "errors", T_ARR)))
    json_array_foreach(a, i, e) {
      push(&v, &m, "errors[%zu]", i);
      if (!json_is_object(e)) {
        if (!err->code)
          dpt_err_set(err, DPT_E_INPUT, "%s: field %s is %s, expected object", v.file, v.path, type_name(e));
      } else {
        need(&v, e, "rank", T_INT);
        need(&v, e, "code", T_STR);
        need(&v, e, "message", T_STR);
        need(&v, e, "time", T_STR);
      }
      pop(&v, m);
    }
  if ((j = json_object_get(doc, "scaling"))) {
    push(&v, &m, "scaling");
    if (!json_is_object(j) && !err->code)
      dpt_err_set(err, DPT_E_INPUT, "%s: field scaling is %s, expected object", v.file, type_name(j));
    else {
      need(&v, j, "baseline_ranks", T_INT);
      need(&v, j, "baseline_images_per_s", T_NUM);
      need(&v, j, "speedup", T_NUM);
      need(&v, j, "efficiency", T_NUM);
    }
    pop(&v, m);
  }
  return err->code;
}

int dpt_report_load(const char *path, json_t **out, struct dpt_err *err)
{
  json_t *doc;
  int rc = load_json(path, &doc, err);
  *out = NULL;
  if (rc)
    return rc;
  if ((rc = dpt_report_validate(doc, path, err))) {
    json_decref(doc);
    return rc;
  }
  *out = doc;
  return 0;
}
