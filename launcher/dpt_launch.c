/* dpt-launch — the dpt runtime without Slurm.
 *
 *   dpt-launch -n N [--oversubscribe] [--input node.xml] [--comm NAME] [--threads T]
 *              [--dry-run] [-v] -- PROGRAM ARGS
 *   dpt-launch --hostfile FILE -N NODES [--gpus-per-node G] [--input node.xml]
 *              [--comm NAME] [--dry-run] [-v] -- PROGRAM ARGS
 *
 * Both compute the plan (dpt_job_plan, topology/dpt_job.h: a flat switch tree
 * over the hosts, the one oversubscription rule: -n more ranks than GPUs, or
 * than cores on a node without GPUs, only with --oversubscribe, which is then
 * said on stderr and passed on as DPT_OVERSUBSCRIBE=1, what is shared as
 * DPT_PLAN_OVERSUBSCRIBED for the job report) and start the ranks
 * through Open MPI's mpirun (--quiet unless -v: dpt-launch names the failing
 * rank itself, without mpirun's abort paragraphs) — the distributed
 * engine, which also gives the ranks the MPI world every dpt communicator
 * uses: one app context per plan rank ("-n 1 -x VAR=value ... : ...",
 * dpt_launch_cmd.c), so MPI rank == plan rank == ring position and each rank
 * gets its own binding and environment (dpt_bind_env).  Each rank runs under a small supervisor
 * (`dpt-launch --exec-rank`, internal) that applies the CPU/memory binding
 * with hwloc (dpt_bind_apply_from_env), forks the program, forwards signals to
 * it, and records how it ended; dpt-launch exits with the status of the first
 * rank that failed and names it.  -N mode places rank r on its plan node: a
 * rankfile binding it to the plan's CPUs when the plan has them (--input),
 * else `--host NODE` in its app context, unbound.  After the job dpt-launch
 * writes the job report of the program (runtime/dpt_report_end.h) from the
 * supervisors' parts, or adds them to the report the program wrote.  SIGUSR1
 * and SIGUSR2 reach the ranks through mpirun; SIGTERM too, as a SIGUSR2 that
 * the rank supervisors turn back into SIGTERM (mpirun would abort the job on a
 * SIGTERM of its own); SIGINT/SIGHUP/SIGQUIT go to mpirun, which tears the job
 * down.
 *
 * Exit: 0 when every rank succeeded; the first failing rank's status
 * (128+signal when killed) — a rank that died on its own, else one that failed
 * with an error, else the one the survivors' watchdogs named; 3 when every
 * rank that ended exited 3 after a forwarded SIGTERM/SIGUSR1 (dpt-train:
 * preempted, checkpoint written); 2 for bad usage or input; 1 if mpirun, or
 * dpt-launch itself (its status directory, memory), fails. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dpt_comm.h"
#include "dpt_err.h"
#include "dpt_hostfile.h"
#include "dpt_job.h"
#include "dpt_plan.h"
#include "dpt_report_end.h"
#include "dpt_launch_int.h"


static void usage(FILE *f)
{
  fprintf(f,
          "usage: dpt-launch -n N [--oversubscribe] [--input node.xml] [--comm NAME] [--threads T] "
          "[--report PATH | --no-report] [--dry-run] [-v] -- PROGRAM [ARGS...]\n"
          "       dpt-launch --hostfile FILE -N NODES [--gpus-per-node G] [--input node.xml] "
          "[--comm NAME] [--report PATH | --no-report] [--dry-run] [-v] -- PROGRAM [ARGS...]\n"
          "  -n N               ranks on this node (forked through mpirun, one per plan rank)\n"
          "  --oversubscribe    allow more ranks than GPUs, or than cores on a node without GPUs\n"
          "                     (ranks share them; said on stderr)\n"
          "  --hostfile FILE    hosts, one per line (\"host [slots=..]\", # comments)\n"
          "  -N NODES           use the first NODES hosts of the hostfile\n"
          "  --gpus-per-node G  ranks (GPUs) per node when no --input describes the nodes\n"
          "  --input node.xml   hwloc XML of the node(s) instead of this machine\n"
          "  --comm NAME        communicator for the program (DPT_COMM): auto, mpi, ring, "
          "hierarchical, nccl\n"
          "  --threads T        OMP_NUM_THREADS per rank (default: cores of its cpuset)\n"
          "  --report PATH      the job report (dpt.report/1; also DPT_REPORT for the ranks); default\n"
          "                     dpt-report-<program>-<pid of rank 0>.json, or the program's own report\n"
          "                     with how each rank ended added to it\n"
          "  --no-report        no job report from dpt-launch\n"
          "  --dry-run          print the plan, bindings and mpirun command; start nothing\n"
          "  -v                 print each rank's applied binding and mpirun's own messages\n");
}


static int parse_pos_int(const char *s, int *out)
{
  char *end;
  long v;
  errno = 0;
  v = strtol(s, &end, 10);
  if (errno || end == s || *end || v > INT_MAX || v < INT_MIN)
    return -1;
  *out = (int)v;
  return 0;
}


/* ---------------------------------------------------------------- the options */

