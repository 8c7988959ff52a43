/* dpt_report.c — the "dpt.report/1" job report: collect per rank, gather to
 * rank 0, validate, write atomically.  Layout and definitions (percentiles,
 * images/s, scaling efficiency): docs/schema-report.md. */
#define _GNU_SOURCE
#include "dpt_report.h"
#include "dpt_env.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hwloc.h>

#include "dpt_job.h"
#include "dpt_node.h"
#include "dpt_plan.h"

#ifndef DPT_VERSION
#define DPT_VERSION "unknown"
#endif

static const char *const phase_names[DPT_REPORT_N_PHASES] = {
  "data_wait", "forward", "backward", "allreduce", "allreduce_exposed", "update", "step"};

const char *dpt_report_phase_name(int phase)
{
  return phase >= 0 && phase < DPT_REPORT_N_PHASES ? phase_names[phase] : "?";
}

struct dpt_report {
  char program[64];
  int rank, size;
  json_t *command;      /* array of argv strings */
  double start_unix;    /* CLOCK_REALTIME at create */
  double start_mono;    /* CLOCK_MONOTONIC at create */
  char host[256];
  long pid;
  json_t *software;     /* object; "libraries" inside */
  json_t *config, *results;
  json_t *plan;         /* dpt.plan/1 or NULL */
  uint64_t plan_bytes;  /* plan->opts.size_bytes (fp32 bytes the costs are for) */
  int plan_fp16;
  json_t *node;         /* this rank's node summary or NULL */
  char *binding;        /* free text or NULL */
  char *oversubscribed; /* what ranks share (dpt_job_sharing of the plan, or the launcher's
                           DPT_PLAN_OVERSUBSCRIBED) or NULL */
  char launch_digest[17]; /* the plan the launcher announced (DPT_PLAN_DIGEST) when the embedded
                             plan is its plan for the job's own message; "" otherwise */
  uint64_t ar_bytes;    /* 0: not set */
  double ar_measured;   /* < 0: from the steps */
  double *samples[DPT_REPORT_N_PHASES]; /* [cap] per phase, n_steps used */
  size_t n_steps, cap;
  long images;
  json_t *curve;        /* array */
  json_t *errors;       /* array */
  int exit_status;      /* -1: not set */
  char *baseline;
  int has_end;                /* a supervisor's part: the program's pid, RSS, end, env */
  struct dpt_report_end end;
  json_t *env;                /* object: the handed-over variables, or NULL */
};

