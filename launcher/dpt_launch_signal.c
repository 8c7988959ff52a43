/* dpt_launch_signal.c — dpt-launch's signal forwarding (launcher side and rank
 * supervisors) and its usage-error reporter.  See dpt_launch.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dpt_launch_int.h"

volatile sig_atomic_t dpt_launch_child_pid = -1;
volatile sig_atomic_t dpt_launch_got_signal = 0;

/* mpirun takes SIGTERM (and SIGINT, SIGHUP) for itself: it aborts the job and
 * SIGKILLs the rank supervisors a second later, before a rank has finished its
 * step and checkpoint.  It forwards SIGUSR1 and SIGUSR2 to the ranks instead.
 * So dpt-launch sends SIGTERM on as SIGUSR2, after writing which signal it
 * meant to $DPT_LAUNCH_STATUS_DIR/forwarded ("T": SIGTERM, "U": a real
 * SIGUSR2), and each rank supervisor turns a SIGUSR2 back into SIGTERM unless
 * that file says "U" (or is unreadable: a node without the launcher's /tmp). */
char dpt_launch_forwarded[DPT_LAUNCH_FORWARDED_CAP]; /* "" until the status directory exists;
                                                       its path + "/forwarded" */
int dpt_launch_is_supervisor;           /* this process is a rank supervisor (--exec-rank) */

static void forward(int sig)
{
  int saved = errno, out = sig;
  if (dpt_launch_forwarded[0] && sig == SIGUSR2 && dpt_launch_is_supervisor) {
    char c = 'T';
    int fd = open(dpt_launch_forwarded, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      if (read(fd, &c, 1) != 1)
        c = 'T';
      close(fd);
    }
    out = c == 'U' ? SIGUSR2 : SIGTERM;
  } else if (dpt_launch_forwarded[0] && (sig == SIGTERM || sig == SIGUSR2) && !dpt_launch_is_supervisor) {
    int fd = open(dpt_launch_forwarded, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ssize_t w = write(fd, sig == SIGTERM ? "T\n" : "U\n", 2);
      (void)w;
      close(fd);
    }
    out = SIGUSR2;
  }
  dpt_launch_got_signal = dpt_launch_is_supervisor ? out : sig; /* the launcher remembers what it was sent */
  /* a supervisor signals the program's process group (the program and what it started) */
  if (dpt_launch_child_pid > 0 && (!dpt_launch_is_supervisor || kill(-(pid_t)dpt_launch_child_pid, out)))
    kill((pid_t)dpt_launch_child_pid, out);
  /* A stopped program (SIGSTOP, a debugger's stop, SIGTSTP) acts on no signal but
   * SIGKILL until it is continued: after a terminating signal the supervisor
   * continues its group, as Slurm and a shell's kill do, so a stopped rank ends on
   * the job's teardown at once, not at mpirun's SIGKILL a second later. */
  if (dpt_launch_child_pid > 0 && dpt_launch_is_supervisor &&
      (out == SIGTERM || out == SIGINT || out == SIGHUP || out == SIGQUIT) &&
      kill(-(pid_t)dpt_launch_child_pid, SIGCONT))
    kill((pid_t)dpt_launch_child_pid, SIGCONT);
  errno = saved;
}

void dpt_launch_install_forwarding(void)
{
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGQUIT};
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = forward;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
    sigaction(sigs[i], &sa, NULL);
}

int dpt_launch_bad(const char *fmt, ...)
{
  va_list ap;
  fprintf(stderr, "dpt-launch: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n(run dpt-launch --help for usage)\n");
  return 2;
}

