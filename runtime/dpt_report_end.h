/* dpt_report_end.h — the job report of any program a dpt launcher started.
 *
 * dpt-train and dpt-bench write their own dpt.report/1 (dpt_report.h).  A
 * PyTorch, JAX or MPI program does not; its launcher does, from what it knows:
 *
 *   supervisor (one per rank: `dpt-launch --exec-rank`, the SPANK plugin's task
 *   supervisor) forks the program, waits for it with wait4() and fills a
 *   struct dpt_report_end (dpt_report_end_from_wait); dpt_report_end_write()
 *   then writes the rank's part of the report -- its node, binding, the
 *   environment it was handed, exit status or signal, wall time and peak RSS,
 *   and an error when it failed -- to a file the launcher reads;
 *
 *   launcher, once every rank has ended: dpt_report_end_finish() reads the
 *   parts.  When the program announced a report of its own
 *   (DPT_REPORT_ANNOUNCE, dpt_report_announce: dpt-train, dpt-bench) it adds
 *   each rank's `end` and `env` to that report (ranks the program's report
 *   lacks -- they died before it gathered -- are added whole); when the
 *   program announced "none" (dpt-train --no-report) nothing is written;
 *   otherwise the launcher writes the program's report: the plan, one part per
 *   rank, job.exit_status, every failing rank in errors[], job.partial when a
 *   rank left no part.
 *
 * Schema: docs/schema-report.md (ranks[].end, ranks[].env). */
#ifndef DPT_REPORT_END_H
#define DPT_REPORT_END_H

#include <stddef.h>
#include <sys/resource.h>

#include "dpt_err.h"
#include "dpt_plan.h"
#include "dpt_report.h"

/* Fills e (how, status, signal, peak RSS, end time) from wait4()'s status and
 * rusage of the program; e->pid, start_unix, started, forwarded and by are the
 * caller's. */
void dpt_report_end_from_wait(struct dpt_report_end *e, int wstatus, const struct rusage *ru);

/* Supervisor: this rank's part (rank DPT_RANK of DPT_SIZE, program argv) to path,
 * atomically.  The part's env lists every variable dpt_bind_env and dpt_rdzv_env
 * set that is present here.  DPT_E_* on failure (the message names path). */
int dpt_report_end_write(const char *path, int argc, char *const *argv, const struct dpt_report_end *e,
                         struct dpt_err *err);

/* Supervisor: the rank's part written ahead.  A supervisor can be killed before
 * its program ends -- mpirun SIGKILLs the ranks' supervisors a moment after the
 * SIGTERM of a failed job's teardown, slurmstepd a step's processes KillWait
 * seconds after it -- and its part must not be lost with it.
 *   open(), before the program is forked: makes the part and reads the node's
 *     topology (hwloc), so the writes that follow are quick.  (Read after the
 *     fork, while the program ran, it made GCC 12's LeakSanitizer crash at the
 *     supervisor's exit on a bogus dynamic-TLS range: trainer.resume_ranks.)
 *   ahead(), once the program has started (e: started, pid, start time): writes
 *     the part saying "no end recorded: its supervisor was killed before the
 *     program ended (teardown)", status and signal null, end = start.
 *   end(): rewrites it with how the program ended.
 * end() and free() take p == NULL (open failed: end() writes the part in one go). */
struct dpt_report_end_part;
int dpt_report_end_part_open(struct dpt_report_end_part **out, int argc, char *const *argv, struct dpt_err *err);
int dpt_report_end_part_ahead(struct dpt_report_end_part *p, const char *path, const struct dpt_report_end *e,
                              const char *teardown, struct dpt_err *err);
int dpt_report_end_part_end(struct dpt_report_end_part *p, const char *path, int argc, char *const *argv,
                            const struct dpt_report_end *e, struct dpt_err *err);
void dpt_report_end_part_free(struct dpt_report_end_part *p);

struct dpt_report_end_job {
  const struct dpt_plan *plan; /* the job's plan (embedded; hosts of missing ranks) */
  int argc;
  char *const *argv;           /* the program and its arguments */
  const char *parts_prefix;    /* the supervisors' part files: prefix, the rank, suffix */
  const char *parts_suffix;
  const char *announce;        /* where the program's own writer announced its report, or NULL */
  const char *path;            /* the report path (may hold %j %s %p), or NULL: $DPT_REPORT, else
                                  the default name (dpt_report_path, pid of rank 0's program) */
  const char *missing_hint;    /* said for a rank without a part: why that may be */
  double start_unix;           /* when the launch started (job.start) */
  int exit_status;             /* the launcher's exit status (job.exit_status); -1: the status
                                  of the rank that failed first (128 + signal), from the parts */
};

/* The launcher, after the job: merges into the announced report or writes the
 * program's (see above), then removes the part files and the announcement.
 * out_path (cap bytes) receives the report's path, "" when none was written.
 * Returns 0 none (announced "none"), 1 merged, 2 written, or a negative DPT_E_*
 * (DPT_E_RUNTIME when no rank left a part: nothing is written then). */
int dpt_report_end_finish(const struct dpt_report_end_job *j, char *out_path, size_t cap,
                          struct dpt_err *err);

#endif /* DPT_REPORT_END_H */
