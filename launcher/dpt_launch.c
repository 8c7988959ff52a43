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
 * uses: one app context per plan rank ("-n 1 -x VAR=value ... : ..."), so MPI
 * rank == plan rank == ring position and each rank gets its own binding and
 * environment (dpt_bind_env).  Each rank runs under a small supervisor
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
 * preempted, checkpoint written); 2 for bad usage or input; 1 if mpirun fails. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "dpt_bind.h"
#include "dpt_comm.h"
#include "dpt_err.h"
#include "dpt_hostfile.h"
#include "dpt_job.h"
#include "dpt_plan.h"
#include "dpt_rdzv.h"
#include "dpt_report_end.h"
#include "dpt_launch_int.h"

#ifndef DPT_MPIRUN
#define DPT_MPIRUN "mpirun"
#endif


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


/* ---------------------------------------------------------------- launching */

struct strv {
  char **v;
  int n, cap;
};

static int sv_push(struct strv *s, const char *x)
{
  if (s->n + 2 > s->cap) {
    int cap = s->cap ? 2 * s->cap : 64;
    char **v = realloc(s->v, sizeof *v * (size_t)cap);
    if (!v)
      return -1;
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n] = strdup(x);
  if (!s->v[s->n])
    return -1;
  s->n++;
  s->v[s->n] = NULL;
  return 0;
}

static void sv_free(struct strv *s)
{
  for (int i = 0; i < s->n; i++)
    free(s->v[i]);
  free(s->v);
}

struct envlist {
  struct strv *argv; /* mpirun argv to append "-x NAME=value" to */
  int failed;
};

static int env_to_x(void *arg, const char *name, const char *value)
{
  struct envlist *e = arg;
  char kv[1024];
  if (!value)
    return 0;
  snprintf(kv, sizeof kv, "%s=%s", name, value);
  if (sv_push(e->argv, "-x") < 0 || sv_push(e->argv, kv) < 0) {
    e->failed = 1;
    return DPT_E_NOMEM;
  }
  return 0;
}

static const char *get_env(void *arg, const char *name)
{
  (void)arg;
  return getenv(name);
}

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

