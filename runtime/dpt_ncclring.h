/* dpt_ncclring.h — does the ring NCCL built follow dpt's plan?
 *
 * With NCCL_DEBUG=INFO, NCCL's rank 0 prints each ring it built at
 * communicator init (src/graph/rings.cc, dumpLine: " %3d" per rank):
 *   n1:4711:4711 [0] NCCL INFO Channel 00/02 :    0   1   2   3   4   5   6   7
 * NCCL joins nodes in the order of their lowest rank (src/init.cc,
 * src/graph/connect.cc), so under dpt (RANK = ring position, each node's ranks
 * contiguous) every channel should visit the plan's nodes in the plan's ring
 * order, each node once, crossing the slow inter-switch links as often as the
 * plan does.  dpt_ncclring_check() reads such a log and compares every
 * channel of every communicator as large as the plan (smaller ones -- NCCL
 * split communicators -- are counted and skipped) with the plan of a job
 * report: the channel's node sequence (each rank mapped to its plan node,
 * consecutive ranks on one node collapsed, cyclically) must be the plan's node
 * ring, up to rotation; reversed is said and accepted (the same links).  For
 * each channel it writes one line: agrees / DIFFERS, the node sequence, its
 * inter-switch crossings (adjacent nodes in different plan groups) and the
 * plan's.  `dpt-report --nccl-log LOG REPORT` is its command. */
#ifndef DPT_NCCLRING_H
#define DPT_NCCLRING_H

#include <stdio.h>

#include <jansson.h>

#include "dpt_err.h"

/* log: the job's output (any prefix before "NCCL INFO Channel" is ignored:
 * srun --label, the host:pid:tid prefix); plan: a dpt.plan/1 object (a report's
 * "plan").  Lines go to out.  Returns 0 every checked channel agrees, 1 one
 * differs, or a negative DPT_E_* (DPT_E_INPUT: no ring line of a communicator of
 * the plan's size in the log, a rank outside the plan, a plan without nodes). */
int dpt_ncclring_check(FILE *log, const char *log_name, const json_t *plan, FILE *out, struct dpt_err *err);

#endif /* DPT_NCCLRING_H */