/* PROGRAM exists and is executable (directly or on PATH). */
static int find_program(const char *prog, char *out, size_t len)
{
  const char *path = getenv("PATH");
  if (strchr(prog, '/')) {
    snprintf(out, len, "%s", prog);
    return access(prog, X_OK);
  }
  if (!path)
    path = "/usr/bin:/bin";
  while (*path) {
    const char *colon = strchr(path, ':');
    size_t l = colon ? (size_t)(colon - path) : strlen(path);
    snprintf(out, len, "%.*s/%s", (int)l, l ? path : ".", prog);
    if (access(out, X_OK) == 0)
      return 0;
    path += l + (colon ? 1 : 0);
  }
  return -1;
}


static double wall_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The job report (runtime/dpt_report_end.h): the supervisors' parts added to the
 * report the program announced, or the program's report written from them. */
static void job_report(const struct dpt_plan *plan, const char *statusdir, const char *report, char **prog,
                       int nprog, double t_start, int rc)
{
  char parts[PATH_MAX + 32], announce[PATH_MAX + 16], path[4096];
  struct dpt_report_end_job j;
  struct dpt_err err;
  int k;

  dpt_err_clear(&err);
  snprintf(parts, sizeof parts, "%s/rank.", statusdir);
  snprintf(announce, sizeof announce, "%s/report", statusdir);
  memset(&j, 0, sizeof j);
  j.plan = plan;
  j.argc = nprog;
  j.argv = prog;
  j.parts_prefix = parts;
  j.parts_suffix = ".json";
  j.announce = announce;
  j.path = report;
  j.missing_hint = "a rank on another node writes to its own TMPDIR; give dpt-launch a TMPDIR that "
                   "every host shares";
  j.start_unix = t_start;
  j.exit_status = rc;
  setenv("DPT_LAUNCHER", "dpt-launch", 1); /* job.launcher of the report written here */
  k = dpt_report_end_finish(&j, path, sizeof path, &err);
  if (k < 0)
    fprintf(stderr, "dpt-launch: no job report: %s\n", err.msg);
  else if (path[0])
    fprintf(stderr, "dpt-launch: report %s%s\n", path, k == 1 ? " (the program's, with how each rank ended)" : "");
}


/* Reads the options into o; 0, or the exit status (2: bad usage). */
static int parse_args(int argc, char **argv, struct dpt_launch_opts *o)
{
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--") || a[0] != '-') { /* the program: after "--", or the first non-option */
      o->prog = argv + i + !strcmp(a, "--");
      o->nprog = argc - i - !strcmp(a, "--");
      return 0;
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      o->help = 1;
      return 0;
    } else if (!strcmp(a, "--dry-run")) {
      o->dry = 1;
    } else if (!strcmp(a, "--no-report")) {
      o->no_report = 1;
    } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
      o->verbose = 1;
    } else if (!strcmp(a, "--oversubscribe")) {
      o->oversub = 1;
    } else if (!strcmp(a, "-n") || !strcmp(a, "-N") || !strcmp(a, "--gpus-per-node") || !strcmp(a, "--threads")) {
      int v;
      if (i + 1 >= argc)
        return dpt_launch_bad("%s needs a number", a);
      if (parse_pos_int(argv[++i], &v) < 0 || v < 1)
        return dpt_launch_bad("%s %s: expected a number of %s >= 1", a, argv[i],
                              !strcmp(a, "-n") ? "ranks" : !strcmp(a, "-N") ? "nodes"
                              : !strcmp(a, "--threads") ? "threads" : "GPUs per node");
      if (!strcmp(a, "-n"))
        o->n = v, o->n_set = 1;
      else if (!strcmp(a, "-N"))
        o->nodes = v, o->nodes_set = 1;
      else if (!strcmp(a, "--threads"))
        o->threads = v;
      else
        o->gpus_per_node = v;
    } else if (!strcmp(a, "--input") || !strcmp(a, "--comm") || !strcmp(a, "--hostfile") ||
               !strcmp(a, "--report")) {
      if (i + 1 >= argc)
        return dpt_launch_bad("%s needs a value", a);
      *(!strcmp(a, "--report") ? &o->report : !strcmp(a, "--input") ? &o->input
        : !strcmp(a, "--comm") ? &o->comm : &o->hostfile) = argv[++i];
    } else {
      return dpt_launch_bad("unknown option %s", a);
    }
  }
  return 0;
}