static double now_real(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double now_mono(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void iso_time(double t, char *buf, size_t len)
{
  time_t s = (time_t)t;
  struct tm tm;
  gmtime_r(&s, &tm);
  int ms = (int)((t - (double)s) * 1000);
  if (ms < 0 || ms > 999)
    ms = 0;
  char b[32];
  strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf, len, "%s.%03dZ", b, ms);
}

static json_t *str_or_null(const char *s)
{
  return s ? json_string(s) : json_null();
}

/* A number that JSON can hold: NAN/inf become null. */
static json_t *num_or_null(double v)
{
  return isfinite(v) ? json_real(v) : json_null();
}

void dpt_report_epoch_init(struct dpt_report_epoch *e)
{
  e->epoch = NAN;
  e->step = -1;
  e->train_loss = e->train_top1 = e->val_loss = e->val_top1 = e->val_top5 = NAN;
  e->lr = NAN;
  e->elapsed_s = NAN;
}

int dpt_report_create(struct dpt_report **out, const char *program, int argc, char *const *argv,
                      int rank, int size, struct dpt_err *err)
{
  struct dpt_report *r = NULL;
  char v[64];
  unsigned hv = hwloc_get_api_version();

  *out = NULL;
  if (size < 1 || rank < 0 || rank >= size)
    return dpt_err_set(err, DPT_E_INPUT, "report: rank %d of %d ranks: need 0 <= rank < size", rank, size);
  if (!program || !*program)
    return dpt_err_set(err, DPT_E_INPUT, "report: empty program name");
  r = calloc(1, sizeof *r);
  if (!r)
    goto nomem;
  snprintf(r->program, sizeof r->program, "%s", program);
  r->rank = rank;
  r->size = size;
  r->start_unix = now_real();
  r->start_mono = now_mono();
  r->pid = (long)getpid();
  r->exit_status = -1;
  r->ar_measured = -1;
  if (dpt_env_str("DPT_PLAN_OVERSUBSCRIBED") && !(r->oversubscribed = strdup(dpt_env_str("DPT_PLAN_OVERSUBSCRIBED"))))
    goto nomem;
  if (gethostname(r->host, sizeof r->host - 1))
    snprintf(r->host, sizeof r->host, "unknown");
  r->command = json_array();
  r->software = json_object();
  r->config = json_object();
  r->results = json_object();
  r->curve = json_array();
  r->errors = json_array();
  if (!r->command || !r->software || !r->config || !r->results || !r->curve || !r->errors)
    goto nomem;
  for (int i = 0; i < argc && argv && argv[i]; i++)
    if (json_array_append_new(r->command, json_string(argv[i])))
      goto nomem;
  json_t *libs = json_object();
  if (!libs || json_object_set_new(r->software, "libraries", libs))
    goto nomem;
#ifdef HWLOC_VERSION
  snprintf(v, sizeof v, "%s", HWLOC_VERSION); /* the library's version (the API version lags) */
  (void)hv;
#else
  snprintf(v, sizeof v, "%u.%u.%u", hv >> 16, (hv >> 8) & 0xff, hv & 0xff);
#endif
  if (json_object_set_new(libs, "hwloc", json_string(v)) ||
      json_object_set_new(libs, "jansson", json_string(jansson_version_str())) ||
      json_object_set_new(r->software, "dpt", json_string(DPT_VERSION)))
    goto nomem;
  *out = r;
  return 0;
nomem:
  dpt_report_destroy(r);
  return dpt_err_set(err, DPT_E_NOMEM, "report: out of memory");
}

void dpt_report_destroy(struct dpt_report *r)
{
  if (!r)
    return;
  json_decref(r->command);
  json_decref(r->software);
  json_decref(r->config);
  json_decref(r->results);
  json_decref(r->plan);
  json_decref(r->node);
  json_decref(r->curve);
  json_decref(r->errors);
  for (int p = 0; p < DPT_REPORT_N_PHASES; p++)
    free(r->samples[p]);
  free(r->binding);
  free(r->baseline);
  free(r->oversubscribed);
  json_decref(r->env);
  free(r);
}

int dpt_report_rank(const struct dpt_report *r) { return r->rank; }
int dpt_report_size(const struct dpt_report *r) { return r->size; }

int dpt_report_set_software(struct dpt_report *r, const char *key, const char *value)
{
  if (!key || !strcmp(key, "libraries") || !strcmp(key, "dpt"))
    return DPT_E_INPUT;
  return json_object_set_new(r->software, key, str_or_null(value)) ? DPT_E_NOMEM : 0;
}

int dpt_report_set_library(struct dpt_report *r, const char *name, const char *version)
{
  if (!name)
    return DPT_E_INPUT;
  return json_object_set_new(json_object_get(r->software, "libraries"), name, str_or_null(version))
             ? DPT_E_NOMEM : 0;
}

int dpt_report_set_config(struct dpt_report *r, const char *key, json_t *value)
{
  if (!key || !value) {
    json_decref(value);
    return DPT_E_INPUT;
  }
  return json_object_set_new(r->config, key, value) ? DPT_E_NOMEM : 0;
}

int dpt_report_set_result(struct dpt_report *r, const char *key, json_t *value)
{
  if (!key || !value) {
    json_decref(value);
    return DPT_E_INPUT;
  }
  return json_object_set_new(r->results, key, value) ? DPT_E_NOMEM : 0;
}

int dpt_report_set_plan(struct dpt_report *r, const struct dpt_plan *plan, struct dpt_err *err)
{
  json_t *j = dpt_plan_to_json(plan);
  if (!j)
    return dpt_err_set(err, DPT_E_NOMEM, "report: cannot render the plan as JSON");
  char shared[512];
  char *o = dpt_job_sharing(plan, shared, sizeof shared) ? strdup(shared) : NULL;
  if (shared[0] && !o) {
    json_decref(j);
    return dpt_err_set(err, DPT_E_NOMEM, "report: out of memory");
  }
  json_decref(r->plan);
  r->plan = j;
  r->plan_bytes = plan->opts.size_bytes;
  r->plan_fp16 = plan->opts.fp16;
  r->launch_digest[0] = '\0';
  free(r->oversubscribed); /* the plan says what its ranks share */
  r->oversubscribed = o;
  return 0;
}

static json_t *node_summary(const struct dpt_node *n)
{
  uint64_t mem = 0;
  json_t *gpus = json_array(), *hcas = json_array();
  for (int i = 0; i < n->n_numa; i++)
    mem += n->numa[i].memory;
  for (int i = 0; i < n->n_gpus; i++)
    json_array_append_new(gpus, json_pack("{s:i,s:s,s:s,s:i}", "index", n->gpus[i].index, "model",
                                          n->gpus[i].model, "busid", n->gpus[i].busid, "numa",
                                          n->gpus[i].numa));
  for (int i = 0; i < n->n_hcas; i++)
    json_array_append_new(hcas, json_pack("{s:s,s:s,s:i}", "name", n->hcas[i].name, "kind",
                                          n->hcas[i].kind, "numa", n->hcas[i].numa));
  return json_pack("{s:s,s:i,s:i,s:i,s:i,s:I,s:o,s:o}", "source", n->source, "packages", n->n_packages,
                   "cores", n->n_cores, "pus", n->n_pus, "numa_nodes", n->n_numa, "memory_bytes",
                   (json_int_t)mem, "gpus", gpus, "hcas", hcas);
}

int dpt_report_set_node(struct dpt_report *r, const struct dpt_node *node, struct dpt_err *err)
{
  json_t *j = node_summary(node);
  if (!j)
    return dpt_err_set(err, DPT_E_NOMEM, "report: cannot summarise the node topology");
  json_decref(r->node);
  r->node = j;
  return 0;
}

int dpt_report_set_binding(struct dpt_report *r, const char *applied)
{
  char *s = applied ? strdup(applied) : NULL;
  if (applied && !s)
    return DPT_E_NOMEM;
  free(r->binding);
  r->binding = s;
  return 0;
}

int dpt_report_set_allreduce(struct dpt_report *r, uint64_t bytes, double measured_s)
{
  r->ar_bytes = bytes;
  r->ar_measured = isfinite(measured_s) ? measured_s : -1;
  return 0;
}

int dpt_report_plan_from_launch(struct dpt_report *r, uint64_t bytes, int fp16, struct dpt_err *err)
{
  const char *digest = dpt_env_str("DPT_PLAN_DIGEST"), *host = dpt_env_str("DPT_NODE_NAME");
  int n_nodes, local_size, rc = 0;
  struct dpt_plan *plan = NULL, *sized = NULL;
  struct dpt_job job;

  if (!digest || !host || dpt_env_int("DPT_N_NODES", 1, 1, NULL, &n_nodes, NULL) != 1 ||
      dpt_env_int("DPT_LOCAL_SIZE", 1, 1000000, NULL, &local_size, NULL) != 1)
    return 0;
  /* the job dpt-launch planned, from the variables it gave the ranks (dpt_job.h) */
  dpt_job_init(&job);
  if ((rc = dpt_job_from_env(&job, err)) < 0)
    return rc;
  job.hosts = &host;
  job.n_hosts = 1;
  job.ranks_per_node = local_size;
  if ((rc = dpt_job_plan(&plan, &job, NULL, 0, err)) < 0)
    goto out;
  if (strcmp(plan->digest, digest)) {
    rc = 0; /* not the plan the launcher computed (another tree: srun): embed nothing */
    goto out;
  }
  /* the same plan for the job's own message: the bytes it all-reduces, on its wire */
  if (bytes) {
    job.model.size_bytes = bytes;
    job.model.fp16 = fp16;
    if ((rc = dpt_job_plan(&sized, &job, NULL, 0, err)) < 0)
      goto out;
  }
  if ((rc = dpt_report_set_plan(r, sized ? sized : plan, err)) < 0)
    goto out;
  snprintf(r->launch_digest, sizeof r->launch_digest, "%s", plan->digest);
  rc = 1;
out:
  dpt_plan_destroy(sized);
  dpt_plan_destroy(plan);
  return rc;
}

int dpt_report_add_step(struct dpt_report *r, const struct dpt_report_step *s, struct dpt_err *err)
{
  double v[DPT_REPORT_N_PHASES] = {s->data_wait, s->forward, s->backward, s->allreduce,
                                   s->allreduce_exposed, s->update, s->step};
  if (v[DPT_REPORT_STEP] <= 0)
    v[DPT_REPORT_STEP] = s->data_wait + s->forward + s->backward + s->allreduce_exposed + s->update;
  for (int p = 0; p < DPT_REPORT_N_PHASES; p++)
    if (!isfinite(v[p]) || v[p] < 0)
      return dpt_err_set(err, DPT_E_INPUT, "report: step %zu: phase %s = %g s; phase times must be >= 0",
                         r->n_steps, phase_names[p], v[p]);
  if (s->images < 0)
    return dpt_err_set(err, DPT_E_INPUT, "report: step %zu: %ld images", r->n_steps, s->images);
  if (r->n_steps == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 256;
    for (int p = 0; p < DPT_REPORT_N_PHASES; p++) {
      double *n = realloc(r->samples[p], cap * sizeof *n);
      if (!n)
        return dpt_err_set(err, DPT_E_NOMEM, "report: out of memory for %zu steps", cap);
      r->samples[p] = n;
    }
    r->cap = cap;
  }
  for (int p = 0; p < DPT_REPORT_N_PHASES; p++)
    r->samples[p][r->n_steps] = v[p];
  r->n_steps++;
  r->images += s->images;
  return 0;
}

int dpt_report_add_epoch(struct dpt_report *r, const struct dpt_report_epoch *e, struct dpt_err *err)
{
  if (!isfinite(e->epoch) || e->epoch < 0)
    return dpt_err_set(err, DPT_E_INPUT, "report: learning-curve point with epoch %g", e->epoch);
  double el = isfinite(e->elapsed_s) ? e->elapsed_s : now_mono() - r->start_mono;
  json_t *p = json_pack("{s:f,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:f}", "epoch", e->epoch, "step",
                        e->step >= 0 ? json_integer(e->step) : json_null(), "train_loss",
                        num_or_null(e->train_loss), "train_top1", num_or_null(e->train_top1), "val_loss",
                        num_or_null(e->val_loss), "val_top1", num_or_null(e->val_top1), "val_top5",
                        num_or_null(e->val_top5), "lr", num_or_null(e->lr), "elapsed_s", el);
  if (!p || json_array_append_new(r->curve, p))
    return dpt_err_set(err, DPT_E_NOMEM, "report: out of memory");
  return 0;
}

int dpt_report_set_error(struct dpt_report *r, const struct dpt_err *e)
{
  char t[40];
  double now = now_real();
  iso_time(now, t, sizeof t);
  json_t *j = json_pack("{s:i,s:s,s:s,s:s,s:s,s:f}", "rank", r->rank, "host", r->host, "code",
                        dpt_err_code_name(e ? e->code : DPT_E_RUNTIME), "message",
                        e && e->msg[0] ? e->msg : "(no message)", "time", t, "elapsed_s",
                        now_mono() - r->start_mono);
  return !j || json_array_append_new(r->errors, j) ? DPT_E_NOMEM : 0;
}

void dpt_report_clear_errors(struct dpt_report *r) { json_array_clear(r->errors); }

void dpt_report_set_exit_status(struct dpt_report *r, int status)
{
  r->exit_status = status;
}

int dpt_report_set_baseline(struct dpt_report *r, const char *path)
{
  char *s = path ? strdup(path) : NULL;
  if (path && !s)
    return DPT_E_NOMEM;
  free(r->baseline);
  r->baseline = s;
  return 0;
}

double dpt_report_efficiency(double t, long long n, double t0, long long n0)
{
  return t0 > 0 && n > 0 && n0 > 0 ? t / (t0 * (double)n / (double)n0) : NAN;
}

/* ---- path ----------------------------------------------------------------- */

static int append(char *buf, size_t len, size_t *at, const char *s, struct dpt_err *err)
{
  size_t n = strlen(s);
  if (*at + n + 1 > len)
    return dpt_err_set(err, DPT_E_INPUT, "report path longer than %zu bytes: shorten --report / DPT_REPORT",
                       len - 1);
  memcpy(buf + *at, s, n + 1);
  *at += n;
  return 0;
}

int dpt_report_path(const struct dpt_report *r, const char *explicit_path, char *buf, size_t len,
                    struct dpt_err *err)
{
  const char *job = dpt_env_str("SLURM_JOB_ID"), *step = dpt_env_str("SLURM_STEP_ID");
  const char *pat = explicit_path && *explicit_path ? explicit_path : dpt_env_str("DPT_REPORT");
  char tmp[64];
  size_t at = 0;
  int rc;

  if (!len)
    return dpt_err_set(err, DPT_E_INPUT, "report path: no buffer");
  buf[0] = '\0';
  if (!pat) {
    /* rank 0's pid: the launchers start ranks at the same time; the pid that
     * matters is the writer's, i.e. this process's when rank 0. */
    if (job && step)
      snprintf(tmp, sizeof tmp, "%s.%s", job, step);
    else if (job)
      snprintf(tmp, sizeof tmp, "%s", job);
    if (job)
      rc = append(buf, len, &at, "dpt-report-", err) || append(buf, len, &at, tmp, err) ||
           append(buf, len, &at, ".json", err);
    else {
      char p[32];
      snprintf(p, sizeof p, "-%ld.json", r->pid);
      rc = append(buf, len, &at, "dpt-report-", err) || append(buf, len, &at, r->program, err) ||
           append(buf, len, &at, p, err);
    }
    return rc ? err->code : (int)at;
  }
  for (const char *c = pat; *c; c++) {
    char one[2] = {*c, 0};
    const char *add = one;
    if (*c == '%' && c[1]) {
      c++;
      if (*c == 'j')
        add = job ? job : "nojob";
      else if (*c == 's')
        add = step ? step : "0";
      else if (*c == 'p') {
        snprintf(tmp, sizeof tmp, "%ld", r->pid);
        add = tmp;
      } else if (*c == '%')
        add = "%";
      else
        return dpt_err_set(err, DPT_E_INPUT, "report path '%s': unknown %%%c (use %%j job, %%s step, %%p pid, %%%%)",
                           pat, *c);
    }
    if (append(buf, len, &at, add, err))
      return err->code;
  }
  return (int)at;
}

/* ---- atomic write ----------------------------------------------------------- */

/* text to path through path.tmp.<pid> and rename; durable: fsync of the file
 * before the rename and of the directory after it. */
static int write_renamed(const char *path, const char *text, size_t len, int durable, struct dpt_err *err)
{
  char tmp[PATH_MAX + 32], dir[PATH_MAX];
  int fd = -1, rc = 0;
  size_t done = 0;

  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
    return dpt_err_set(err, DPT_E_INPUT, "path '%s' too long", path);
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return dpt_err_set(err, errno == ENOENT || errno == EACCES || errno == ENOTDIR ? DPT_E_INPUT : DPT_E_RUNTIME,
                       "cannot create %s: %s (the directory of %s must exist and be writable)", tmp,
                       strerror(errno), path);
  while (done < len) {
    ssize_t w = write(fd, text + done, len - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      rc = dpt_err_set(err, DPT_E_RUNTIME, "writing %s failed: %s", tmp, strerror(errno));
      goto fail;
    }
    done += (size_t)w;
  }
  if (durable && fsync(fd)) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "fsync of %s failed: %s", tmp, strerror(errno));
    goto fail;
  }
  if (close(fd)) {
    fd = -1;
    rc = dpt_err_set(err, DPT_E_RUNTIME, "closing %s failed: %s", tmp, strerror(errno));
    goto fail;
  }
  fd = -1;
  if (rename(tmp, path)) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    goto fail;
  }
  if (!durable)
    return 0;
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash == dir)
    dir[1] = '\0';
  else if (slash)
    *slash = '\0';
  else
    snprintf(dir, sizeof dir, ".");
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd); /* best effort: some file systems refuse fsync on directories */
    close(dfd);
  }
  return 0;
