/* dpt_launch_cmd.c — the mpirun command dpt-launch runs: Open MPI's flags, the
 * rankfile (--hostfile with the plan's CPUs), the frameworks' rendezvous, and one
 * app context per plan rank ("-n 1 [--host H] -x VAR=value ... dpt-launch
 * --exec-rank -- PROGRAM ARGS"), so that MPI rank == plan rank == ring position
 * and each rank gets its own binding and environment (dpt_bind_env). */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpt_bind.h"
#include "dpt_err.h"
#include "dpt_job.h"
#include "dpt_plan.h"
#include "dpt_rdzv.h"
#include "dpt_launch_int.h"

#ifndef DPT_MPIRUN
#define DPT_MPIRUN "mpirun"
#endif

/* ------------------------------------------------------------------ the argv */

static int av_take(struct dpt_launch_argv *av, char *s)
{
  if (!s)
    return -1;
  if (av->n + 2 > av->cap) {
    int cap = av->cap ? 2 * av->cap : 64;
    char **v = realloc(av->v, sizeof *v * (size_t)cap);
    if (!v) {
      free(s);
      return -1;
    }
    av->v = v;
    av->cap = cap;
  }
  av->v[av->n++] = s;
  av->v[av->n] = NULL;
  return 0;
}

/* Appends each argument up to the NULL; -1 when out of memory. */
static int av_push(struct dpt_launch_argv *av, ...)
{
  va_list ap;
  const char *s;
  int rc = 0;
  va_start(ap, av);
  while (!rc && (s = va_arg(ap, const char *)))
    rc = av_take(av, strdup(s));
  va_end(ap);
  return rc;
}

