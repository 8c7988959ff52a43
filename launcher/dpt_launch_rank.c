/* dpt_launch_rank.c — the rank supervisor of dpt-launch (`dpt-launch --exec-rank`,
 * internal; one per plan rank, started by mpirun): applies the rank's CPU and
 * memory binding, forks the program in its own process group, forwards signals
 * to it, waits for it (wait4), records a failure for the launcher's summary
 * ($DPT_LAUNCH_STATUS_DIR/rank.<r>) and writes the rank's part of the job report
 * (rank.<r>.json, written ahead when the program starts: dpt_report_end_part_ahead,
 * runtime/dpt_report_end.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dpt_bind.h"
#include "dpt_err.h"
#include "dpt_rdzv.h"
#include "dpt_report_end.h"
#include "dpt_launch_int.h"


static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The rank's part of the job report, next to its status record:
 * $DPT_LAUNCH_STATUS_DIR/rank.<r>.json (the launcher turns the parts into the
 * report, or adds them to the program's own).  Written ahead when the program
 * has started (see dpt_report_end_part_open; mpirun SIGKILLs this
 * supervisor soon after the SIGTERM of a failed job's teardown), then with how
 * it ended.  Best effort: said, not fatal. */
static struct dpt_report_end_part *ahead;

/* The part ahead of the end (first: when the program has started) or with it. */
static void write_part(const char *dir, const char *rank, int argc, char **argv, const struct dpt_report_end *e,
                       int first)
{
  char path[PATH_MAX];
  struct dpt_err err;
  dpt_err_clear(&err);
  if (!dir || !*dir)
    return;
  snprintf(path, sizeof path, "%s/rank.%s.json", dir, rank);
  if (first) {
    if (ahead && dpt_report_end_part_ahead(ahead, path, e, "mpirun SIGKILLs the ranks' supervisors as it "
                                           "tears down a failed job", &err) < 0)
      fprintf(stderr, "dpt-launch: rank %s: its part of the job report cannot be written ahead: %s\n", rank,
              err.msg);
    return;
  }
  if (dpt_report_end_part_end(ahead, path, argc, argv, e, &err) < 0)
    fprintf(stderr, "dpt-launch: rank %s: its part of the job report is lost: %s\n", rank, err.msg);
  dpt_report_end_part_free(ahead);
  ahead = NULL;
}

/* Forks the program (its own process group, dies with the supervisor); *exec_errno
 * receives execvp's errno when it could not be started, 0 otherwise. */
static pid_t start_program(char **argv, const char *rank, const char *node, int *exec_errno)
{
  pid_t parent = getpid(), pid;
  int fds[2];
  *exec_errno = 0;
  if (pipe2(fds, O_CLOEXEC) < 0)
    return -1;
  pid = fork();
  if (pid == 0) {
    /* Its own process group: mpirun signals the supervisor's group, and the
     * program must get what the supervisor forwards (SIGUSR2 may stand for
     * SIGTERM), not mpirun's signal as well.  mpirun's teardown (SIGTERM, then
     * SIGKILL a second later) still ends it: the supervisor forwards the
     * SIGTERM to the program's group, and the program dies with the supervisor. */
    int e;
    close(fds[0]);
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(128 + SIGKILL);
    execvp(argv[0], argv);
    e = errno;
    fprintf(stderr, "dpt-launch: rank %s on %s: cannot run %s: %s\n", rank, node, argv[0], strerror(e));
    if (write(fds[1], &e, sizeof e) != (ssize_t)sizeof e)
      _exit(127);
    _exit(127);
  }
  close(fds[1]);
  if (pid > 0) {
    setpgid(pid, pid); /* as the child does: no signal can come before its group exists */
    while (read(fds[0], exec_errno, sizeof *exec_errno) < 0 && errno == EINTR)
      ; /* EOF: execvp succeeded (the pipe closed on exec) */
  }
  close(fds[0]);
  return pid;
}

