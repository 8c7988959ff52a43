/* dpt_spank_super.c — see dpt_spank_super.h */
#define _GNU_SOURCE
#include "dpt_spank_super.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dpt_bind.h"
#include "dpt_rdzv.h"
#include "dpt_report_end.h"

#define VAL_MAX 8192

/* The task's environment (what Slurm will exec the program with) lives in
 * slurmstepd's job record, not in this process's environ: copy the variables
 * the report records into environ, which only the supervisor reads. */
static void copy_env(spank_t sp, const char *const *names, char *buf)
{
  for (int i = 0; names[i]; i++)
    if (spank_getenv(sp, names[i], buf, VAL_MAX) == ESPANK_SUCCESS)
      setenv(names[i], buf, 1);
    else
      unsetenv(names[i]);
}

/* argv[0] as slurmstepd will exec it: a path, or the first executable on the task's PATH. */
static int resolvable(spank_t sp, const char *prog, char *buf)
{
  const char *p;
  if (!prog || !*prog)
    return 0;
  if (strchr(prog, '/'))
    return access(prog, X_OK) == 0;
  if (spank_getenv(sp, "PATH", buf, VAL_MAX) != ESPANK_SUCCESS)
    snprintf(buf, VAL_MAX, "/usr/bin:/bin");
  for (p = buf; *p;) {
    const char *colon = strchr(p, ':');
    size_t l = colon ? (size_t)(colon - p) : strlen(p);
    char full[4096];
    snprintf(full, sizeof full, "%.*s/%s", (int)l, l ? p : ".", prog);
    if (access(full, X_OK) == 0)
      return 1;
    p += l + (colon ? 1 : 0);
  }
  return 0;
}

/* Ends this process as the program ended: slurmstepd and srun see the same status. */
static void end_like(int wstatus)
{
  if (WIFSIGNALED(wstatus)) {
    struct rlimit no_core = {0, 0};
    sigset_t all;
    int sig = WTERMSIG(wstatus);
    setrlimit(RLIMIT_CORE, &no_core); /* the program dumped its core already */
    signal(sig, SIG_DFL);
    sigfillset(&all);
    sigdelset(&all, sig);
    sigprocmask(SIG_SETMASK, &all, NULL);
    raise(sig);
    _exit(128 + sig);
  }
  _exit(WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 1);
}

