/* dpt_launch_int.h — the parts of dpt-launch (launcher/): options, hosts, plan and
 * the run (dpt_launch.c), the mpirun command (dpt_launch_cmd.c), signal forwarding
 * (dpt_launch_signal.c), the rank supervisor (dpt_launch_rank.c), the status
 * directory the supervisors write to (dpt_launch_status.c). */
#ifndef DPT_LAUNCH_INT_H
#define DPT_LAUNCH_INT_H

#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>

struct dpt_err;
struct dpt_plan;

/* dpt-launch's options (dpt_launch.c's usage()); 0 or NULL where not given. */
struct dpt_launch_opts {
  int n, nodes, gpus_per_node, threads; /* -n, -N, --gpus-per-node, --threads */
  int n_set, nodes_set, help, dry, verbose, oversub, no_report;
  const char *input, *comm, *hostfile, *report;
  char **prog; /* [nprog] the program and its arguments, in main's argv */
  int nprog;
  char progpath[PATH_MAX]; /* prog[0] as found (directly or on PATH) */
};

/* A NULL-terminated argv being built: v[n] == NULL, each string owned. */
struct dpt_launch_argv {
  char **v;
  int n, cap;
};

/* The process signals go to (mpirun, or a supervisor's program); -1 none. */
extern volatile sig_atomic_t dpt_launch_child_pid;
/* The last signal received (a supervisor: the one it forwarded). */
extern volatile sig_atomic_t dpt_launch_got_signal;
/* "" until the status directory exists; then its path + "/forwarded". */
#define DPT_LAUNCH_FORWARDED_CAP (4096 + 16)
extern char dpt_launch_forwarded[DPT_LAUNCH_FORWARDED_CAP];
/* This process is a rank supervisor (--exec-rank). */
extern int dpt_launch_is_supervisor;

/* mpirun's command for the plan: Open MPI's flags, the rankfile when --hostfile
 * has every rank's CPUs (written under statusdir; a dry run prints it), the
 * frameworks' rendezvous (sets DPT_MASTER_ADDR/PORT and DPT_RUN_ID here for
 * dpt_bind_env), then one app context per plan rank running `dpt-launch
 * --exec-rank -- PROGRAM ARGS` with the rank's environment.  0, or a negative
 * DPT_E_* with err saying what failed (DPT_E_INPUT: the user's environment). */
int dpt_launch_cmd_build(const struct dpt_launch_opts *o, const struct dpt_plan *plan, const char *statusdir,
                         const char *hostname, struct dpt_launch_argv *av, struct dpt_err *err);
/* The plan (a dry run), the bindings, the communicator and the command, to f. */
void dpt_launch_cmd_print(FILE *f, const struct dpt_launch_opts *o, const struct dpt_plan *plan,
                          const struct dpt_launch_argv *av);
void dpt_launch_argv_free(struct dpt_launch_argv *av);

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
