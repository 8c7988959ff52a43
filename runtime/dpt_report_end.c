/* dpt_report_end.c — the job report of any program a dpt launcher started
 * (dpt_report_end.h): the supervisors' parts, merged into the program's own
 * report or written as the program's report. */
#define _GNU_SOURCE
#include "dpt_report_end.h"

#include <errno.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "dpt_bind.h"
#include "dpt_env.h"
#include "dpt_file.h"
#include "dpt_node.h"
#include "dpt_rdzv.h"

static double now_unix(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void dpt_report_end_from_wait(struct dpt_report_end *e, int wstatus, const struct rusage *ru)
{
  e->end_unix = now_unix();
  e->peak_rss_bytes = ru ? (long long)ru->ru_maxrss * 1024 : 0;
  if (WIFSIGNALED(wstatus)) {
    const char *s = strsignal(WTERMSIG(wstatus));
    e->status = -1;
    e->signal = WTERMSIG(wstatus);
    snprintf(e->how, sizeof e->how, "killed by signal %d (%s)", e->signal, s ? s : "?");
  } else {
    e->status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
    e->signal = 0;
    if (e->started)
      snprintf(e->how, sizeof e->how, "exited with status %d", e->status);
  }
}

/* The program's name for the report: the base name of argv[0]. */
static void program_name(const char *argv0, char *buf, size_t len)
{
  const char *slash = argv0 ? strrchr(argv0, '/') : NULL;
  snprintf(buf, len, "%s", !argv0 || !*argv0 ? "program" : slash && slash[1] ? slash + 1 : argv0);
}

struct dpt_report_end_part {
  struct dpt_report *rep; /* this rank's report, made once (its node's topology read) */
  long rank;
  char node[256];
};

void dpt_report_end_part_free(struct dpt_report_end_part *p)
{
  if (!p)
    return;
  dpt_report_destroy(p->rep);
  free(p);
}

/* The rank's report with its binding. */
static int part_open(struct dpt_report_end_part **out, int argc, char *const *argv, struct dpt_err *err)
{
  struct dpt_report_end_part *p = calloc(1, sizeof *p);
  long size = dpt_env_str("DPT_SIZE") ? atol(dpt_env_str("DPT_SIZE")) : -1;
  char prog[64], applied[1024];
  int rc;

  *out = NULL;
  if (!p)
    return dpt_err_set(err, DPT_E_NOMEM, "rank supervisor: out of memory");
  p->rank = dpt_env_str("DPT_RANK") ? atol(dpt_env_str("DPT_RANK")) : -1;
  snprintf(p->node, sizeof p->node, "%s", dpt_env_str("DPT_NODE_NAME") ? dpt_env_str("DPT_NODE_NAME") : "?");
  if (p->rank < 0 || size < 1 || p->rank >= size) {
    rc = dpt_err_set(err, DPT_E_INPUT, "rank supervisor: DPT_RANK/DPT_SIZE missing or bad (%ld of %ld): "
                     "not started by a dpt launcher", p->rank, size);
    goto fail;
  }
  program_name(argv && argc > 0 ? argv[0] : NULL, prog, sizeof prog);
  if ((rc = dpt_report_create(&p->rep, prog, argc, argv, (int)p->rank, (int)size, err)) < 0)
    goto fail;
  dpt_bind_describe_applied(applied, sizeof applied);
  if (dpt_report_set_binding(p->rep, applied)) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "rank supervisor: out of memory");
    goto fail;
  }
  *out = p;
  return 0;
fail:
  dpt_report_end_part_free(p);
  return rc;
}

/* The part with end e (an error when the program did not end well) to path: atomically, not
 * synced (dpt_report_write_handoff: the launcher reads it once the job is over). */
static int part_put(struct dpt_report_end_part *p, const char *path, const struct dpt_report_end *e,
                    struct dpt_err *err)
{
  const char *names[64];
  char *text = NULL;
  int n = 0, rc;

