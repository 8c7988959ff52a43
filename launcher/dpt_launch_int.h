/* dpt_launch_int.h — the parts of dpt-launch (launcher/): options, plan and the
 * mpirun command (dpt_launch.c), signal forwarding (dpt_launch_signal.c), the
 * rank supervisor (dpt_launch_rank.c), the status directory the supervisors
 * write to (dpt_launch_status.c). */
#ifndef DPT_LAUNCH_INT_H
#define DPT_LAUNCH_INT_H

#include <signal.h>
#include <stddef.h>

/* The process signals go to (mpirun, or a supervisor's program); -1 none. */
extern volatile sig_atomic_t dpt_launch_child_pid;
/* The last signal received (a supervisor: the one it forwarded). */
extern volatile sig_atomic_t dpt_launch_got_signal;
/* "" until the status directory exists; then its path + "/forwarded". */
#define DPT_LAUNCH_FORWARDED_CAP (4096 + 16)
extern char dpt_launch_forwarded[DPT_LAUNCH_FORWARDED_CAP];
/* This process is a rank supervisor (--exec-rank). */
extern int dpt_launch_is_supervisor;

/* Forward SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGQUIT to dpt_launch_child_pid
 * (a launcher sends SIGTERM on as SIGUSR2, a supervisor turns it back). */
void dpt_launch_install_forwarding(void);

/* "dpt-launch: <message>" and the --help hint on stderr; returns 2 (bad usage). */
int dpt_launch_bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The rank supervisor: argv is the program and its arguments.  Returns the exit
 * status for mpirun (the program's; 128+signal when killed). */
int dpt_launch_exec_rank(int argc, char **argv);

/* Reads the status directory (does not change it); returns the exit status for
 * dpt-launch (0: no failure recorded) and in msg which rank caused it. */
int dpt_launch_first_failure(const char *dir, int n_ranks, int forwarded, char *msg, size_t len);

/* Removes the status directory and what is in it. */
void dpt_launch_status_remove(const char *dir);

#endif /* DPT_LAUNCH_INT_H */