static double now_unix(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int dpt_spank_supervise(spank_t sp, struct dpt_err *err)
{
  static const char *const own[] = {"DPT_LAUNCH_PARTS", "DPT_BIND_APPLIED", "DPT_LAUNCHER",
                                    "DPT_CPUS_BOUND", NULL};
  static const int ignored[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM,
                                SIGTSTP, SIGTTIN, SIGTTOU};
  struct dpt_report_end e;
  struct dpt_report_end_part *ahead = NULL;
  struct rusage ru;
  char *buf = NULL, path[4200], **argv = NULL;
  int argc = 0, status = 0, ok;
  pid_t pid, parent = getpid();

  if (!(buf = malloc(VAL_MAX)))
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
  if (spank_getenv(sp, "DPT_LAUNCH_PARTS", buf, VAL_MAX) != ESPANK_SUCCESS || !buf[0]) {
    free(buf); /* report=none: no supervisor */
    return 0;
  }
  if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS)
    argc = 0;
  copy_env(sp, own, buf);
  copy_env(sp, dpt_bind_env_names, buf);
  copy_env(sp, dpt_rdzv_env_names, buf);
  ok = resolvable(sp, argc > 0 ? argv[0] : NULL, buf);
  memset(&e, 0, sizeof e);
  snprintf(e.by, sizeof e.by, "spank");
  e.status = -1;
  e.started = ok;
  if (!ok)
    snprintf(e.how, sizeof e.how, "not started: cannot run %.150s: not found or not executable on the "
             "task's PATH", argc > 0 ? argv[0] : "(no program)");
  if (ok) { /* the part made (the node's topology read) before the fork: written ahead below */
    struct dpt_err werr;
    dpt_err_clear(&werr);
    if (dpt_report_end_part_open(&ahead, argc, argv, &werr) < 0)
      fprintf(stderr, "dpt: rank %s: its part of the job report cannot be written ahead: %s\n",
              getenv("DPT_RANK") ? getenv("DPT_RANK") : "?", werr.msg);
  }
  e.start_unix = now_unix();
  pid = fork();
  if (pid < 0) {
    free(buf);
    dpt_report_end_part_free(ahead);
    return dpt_err_set(err, DPT_E_RUNTIME, "cannot fork the task supervisor: %s", strerror(errno));
  }
  if (pid == 0) { /* the task: back to slurmstepd, which execs the program */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(128 + SIGKILL);
    free(buf);
    dpt_report_end_part_free(ahead);
    return 0;
  }
  /* The supervisor: slurmstepd waits for this pid, signals reach the program
   * directly (same process group and container): only wait, record, and end
   * the same way. */
  for (size_t i = 0; i < sizeof ignored / sizeof *ignored; i++)
    signal(ignored[i], SIG_IGN);
  {
    int fd = open("/dev/null", O_RDONLY);
    if (fd >= 0) {
      dup2(fd, 0); /* the program reads the task's stdin, not us */
      close(fd);
    }
  }
  e.pid = (long)pid;
  memset(&ru, 0, sizeof ru);
  snprintf(path, sizeof path, "%s.rank%s.end", getenv("DPT_LAUNCH_PARTS"),
           getenv("DPT_RANK") ? getenv("DPT_RANK") : "x");
  {
    /* written ahead: slurmstepd SIGKILLs the supervisor with the program when
     * the program outlives a step's SIGTERM by KillWait seconds */
    struct dpt_err werr;
    dpt_err_clear(&werr);
    if (ahead && dpt_report_end_part_ahead(ahead, path, &e, "slurmstepd SIGKILLs what is left of a step "
                                           "KillWait seconds after its SIGTERM", &werr) < 0)
      fprintf(stderr, "dpt: rank %s: its part of the job report cannot be written ahead: %s\n",
              getenv("DPT_RANK") ? getenv("DPT_RANK") : "?", werr.msg);
  }
  while (wait4(pid, &status, 0, &ru) < 0)
    if (errno != EINTR)
      _exit(1);
  dpt_report_end_from_wait(&e, status, &ru);
  {
    struct dpt_err werr;
    dpt_err_clear(&werr);
    if (dpt_report_end_part_end(ahead, path, argc, argv, &e, &werr) < 0)
      fprintf(stderr, "dpt: rank %s: its part of the job report is lost: %s\n",
              getenv("DPT_RANK") ? getenv("DPT_RANK") : "?", werr.msg);
    dpt_report_end_part_free(ahead);
  }
  end_like(status);
  return 0; /* not reached */
}

void dpt_spank_supervise_failed(spank_t sp, const struct dpt_err *why)
{
  static const char *const own[] = {"DPT_LAUNCH_PARTS", "DPT_BIND_APPLIED", "DPT_LAUNCHER", NULL};
  struct dpt_report_end e;
  struct dpt_err werr;
  char *buf = malloc(VAL_MAX), path[4200], **argv = NULL;
  int argc = 0;

  if (!buf)
    return;
  copy_env(sp, own, buf);
  copy_env(sp, dpt_bind_env_names, buf);
  copy_env(sp, dpt_rdzv_env_names, buf);
  free(buf);
  if (!getenv("DPT_LAUNCH_PARTS") || !getenv("DPT_RANK")) /* report=none, or failed before the plan rank was known */
    return;
  if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS)
    argc = 0;
  memset(&e, 0, sizeof e);
  snprintf(e.by, sizeof e.by, "spank");
  e.pid = (long)getpid();
  e.status = 1; /* slurmstepd ends a task whose SPANK task_init failed with exit(1) */
  e.start_unix = e.end_unix = now_unix();
  snprintf(e.how, sizeof e.how, "not started: dpt: %.220s", why->msg);
  snprintf(path, sizeof path, "%s.rank%s.end", getenv("DPT_LAUNCH_PARTS"), getenv("DPT_RANK"));
  dpt_err_clear(&werr);
  dpt_report_end_write(path, argc, argv, &e, &werr);
}
