/* dpt_spank_report.h — srun's side of the job report of any program under `srun --dpt`.
 *
 * Before the step (slurm_spank_local_user_init): the report's path, absolute --
 * --dpt=report=PATH (%j job, %s step, %p srun's pid), else
 * dpt-report-<job>.<step>.json in srun's working directory -- goes to the tasks as
 * DPT_LAUNCH_PARTS (the task supervisors write <path>.rank<R>.end there:
 * dpt_spank_super.h) and DPT_REPORT_ANNOUNCE=<path>.announce (where a program that
 * writes its own report, dpt-train, says which).  report=none: neither, no report.
 * After the step (slurm_spank_exit in srun): dpt_report_end_finish()
 * (runtime/dpt_report_end.h) adds how each rank ended to the program's report or
 * writes the program's report there, and says "dpt: report PATH" on stderr.  The
 * directory must be shared with the nodes (it is the job's working directory). */
#ifndef DPT_SPANK_REPORT_H
#define DPT_SPANK_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <slurm/spank.h>

#include "dpt_err.h"
#include "dpt_plan.h"
#include "dpt_spank_opts.h"

/* base (cap bytes) receives the report path, "" with report=none. */
int dpt_spank_report_setup(spank_t sp, const struct dpt_spank_opts *opts, char *base, size_t cap,
                           struct dpt_err *err);
/* After the step; messages on stderr, never fails the step. */
void dpt_spank_report_finish(spank_t sp, const struct dpt_plan *plan, const char *base, double start_unix);

#endif /* DPT_SPANK_REPORT_H */
