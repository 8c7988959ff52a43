/* dpt_comm_hier.c — the "hierarchical" communicator (ChainerMN's
 * two_dimensional, Horovod's hierarchical all-reduce):
 *   1. ring reduce-scatter among the L ranks of each node: local rank l ends
 *      with the node's sum of shard (l+1) mod L;
 *   2. ring all-reduce of that shard across nodes, among the ranks with the
 *      same local rank (one ring per local rank, in the plan's node order);
 *   3. ring all-gather inside the node.
 * Every node must have the same number of ranks. */
#include "dpt_comm_int.h"

#include <stdlib.h>
#include <string.h>

struct hier {
  MPI_Comm node_comm;   /* ranks of this node, in ring order */
  MPI_Comm cross_comm;  /* same local rank on every node, in ring order */
  int L, l;             /* ranks per node, local rank */
  int N, nid;           /* nodes, this node's position in cross_comm */
  int *node_world;      /* [L] world ranks of node_comm ranks */
  int *cross_world;     /* [N] world ranks of cross_comm ranks */
};

static void hier_fini(struct dpt_comm *c)
{
  struct hier *h = c->impl;
  if (!h)
    return;
  if (h->node_comm != MPI_COMM_NULL)
    MPI_Comm_free(&h->node_comm);
  if (h->cross_comm != MPI_COMM_NULL)
    MPI_Comm_free(&h->cross_comm);
  free(h->node_world);
  free(h->cross_world);
  free(h);
  c->impl = NULL;
}

static int hier_init(struct dpt_comm *c, const struct dpt_comm_opts *opts, struct dpt_err *err)
{
  struct hier *h = calloc(1, sizeof *h);
  int mynode = c->node_of[c->rank], rc, L0 = -1;
  int *count = NULL;

  if (!h)
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
  c->impl = h;
  h->node_comm = h->cross_comm = MPI_COMM_NULL;
  count = calloc((size_t)c->n_nodes, sizeof *count);
  if (!count) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
    goto fail;
  }
  for (int q = 0; q < c->size; q++)
    count[c->node_of[q]]++;
  for (int v = 0; v < c->n_nodes; v++) {
    if (!count[v])
      continue;
    if (L0 < 0)
      L0 = count[v];
    if (count[v] != L0) {
      rc = dpt_err_set(err, DPT_E_INPUT,
                       "hierarchical all-reduce needs the same number of ranks on every node, "
                       "but node %d has %d and another has %d: use --comm ring, or launch the "
                       "same number of ranks per node", v, count[v], L0);
      goto fail;
    }
  }
  h->L = L0;
  h->l = 0;
  for (int q = 0; q < c->rank; q++)
    if (c->node_of[q] == mynode)
      h->l++;
  h->N = 0;
  h->node_world = malloc(sizeof(int) * (size_t)h->L);
  h->cross_world = malloc(sizeof(int) * (size_t)c->size);
  if (!h->node_world || !h->cross_world) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
    goto fail;
  }
  {
    int li = 0;
    int *local_of = calloc((size_t)c->n_nodes, sizeof(int));
    if (!local_of) {
      rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
      goto fail;
    }
    for (int q = 0; q < c->size; q++) {
      int lq = local_of[c->node_of[q]]++;
      if (c->node_of[q] == mynode)
        h->node_world[li++] = c->world_of[q];
      if (lq == h->l) {
        if (q == c->rank)
          h->nid = h->N;
        h->cross_world[h->N++] = c->world_of[q];
      }
    }
    free(local_of);
  }
  rc = MPI_Comm_split(c->ring, mynode, c->rank, &h->node_comm);
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_split(c->ring, h->l, c->rank, &h->cross_comm);
  if (rc != MPI_SUCCESS) {
    rc = dpt_comm_mpi_err(c, rc, "MPI_Comm_split", err);
    goto fail;
  }
  free(count);
  return 0;
fail:
  free(count);
  return rc;
}

static int hier_allreduce(struct dpt_comm *c, float *buf, size_t n, unsigned flags,
                          struct dpt_err *err)
{
  struct hier *h = c->impl;
  int fp16 = !!(flags & DPT_COMM_FP16), rc;
  size_t off, len;
  struct dpt_ring_args a = {
    .comm = h->node_comm, .p = h->L, .r = h->l, .world_of = h->node_world,
    .data = buf, .n = n, .mode = DPT_RING_RS, .fp16 = fp16, .divisor = 0.0f,
  };

  if ((rc = dpt_ring_run(c, &a, err)) < 0)
    return rc;
  dpt_ring_segment(n, h->L, (h->l + 1) % h->L, &off, &len);
  {
    struct dpt_ring_args x = {
      .comm = h->cross_comm, .p = h->N, .r = h->nid, .world_of = h->cross_world,
      .data = buf + off, .n = len, .mode = DPT_RING_ALL, .fp16 = fp16,
      .divisor = (flags & DPT_COMM_AVG) ? (float)c->size : 0.0f,
    };
    if ((rc = dpt_ring_run(c, &x, err)) < 0)
      return rc;
  }
  a.mode = DPT_RING_AG;
  return dpt_ring_run(c, &a, err);
}

const struct dpt_comm_ops dpt_comm_hier_ops = {
  .name = "hierarchical",
  .init = hier_init,
  .allreduce = hier_allreduce,
  .fini = hier_fini,
};
