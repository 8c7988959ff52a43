/* dpt_comm_gpu.c — one GPU per rank for the device communicator (issue 14).
 *
 * NCCL refuses a communicator in which two ranks drive the same GPU
 * (ncclCommInitRank: "invalid usage"), after it has started.  dpt decides
 * before NCCL is called: every rank names its GPU by PCI bus id, the names are
 * gathered in ring order, and dpt_comm_gpu_choose() says nccl, ring (--comm
 * auto) or no (--comm nccl, with the bus id and what to do). */
#include "dpt_comm_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* "ranks 0 and 1", "ranks 0, 1 and 3", "ranks 0, 1, 2, ... (9 ranks)" */
static void rank_list(char *s, size_t len, const int *r, int k)
{
  size_t o = (size_t)snprintf(s, len, "ranks %d", r[0]);
  for (int i = 1; i < k && o < len; i++) {
    if (i == 6 && k > 7) {
      snprintf(s + o, len - o, ", ... (%d ranks)", k);
      return;
    }
    o += (size_t)snprintf(s + o, len - o, "%s%d", i == k - 1 ? " and " : ", ", r[i]);
  }
}

const char *dpt_comm_gpu_choose(const char *requested, int n, const char *const *hosts,
                                const char *const *bus_ids, char *note, size_t note_len,
                                struct dpt_err *err)
{
  if (note && note_len)
    note[0] = '\0';
  if (!requested || (strcmp(requested, "nccl") && strcmp(requested, "auto")))
    return requested;
  for (int q = 0; q < n; q++)
    if (!bus_ids[q] || !bus_ids[q][0]) {
      dpt_err_set(err, DPT_E_RUNTIME,
                  "communicator nccl: rank %d (%s) could not name its GPU (no PCI bus id; see that "
                  "rank's message): every rank needs a working GPU of its own, or use --comm ring",
                  q, hosts[q] ? hosts[q] : "?");
      return NULL;
    }
  int *share = malloc(sizeof *share * (size_t)(n > 0 ? n : 1));
  if (!share) {
    dpt_err_set(err, DPT_E_NOMEM, "out of memory comparing %d ranks' GPUs", n);
    return NULL;
  }
  /* the first GPU driven by more than one rank: every rank on it, in ring order */
  int k = 0;
  for (int i = 0; i < n && k < 2; i++) {
    k = 0;
    for (int j = i; j < n; j++)
      if (!strcmp(hosts[i] ? hosts[i] : "", hosts[j] ? hosts[j] : "") && !strcasecmp(bus_ids[i], bus_ids[j]))
        share[k++] = j;
  }
  if (k < 2) {
    free(share);
    return "nccl";
  }
  char ranks[128];
  rank_list(ranks, sizeof ranks, share, k);
  const char *host = hosts[share[0]] ? hosts[share[0]] : "?", *bus = bus_ids[share[0]];
  free(share);
  if (!strcmp(requested, "nccl")) {
    dpt_err_set(err, DPT_E_INPUT,
                "communicator nccl: %s share one GPU (PCI bus id %s on %s), and NCCL needs a GPU of "
                "its own for every rank (ncclCommInitRank would fail with 'invalid usage'): use --comm "
                "ring (the ranks then reduce through host memory), or start at most one rank per GPU",
                ranks, bus, host);
    return NULL;
  }
  if (note && note_len)
    snprintf(note, note_len,
             "%s share one GPU (PCI bus id %s on %s), which NCCL does not allow: the gradients go over "
             "the ring, through host memory", ranks, bus, host);
  return "ring";
}

const char *dpt_comm_gpu_agree(struct dpt_comm *c, const char *requested, const char *bus_id, char *note,
                               size_t note_len, struct dpt_err *err)
{
  char mine[DPT_COMM_BUSID_LEN] = "";
  char *all = NULL;
  const char **ids = NULL, **hosts = NULL, *res = NULL;
  int rc;

  if (bus_id)
    snprintf(mine, sizeof mine, "%s", bus_id);
  all = calloc((size_t)c->size, DPT_COMM_BUSID_LEN);
  ids = calloc((size_t)c->size, sizeof *ids);
  hosts = calloc((size_t)c->size, sizeof *hosts);
  if (!all || !ids || !hosts) {
    dpt_err_set(err, DPT_E_NOMEM, "out of memory gathering %d ranks' GPU bus ids", c->size);
    goto out;
  }
  rc = MPI_Allgather(mine, DPT_COMM_BUSID_LEN, MPI_CHAR, all, DPT_COMM_BUSID_LEN, MPI_CHAR, c->ring);
  if (rc != MPI_SUCCESS) {
    dpt_comm_mpi_err(c, rc, "MPI_Allgather (GPU bus ids)", err);
    goto out;
  }
  for (int q = 0; q < c->size; q++) {
    all[(size_t)q * DPT_COMM_BUSID_LEN + DPT_COMM_BUSID_LEN - 1] = '\0';
    ids[q] = all + (size_t)q * DPT_COMM_BUSID_LEN;
    hosts[q] = c->host_of[q];
  }
  res = dpt_comm_gpu_choose(requested, c->size, hosts, ids, note, note_len, err);
out:
  free(all);
  free(ids);
  free(hosts);
  return res;
}

const char *dpt_comm_gpu_resolve(struct dpt_comm *c, const char *requested, int gpu, char *note,
                                 size_t note_len, struct dpt_err *err)
{
#ifdef DPT_HAVE_NCCL
  char bus[DPT_COMM_BUSID_LEN] = "";
  struct dpt_err mine = {0};
  int ok = dpt_comm_nccl_bus_id(gpu, bus, sizeof bus, &mine) == 0;
  const char *res = dpt_comm_gpu_agree(c, requested, ok ? bus : "", note, note_len, err);
  if (!res && !ok) /* this rank is the one without a bus id: its own reason */
    *err = mine;
  return res;
#else
  (void)c, (void)gpu;
  if (note && note_len)
    note[0] = '\0';
  if (!dpt_comm_check_name(requested, err)) /* "nccl": not in this build */
    return NULL;
  return dpt_comm_resolve(requested, 1);   /* auto: the ring */
#endif
}