/* What the two modes allow together, and the program; 0, or 2 (bad usage). */
static int check_args(struct dpt_launch_opts *o)
{
  struct dpt_err err;
  dpt_err_clear(&err);
  if (!o->n_set && !o->hostfile)
    return dpt_launch_bad("say how many ranks: -n N (this node) or --hostfile FILE -N NODES");
  if (o->n_set && o->hostfile)
    return dpt_launch_bad("-n (this node) and --hostfile (several nodes) exclude each other");
  if (o->hostfile && !o->nodes_set)
    return dpt_launch_bad("--hostfile needs -N NODES");
  if (o->hostfile && o->oversub)
    return dpt_launch_bad("--oversubscribe goes with -n (ranks on this node); --hostfile runs --gpus-per-node "
                          "ranks per node");
  if (o->comm && !dpt_comm_check_name(o->comm, &err))
    return dpt_launch_bad("--comm: %s", err.msg);
  if (!o->prog || o->nprog < 1)
    return dpt_launch_bad("missing program: dpt-launch ... -- PROGRAM [ARGS...]");
  if (find_program(o->prog[0], o->progpath, sizeof o->progpath) < 0)
    return dpt_launch_bad("program \"%s\" not found or not executable (PATH=%s)", o->prog[0],
                          getenv("PATH") ? getenv("PATH") : "");
  return 0;
}

/* The hosts: the hostfile's first -N, or this one (-n).  0, or the exit status. */
static int hosts_load(const struct dpt_launch_opts *o, const char *hostname, char ***hosts, int *n_hosts)
{
  struct dpt_err err;
  dpt_err_clear(&err);
  if (!o->hostfile) {
    if (!(*hosts = calloc(1, sizeof **hosts)) || !((*hosts)[0] = strdup(hostname))) {
      fprintf(stderr, "dpt-launch: out of memory for the host name %s\n", hostname);
      return 1;
    }
    *n_hosts = 1;
    return 0;
  }
  if (dpt_hostfile_load(o->hostfile, hosts, n_hosts, &err) < 0)
    return dpt_launch_bad("%s", err.msg);
  if (o->nodes > *n_hosts)
    return dpt_launch_bad("-N %d but hostfile %s lists only %d host%s", o->nodes, o->hostfile, *n_hosts,
                          *n_hosts == 1 ? "" : "s");
  for (int i = o->nodes; i < *n_hosts; i++)
    free((*hosts)[i]);
  *n_hosts = o->nodes;
  return 0;
}

/* The plan, as every planner caller makes it (dpt_job.h): a flat tree over the
 * hosts; --input for every host, this machine (-n), or the GPU count.  0, or 2. */
static int plan_make(const struct dpt_launch_opts *o, char **hosts, int n_hosts, struct dpt_plan **plan)
{
  char node_what[PATH_MAX + 16], note[600] = "";
  struct dpt_job job;
  struct dpt_err err;
  dpt_err_clear(&err);
  dpt_job_init(&job);
  job.hosts = (const char *const *)hosts;
  job.n_hosts = n_hosts;
  if (o->input) {
    job.node_source = DPT_JOB_NODE_XML;
    job.node_path = o->input;
    snprintf(node_what, sizeof node_what, "--input %s", o->input);
    job.node_what = node_what;
  } else if (o->hostfile) {
    job.node_source = DPT_JOB_NODE_GPUS;
    job.gpus_per_node = o->gpus_per_node > 0 ? o->gpus_per_node : 1;
  }
  job.ranks_per_node = o->hostfile ? o->gpus_per_node : o->n;
  job.oversubscribe = o->oversub;
  job.threads_per_rank = o->threads;
  if (dpt_job_plan(plan, &job, note, sizeof note, &err) < 0)
    return dpt_launch_bad("%s", err.msg);
  if (note[0])
    fprintf(stderr, "dpt-launch: %s\n", note);
  return 0;
}

/* The directory the rank supervisors write to, under TMPDIR (a dry run: its pattern).
 * 0, or 1 with dir "". */
