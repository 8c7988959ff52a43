/* dpt_rdzv.h — the rendezvous every framework's env:// path reads, from the plan.
 *
 * PyTorch (init_process_group("env://"), torchrun), Lightning, accelerate and
 * DeepSpeed host their rendezvous store on RANK 0 and find it at
 * MASTER_ADDR:MASTER_PORT.  Under dpt RANK is the plan's ring position, so the
 * store must be looked for on the node of plan rank 0 -- not on the first host
 * of the Slurm node list, which frameworks otherwise take (a hang when the two
 * differ).  dpt_rdzv_env() sets, for plan rank `rank`, what torchrun sets
 * (torch/distributed/elastic/agent/server/local_elastic_agent.py):
 *   MASTER_ADDR       DPT_MASTER_ADDR when the launcher resolved one (srun --dpt:
 *                     Slurm's NodeAddr of plan rank 0's node; dpt-launch -n:
 *                     127.0.0.1), else the plan's host name of that node;
 *   MASTER_PORT       DPT_MASTER_PORT (the launcher's, see dpt_rdzv_port()), else
 *                     29500 (torchrun's default);
 *   GROUP_RANK, NODE_RANK  this node's index in plan order; GROUP_WORLD_SIZE the nodes;
 *   ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME=default;
 *   TORCHELASTIC_RUN_ID (DPT_RUN_ID, else dpt-<plan digest>): its presence makes
 *                     Lightning choose its TorchElasticEnvironment (the env path)
 *                     over SLURMEnvironment, which would rank by SLURM_PROCID;
 *   TORCHELASTIC_RESTART_COUNT=0, TORCHELASTIC_MAX_RESTARTS=0,
 *   TORCHELASTIC_USE_AGENT_STORE=False (no agent: rank 0 hosts the store).
 * RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE come from dpt_bind_env().
 *
 * What the user set before the launch:
 *   MASTER_PORT       kept, and said in report;
 *   MASTER_ADDR       kept when it names the same host as ours (equal, or the
 *                     two resolve to a common address, or both to this machine
 *                     for a one-node plan); otherwise DPT_E_INPUT naming the
 *                     rank, its node, both values and what to do -- the usual
 *                     `export MASTER_ADDR=$(scontrol show hostnames ... | head -1)`
 *                     would send every rank to a node that hosts no store. */
#ifndef DPT_RDZV_H
#define DPT_RDZV_H

#include <stddef.h>

#include "dpt_bind.h"
#include "dpt_err.h"
#include "dpt_plan.h"

#define DPT_RDZV_PORT_DEFAULT 29500 /* torchrun's, when no launcher derived one */
#define DPT_RDZV_PORT_BASE 20000    /* derived ports: [BASE, BASE + SPAN), below Linux's */
#define DPT_RDZV_PORT_SPAN 10000    /* ephemeral range (32768-60999) */

/* The variables dpt_rdzv_env() may set, NULL-terminated (for reports). */
extern const char *const dpt_rdzv_env_names[];

/* Set the rendezvous variables of plan rank `rank` (see above).  report (may be
 * NULL) receives, "; "-separated after what it already holds, the user's values
 * that were kept.  Errors (DPT_E_INPUT): a bad DPT_MASTER_PORT/MASTER_PORT, a
 * user MASTER_ADDR that is not plan rank 0's host. */
int dpt_rdzv_env(const struct dpt_plan *plan, int rank, dpt_bind_getenv_fn get, void *get_arg,
                 dpt_bind_setenv_fn set, void *set_arg, char *report, size_t report_len,
                 struct dpt_err *err);

/* The port of a launch: DPT_RDZV_PORT_BASE + (31 * job + step) mod SPAN.  Slurm:
 * the job and step ids (two steps of a job, and consecutive jobs, differ);
 * dpt-launch: its process id and 0. */
int dpt_rdzv_port(unsigned long job, unsigned long step);

/* 1 when a and b name the same host (equal strings, a common resolved address,
 * or, with local_ok, both resolve to addresses of this machine), 0 otherwise
 * (including a name that does not resolve). */
int dpt_rdzv_same_host(const char *a, const char *b, int local_ok);

/* 0 when a TCP socket can listen on port (any address, SO_REUSEADDR as
 * PyTorch's TCPStore does) on this machine now; DPT_E_INPUT with the reason
 * (errno text) in err otherwise. */
int dpt_rdzv_port_check(int port, struct dpt_err *err);

#endif /* DPT_RDZV_H */