  for (int i = 0; dpt_bind_env_names[i] && n < 62; i++)
    names[n++] = dpt_bind_env_names[i];
  for (int i = 0; dpt_rdzv_env_names[i] && n < 62; i++)
    if (strcmp(dpt_rdzv_env_names[i], "MASTER_ADDR") && strcmp(dpt_rdzv_env_names[i], "MASTER_PORT"))
      names[n++] = dpt_rdzv_env_names[i]; /* those two are in dpt_bind_env_names */
  names[n] = NULL;
  if (dpt_report_set_end(p->rep, e, names))
    return dpt_err_set(err, DPT_E_NOMEM, "rank supervisor: out of memory");
  dpt_report_clear_errors(p->rep);
  if (!e->started || e->status != 0) {
    struct dpt_err fe;
    dpt_err_clear(&fe);
    dpt_err_set(&fe, e->started ? DPT_E_RUNTIME : DPT_E_INPUT, "rank %ld on %s (pid %ld) %s%s", p->rank,
                p->node, e->pid, e->how, e->forwarded ? " after the launcher forwarded a signal" : "");
    dpt_report_set_error(p->rep, &fe);
  }
  if (!(text = dpt_report_part(p->rep)))
    return dpt_err_set(err, DPT_E_NOMEM, "rank supervisor: out of memory");
  rc = dpt_report_write_handoff(path, text, strlen(text), err);
  free(text);
  return rc < 0 ? rc : 0;
}

int dpt_report_end_part_open(struct dpt_report_end_part **out, int argc, char *const *argv, struct dpt_err *err)
{
  struct dpt_node *node = NULL;
  struct dpt_err ne;
  int rc = part_open(out, argc, argv, err);
  if (rc < 0)
    return rc;
  /* the node's topology, kept for the writes (when hwloc cannot read it, the part's
   * node stays unset and the write tries again, as any rank part does) */
  dpt_err_clear(&ne);
  if (dpt_node_load(&node, NULL, &ne) == 0) {
    rc = dpt_report_set_node((*out)->rep, node, err);
    dpt_node_destroy(node);
    if (rc < 0) {
      dpt_report_end_part_free(*out);
      *out = NULL;
      return rc;
    }
  }
  return 0;
}

int dpt_report_end_part_ahead(struct dpt_report_end_part *p, const char *path, const struct dpt_report_end *e,
                              const char *teardown, struct dpt_err *err)
{
  struct dpt_report_end ahead = *e;

  ahead.status = -1;
  ahead.signal = 0;
  ahead.peak_rss_bytes = 0;
  ahead.end_unix = ahead.start_unix;
  snprintf(ahead.how, sizeof ahead.how, "no end recorded: its supervisor was killed before the program "
           "ended (%.180s)", teardown && *teardown ? teardown : "a teardown");
  return part_put(p, path, &ahead, err);
}

int dpt_report_end_part_end(struct dpt_report_end_part *p, const char *path, int argc, char *const *argv,
                            const struct dpt_report_end *e, struct dpt_err *err)
{
  struct dpt_report_end_part *own = NULL;
  int rc;

  if (!p && (rc = part_open(&own, argc, argv, err)) < 0)
    return rc;
  rc = part_put(p ? p : own, path, e, err);
  dpt_report_end_part_free(own);
  return rc;
}

int dpt_report_end_write(const char *path, int argc, char *const *argv, const struct dpt_report_end *e,
                         struct dpt_err *err)
{
  return dpt_report_end_part_end(NULL, path, argc, argv, e, err);
}

/* ---- the launcher ----------------------------------------------------------- */

struct parts {
  char **text; /* [n] file contents, NULL when missing */
  size_t *len; /* [n] */
  int n;
};

/* A small file's contents (a supervisor's part, the announcement), NULL when absent. */
static char *slurp(const char *path, size_t *len)
{
  struct dpt_err e;
  char *buf = NULL;
  *len = 0;
  dpt_err_clear(&e);
  return dpt_file_read(path, "report part", NULL, 64u << 20, &buf, len, &e) == 0 ? buf : NULL;
}

/* The gather hook of the launcher's report: the supervisors' parts in rank order,
 * zero-length for a rank without one (dpt_report_finish: partial). */
static int gather_parts(void *arg, const char *mine, size_t len, char **all, size_t **lens, struct dpt_err *err)
{
  struct parts *p = arg;
  size_t total = 0, at = 0;
  (void)mine;
  (void)len;
  if (p->n < 1)
    return dpt_err_set(err, DPT_E_INPUT, "report: no ranks to gather");
  for (int i = 0; i < p->n; i++)
    total += p->text[i] ? p->len[i] : 0;
  *all = malloc(total + 1);
  *lens = calloc((size_t)(unsigned)p->n, sizeof **lens);
  if (!*all || !*lens) {
    free(*all);
    free(*lens);
    *all = NULL;
    *lens = NULL;
    return dpt_err_set(err, DPT_E_NOMEM, "report: out of memory gathering the ranks' parts");
  }
  for (int i = 0; i < p->n; i++)
    if (p->text[i]) {
      memcpy(*all + at, p->text[i], p->len[i]);
      at += p->len[i];
      (*lens)[i] = p->len[i];
    }
  return 0;
}