int main(int argc, char **argv)
{
  int n = 0, nodes = 0, gpn = 0, threads = 0, dry = 0, verbose = 0, oversub = 0, i, rc = 1;
  const char *input = NULL, *comm = NULL, *hostfile = NULL, *mpirun, *report = NULL;
  int no_report = 0;
  double t_start = 0;
  char **prog = NULL, **hosts = NULL;
  int nprog = 0, n_hosts = 0, n_nodes_set = 0, n_set = 0, cpusets = 0;
  struct dpt_err err;
  struct dpt_job job;
  struct dpt_plan *plan = NULL;
  struct strv av = {0};
  char self[PATH_MAX], progpath[PATH_MAX], statusdir[PATH_MAX] = "", rankfile[PATH_MAX] = "";
  char hostname[256] = "localhost", node_what[PATH_MAX + 16], note[600] = "", shared[512] = "";

  dpt_err_clear(&err);
  if (argc >= 2 && !strcmp(argv[1], "--exec-rank")) {
    int a = 2;
    if (a < argc && !strcmp(argv[a], "--"))
      a++;
    return dpt_launch_exec_rank(argc - a, argv + a);
  }
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--")) {
      prog = argv + i + 1;
      nprog = argc - i - 1;
      break;
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--dry-run")) {
      dry = 1;
    } else if (!strcmp(a, "--no-report")) {
      no_report = 1;
    } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
      verbose = 1;
    } else if (!strcmp(a, "--oversubscribe")) {
      oversub = 1;
    } else if (!strcmp(a, "-n") || !strcmp(a, "-N") || !strcmp(a, "--gpus-per-node") ||
               !strcmp(a, "--threads")) {
      int v;
      if (i + 1 >= argc)
        return dpt_launch_bad("%s needs a number", a);
      if (parse_pos_int(argv[++i], &v) < 0 || v < 1)
        return dpt_launch_bad("%s %s: expected a number of %s >= 1", a, argv[i],
                   !strcmp(a, "-n") ? "ranks" : !strcmp(a, "-N") ? "nodes"
                   : !strcmp(a, "--threads") ? "threads" : "GPUs per node");
      if (!strcmp(a, "-n")) {
        n = v;
        n_set = 1;
      } else if (!strcmp(a, "-N")) {
        nodes = v;
        n_nodes_set = 1;
      } else if (!strcmp(a, "--threads")) {
        threads = v;
      } else {
        gpn = v;
      }
    } else if (!strcmp(a, "--input") || !strcmp(a, "--comm") || !strcmp(a, "--hostfile") ||
               !strcmp(a, "--report")) {
      if (i + 1 >= argc)
        return dpt_launch_bad("%s needs a value", a);
      if (!strcmp(a, "--report"))
        report = argv[++i];
      else if (!strcmp(a, "--input"))
        input = argv[++i];
      else if (!strcmp(a, "--comm"))
        comm = argv[++i];
      else
        hostfile = argv[++i];
    } else if (a[0] == '-') {
      return dpt_launch_bad("unknown option %s", a);
    } else {
      prog = argv + i;
      nprog = argc - i;
      break;
    }
  }
  if (!n_set && !hostfile)
    return dpt_launch_bad("say how many ranks: -n N (this node) or --hostfile FILE -N NODES");
  if (n_set && hostfile)
    return dpt_launch_bad("-n (this node) and --hostfile (several nodes) exclude each other");
  if (hostfile && !n_nodes_set)
    return dpt_launch_bad("--hostfile needs -N NODES");
  if (hostfile && oversub)
    return dpt_launch_bad("--oversubscribe goes with -n (ranks on this node); --hostfile runs --gpus-per-node ranks "
               "per node");
  if (comm && !dpt_comm_check_name(comm, &err))
    return dpt_launch_bad("--comm: %s", err.msg);
  if (!prog || nprog < 1)
    return dpt_launch_bad("missing program: dpt-launch ... -- PROGRAM [ARGS...]");
  if (find_program(prog[0], progpath, sizeof progpath) < 0)
    return dpt_launch_bad("program \"%s\" not found or not executable (PATH=%s)", prog[0],
               getenv("PATH") ? getenv("PATH") : "");

  gethostname(hostname, sizeof hostname - 1);
  if (hostfile) {
    if (dpt_hostfile_load(hostfile, &hosts, &n_hosts, &err) < 0)
      return dpt_launch_bad("%s", err.msg);
    if (nodes > n_hosts) {
      rc = dpt_launch_bad("-N %d but hostfile %s lists only %d host%s", nodes, hostfile, n_hosts,
               n_hosts == 1 ? "" : "s");
      goto out;
    }
    for (i = nodes; i < n_hosts; i++)
      free(hosts[i]);
    n_hosts = nodes;
  } else {
    hosts = malloc(sizeof *hosts);
    if (!hosts)
      goto out;
    hosts[0] = strdup(hostname);
    n_hosts = 1;
  }

  /* The plan, as every planner caller makes it (dpt_job.h): a flat tree over the
   * hosts; --input for every host, this machine (-n), or the GPU count. */
  dpt_job_init(&job);
  job.hosts = (const char *const *)hosts;
  job.n_hosts = n_hosts;
  if (input) {
    job.node_source = DPT_JOB_NODE_XML;
    job.node_path = input;
    snprintf(node_what, sizeof node_what, "--input %s", input);
    job.node_what = node_what;
  } else if (hostfile) {
    job.node_source = DPT_JOB_NODE_GPUS;
    job.gpus_per_node = gpn > 0 ? gpn : 1;
  }
  job.ranks_per_node = hostfile ? gpn : n;
  job.oversubscribe = oversub;
  job.threads_per_rank = threads;
  if (dpt_job_plan(&plan, &job, note, sizeof note, &err) < 0) {
    rc = dpt_launch_bad("%s", err.msg);
    goto out;
  }
  if (note[0])
    fprintf(stderr, "dpt-launch: %s\n", note);
  dpt_job_sharing(plan, shared, sizeof shared);

  /* mpirun command: one app context per plan rank. */
  mpirun = getenv("DPT_MPIRUN") ? getenv("DPT_MPIRUN") : DPT_MPIRUN;
  {
    ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
    if (l < 0) {
      fprintf(stderr, "dpt-launch: cannot find its own executable: %s\n", strerror(errno));
      goto out;
    }
    self[l] = '\0';
  }
  if (!dry) {
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(statusdir, sizeof statusdir, "%s/dpt-launch.XXXXXX", tmp);
    if (!mkdtemp(statusdir)) {
      fprintf(stderr, "dpt-launch: cannot create a status directory in %s: %s\n", tmp,
              strerror(errno));
      statusdir[0] = '\0';
      goto out;
    }
    snprintf(dpt_launch_forwarded, sizeof dpt_launch_forwarded, "%s/forwarded", statusdir);
  } else {
    snprintf(statusdir, sizeof statusdir, "/tmp/dpt-launch.XXXXXX");
  }
  if (sv_push(&av, mpirun) < 0)
    goto out;
  if (geteuid() == 0 && sv_push(&av, "--allow-run-as-root") < 0)
    goto out;
  if (sv_push(&av, "--oversubscribe") < 0) /* mpirun's slots: the plan decides what runs where */
    goto out;
  if (!verbose && sv_push(&av, "--quiet") < 0) /* no abort paragraphs: the summary line below names the rank */
    goto out;
  for (i = 0; i < plan->n_ranks; i++) /* a rankfile binds: only where the plan has every rank's CPUs */
    cpusets += plan->ranks[i].cpuset[0] != '\0';
  if (hostfile && cpusets == plan->n_ranks) {
    FILE *f;
    if ((size_t)snprintf(rankfile, sizeof rankfile, "%s/rankfile", statusdir) >= sizeof rankfile) {
      fprintf(stderr, "dpt-launch: the rankfile path under %s is too long; set TMPDIR to a shorter "
              "directory\n", statusdir);
      goto out;
    }
    f = dry ? stdout : fopen(rankfile, "w");
    if (!f) {
      fprintf(stderr, "dpt-launch: cannot write %s: %s\n", rankfile, strerror(errno));
      goto out;
    }
    if (dry)
      printf("\nrankfile (%s):\n", rankfile);
    for (i = 0; i < plan->n_ranks; i++)
      fprintf(f, "rank %d=%s slot=%s\n", i, plan->nodes[plan->ranks[i].node].host, plan->ranks[i].cpuset);
    if (!dry)
      fclose(f);
    if (sv_push(&av, "--rankfile") < 0 || sv_push(&av, rankfile) < 0 || sv_push(&av, "--mca") < 0 ||
        sv_push(&av, "rmaps_rank_file_physical") < 0 || sv_push(&av, "1") < 0)
      goto out;
  } else if (sv_push(&av, "--bind-to") < 0 || sv_push(&av, "none") < 0) {
    goto out;
  }
  /* the frameworks' rendezvous (runtime/dpt_rdzv.h): plan rank 0's host -- this one
   * over loopback without a hostfile --, a port derived from this process */
  {
    char port[16], id[96];
    snprintf(port, sizeof port, "%d", dpt_rdzv_port((unsigned long)getpid(), 0));
    snprintf(id, sizeof id, "dpt-launch-%.64s-%ld", hostname, (long)getpid());
    if ((hostfile ? unsetenv("DPT_MASTER_ADDR") : setenv("DPT_MASTER_ADDR", "127.0.0.1", 1)) != 0 ||
        setenv("DPT_MASTER_PORT", port, 1) != 0 || setenv("DPT_RUN_ID", id, 1) != 0) {
      fprintf(stderr, "dpt-launch: cannot set DPT_MASTER_ADDR/PORT: %s\n", strerror(errno));
      goto out;
    }
  }
  for (i = 0; i < plan->n_ranks; i++) {
    struct envlist el = {&av, 0};
    char kv[PATH_MAX + 32];
    if (i && sv_push(&av, ":") < 0)
      goto out;
    if (sv_push(&av, "-n") < 0 || sv_push(&av, "1") < 0)
      goto out;
    /* without the ranks' CPUs (--gpus-per-node: no node topology) the rank goes to its
     * plan host unbound; a rankfile would bind it to a core it guessed (slot = local
     * rank), which mpirun refuses beyond the host's cores */
    if (hostfile && cpusets < plan->n_ranks &&
        (sv_push(&av, "--host") < 0 || sv_push(&av, plan->nodes[plan->ranks[i].node].host) < 0))
      goto out;
    if (dpt_bind_env(plan, i, get_env, NULL, env_to_x, &el, &err) < 0) {
      rc = dpt_launch_bad("%s", err.msg);
      goto out;
    }
    snprintf(kv, sizeof kv, "DPT_LAUNCH_STATUS_DIR=%s", statusdir);
    if (sv_push(&av, "-x") < 0 || sv_push(&av, kv) < 0)
      goto out;
    /* a program that writes its own report (dpt-train) says where: the launcher adds
     * how each rank ended to it instead of writing one (runtime/dpt_report_end.h) */
    snprintf(kv, sizeof kv, "DPT_REPORT_ANNOUNCE=%s/report", statusdir);
    if (sv_push(&av, "-x") < 0 || sv_push(&av, kv) < 0)
      goto out;
    if (report) {
      snprintf(kv, sizeof kv, "DPT_REPORT=%s", report);
      if (sv_push(&av, "-x") < 0 || sv_push(&av, kv) < 0)
        goto out;
    }
    /* The planning inputs (with DPT_PLAN_DIGEST, DPT_HOST_INDEX, DPT_PLAN_THREADS from
     * dpt_bind_env): the program's dpt_boot_init recomputes the plan on every rank
     * and checks it against DPT_PLAN_DIGEST.  (Not in the supervisor: mpirun's PMIx
     * server accepts one client per rank, and the program needs it for MPI.) */
    if (sv_push(&av, "-x") < 0 || sv_push(&av, "DPT_PLAN_TREE=flat") < 0)
      goto out;
    if (input) {
      char abs[PATH_MAX];
      snprintf(kv, sizeof kv, "DPT_PLAN_XML=%s", realpath(input, abs) ? abs : input);
    } else if (hostfile) {
      snprintf(kv, sizeof kv, "DPT_PLAN_GPUS=%d", gpn > 0 ? gpn : 1);
    } else {
      kv[0] = '\0';
    }
    if (kv[0] && (sv_push(&av, "-x") < 0 || sv_push(&av, kv) < 0))
      goto out;
    if (oversub && (sv_push(&av, "-x") < 0 || sv_push(&av, "DPT_OVERSUBSCRIBE=1") < 0))
      goto out;
    if (shared[0]) { /* what the plan's ranks share, for the job report (job.oversubscribed) */
      snprintf(kv, sizeof kv, "DPT_PLAN_OVERSUBSCRIBED=%s", shared);
      if (sv_push(&av, "-x") < 0 || sv_push(&av, kv) < 0)
        goto out;
    }
    if (comm) {
      snprintf(kv, sizeof kv, "DPT_COMM=%s", comm);
      if (sv_push(&av, "-x") < 0 || sv_push(&av, kv) < 0)
        goto out;
    }
    if (verbose && (sv_push(&av, "-x") < 0 || sv_push(&av, "DPT_LAUNCH_VERBOSE=1") < 0))
      goto out;
    if (sv_push(&av, self) < 0 || sv_push(&av, "--exec-rank") < 0 || sv_push(&av, "--") < 0)
      goto out;
    for (int a = 0; a < nprog; a++)
      if (sv_push(&av, a == 0 ? progpath : prog[a]) < 0)
        goto out;
  }

  if (dry || verbose) {
    FILE *f = dry ? stdout : stderr;
    if (dry)
      dpt_plan_print(f, plan);
    fprintf(f, "\nbindings (plan digest %s):\n", plan->digest);
    for (i = 0; i < plan->n_ranks; i++) {
      char line[512];
      dpt_bind_describe(plan, i, line, sizeof line);
      fprintf(f, "  %s\n", line);
    }
    if (comm)
      fprintf(f, "communicator: %s (DPT_COMM)\n", comm);
    fprintf(f, "\ncommand:");
    for (i = 0; i < av.n; i++)
      fprintf(f, " %s", av.v[i]);
    fprintf(f, "\n");
  }
  if (dry) {
    rc = 0;
    goto out;
  }

  t_start = wall_now();
  dpt_launch_install_forwarding();
  {
    pid_t pid = fork();
    int status = 0, first;
    char msg[2048] = "";
    if (pid < 0) {
      fprintf(stderr, "dpt-launch: fork failed: %s\n", strerror(errno));
      goto out;
    }
    if (pid == 0) {
      execvp(av.v[0], av.v);
      fprintf(stderr, "dpt-launch: cannot run %s: %s (set DPT_MPIRUN to Open MPI's mpirun)\n",
              av.v[0], strerror(errno));
      _exit(127);
    }
    dpt_launch_child_pid = pid;
    while (waitpid(pid, &status, 0) < 0)
      if (errno != EINTR) {
        fprintf(stderr, "dpt-launch: waitpid: %s\n", strerror(errno));
        goto out;
      }
    dpt_launch_child_pid = -1;
    first = dpt_launch_first_failure(statusdir, plan->n_ranks,
                          dpt_launch_got_signal == SIGTERM || dpt_launch_got_signal == SIGUSR1 ||
                                  dpt_launch_got_signal == SIGUSR2 ? dpt_launch_got_signal : 0,
                          msg, sizeof msg);
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
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
              dpt_launch_got_signal ? " (after a forwarded signal)" : "",
              verbose ? "" : "; run with -v to see mpirun's own messages");
    }
    if (!no_report)
      job_report(plan, statusdir, report, prog, nprog, t_start, rc);
  }
out:
  if (statusdir[0] && !dry)
    dpt_launch_status_remove(statusdir);
  sv_free(&av);
  dpt_plan_destroy(plan);
  if (hosts)
    for (i = 0; i < n_hosts; i++)
      free(hosts[i]);
  free(hosts);
  return rc;
}

