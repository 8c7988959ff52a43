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
 * rank that failed and names it.  -N mode adds a rankfile that places rank r
 * on its plan node.  SIGUSR1 and SIGUSR2 reach the ranks through mpirun;
 * SIGTERM too, as a SIGUSR2 that the rank supervisors turn back into SIGTERM
 * (mpirun would abort the job on a SIGTERM of its own); SIGINT/SIGHUP/SIGQUIT
 * go to mpirun, which tears the job down.
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

#ifndef DPT_MPIRUN
#define DPT_MPIRUN "mpirun"
#endif

static volatile sig_atomic_t child_pid = -1;
static volatile sig_atomic_t got_signal = 0;

/* mpirun takes SIGTERM (and SIGINT, SIGHUP) for itself: it aborts the job and
 * SIGKILLs the rank supervisors a second later, before a rank has finished its
 * step and checkpoint.  It forwards SIGUSR1 and SIGUSR2 to the ranks instead.
 * So dpt-launch sends SIGTERM on as SIGUSR2, after writing which signal it
 * meant to $DPT_LAUNCH_STATUS_DIR/forwarded ("T": SIGTERM, "U": a real
 * SIGUSR2), and each rank supervisor turns a SIGUSR2 back into SIGTERM unless
 * that file says "U" (or is unreadable: a node without the launcher's /tmp). */
static char g_forwarded[PATH_MAX + 16]; /* "" until the status directory exists; its path + "/forwarded" */
static int g_supervisor;           /* this process is a rank supervisor (--exec-rank) */

static void forward(int sig)
{
  int saved = errno, out = sig;
  if (g_forwarded[0] && sig == SIGUSR2 && g_supervisor) {
    char c = 'T';
    int fd = open(g_forwarded, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      if (read(fd, &c, 1) != 1)
        c = 'T';
      close(fd);
    }
    out = c == 'U' ? SIGUSR2 : SIGTERM;
  } else if (g_forwarded[0] && (sig == SIGTERM || sig == SIGUSR2) && !g_supervisor) {
    int fd = open(g_forwarded, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ssize_t w = write(fd, sig == SIGTERM ? "T\n" : "U\n", 2);
      (void)w;
      close(fd);
    }
    out = SIGUSR2;
  }
  got_signal = g_supervisor ? out : sig; /* the launcher remembers what it was sent */
  /* a supervisor signals the program's process group (the program and what it started) */
  if (child_pid > 0 && (!g_supervisor || kill(-(pid_t)child_pid, out)))
    kill((pid_t)child_pid, out);
  errno = saved;
}

static void install_forwarding(void)
{
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGQUIT};
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = forward;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
    sigaction(sigs[i], &sa, NULL);
}