fail:
  if (fd >= 0)
    close(fd);
  unlink(tmp);
  return rc;
}

int dpt_report_write_atomic(const char *path, const char *text, size_t len, struct dpt_err *err)
{
  return write_renamed(path, text, len, 1, err);
}

int dpt_report_write_handoff(const char *path, const char *text, size_t len, struct dpt_err *err)
{
  return write_renamed(path, text, len, 0, err);
}

/* ---- this rank's part ----------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[n]: v[ceil(q/100 * n) - 1]. */
static double pct(const double *v, size_t n, double q)
{
  size_t k = (size_t)ceil(q / 100.0 * (double)n);
  if (k < 1)
    k = 1;
  if (k > n)
    k = n;
  return v[k - 1];
}

static json_t *phase_stats(const double *s, size_t n)
{
  double *v = malloc((n ? n : 1) * sizeof *v), total = 0;
  json_t *j;
  if (!v)
    return NULL;
  for (size_t i = 0; i < n; i++)
    total += s[i];
  memcpy(v, s, n * sizeof *v);
  qsort(v, n, sizeof *v, cmp_double);
  j = json_pack("{s:f,s:f,s:f,s:f,s:f,s:f}", "total_s", total, "mean_s", total / (double)n, "p50_s",
                pct(v, n, 50), "p90_s", pct(v, n, 90), "p99_s", pct(v, n, 99), "max_s", v[n - 1]);
  free(v);
  return j;
}