static int statusdir_make(const struct dpt_launch_opts *o, char *dir, size_t len)
{
  const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  if (o->dry) {
    snprintf(dir, len, "/tmp/dpt-launch.XXXXXX");
    return 0;
  }
  snprintf(dir, len, "%s/dpt-launch.XXXXXX", tmp);
  if (!mkdtemp(dir)) {
    fprintf(stderr, "dpt-launch: cannot create a status directory in %s: %s (set TMPDIR to a writable "
            "directory)\n", tmp, strerror(errno));
    dir[0] = '\0';
    return 1;
  }
  snprintf(dpt_launch_forwarded, sizeof dpt_launch_forwarded, "%s/forwarded", dir);
  return 0;
}

/* Runs mpirun, waits, names the first failing rank and writes the job report;
 * returns dpt-launch's exit status (see the top of this file). */
static int run_job(const struct dpt_launch_opts *o, const struct dpt_launch_argv *av, const struct dpt_plan *plan,
                   const char *statusdir)
{
  int status = 0, first, rc, sig;
  char msg[2048] = "";
  double t_start = wall_now();
  pid_t pid;
  dpt_launch_install_forwarding();
  if ((pid = fork()) < 0) {
    fprintf(stderr, "dpt-launch: fork failed: %s\n", strerror(errno));
    return 1;
  }
  if (pid == 0) {
    execvp(av->v[0], av->v);
    fprintf(stderr, "dpt-launch: cannot run %s: %s (set DPT_MPIRUN to Open MPI's mpirun)\n", av->v[0],
            strerror(errno));
    _exit(127);
  }
  dpt_launch_child_pid = pid;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) {
      fprintf(stderr, "dpt-launch: waitpid: %s\n", strerror(errno));
      return 1;
    }
  dpt_launch_child_pid = -1;
  sig = dpt_launch_got_signal;
  first = dpt_launch_first_failure(statusdir, plan->n_ranks,
                                   sig == SIGTERM || sig == SIGUSR1 || sig == SIGUSR2 ? sig : 0, msg, sizeof msg);
  dpt_launch_forwarded[0] = '\0';
  if (first) {
    fprintf(stderr, "dpt-launch: %s\n", msg);
    rc = first;
  } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    rc = 0;
  } else {
    rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (!rc)
      rc = 1;
    fprintf(stderr, "dpt-launch: mpirun %s %d without a failing rank recorded%s%s\n",
            WIFEXITED(status) ? "exited with status" : "was killed by signal",
            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), sig ? " (after a forwarded signal)" : "",
            o->verbose ? "" : "; run with -v to see mpirun's own messages");
  }
  if (!o->no_report)
    job_report(plan, statusdir, o->report, o->prog, o->nprog, t_start, rc);
  return rc;
}

int main(int argc, char **argv)
{
  struct dpt_launch_opts o = {0};
  struct dpt_launch_argv av = {0};
  struct dpt_plan *plan = NULL;
  struct dpt_err err;
  char **hosts = NULL, hostname[256] = "localhost", statusdir[PATH_MAX] = "";
  int n_hosts = 0, rc;

  dpt_err_clear(&err);
  if (argc >= 2 && !strcmp(argv[1], "--exec-rank")) {
    int a = 2 + (argc > 2 && !strcmp(argv[2], "--"));
    return dpt_launch_exec_rank(argc - a, argv + a);
  }
  if ((rc = parse_args(argc, argv, &o)) || o.help || (rc = check_args(&o))) {
    if (o.help)
      usage(stdout);
    return rc;
  }
  gethostname(hostname, sizeof hostname - 1);
  if ((rc = hosts_load(&o, hostname, &hosts, &n_hosts)) || (rc = plan_make(&o, hosts, n_hosts, &plan)) ||
      (rc = statusdir_make(&o, statusdir, sizeof statusdir)))
    goto out;
  if (dpt_launch_cmd_build(&o, plan, statusdir, hostname, &av, &err) < 0) {
    if (err.code == DPT_E_INPUT) { /* the user's environment (dpt_bind_env) */
      rc = dpt_launch_bad("%s", err.msg);
    } else {
      fprintf(stderr, "dpt-launch: %s\n", err.msg);
      rc = 1;
    }
    goto out;
  }
  if (o.dry || o.verbose)
    dpt_launch_cmd_print(o.dry ? stdout : stderr, &o, plan, &av);
  if (!o.dry)
    rc = run_job(&o, &av, plan, statusdir);
out:
  if (statusdir[0] && !o.dry)
    dpt_launch_status_remove(statusdir);
  dpt_launch_argv_free(&av);
  dpt_plan_destroy(plan);
  for (int i = 0; hosts && i < n_hosts; i++)
    free(hosts[i]);
  free(hosts);
  return rc;
}
