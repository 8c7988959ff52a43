/* dpt_watchdog.h — no hung jobs: a deadline on every collective.
 *
 * A thread per watchdog checks, several times per period, whether the armed
 * operation (dpt_watchdog_begin) has made progress (dpt_watchdog_progress)
 * within `seconds`.  When it has not, the watchdog builds one message naming
 * this rank, the operation and the suspected rank, and calls the handler.
 * The default handler writes the message to stderr and terminates the process
 * with _exit(DPT_WATCHDOG_EXIT): a rank stuck inside MPI cannot be unwound, and
 * a job whose peer died must not hang (this is the one place in the libraries
 * that ends the process; install another handler to change that).  Code that
 * polls can also ask dpt_watchdog_expired() and fail the operation itself.
 *
 * Under dpt-launch each rank's supervisor records a rank that died in
 * $DPT_LAUNCH_STATUS_DIR/rank.<r> ("<ns> <rank> <status> <forwarded> <node>\n
 * <how>"); an armed watchdog that has seen no progress for a tick looks there
 * and fires at once, naming that rank (dpt-launch's teardown follows within a
 * second, too soon for the deadline).  The process-wide phase
 * (dpt_watchdog_set_phase) is named in every message and mirrored to
 * $DPT_LAUNCH_STATUS_DIR/rank.<DPT_RANK>.phase, so the survivors also name the
 * phase the dead rank was in.  With dpt_watchdog_set_error_file every firing
 * also writes a JSON error file (schema dpt.error/1) for the job report's
 * absence: a rank that died takes the report's gather with it. */
#ifndef DPT_WATCHDOG_H
#define DPT_WATCHDOG_H

#include <stddef.h>

#include "dpt_err.h"

#define DPT_WATCHDOG_EXIT 1
#define DPT_WATCHDOG_DEFAULT_S 30.0

struct dpt_watchdog;

/* Called on the watchdog thread with the full message. */
typedef void (*dpt_watchdog_handler_fn)(void *arg, const char *msg);
/* Called on the watchdog thread when it fires: write who is suspected into buf.
 * waiting_on is the last rank passed to dpt_watchdog_waiting_on (-1 if none). */
typedef void (*dpt_watchdog_suspect_fn)(void *arg, int waiting_on, char *buf, size_t len);

/* seconds > 0: that; seconds == 0: DPT_WATCHDOG_SECONDS from the environment,
 * else DPT_WATCHDOG_DEFAULT_S; seconds < 0 or DPT_WATCHDOG_SECONDS=0: disabled
 * (no thread, every call is a no-op).  self names this process in messages
 * ("rank 3 (n12)").  Errors: DPT_WATCHDOG_SECONDS not a number (DPT_E_INPUT). */
int dpt_watchdog_create(struct dpt_watchdog **out, double seconds, const char *self,
                        struct dpt_err *err);
void dpt_watchdog_destroy(struct dpt_watchdog *wd);

void dpt_watchdog_set_handler(struct dpt_watchdog *wd, dpt_watchdog_handler_fn fn, void *arg);
void dpt_watchdog_set_suspect(struct dpt_watchdog *wd, dpt_watchdog_suspect_fn fn, void *arg);

/* Arm for an operation described by `what` (copied). */
void dpt_watchdog_begin(struct dpt_watchdog *wd, const char *what);
/* Something completed: push the deadline. */
void dpt_watchdog_progress(struct dpt_watchdog *wd);
/* The rank this process is blocked on right now (-1: unknown). */
void dpt_watchdog_waiting_on(struct dpt_watchdog *wd, int rank);
void dpt_watchdog_end(struct dpt_watchdog *wd);

/* 1 once the armed operation has passed its deadline (the handler has run). */
int dpt_watchdog_expired(const struct dpt_watchdog *wd);
/* The message of the last firing ("" if none). */
const char *dpt_watchdog_message(const struct dpt_watchdog *wd);
double dpt_watchdog_seconds(const struct dpt_watchdog *wd); /* 0 when disabled */

/* Process-wide: what this process is doing ("startup", "allreduce",
 * "checkpoint", "validation", ...; copied, at most 47 characters) and at which
 * training step (< 0: none).  Cheap: a mutex and, under dpt-launch, one pwrite. */
void dpt_watchdog_set_phase(const char *phase, long step);
/* This process failed and is on its way out (an error, not a hang): under
 * dpt-launch its phase line says so, and the other ranks' watchdogs name it
 * within a fraction of a second instead of waiting for the deadline. */
void dpt_watchdog_announce_failure(void);
/* "phase" or "phase (step N)" into buf. */
void dpt_watchdog_phase(char *buf, size_t len);
/* Process-wide: write a dpt.error/1 JSON file at path (NULL: none) when a
 * watchdog fires or dpt_watchdog_write_error is called; rank/node name this
 * process in it. */
void dpt_watchdog_set_error_file(const char *path, int rank, const char *node);
/* Write the error file now (no-op without one): kind ("watchdog",
 * "signal", "error", ...), the message, and the suspected rank (-1: none or
 * this process), its node and phase (NULL: unknown).  Not async-signal-safe;
 * see dpt_watchdog_write_error_signal. */
void dpt_watchdog_write_error(const char *kind, const char *msg, int suspect_rank, const char *suspect_node,
                              const char *suspect_phase);
/* From a fatal-signal handler (SIGSEGV, SIGBUS, SIGABRT, SIGFPE): only write(2). */
void dpt_watchdog_write_error_signal(int sig);

#endif /* DPT_WATCHDOG_H */
