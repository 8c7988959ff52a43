/* dpt_report.c — the "dpt.report/1" job report: what each rank collects (its
 * config, plan, binding, steps, epochs, errors) and its part of the document.
 * Rank 0's document: dpt_report_doc.c; the path and the atomic write:
 * dpt_report_file.c.  Layout and definitions (percentiles, images/s, scaling
 * efficiency): docs/schema-report.md. */
#define _GNU_SOURCE
#include "dpt_report_int.h"
#include "dpt_env.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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
  r->start_unix = dpt_report_now_real();
  r->start_mono = dpt_report_now_mono();
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
  return json_object_set_new(r->software, key, dpt_report_str_or_null(value)) ? DPT_E_NOMEM : 0;
}

int dpt_report_set_library(struct dpt_report *r, const char *name, const char *version)
{
  if (!name)
    return DPT_E_INPUT;
  return json_object_set_new(json_object_get(r->software, "libraries"), name, dpt_report_str_or_null(version))
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
  double el = isfinite(e->elapsed_s) ? e->elapsed_s : dpt_report_now_mono() - r->start_mono;
  json_t *p = json_pack("{s:f,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:f}", "epoch", e->epoch, "step",
                        e->step >= 0 ? json_integer(e->step) : json_null(), "train_loss",
                        dpt_report_num_or_null(e->train_loss), "train_top1", dpt_report_num_or_null(e->train_top1), "val_loss",
                        dpt_report_num_or_null(e->val_loss), "val_top1", dpt_report_num_or_null(e->val_top1), "val_top5",
                        dpt_report_num_or_null(e->val_top5), "lr", dpt_report_num_or_null(e->lr), "elapsed_s", el);
  if (!p || json_array_append_new(r->curve, p))
    return dpt_err_set(err, DPT_E_NOMEM, "report: out of memory");
  return 0;
}

int dpt_report_set_error(struct dpt_report *r, const struct dpt_err *e)
{
  char t[40];
  double now = dpt_report_now_real();
  dpt_report_iso_time(now, t, sizeof t);
  json_t *j = json_pack("{s:i,s:s,s:s,s:s,s:s,s:f}", "rank", r->rank, "host", r->host, "code",
                        dpt_err_code_name(e ? e->code : DPT_E_RUNTIME), "message",
                        e && e->msg[0] ? e->msg : "(no message)", "time", t, "elapsed_s",
                        dpt_report_now_mono() - r->start_mono);
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

/* ranks[].end of a supervised program (dpt_report_set_end); command: its argv. */
static json_t *end_object(const struct dpt_report_end *e, json_t *command)
{
  char t0[40], t1[40], sig[32];
  snprintf(sig, sizeof sig, "SIG%s", e->signal > 0 && sigabbrev_np(e->signal) ? sigabbrev_np(e->signal) : "?");
  dpt_report_iso_time(e->start_unix, t0, sizeof t0);
  dpt_report_iso_time(e->end_unix, t1, sizeof t1);
  return json_pack("{s:s,s:b,s:o,s:o,s:o,s:b,s:s,s:s,s:s,s:f,s:O}", "by", e->by, "started", e->started,
                   "status", e->status >= 0 ? json_integer(e->status) : json_null(), "signal",
                   e->signal > 0 ? json_integer(e->signal) : json_null(), "signal_name",
                   dpt_report_str_or_null(e->signal > 0 ? sig : NULL), "forwarded", e->forwarded,
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
                           "cpus_allowed", cpus, "applied", dpt_report_str_or_null(r->binding), "cpuset",
                           dpt_report_str_or_null(dpt_env_str("DPT_CPUSET")), "numa", dpt_report_str_or_null(dpt_env_str("DPT_NUMA")),
                           "cuda_visible_devices", dpt_report_str_or_null(dpt_env_str("CUDA_VISIBLE_DEVICES")),
                           "cuda_device", dpt_report_str_or_null(dpt_env_str("DPT_CUDA_DEVICE")), "nccl_ib_hca",
                           dpt_report_str_or_null(dpt_env_str("NCCL_IB_HCA")), "omp_num_threads",
                           dpt_report_str_or_null(dpt_env_str("OMP_NUM_THREADS")), "node",
                           r->node ? json_incref(r->node) : json_null(), "steps", 0, "images", 0,
                           "step_time_s", 0.0, "images_per_s", 0.0, "peak_rss_bytes",
                           (json_int_t)(r->end.peak_rss_bytes > 0 ? r->end.peak_rss_bytes : 0), "phases", phases,
                           "errors", r->errors, "end_elapsed_s", dpt_report_now_mono() - r->start_mono, "end",
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
  r->start_mono -= dpt_report_now_real() - start_unix; /* the same instant on the monotonic clock */
  r->start_unix = start_unix;
}

char *dpt_report_part(struct dpt_report *r)
{
  json_t *part = dpt_report_rank_part(r);
  char *text = part ? json_dumps(part, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
  json_decref(part);
  return text;
}

json_t *dpt_report_rank_part(struct dpt_report *r)
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
                   "applied", dpt_report_str_or_null(r->binding), "cpuset", dpt_report_str_or_null(dpt_env_str("DPT_CPUSET")),
                   "numa", dpt_report_str_or_null(dpt_env_str("DPT_NUMA")), "cuda_visible_devices",
                   dpt_report_str_or_null(dpt_env_str("CUDA_VISIBLE_DEVICES")), "cuda_device",
                   dpt_report_str_or_null(dpt_env_str("DPT_CUDA_DEVICE")), "nccl_ib_hca",
                   dpt_report_str_or_null(dpt_env_str("NCCL_IB_HCA")), "omp_num_threads",
                   dpt_report_str_or_null(dpt_env_str("OMP_NUM_THREADS")), "node",
                   r->node ? json_incref(r->node) : json_null(), "steps", (json_int_t)r->n_steps, "images",
                   (json_int_t)r->images, "step_time_s", step_total, "images_per_s",
                   step_total > 0 ? (double)r->images / step_total : 0.0, "peak_rss_bytes",
                   (json_int_t)ru.ru_maxrss * 1024, "phases", phases, "errors", r->errors, "end_elapsed_s",
                   dpt_report_now_mono() - r->start_mono);
  return part;
}
