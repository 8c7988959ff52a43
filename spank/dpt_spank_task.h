/* dpt_spank_task.h — the node side of `--dpt`: one task's binding, in task_init.
 *
 * Runs in the task process slurmstepd forked, as the user, after Slurm's own
 * CPU binding (task/affinity, cgroups) and GPU environment, before exec:
 * decode this task's entry of DPT_SPANK_PLAN, restrict the CPU affinity to the
 * plan's cpuset within what Slurm gave (never wider), narrow
 * CUDA_VISIBLE_DEVICES to the plan's GPU when Slurm's list holds it, and set
 * the environment with spank_setenv (the task's environment is the job's
 * env array, not this process's environ). */
#ifndef DPT_SPANK_TASK_H
#define DPT_SPANK_TASK_H

#include <stdint.h>
#include <slurm/spank.h>

#include "dpt_err.h"
#include "dpt_spank_opts.h"

int dpt_spank_task_apply(spank_t sp, const struct dpt_spank_opts *opts, struct dpt_err *err);

#endif /* DPT_SPANK_TASK_H */