static void cpus_allowed(char *buf, size_t len)
{
  cpu_set_t set;
  size_t at = 0;
  buf[0] = '\0';
  if (sched_getaffinity(0, sizeof set, &set))
    return;
  for (int c = 0; c < CPU_SETSIZE && at + 24 < len; c++) {
    if (!CPU_ISSET(c, &set))
      continue;
    int e = c;
    while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, &set))
      e++;
    at += (size_t)snprintf(buf + at, len - at, at ? ",%d" : "%d", c);
    if (e > c)
      at += (size_t)snprintf(buf + at, len - at, "-%d", e);
    c = e;
  }
}

static json_t *rank_part(struct dpt_report *r);

/* ranks[].end of a supervised program (dpt_report_set_end); command: its argv. */
static json_t *end_object(const struct dpt_report_end *e, json_t *command)
{
  char t0[40], t1[40], sig[32];
  snprintf(sig, sizeof sig, "SIG%s", e->signal > 0 && sigabbrev_np(e->signal) ? sigabbrev_np(e->signal) : "?");
  iso_time(e->start_unix, t0, sizeof t0);
  iso_time(e->end_unix, t1, sizeof t1);
  return json_pack("{s:s,s:b,s:o,s:o,s:o,s:b,s:s,s:s,s:s,s:f,s:O}", "by", e->by, "started", e->started,
                   "status", e->status >= 0 ? json_integer(e->status) : json_null(), "signal",
                   e->signal > 0 ? json_integer(e->signal) : json_null(), "signal_name",
                   str_or_null(e->signal > 0 ? sig : NULL), "forwarded", e->forwarded,
                   "how", e->how, "start", t0, "end", t1, "wall_s",
                   e->end_unix > e->start_unix ? e->end_unix - e->start_unix : 0.0, "command", command);
}

