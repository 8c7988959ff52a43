/* dpt_spank_super.h — the task supervisor of `srun --dpt`: the job report of any program.
 *
 * A SPANK plugin cannot wait for the program it prepares: slurmstepd execs it
 * and reaps it.  So in slurm_spank_task_init (in the task, as the user, after
 * the binding) the task forks once: the child returns to slurmstepd, which
 * execs the program in it; the parent -- the pid slurmstepd waits for --
 * becomes the supervisor.  It ignores the job-control and termination signals
 * (Slurm signals the whole step: the program gets them itself), waits for the
 * program with wait4(), writes the rank's part of the job report to
 * $DPT_LAUNCH_PARTS.rank<R>.end (runtime/dpt_report_end.h: node, pid, exit
 * status or signal, wall time, peak RSS, the environment handed over), and
 * ends the same way the program did (the same exit status; the same signal,
 * without a second core dump), so srun and sacct see the program's status.
 * The program dies with the supervisor (PR_SET_PDEATHSIG).  srun writes the
 * report when the step has ended (slurm_spank_exit).
 * No supervisor when DPT_LAUNCH_PARTS is unset (--dpt=report=none). */
#ifndef DPT_SPANK_SUPER_H
#define DPT_SPANK_SUPER_H

#include <stdint.h>
#include <slurm/spank.h>

#include "dpt_err.h"

/* Returns 0 in the task (go on to exec), or a negative DPT_E_* when the
 * supervisor could not be set up (the task then fails); never returns in the
 * supervisor. */
int dpt_spank_supervise(spank_t sp, struct dpt_err *err);

/* task_init failed (why): the rank's part says its program was not started and
 * why (exit status 1, slurmstepd's for a failed plugin), when the plan rank is
 * known.  Best effort. */
void dpt_spank_supervise_failed(spank_t sp, const struct dpt_err *why);

#endif /* DPT_SPANK_SUPER_H */
