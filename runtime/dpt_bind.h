/* dpt_bind.h — apply one plan rank's binding to this process.
 *
 * From a dpt_plan (topology/dpt_plan.h) and a rank:
 *   - environment: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, DPT_RANK,
 *     DPT_SIZE, DPT_LOCAL_RANK, DPT_LOCAL_SIZE, DPT_NODE_ID, DPT_N_NODES,
 *     DPT_NODE_NAME, DPT_PLAN_DIGEST, OMP_NUM_THREADS, NCCL_IB_HCA (node-wide,
 *     when the node has HCAs), CUDA_DEVICE_ORDER=PCI_BUS_ID and either
 *     CUDA_VISIBLE_DEVICES=<gpu> (DPT_CUDA_DEVICE=0) or, when
 *     CUDA_VISIBLE_DEVICES was already narrowed (Slurm's gres), only
 *     DPT_CUDA_DEVICE=<index of the plan's GPU in that list>;
 *     DPT_CPUSET and DPT_NUMA carry the binding to dpt_bind_apply_cpu();
 *     then dpt_rdzv_env() (dpt_rdzv.h): MASTER_ADDR, MASTER_PORT and the rest of
 *     what torchrun sets, for other frameworks' env:// rendezvous;
 *   - CPU affinity (hwloc_set_cpubind) and memory policy (hwloc_set_membind,
 *     bind to the rank's NUMA node), both inherited across exec.
 * What was applied is reported in one line. */
#ifndef DPT_BIND_H
#define DPT_BIND_H

#include "dpt_err.h"
#include "dpt_plan.h"

/* The variables dpt_bind_env() may set, NULL-terminated (for reports; the
 * rendezvous ones are also in dpt_rdzv_env_names). */
extern const char *const dpt_bind_env_names[];

/* Sets name=value (value NULL: unset).  Returns 0 or a negative DPT_E_*. */
typedef int (*dpt_bind_setenv_fn)(void *arg, const char *name, const char *value);
/* Reads a variable (NULL when unset). */
typedef const char *(*dpt_bind_getenv_fn)(void *arg, const char *name);

/* The environment of plan rank `rank`.  get reads the current environment;
 * set receives every variable.  Besides the list above: DPT_HOST_INDEX (the
 * node's index in the launcher's host list, for dpt_boot) and
 * DPT_PLAN_THREADS (the plan's threads_per_rank option).
 * GPU: when CUDA_VISIBLE_DEVICES is already set, DPT_CUDA_DEVICE is the
 * position of the plan's GPU (a node GPU index) in SLURM_STEP_GPUS when that
 * is set (Slurm lists the node's GPU indices there, in CUDA_VISIBLE_DEVICES'
 * order, while CUDA_VISIBLE_DEVICES itself may be renumbered from 0 under
 * ConstrainDevices), else in CUDA_VISIBLE_DEVICES.
 * NCCL_IB_HCA: a value the user set is kept, never overridden (the plan's
 * list goes to DPT_PLAN_IB_HCA either way).
 * Errors: rank out of range, plan GPU not in an already narrowed list. */
int dpt_bind_env(const struct dpt_plan *plan, int rank, dpt_bind_getenv_fn get, void *get_arg,
                 dpt_bind_setenv_fn set, void *set_arg, struct dpt_err *err);

/* dpt_bind_env, and report (may be NULL) receives what was not applied as the
 * plan says ("NCCL_IB_HCA=mlx5_1 kept (set by the user; the plan says
 * mlx5_0,mlx5_1)"), "" when everything was.  Either way a non-empty one also
 * goes to the rank as DPT_ENV_KEPT, which its job report records. */
int dpt_bind_env_report(const struct dpt_plan *plan, int rank, dpt_bind_getenv_fn get,
                        void *get_arg, dpt_bind_setenv_fn set, void *set_arg, char *report,
                        size_t report_len, struct dpt_err *err);

/* Append to report (len bytes, NUL-terminated; NULL or 0: nothing) a formatted
 * part, "; "-separated from what it already holds; truncated, never overflowed. */
void dpt_bind_note(char *report, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* dpt_bind_env on the process environment (getenv/setenv). */
int dpt_bind_env_self(const struct dpt_plan *plan, int rank, struct dpt_err *err);

/* Bind this process to cpuset (hwloc list syntax, "" = leave alone) and memory
 * node numa (-1 = leave alone) on the live machine.  report (may be NULL)
 * receives what was done.  Errors (DPT_E_INPUT): cpuset unparsable or not
 * available here (e.g. a plan computed from another machine's XML);
 * DPT_E_RUNTIME: hwloc refused. */
int dpt_bind_apply_cpu(const char *cpuset, int numa, char *report, size_t report_len,
                       struct dpt_err *err);

/* Flags of dpt_bind_apply_cpu_ex(). */
#define DPT_BIND_WITHIN 0x1u        /* bind to the plan's cpuset AND the current binding
                                       (hwloc_get_cpubind: Slurm's task/affinity or cgroup);
                                       never widens it.  Memory is bound only when the
                                       result lies inside the plan's NUMA node and that
                                       node exists here; otherwise left to first touch. */
#define DPT_BIND_KEEP_IF_EMPTY 0x2u /* WITHIN and the two do not meet: keep the current
                                       binding (said in report) instead of DPT_E_INPUT */

/* dpt_bind_apply_cpu with flags.  bound (may be NULL) receives the CPUs the
 * process is bound to afterwards (hwloc list), "" when nothing changed
 * because the plan has no cpuset. */
int dpt_bind_apply_cpu_ex(const char *cpuset, int numa, unsigned flags, char *bound,
                          size_t bound_len, char *report, size_t report_len, struct dpt_err *err);

/* dpt_bind_apply_cpu from DPT_CPUSET / DPT_NUMA (what dpt_bind_env set). */
int dpt_bind_apply_from_env(char *report, size_t report_len, struct dpt_err *err);

/* What is applied to this process now, in one line (for the job report's
 * ranks[].binding.applied): who bound it (DPT_LAUNCHER: spank, boot; dpt-launch
 * when its variables are present; "nobody" otherwise), the binder's own words
 * (DPT_BIND_APPLIED, set by the dpt-launch rank supervisor, the SPANK plugin and
 * dpt_boot_init), the CPUs the process is bound to (hwloc_get_cpubind) against
 * the plan's (DPT_CPUSET), the memory binding (hwloc_get_membind), GPU
 * (CUDA_VISIBLE_DEVICES, DPT_CUDA_DEVICE), HCAs (NCCL_IB_HCA), threads
 * (OMP_NUM_THREADS) and every variable dpt_bind_env sets that is present.
 * Never fails: what cannot be read is said so in the text. */
void dpt_bind_describe_applied(char *buf, size_t len);

/* One line describing rank's binding: "rank 1 node h local 1/2 cpus 1 threads 1 ...". */
void dpt_bind_describe(const struct dpt_plan *plan, int rank, char *buf, size_t len);

#endif /* DPT_BIND_H */