/* The part of a rank whose program a supervisor ran: no steps of its own, the
 * program's pid and peak RSS, how it ended and what it was handed. */
static json_t *end_part(struct dpt_report *r, const char *cpus, json_t *phases)
{
  json_t *part = json_pack("{s:i,s:s,s:I,s:{s:s,s:o,s:o,s:o,s:o,s:o,s:o,s:o},s:o,s:i,s:i,s:f,s:f,s:I,s:o,s:O,"
                           "s:f,s:o,s:o}",
                           "rank", r->rank, "host", r->host, "pid", (json_int_t)r->end.pid, "binding",
                           "cpus_allowed", cpus, "applied", str_or_null(r->binding), "cpuset",
                           str_or_null(dpt_env_str("DPT_CPUSET")), "numa", str_or_null(dpt_env_str("DPT_NUMA")),
                           "cuda_visible_devices", str_or_null(dpt_env_str("CUDA_VISIBLE_DEVICES")),
                           "cuda_device", str_or_null(dpt_env_str("DPT_CUDA_DEVICE")), "nccl_ib_hca",
                           str_or_null(dpt_env_str("NCCL_IB_HCA")), "omp_num_threads",
                           str_or_null(dpt_env_str("OMP_NUM_THREADS")), "node",
                           r->node ? json_incref(r->node) : json_null(), "steps", 0, "images", 0,
                           "step_time_s", 0.0, "images_per_s", 0.0, "peak_rss_bytes",
                           (json_int_t)(r->end.peak_rss_bytes > 0 ? r->end.peak_rss_bytes : 0), "phases", phases,
                           "errors", r->errors, "end_elapsed_s", now_mono() - r->start_mono, "end",
                           end_object(&r->end, r->command), "env", r->env ? json_incref(r->env) : json_object());
  return part;
}