static int by_rank(const void *a, const void *b)
{
  json_int_t x = json_integer_value(json_object_get(*(json_t *const *)a, "rank"));
  json_int_t y = json_integer_value(json_object_get(*(json_t *const *)b, "rank"));
  return (x > y) - (x < y);
}

/* Adds each part's end and env to the program's report (ranks it lacks: the whole
 * part, its errors too) and the launcher's exit status when the program set none. */
static int merge(json_t *doc, const struct parts *p, int exit_status)
{
  json_t *ranks = json_object_get(doc, "ranks"), *job = json_object_get(doc, "job"), *e;
  json_t **v;
  size_t i, n;
  int added = 0;

  for (int r = 0; r < p->n; r++) {
    json_t *part = p->text[r] ? json_loadb(p->text[r], p->len[r], 0, NULL) : NULL, *found = NULL;
    if (!part)
      continue;
    json_array_foreach(ranks, i, e) if (json_integer_value(json_object_get(e, "rank")) == r) found = e;
    if (found) {
      json_object_set(found, "end", json_object_get(part, "end"));
      json_object_set(found, "env", json_object_get(part, "env"));
    } else {
      json_t *pe;
      size_t k;
      json_array_foreach(json_object_get(part, "errors"), k, pe) json_array_append(json_object_get(doc, "errors"), pe);
      json_array_append(ranks, part);
      added++;
    }
    json_decref(part);
  }
  n = json_array_size(ranks);
  if (added && n > 1 && (v = malloc(n * sizeof *v))) {
    for (i = 0; i < n; i++)
      v[i] = json_incref(json_array_get(ranks, i));
    qsort(v, n, sizeof *v, by_rank);
    json_array_clear(ranks);
    for (i = 0; i < n; i++)
      json_array_append_new(ranks, v[i]);
    free(v);
  }
  json_object_set_new(job, "ranks_reporting", json_integer((json_int_t)n));
  if (json_is_null(json_object_get(job, "exit_status")))
    json_object_set_new(job, "exit_status", json_integer(exit_status));
  return 0;
}

static int write_merged(json_t *doc, const char *path, struct dpt_err *err)
{
  char *text;
  int rc;
  if ((rc = dpt_report_validate(doc, path, err)))
    return dpt_err_prefix(err, "report with the ranks' ends is invalid (a dpt bug)");
  text = json_dumps(doc, JSON_INDENT(1) | JSON_REAL_PRECISION(9));
  if (!text)
    return dpt_err_set(err, DPT_E_NOMEM, "report: cannot render %s", path);
  size_t len = strlen(text);
  text[len] = '\n'; /* over the NUL: the file ends with a newline */
  rc = dpt_report_write_atomic(path, text, len + 1, err);
  free(text);
  return rc;
}

/* The launcher's own report of the program. */
static int write_own(const struct dpt_report_end_job *j, struct parts *p, int exit_status, char *out_path,
                     struct dpt_err *err)
{
  struct dpt_report *rep = NULL;
  struct dpt_report_gather g = {gather_parts, p};
  char prog[64], path[4096] = "";
  long pid0 = 0;
  int rc;

  int argc = j->argc;
  char *const *argv = j->argv;
  char *cmd[64];
  json_t *first = NULL;

  for (int r = 0; r < p->n && !first; r++) /* srun cannot say the step's command: the ranks can */
    first = p->text[r] ? json_loadb(p->text[r], p->len[r], 0, NULL) : NULL;
  if (argc < 1 && first) {
    const json_t *c = json_object_get(json_object_get(first, "end"), "command"), *x;
    size_t i;
    argc = 0;
    json_array_foreach(c, i, x) if (argc < 63 && json_is_string(x)) cmd[argc++] = (char *)json_string_value(x);
    cmd[argc] = NULL;
    argv = cmd;
  }
  program_name(argc > 0 ? argv[0] : NULL, prog, sizeof prog);
  rc = dpt_report_create(&rep, prog, argc, argv, 0, j->plan->n_ranks, err);
  json_decref(first);
  if (rc < 0)
    return rc;
  if (p->text[0]) { /* the default name and %p carry rank 0's pid, as a program's own report does */
    json_t *part0 = json_loadb(p->text[0], p->len[0], 0, NULL);
    pid0 = (long)json_integer_value(json_object_get(part0, "pid"));
    json_decref(part0);
  }
  dpt_report_set_pid(rep, pid0 > 0 ? pid0 : (long)getpid());
  dpt_report_set_start(rep, j->start_unix);
  dpt_report_set_exit_status(rep, exit_status);
  if ((rc = dpt_report_set_plan(rep, j->plan, err)) < 0)
    goto out;
  for (int r = 0; r < p->n; r++)
    if (!p->text[r]) {
      struct dpt_err me;
      dpt_err_clear(&me);
      dpt_err_set(&me, DPT_E_RUNTIME, "rank %d on %s: no record of how it ended (its supervisor wrote no "
                  "part%s%s)", r, j->plan->nodes[j->plan->ranks[r].node].host, j->missing_hint ? ": " : "",
                  j->missing_hint ? j->missing_hint : "");
      dpt_report_set_error(rep, &me);
    }
  rc = dpt_report_finish(rep, &g, j->path, path, err);
  if (rc == 0 || path[0])
    snprintf(out_path, 4096, "%s", path);
out:
  dpt_report_destroy(rep);
  return rc;
}

