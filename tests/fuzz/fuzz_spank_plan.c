/* fuzz_spank_plan.c — the DPT_SPANK_PLAN transport decoder (spank/dpt_spank_plan.c),
 * which runs in every task on a variable the user can overwrite.
 * Input: byte 0 = Slurm node id (low 3 bits, 7 = -1) and whether to ask for
 * the whole plan (bit 3); byte 1 = local task id (low 3 bits, 7 = -1) and local
 * task count (bits 4..6); byte 2: check the host name against the plan's node
 * (odd) or not; the rest is the encoded string.
 * Properties: 0 or DPT_E_INPUT with a printable message and no plan; on
 * success the task entry is in range and agrees with the whole plan. */
#include "dpt_plan.h"
#include "dpt_spank_plan.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 3)
    return 0;
  int node_id = (data[0] & 7) == 7 ? -1 : data[0] & 7, want_plan = (data[0] >> 3) & 1;
  int local_id = (data[1] & 7) == 7 ? -1 : data[1] & 7, local_count = (data[1] >> 4) & 7;
  char *s = fuzz_strndup(data + 3, size - 3);
  /* The host name check compares with the node's own name: take it from the
   * encoding when it can be found ("dpt1;D;W;host/..."), else a fixed one. */
  char host[64] = "n1";
  if (data[2] & 1) {
    const char *p = s;
    for (int k = 0; k < 4 && p; k++)
      p = (p = strchr(p, ';')) ? p + 1 : NULL;
    if (p) {
      size_t l = strcspn(p, "/,;");
      if (l < sizeof host)
        snprintf(host, sizeof host, "%.*s", (int)l, p);
    }
  }
  struct dpt_spank_task t;
  struct dpt_plan *plan = NULL;
  struct dpt_err err = {0};
  int rc = dpt_spank_plan_decode(s, node_id, (data[2] & 2) ? NULL : host, local_id, local_count, &t,
                                 want_plan ? &plan : NULL, &err);
  if (rc) {
    fuzz_check_error_printable(rc, &err);
    FUZZ_CHECK(rc == DPT_E_INPUT);
    FUZZ_CHECK(plan == NULL);
    free(s);
    return 0;
  }
  FUZZ_CHECK(t.world >= 1 && t.n_nodes >= 1 && t.node_ring >= 0 && t.node_ring < t.n_nodes);
  FUZZ_CHECK(t.rank.rank >= 0 && t.rank.rank < t.world);
  FUZZ_CHECK(t.node.first_rank >= 0 && t.node.first_rank + t.node.n_ranks <= t.world);
  FUZZ_CHECK(t.rank.local_rank == local_id && t.node.n_ranks == local_count);
  FUZZ_CHECK(t.rank.gpu >= -1 && t.rank.threads >= 0);
  FUZZ_CHECK(strnlen(t.digest, sizeof t.digest) == 16);
  FUZZ_CHECK(fuzz_printable(t.rank.cpuset, sizeof t.rank.cpuset) &&
             fuzz_printable(t.node.hcas, sizeof t.node.hcas) && fuzz_printable(t.node.host, sizeof t.node.host) &&
             fuzz_printable(t.rank.gpu_busid, sizeof t.rank.gpu_busid));
  if (want_plan) {
    FUZZ_CHECK(plan != NULL && plan->n_ranks == t.world && plan->n_nodes == t.n_nodes);
    FUZZ_CHECK(plan->ranks[t.rank.rank].rank == t.rank.rank);
    FUZZ_CHECK(!strcmp(plan->nodes[t.node_ring].host, t.node.host));
    int seen = 0;
    for (int i = 0; i < plan->n_ranks; i++) {
      FUZZ_CHECK(plan->ranks[i].rank == i);
      FUZZ_CHECK(plan->ranks[i].node >= 0 && plan->ranks[i].node < plan->n_nodes);
    }
    for (int i = 0; i < plan->n_nodes; i++)
      seen += plan->nodes[i].n_ranks;
    FUZZ_CHECK(seen == plan->n_ranks);
    dpt_plan_destroy(plan);
  }
  free(s);
  return 0;
}