/* Appends "-x NAME=value" for the variable fmt makes ("NAME=%s"). */
static int av_push_x(struct dpt_launch_argv *av, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int av_push_x(struct dpt_launch_argv *av, const char *fmt, ...)
{
  va_list ap;
  char *kv = NULL;
  int k;
  va_start(ap, fmt);
  k = vasprintf(&kv, fmt, ap);
  va_end(ap);
  if (k < 0)
    return -1;
  if (av_push(av, "-x", (char *)NULL) < 0) {
    free(kv);
    return -1;
  }
  return av_take(av, kv);
}

void dpt_launch_argv_free(struct dpt_launch_argv *av)
{
  for (int i = 0; i < av->n; i++)
    free(av->v[i]);
  free(av->v);
  memset(av, 0, sizeof *av);
}

/* dpt_bind_env's setter and getter: the variable into the app context, this
 * process's environment for what the user set (NCCL_IB_HCA, CUDA_VISIBLE_DEVICES) */
static int env_to_x(void *arg, const char *name, const char *value)
{
  if (!value)
    return 0;
  return av_push_x(arg, "%s=%s", name, value) < 0 ? DPT_E_NOMEM : 0;
}

static const char *get_env(void *arg, const char *name)
{
  (void)arg;
  return getenv(name);
}

/* ---------------------------------------------------------------- the parts */

static int oom(struct dpt_err *err, const char *what)
{
  return dpt_err_set(err, DPT_E_NOMEM, "out of memory building mpirun's command (%s)", what);
}

/* The rankfile binds each rank to its plan CPUs on its plan host (dry run: printed). */
static int rankfile_write(const struct dpt_launch_opts *o, const struct dpt_plan *plan, const char *path,
                          struct dpt_err *err)
{
  FILE *f = o->dry ? stdout : fopen(path, "w");
  int i, bad;
  if (!f)
    return dpt_err_set(err, DPT_E_RUNTIME, "cannot write the rankfile %s: %s (set TMPDIR to a writable "
                       "directory)", path, strerror(errno));
  if (o->dry)
    printf("\nrankfile (%s):\n", path);
  for (i = 0; i < plan->n_ranks; i++)
    fprintf(f, "rank %d=%s slot=%s\n", i, plan->nodes[plan->ranks[i].node].host, plan->ranks[i].cpuset);
  if (o->dry)
    return 0;
  bad = ferror(f); /* before fclose: | would leave the order to the compiler */
  bad |= fclose(f);
  if (bad)
    return dpt_err_set(err, DPT_E_RUNTIME, "cannot write the rankfile %s: %s (is its file system full?)",
                       path, strerror(errno));
  return 0;
}

/* mpirun and its flags; the rankfile, or no binding by mpirun (the supervisors bind). */
static int head(const struct dpt_launch_opts *o, const struct dpt_plan *plan, int by_rankfile,
                const char *statusdir, struct dpt_launch_argv *av, struct dpt_err *err)
{
  const char *mpirun = getenv("DPT_MPIRUN") ? getenv("DPT_MPIRUN") : DPT_MPIRUN;
  char rankfile[PATH_MAX];
  int rc;
  /* --oversubscribe: mpirun's slots, the plan decides what runs where; --quiet: no abort
   * paragraphs, dpt-launch names the failing rank itself */
  if (av_push(av, mpirun, (char *)NULL) < 0 ||
      (geteuid() == 0 && av_push(av, "--allow-run-as-root", (char *)NULL) < 0) ||
      av_push(av, "--oversubscribe", (char *)NULL) < 0 || (!o->verbose && av_push(av, "--quiet", (char *)NULL) < 0))
    return oom(err, "mpirun's flags");
  if (!by_rankfile)
    return av_push(av, "--bind-to", "none", (char *)NULL) < 0 ? oom(err, "--bind-to") : 0;
  if ((size_t)snprintf(rankfile, sizeof rankfile, "%s/rankfile", statusdir) >= sizeof rankfile)
    return dpt_err_set(err, DPT_E_RUNTIME, "the rankfile path under %s is too long; set TMPDIR to a shorter "
                       "directory", statusdir);
  if ((rc = rankfile_write(o, plan, rankfile, err)) < 0)
    return rc;
  if (av_push(av, "--rankfile", rankfile, "--mca", "rmaps_rank_file_physical", "1", (char *)NULL) < 0)
    return oom(err, "--rankfile");
  return 0;
}

/* The frameworks' rendezvous (runtime/dpt_rdzv.h), for dpt_bind_env to pass on: plan
 * rank 0's host -- this one over loopback without a hostfile --, a port derived from
 * this process. */
static int rendezvous(const struct dpt_launch_opts *o, const char *hostname, struct dpt_err *err)
{
  char port[16], id[96];
  snprintf(port, sizeof port, "%d", dpt_rdzv_port((unsigned long)getpid(), 0));
  snprintf(id, sizeof id, "dpt-launch-%.64s-%ld", hostname, (long)getpid());
  if ((o->hostfile ? unsetenv("DPT_MASTER_ADDR") : setenv("DPT_MASTER_ADDR", "127.0.0.1", 1)) != 0 ||
      setenv("DPT_MASTER_PORT", port, 1) != 0 || setenv("DPT_RUN_ID", id, 1) != 0)
    return dpt_err_set(err, DPT_E_RUNTIME, "cannot set DPT_MASTER_ADDR/PORT: %s", strerror(errno));
  return 0;
}

/* What dpt-launch itself gives every rank: where the supervisors write, the report,
 * the planning inputs (with DPT_PLAN_DIGEST, DPT_HOST_INDEX, DPT_PLAN_THREADS from
 * dpt_bind_env: the program's dpt_boot_init recomputes the plan on every rank and
 * checks it against DPT_PLAN_DIGEST; not in the supervisor: mpirun's PMIx server
 * accepts one client per rank, and the program needs it for MPI), what the plan's
 * ranks share (the job report's job.oversubscribed), the communicator. */
static int launch_env(const struct dpt_launch_opts *o, const char *statusdir, const char *shared,
                      struct dpt_launch_argv *av)
{
  char abs[PATH_MAX];
  if (av_push_x(av, "DPT_LAUNCH_STATUS_DIR=%s", statusdir) < 0 ||
      /* a program that writes its own report (dpt-train) says where: the launcher adds
       * how each rank ended to it instead of writing one (runtime/dpt_report_end.h) */
      av_push_x(av, "DPT_REPORT_ANNOUNCE=%s/report", statusdir) < 0 ||
      (o->report && av_push_x(av, "DPT_REPORT=%s", o->report) < 0) ||
      av_push_x(av, "DPT_PLAN_TREE=flat") < 0)
    return -1;
  if (o->input && av_push_x(av, "DPT_PLAN_XML=%s", realpath(o->input, abs) ? abs : o->input) < 0)
    return -1;
  if (!o->input && o->hostfile && av_push_x(av, "DPT_PLAN_GPUS=%d", o->gpus_per_node > 0 ? o->gpus_per_node : 1) < 0)
    return -1;
  if ((o->oversub && av_push_x(av, "DPT_OVERSUBSCRIBE=1") < 0) ||
      (shared[0] && av_push_x(av, "DPT_PLAN_OVERSUBSCRIBED=%s", shared) < 0) ||
      (o->comm && av_push_x(av, "DPT_COMM=%s", o->comm) < 0) ||
      (o->verbose && av_push_x(av, "DPT_LAUNCH_VERBOSE=1") < 0))
    return -1;
  return 0;
}

/* Rank i's app context. */
static int rank_context(const struct dpt_launch_opts *o, const struct dpt_plan *plan, int i, int by_rankfile,
                        const char *statusdir, const char *shared, const char *self, struct dpt_launch_argv *av,
                        struct dpt_err *err)
{
  int rc;
  if ((i && av_push(av, ":", (char *)NULL) < 0) || av_push(av, "-n", "1", (char *)NULL) < 0)
    return oom(err, "an app context");
  /* without the ranks' CPUs (--gpus-per-node: no node topology) the rank goes to its
   * plan host unbound; a rankfile would bind it to a core it guessed (slot = local
   * rank), which mpirun refuses beyond the host's cores */
  if (o->hostfile && !by_rankfile &&
      av_push(av, "--host", plan->nodes[plan->ranks[i].node].host, (char *)NULL) < 0)
    return oom(err, "--host");
  if ((rc = dpt_bind_env(plan, i, get_env, NULL, env_to_x, av, err)) < 0)
    return rc;
  if (launch_env(o, statusdir, shared, av) < 0 || av_push(av, self, "--exec-rank", "--", o->progpath, (char *)NULL) < 0)
    return oom(err, "dpt-launch's variables");
  for (int a = 1; a < o->nprog; a++)
    if (av_push(av, o->prog[a], (char *)NULL) < 0)
      return oom(err, "the program's arguments");
  return 0;
}

/* ---------------------------------------------------------------- the command */

/* 1 when the ranks go by rankfile: --hostfile, and the plan has every rank's CPUs. */
static int ranks_by_rankfile(const struct dpt_launch_opts *o, const struct dpt_plan *plan)
{
  int cpusets = 0;
  for (int i = 0; i < plan->n_ranks; i++)
    cpusets += plan->ranks[i].cpuset[0] != '\0';
  return o->hostfile && cpusets == plan->n_ranks;
}

int dpt_launch_cmd_build(const struct dpt_launch_opts *o, const struct dpt_plan *plan, const char *statusdir,
                         const char *hostname, struct dpt_launch_argv *av, struct dpt_err *err)
{
  char self[PATH_MAX], shared[512] = "";
  ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
  int rc, rf = ranks_by_rankfile(o, plan);
  if (l < 0)
    return dpt_err_set(err, DPT_E_RUNTIME, "cannot find its own executable (/proc/self/exe): %s", strerror(errno));
  self[l] = '\0';
  dpt_job_sharing(plan, shared, sizeof shared);
  if ((rc = head(o, plan, rf, statusdir, av, err)) < 0 || (rc = rendezvous(o, hostname, err)) < 0)
    return rc;
  for (int i = 0; i < plan->n_ranks; i++)
    if ((rc = rank_context(o, plan, i, rf, statusdir, shared, self, av, err)) < 0)
      return rc;
  return 0;
}

/* " ARG" as a POSIX shell reads it back: single quotes around an argument with a space or
 * another character the shell would act on (what the ranks share, the program's arguments),
 * so that the printed command can be pasted into a shell. */
static void put_quoted(FILE *f, const char *a)
{
  if (*a && strspn(a, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_@%+=:,./-") == strlen(a)) {
    fprintf(f, " %s", a);
    return;
  }
  fputs(" '", f);
  for (; *a; a++)
    if (*a == '\'')
      fputs("'\\''", f);
    else
      fputc(*a, f);
  fputc('\'', f);
}

void dpt_launch_cmd_print(FILE *f, const struct dpt_launch_opts *o, const struct dpt_plan *plan,
                          const struct dpt_launch_argv *av)
{
  if (o->dry)
    dpt_plan_print(f, plan);
  fprintf(f, "\nbindings (plan digest %s):\n", plan->digest);
  for (int i = 0; i < plan->n_ranks; i++) {
    char line[512];
    dpt_bind_describe(plan, i, line, sizeof line);
    fprintf(f, "  %s\n", line);
  }
  if (o->comm)
    fprintf(f, "communicator: %s (DPT_COMM)\n", o->comm);
  fprintf(f, "\ncommand:");
  for (int i = 0; i < av->n; i++)
    put_quoted(f, av->v[i]);
  fprintf(f, "\n");
}