int dpt_launch_exec_rank(int argc, char **argv)
{
  struct dpt_err err;
  struct dpt_report_end e;
  struct rusage ru;
  char report[512];
  const char *rank = getenv("DPT_RANK") ? getenv("DPT_RANK") : "?";
  const char *node = getenv("DPT_NODE_NAME") ? getenv("DPT_NODE_NAME") : "?";
  const char *dir = getenv("DPT_LAUNCH_STATUS_DIR");
  int status = 0, code, exec_errno = 0;
  pid_t pid;

  dpt_err_clear(&err);
  memset(&e, 0, sizeof e);
  memset(&ru, 0, sizeof ru);
  snprintf(e.by, sizeof e.by, "dpt-launch");
  e.status = -1;
  if (argc < 1)
    return dpt_launch_bad("--exec-rank needs a program");
  dpt_launch_is_supervisor = 1;
  if (dir && *dir)
    snprintf(dpt_launch_forwarded, DPT_LAUNCH_FORWARDED_CAP, "%s/forwarded", dir);
  e.start_unix = e.end_unix = (double)now_ns() * 1e-9;
  if (dpt_bind_apply_from_env(report, sizeof report, &err) < 0) {
    fprintf(stderr, "dpt-launch: rank %s on %s: binding failed: %s\n", rank, node, err.msg);
    code = dpt_err_exit_status(&err);
    snprintf(e.how, sizeof e.how, "not started: binding failed: %.200s", err.msg);
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
  if (dir && *dir && dpt_report_end_part_open(&ahead, argc, argv, &err) < 0)
    fprintf(stderr, "dpt-launch: rank %s: its part of the job report cannot be written ahead: %s\n", rank,
            err.msg);
  dpt_launch_install_forwarding();
  e.start_unix = (double)now_ns() * 1e-9;
  pid = start_program(argv, rank, node, &exec_errno);
  if (pid < 0) {
    fprintf(stderr, "dpt-launch: rank %s: fork failed: %s\n", rank, strerror(errno));
    code = 1;
    snprintf(e.how, sizeof e.how, "not started: fork failed: %s", strerror(errno));
    goto record;
  }
  dpt_launch_child_pid = pid;
  e.pid = (long)pid;
  e.started = !exec_errno;
  if (exec_errno)
    snprintf(e.how, sizeof e.how, "not started: cannot run %.200s: %s", argv[0], strerror(exec_errno));
  else
    write_part(dir, rank, argc, argv, &e, 1);
  while (wait4(pid, &status, 0, &ru) < 0)
    if (errno != EINTR) {
      fprintf(stderr, "dpt-launch: rank %s: waitpid: %s\n", rank, strerror(errno));
      return 1;
    }
  e.forwarded = dpt_launch_got_signal != 0;
  dpt_report_end_from_wait(&e, status, &ru);
  code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (!code) {
    write_part(dir, rank, argc, argv, &e, 0);
    return 0;
  }
  if (dpt_launch_got_signal)
    fprintf(stderr, "dpt-launch: rank %s on %s (pid %d) %s after the launcher forwarded "
                    "signal %d\n", rank, node, (int)pid, e.how, (int)dpt_launch_got_signal);
  else if (e.started)
    fprintf(stderr, "dpt-launch: rank %s on %s (pid %d) %s\n", rank, node, (int)pid, e.how);
record:
  write_part(dir, rank, argc, argv, &e, 0);
  if (dir) {
    char path[PATH_MAX];
    FILE *f;
    snprintf(path, sizeof path, "%s/rank.%s", dir, rank);
    f = fopen(path, "w");
    if (f) {
      fprintf(f, "%llu %s %d %d %s\n%s\n", (unsigned long long)now_ns(), rank, code,
              dpt_launch_got_signal ? 1 : 0, node, e.how);
      fclose(f);
    }
  }
  return code;
}