/* The job's exit status from the parts: the status (128 + signal) of the rank whose
 * program failed first, 0 when none did. */
static int status_from_parts(const struct parts *p)
{
  int code = 0;
  char first[40] = ""; /* its end time */
  for (int r = 0; r < p->n; r++) {
    json_t *part = p->text[r] ? json_loadb(p->text[r], p->len[r], 0, NULL) : NULL;
    json_t *e = json_object_get(part, "end");
    json_int_t st = json_integer_value(json_object_get(e, "status"));
    json_int_t sig = json_integer_value(json_object_get(e, "signal"));
    const char *t = json_string_value(json_object_get(e, "end"));
    if (e && (st || sig) && t && (!first[0] || strcmp(t, first) < 0)) { /* ISO UTC: text order is time order */
      snprintf(first, sizeof first, "%s", t);
      code = sig ? 128 + (int)sig : (int)st;
    }
    json_decref(part);
  }
  return code;
}

int dpt_report_end_finish(const struct dpt_report_end_job *j, char *out_path, size_t cap, struct dpt_err *err)
{
  struct parts p = {NULL, NULL, j->plan ? j->plan->n_ranks : 0};
  char file[4200], *ann = NULL, written[4096] = "";
  size_t alen = 0;
  json_t *doc = NULL;
  int rc = 0, exit_status;

  if (cap)
    out_path[0] = '\0';
  if (!j->plan || p.n < 1)
    return dpt_err_set(err, DPT_E_INPUT, "launcher report: no plan");
  p.text = calloc((size_t)p.n, sizeof *p.text);
  p.len = calloc((size_t)p.n, sizeof *p.len);
  if (!p.text || !p.len) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "launcher report: out of memory");
    goto out;
  }
  for (int r = 0; r < p.n; r++) {
    snprintf(file, sizeof file, "%s%d%s", j->parts_prefix, r, j->parts_suffix);
    p.text[r] = slurp(file, &p.len[r]);
    if (p.text[r] && !p.len[r]) {
      free(p.text[r]);
      p.text[r] = NULL;
    }
  }
  exit_status = j->exit_status >= 0 ? j->exit_status : status_from_parts(&p);
  unsetenv("DPT_REPORT_ANNOUNCE"); /* dpt_report_finish below must not announce to the ranks' file */
  if (j->announce && (ann = slurp(j->announce, &alen))) {
    ann[strcspn(ann, "\n")] = '\0';
    if (!strcmp(ann, "none")) {
      rc = 0;
      goto out;
    }
    if (dpt_report_load(ann, &doc, err) == 0 && merge(doc, &p, exit_status) == 0 &&
        write_merged(doc, ann, err) == 0) {
      snprintf(out_path, cap, "%s", ann);
      rc = 1;
      goto out;
    }
    dpt_err_prefix(err, "adding the ranks' ends to the program's report");
    rc = err->code;
    goto out;
  }
  {
    int any = 0;
    for (int r = 0; r < p.n; r++)
      any |= p.text[r] != NULL;
    if (!any) { /* nothing to report: say why rather than write a report of no rank */
      rc = dpt_err_set(err, DPT_E_RUNTIME, "no rank left a record of how it ended (%s)",
                       j->missing_hint ? j->missing_hint : "its supervisor wrote no part");
      goto out;
    }
  }
  rc = write_own(j, &p, exit_status, written, err);
  snprintf(out_path, cap, "%s", written);
  if (rc == 0)
    rc = 2;
  else if (written[0] && rc < 0) /* written, partial (a gather error): still the report */
    rc = 2;
out:
  for (int r = 0; r < p.n && p.text; r++) {
    snprintf(file, sizeof file, "%s%d%s", j->parts_prefix, r, j->parts_suffix);
    unlink(file);
    free(p.text[r]);
  }
  if (j->announce)
    unlink(j->announce);
  free(p.text);
  free(p.len);
  free(ann);
  json_decref(doc);
  return rc;
}