static void usage(FILE *f)
{
  fprintf(f,
          "usage: dpt-launch -n N [--oversubscribe] [--input node.xml] [--comm NAME] [--threads T] "
          "[--dry-run] [-v] -- PROGRAM [ARGS...]\n"
          "       dpt-launch --hostfile FILE -N NODES [--gpus-per-node G] [--input node.xml] "
          "[--comm NAME] [--dry-run] [-v] -- PROGRAM [ARGS...]\n"
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
          "  --dry-run          print the plan, bindings and mpirun command; start nothing\n"
          "  -v                 print each rank's applied binding and mpirun's own messages\n");
}

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...)
{
  va_list ap;
  fprintf(stderr, "dpt-launch: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n(run dpt-launch --help for usage)\n");
  return 2;
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

/* ---------------------------------------------------------------- exec-rank */

static const char *signame(int sig)
{
  const char *s = strsignal(sig);
  return s ? s : "?";
}

static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int exec_rank(int argc, char **argv)
{
  struct dpt_err err;
  char report[512];
  const char *rank = getenv("DPT_RANK") ? getenv("DPT_RANK") : "?";
  const char *node = getenv("DPT_NODE_NAME") ? getenv("DPT_NODE_NAME") : "?";
  const char *dir = getenv("DPT_LAUNCH_STATUS_DIR");
  int status = 0, code;
  pid_t pid, parent;
  char how[160];

  dpt_err_clear(&err);
  if (argc < 1)
    return bad("--exec-rank needs a program");
  g_supervisor = 1;
  if (dir && *dir)
    snprintf(g_forwarded, sizeof g_forwarded, "%s/forwarded", dir);
  if (dpt_bind_apply_from_env(report, sizeof report, &err) < 0) {
    fprintf(stderr, "dpt-launch: rank %s on %s: binding failed: %s\n", rank, node, err.msg);
    code = dpt_err_exit_status(&err);
    snprintf(how, sizeof how, "binding failed");
    goto record;
  }
  setenv("DPT_BIND_APPLIED", report, 1); /* what was done, for the program's job report */
  if (!strcmp(rank, "0") && getenv("MASTER_PORT")) {
    /* rank 0 hosts the frameworks' rendezvous store: say a taken port before it fails */
    struct dpt_err perr;
    dpt_err_clear(&perr);
    if (dpt_rdzv_port_check(atoi(getenv("MASTER_PORT")), &perr) < 0)
      fprintf(stderr, "dpt-launch: rank 0 on %s: MASTER_PORT %s cannot be listened on there (%s): a "
              "PyTorch, Lightning or JAX rendezvous hosted by rank 0 will fail to start; export "
              "MASTER_PORT=<a free port> before dpt-launch\n", node, getenv("MASTER_PORT"), perr.msg);
  }
  if (getenv("DPT_LAUNCH_VERBOSE"))
    fprintf(stderr, "dpt-launch: rank %s on %s: %s, OMP_NUM_THREADS=%s%s%s\n", rank, node,
            report, getenv("OMP_NUM_THREADS") ? getenv("OMP_NUM_THREADS") : "-",
            getenv("CUDA_VISIBLE_DEVICES") ? ", CUDA_VISIBLE_DEVICES=" : "",
            getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "");
  install_forwarding();
  parent = getpid();
  pid = fork();
  if (pid < 0) {
    fprintf(stderr, "dpt-launch: rank %s: fork failed: %s\n", rank, strerror(errno));
    return 1;
  }
  if (pid == 0) {
    /* Its own process group: mpirun signals the supervisor's group, and the
     * program must get what the supervisor forwards (SIGUSR2 may stand for
     * SIGTERM), not mpirun's signal as well.  mpirun's teardown (SIGTERM, then
     * SIGKILL a second later) still ends it: the supervisor forwards the
     * SIGTERM to the program's group, and the program dies with the supervisor. */
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(128 + SIGKILL);
    execvp(argv[0], argv);
    fprintf(stderr, "dpt-launch: rank %s on %s: cannot run %s: %s\n", rank, node, argv[0],
            strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid); /* as the child does: no signal can come before its group exists */
  child_pid = pid;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) {
      fprintf(stderr, "dpt-launch: rank %s: waitpid: %s\n", rank, strerror(errno));
      return 1;
    }
  if (WIFEXITED(status)) {
    code = WEXITSTATUS(status);
    snprintf(how, sizeof how, "exited with status %d", code);
  } else {
    code = 128 + WTERMSIG(status);
    snprintf(how, sizeof how, "killed by signal %d (%s)", WTERMSIG(status),
             signame(WTERMSIG(status)));
  }
  if (!code)
    return 0;
  if (got_signal)
    fprintf(stderr, "dpt-launch: rank %s on %s (pid %d) %s after the launcher forwarded "
                    "signal %d\n", rank, node, (int)pid, how, (int)got_signal);
  else
    fprintf(stderr, "dpt-launch: rank %s on %s (pid %d) %s\n", rank, node, (int)pid, how);
record:
  if (dir) {
    char path[PATH_MAX];
    FILE *f;
    snprintf(path, sizeof path, "%s/rank.%s", dir, rank);
    f = fopen(path, "w");
    if (f) {
      fprintf(f, "%llu %s %d %d %s\n%s\n", (unsigned long long)now_ns(), rank, code,
              got_signal ? 1 : 0, node, how);
      fclose(f);
    }
  }
  return code;
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

/* How one rank ended, from its supervisor's record ($dir/rank.<r>) and the
 * phase it mirrored there (rank.<r>.phase, runtime/dpt_watchdog.c). */
struct rank_end {
  int recorded; /* rank.<r> was written: the rank exited non-zero or was killed */
  unsigned long long t;
  int code, fwd; /* fwd: its supervisor had forwarded a signal (a teardown, not a cause) */
  char node[256], how[256], phase[160];
};

/* the phase lines dpt_watchdog.c writes for a rank whose watchdog fired (a
 * survivor: "stopped by its watchdog; suspect rank R on NODE") and for one that
 * failed and is on its way out ("failed in PHASE @NODE") */
#define WATCHDOG_FIRED "stopped by its watchdog"
#define FAILED_IN "failed in "

static int starts(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

static void read_phase(const char *path, char *buf, size_t len)
{
  FILE *f = fopen(path, "r");
  buf[0] = '\0';
  if (!f)
    return;
  if (!fgets(buf, (int)len, f))
    buf[0] = '\0';
  fclose(f);
  for (size_t n = strlen(buf); n > 0 && (buf[n - 1] == ' ' || buf[n - 1] == '\n'); n--)
    buf[n - 1] = '\0';
}

/* Reads and removes the status directory; returns the exit status for
 * dpt-launch (0: no failure recorded) and in msg which rank caused it:
 *  - after a forwarded SIGTERM/SIGUSR1/SIGUSR2, when every recorded rank
 *    exited 3 (dpt-train: preempted, checkpoint written): 3;
 *  - else the earliest rank that died on its own (not stopped by a forwarded
 *    signal, not a survivor whose watchdog fired);
 *  - else a rank that announced it failed (an error, e.g. out of memory);
 *  - else the rank the survivors' watchdogs named most (a hung rank);
 *  - else the earliest record, preferring those not stopped by a signal. */
static int first_failure(const char *dir, int n_ranks, int forwarded, char *msg, size_t len)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  struct rank_end *re = n_ranks > 0 ? calloc((size_t)n_ranks, sizeof *re) : NULL;
  int *votes = n_ranks > 0 ? calloc((size_t)n_ranks, sizeof *votes) : NULL;
  unsigned long long best = ~0ull;
  int code = 0, fb = -1, pick = -1, n_rec = 0, n_three = 0, r;
  char voters[256] = "";

  if (!d)
    goto out;
  while ((e = readdir(d))) {
    char path[PATH_MAX], tail[8] = "";
    int n = -1;
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    else
      continue;
    if (sscanf(e->d_name, "rank.%d%n.%7s", &r, &n, tail) >= 1 && re && r >= 0 && r < n_ranks) {
      if (!strcmp(tail, "phase")) {
        read_phase(path, re[r].phase, sizeof re[r].phase);
      } else if (n > 0 && !e->d_name[n]) {
        FILE *f = fopen(path, "r");
        char rk[32];
        if (f && fscanf(f, "%llu %31s %d %d %255s\n", &re[r].t, rk, &re[r].code, &re[r].fwd,
                        re[r].node) == 5 && fgets(re[r].how, sizeof re[r].how, f)) {
          re[r].how[strcspn(re[r].how, "\n")] = '\0';
          re[r].recorded = 1;
        }
        if (f)
          fclose(f);
      }
    }
    unlink(path); /* rank.<r>, rank.<r>.phase, forwarded, rankfile */
  }
  closedir(d);
  rmdir(dir);
  if (!re || !votes)
    goto out;

  for (r = 0; r < n_ranks; r++) {
    struct rank_end *x = &re[r];
    if (!x->recorded)
      continue;
    n_rec++;
    n_three += x->code == 3;
    /* fallback: the earliest, not stopped by a forwarded signal if there is one */
    if (fb < 0 || x->fwd < re[fb].fwd || (x->fwd == re[fb].fwd && x->t < re[fb].t))
      fb = r;
    if (!x->fwd && x->code && !starts(x->phase, WATCHDOG_FIRED) && x->t < best) {
      best = x->t;
      pick = r;
    }
  }
  if (!n_rec) {
    code = 0;
    goto out;
  }
  if (forwarded && n_three == n_rec) {
    snprintf(msg, len, "the ranks stopped after the forwarded %s: %d of %d exited with status 3 "
             "(dpt-train: preempted, checkpoint written; run it again with --resume auto)",
             forwarded == SIGTERM ? "SIGTERM" : forwarded == SIGUSR1 ? "SIGUSR1" : "SIGUSR2", n_rec, n_ranks);
    code = 3;
    goto out;
  }
  if (pick >= 0) { /* died on its own */
    snprintf(msg, len, "rank %d on %s %s (first failing rank; the others were stopped)", pick,
             re[pick].node, re[pick].how);
    code = re[pick].code;
    goto out;
  }
  for (r = 0; r < n_ranks && pick < 0; r++)
    if (starts(re[r].phase, FAILED_IN))
      pick = r;
  if (pick >= 0) { /* "failed in PHASE @NODE": an error, e.g. out of memory */
    char *ph = re[pick].phase + strlen(FAILED_IN), *at = strrchr(ph, '@');
    const char *node = re[pick].recorded ? re[pick].node : at ? at + 1 : "?";
    if (at)
      *(at > ph && at[-1] == ' ' ? at - 1 : at) = '\0';
    snprintf(msg, len, "rank %d on %s failed with an error in phase %s (%s) (first failing rank; the "
             "others were stopped)", pick, node, ph, re[pick].recorded ? re[pick].how : "its exit was not recorded");
    code = re[pick].recorded && re[pick].code ? re[pick].code : re[fb].code;
    goto out;
  }
  /* a hung rank: the survivors' watchdogs name it ("...; suspect rank R on NODE") */
  for (r = 0; r < n_ranks; r++) {
    const char *s = strstr(re[r].phase, "; suspect rank ");
    int v;
    if (starts(re[r].phase, WATCHDOG_FIRED) && s && sscanf(s, "; suspect rank %d", &v) == 1 && v >= 0 &&
        v < n_ranks && v != r)
      votes[v]++;
  }
  for (r = 0; r < n_ranks; r++)
    if (votes[r] && (pick < 0 || votes[r] > votes[pick]))
      pick = r;
  if (pick >= 0) {
    char node[256] = "?";
    size_t at = 0;
    for (r = 0; r < n_ranks; r++) {
      const char *s = strstr(re[r].phase, "; suspect rank ");
      int v;
      if (!starts(re[r].phase, WATCHDOG_FIRED) || !s || sscanf(s, "; suspect rank %d on %255s", &v, node) < 1 ||
          v != pick)
        continue;
      if (at < sizeof voters)
        at += (size_t)snprintf(voters + at, sizeof voters - at, "%s%d", at ? ", " : "", r);
    }
    if (re[pick].recorded)
      snprintf(node, sizeof node, "%s", re[pick].node);
    snprintf(msg, len, "rank %d on %s made no progress%s%s: named by the watchdogs of rank%s %s (first "
             "failing rank; the others were stopped)", pick, node,
             re[pick].phase[0] && !starts(re[pick].phase, WATCHDOG_FIRED) ? " in phase " : "",
             starts(re[pick].phase, WATCHDOG_FIRED) ? "" : re[pick].phase, strchr(voters, ',') ? "s" : "",
             voters);
    code = re[fb].code;
    goto out;
  }
  snprintf(msg, len, "rank %d on %s %s (first failing rank; the others were stopped)", fb, re[fb].node,
           re[fb].how);
  code = re[fb].code;
out:
  free(re);
  free(votes);
  return code;
}

int main(int argc, char **argv)
{
  int n = 0, nodes = 0, gpn = 0, threads = 0, dry = 0, verbose = 0, oversub = 0, i, rc = 1;
  const char *input = NULL, *comm = NULL, *hostfile = NULL, *mpirun;
  char **prog = NULL, **hosts = NULL;
  int nprog = 0, n_hosts = 0, n_nodes_set = 0, n_set = 0;
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
    return exec_rank(argc - a, argv + a);
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
    } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
      verbose = 1;
    } else if (!strcmp(a, "--oversubscribe")) {
      oversub = 1;
    } else if (!strcmp(a, "-n") || !strcmp(a, "-N") || !strcmp(a, "--gpus-per-node") ||
               !strcmp(a, "--threads")) {
      int v;
      if (i + 1 >= argc)
        return bad("%s needs a number", a);
      if (parse_pos_int(argv[++i], &v) < 0 || v < 1)
        return bad("%s %s: expected a number of %s >= 1", a, argv[i],
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
    } else if (!strcmp(a, "--input") || !strcmp(a, "--comm") || !strcmp(a, "--hostfile")) {
      if (i + 1 >= argc)
        return bad("%s needs a value", a);
      if (!strcmp(a, "--input"))
        input = argv[++i];
      else if (!strcmp(a, "--comm"))
        comm = argv[++i];
      else
        hostfile = argv[++i];
    } else if (a[0] == '-') {
      return bad("unknown option %s", a);
    } else {
      prog = argv + i;
      nprog = argc - i;
      break;
    }
  }
  if (!n_set && !hostfile)
    return bad("say how many ranks: -n N (this node) or --hostfile FILE -N NODES");
  if (n_set && hostfile)
    return bad("-n (this node) and --hostfile (several nodes) exclude each other");
  if (hostfile && !n_nodes_set)
    return bad("--hostfile needs -N NODES");
  if (hostfile && oversub)
    return bad("--oversubscribe goes with -n (ranks on this node); --hostfile runs --gpus-per-node ranks "
               "per node");
  if (comm && !dpt_comm_check_name(comm, &err))
    return bad("--comm: %s", err.msg);
  if (!prog || nprog < 1)
    return bad("missing program: dpt-launch ... -- PROGRAM [ARGS...]");
  if (find_program(prog[0], progpath, sizeof progpath) < 0)
    return bad("program \"%s\" not found or not executable (PATH=%s)", prog[0],
               getenv("PATH") ? getenv("PATH") : "");

  gethostname(hostname, sizeof hostname - 1);
  if (hostfile) {
    if (dpt_hostfile_load(hostfile, &hosts, &n_hosts, &err) < 0)
      return bad("%s", err.msg);
    if (nodes > n_hosts) {
      rc = bad("-N %d but hostfile %s lists only %d host%s", nodes, hostfile, n_hosts,
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
    rc = bad("%s", err.msg);
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
    snprintf(g_forwarded, sizeof g_forwarded, "%s/forwarded", statusdir);
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
  if (hostfile) {
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
    for (i = 0; i < plan->n_ranks; i++) {
      const struct dpt_plan_rank *rk = &plan->ranks[i];
      if (rk->cpuset[0])
        fprintf(f, "rank %d=%s slot=%s\n", i, plan->nodes[rk->node].host, rk->cpuset);
      else
        fprintf(f, "rank %d=%s slot=%d\n", i, plan->nodes[rk->node].host, rk->local_rank);
    }
    if (!dry)
      fclose(f);
    if (sv_push(&av, "--rankfile") < 0 || sv_push(&av, rankfile) < 0)
      goto out;
    if (plan->ranks[0].cpuset[0] &&
        (sv_push(&av, "--mca") < 0 || sv_push(&av, "rmaps_rank_file_physical") < 0 ||
         sv_push(&av, "1") < 0))
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
    if (dpt_bind_env(plan, i, get_env, NULL, env_to_x, &el, &err) < 0) {
      rc = bad("%s", err.msg);
      goto out;
    }
    snprintf(kv, sizeof kv, "DPT_LAUNCH_STATUS_DIR=%s", statusdir);
    if (sv_push(&av, "-x") < 0 || sv_push(&av, kv) < 0)
      goto out;
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

  install_forwarding();
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
    child_pid = pid;
    while (waitpid(pid, &status, 0) < 0)
      if (errno != EINTR) {
        fprintf(stderr, "dpt-launch: waitpid: %s\n", strerror(errno));
        goto out;
      }
    child_pid = -1;
    first = first_failure(statusdir, plan->n_ranks,
                          got_signal == SIGTERM || got_signal == SIGUSR1 || got_signal == SIGUSR2 ? got_signal : 0,
                          msg, sizeof msg);
    statusdir[0] = '\0';
    g_forwarded[0] = '\0';
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
              got_signal ? " (after a forwarded signal)" : "",
              verbose ? "" : "; run with -v to see mpirun's own messages");
    }
  }
out:
  if (statusdir[0] && !dry) {
    char msg[8];
    if (rankfile[0])
      unlink(rankfile);
    first_failure(statusdir, 0, 0, msg, sizeof msg);
  }
  sv_free(&av);
  dpt_plan_destroy(plan);
  if (hosts)
    for (i = 0; i < n_hosts; i++)
      free(hosts[i]);
  free(hosts);
  return rc;
}