int dpt_report_set_end(struct dpt_report *r, const struct dpt_report_end *e, const char *const *names)
{
  json_t *env = json_object();
  if (!env)
    return DPT_E_NOMEM;
  for (int i = 0; names && names[i]; i++)
    if (getenv(names[i]) && json_object_set_new(env, names[i], json_string(getenv(names[i])))) {
      json_decref(env);
      return DPT_E_NOMEM;
    }
  json_decref(r->env);
  r->env = env;
  if (dpt_env_str("DPT_NODE_NAME")) /* the plan's name of the node (Slurm's, the hostfile's) */
    snprintf(r->host, sizeof r->host, "%s", dpt_env_str("DPT_NODE_NAME"));
  r->end = *e;
  r->end.how[sizeof r->end.how - 1] = r->end.by[sizeof r->end.by - 1] = '\0';
  r->has_end = 1;
  return 0;
}

void dpt_report_set_pid(struct dpt_report *r, long pid) { r->pid = pid; }

void dpt_report_set_start(struct dpt_report *r, double start_unix)
{
  r->start_mono -= now_real() - start_unix; /* the same instant on the monotonic clock */
  r->start_unix = start_unix;
}

char *dpt_report_part(struct dpt_report *r)
{
  json_t *part = rank_part(r);
  char *text = part ? json_dumps(part, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
  json_decref(part);
  return text;
}

static json_t *rank_part(struct dpt_report *r)
{
  char cpus[1024];
  struct rusage ru;
  json_t *phases = json_object(), *part;
  double step_total = 0;

  if (!phases)
    return NULL;
  cpus_allowed(cpus, sizeof cpus);
  if (r->n_steps) {
    for (int p = 0; p < DPT_REPORT_N_PHASES; p++)
      json_object_set_new(phases, phase_names[p], phase_stats(r->samples[p], r->n_steps));
    for (size_t i = 0; i < r->n_steps; i++)
      step_total += r->samples[DPT_REPORT_STEP][i];
  }
  if (!r->node) {
    struct dpt_node *n = NULL;
    struct dpt_err e;
    if (!dpt_node_load(&n, NULL, &e)) {
      r->node = node_summary(n);
      dpt_node_destroy(n);
    }
  }
  getrusage(RUSAGE_SELF, &ru);
  if (r->has_end)
    return end_part(r, cpus, phases);
  part = json_pack("{s:i,s:s,s:I,s:{s:s,s:o,s:o,s:o,s:o,s:o,s:o,s:o},s:o,s:I,s:I,s:f,s:f,s:I,s:o,s:O,s:f}",
                   "rank", r->rank, "host", r->host, "pid", (json_int_t)r->pid, "binding", "cpus_allowed", cpus,
                   "applied", str_or_null(r->binding), "cpuset", str_or_null(dpt_env_str("DPT_CPUSET")),
                   "numa", str_or_null(dpt_env_str("DPT_NUMA")), "cuda_visible_devices",
                   str_or_null(dpt_env_str("CUDA_VISIBLE_DEVICES")), "cuda_device",
                   str_or_null(dpt_env_str("DPT_CUDA_DEVICE")), "nccl_ib_hca",
                   str_or_null(dpt_env_str("NCCL_IB_HCA")), "omp_num_threads",
                   str_or_null(dpt_env_str("OMP_NUM_THREADS")), "node",
                   r->node ? json_incref(r->node) : json_null(), "steps", (json_int_t)r->n_steps, "images",
                   (json_int_t)r->images, "step_time_s", step_total, "images_per_s",
                   step_total > 0 ? (double)r->images / step_total : 0.0, "peak_rss_bytes",
                   (json_int_t)ru.ru_maxrss * 1024, "phases", phases, "errors", r->errors, "end_elapsed_s",
                   now_mono() - r->start_mono);
  return part;
}

/* ---- rank 0: the document ----------------------------------------------------- */

/* Who started the ranks: DPT_LAUNCHER (the SPANK plugin sets it), else guessed
 * from the variables each launcher sets. */
static json_t *launcher(void)
{
  const char *l = dpt_env_str("DPT_LAUNCHER");
  if (!l)
    l = dpt_env_str("DPT_PLAN_DIGEST") && dpt_env_str("DPT_RANK") ? "dpt-launch"
        : dpt_env_str("SLURM_PROCID")                           ? "srun"
        : dpt_env_str("OMPI_COMM_WORLD_RANK")                   ? "mpirun"
        : dpt_env_str("PMIX_RANK")                              ? "pmix"
                                                                : "single";
  return json_string(l);
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
    iso_time(t && el ? r->start_unix + el : now_real(), ts, sizeof ts);
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
  double end = now_real();
  json_t *doc = NULL, *hosts = json_array(), *topo = json_array(), *ar = NULL, *scaling = NULL,
         *errors = json_array(), *baseline = NULL;
  double ips = 0, measured = -1, slowest = 0;
  json_int_t images = 0;
  size_t i;
  json_t *p;

  if (!hosts || !topo || !errors)
    goto nomem;
  iso_time(r->start_unix, t0, sizeof t0);
  iso_time(end, t1, sizeof t1);
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
                   "wire", str_or_null(json_string_value(json_object_get(r->software, "wire"))), "measured_s",
                   measured >= 0 ? json_real(measured) : json_null(), "predicted_s", num_or_null(pred),
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
                  "slurm_job_id", str_or_null(job), "slurm_step_id", str_or_null(step), "launcher",
                  launcher(), "hosts", hosts, "n_nodes", (int)json_array_size(hosts),
                  "ranks", r->size, "ranks_reporting", (int)json_array_size(parts), "start", t0, "end", t1,
                  "duration_s", now_mono() - r->start_mono, "exit_status",
                  r->exit_status >= 0 ? json_integer(r->exit_status) : json_null(), "partial", partial,
                  "software", r->software, "config", r->config, "topology", topo, "plan",
                  r->plan ? json_incref(r->plan) : json_null(), "ranks", parts, "throughput", "images_per_s",
                  ips, "images", images, "allreduce", ar, "learning_curve", r->curve, "results", r->results,
                  "errors", errors);
  hosts = topo = ar = errors = NULL;
  if (!doc)
    goto nomem;
  if (json_object_set_new(json_object_get(doc, "job"), "oversubscribed", str_or_null(r->oversubscribed)) ||
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
  json_t *parts = json_array(), *part = rank_part(r), *doc = NULL;
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
  part = rank_part(r);
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
      part = rank_part(r); /* with the gather error in it */
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

int dpt_report_announce(const char *path, struct dpt_err *err)
{
  const char *to = dpt_env_str("DPT_REPORT_ANNOUNCE");
  char abs[PATH_MAX + 2], cwd[PATH_MAX];
  int n;

  if (!to)
    return 0;
  if (!path)
    n = snprintf(abs, sizeof abs, "none\n");
  else if (path[0] == '/' || !getcwd(cwd, sizeof cwd))
    n = snprintf(abs, sizeof abs, "%s\n", path);
  else
    n = snprintf(abs, sizeof abs, "%s/%s\n", cwd, path);
  if (n < 0 || (size_t)n >= sizeof abs)
    return dpt_err_set(err, DPT_E_INPUT, "report path '%s' too long to announce", path);
  return dpt_report_write_atomic(to, abs, (size_t)n, err);
}
