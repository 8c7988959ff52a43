/* test_boot.c — the bootstrap on every rank (run under mpirun, srun --mpi=pmix
 * or dpt-launch).
 *
 *   test_boot [--transport auto|pmix|mpi] [--expect-transport T] [--nodes N]
 *             [--ring n1,n3,...] [--digest HEX] [--comm NAME] [--blob-misuse]
 *
 * Checks on every rank: dpt_boot_create succeeds with the expected transport;
 * the plan has --nodes nodes, in the --ring order when given, and digest HEX
 * when given; plan ranks are a permutation (each rank's plan rank comes back
 * through dpt_boot_allgather and every value 0..p-1 appears once; a rank's
 * plan rank lies on its own host); dpt_boot_bcast_blob from plan rank 0 and
 * from the last plan rank delivers the root's 128-byte "NCCL id" and a 1000
 * byte blob to every rank.  With --comm, dpt_boot_init then gives a
 * communicator in the plan's ring order and an all-reduce of the ranks'
 * (plan rank + 1) sums to p(p+1)/2.  With --blob-misuse, a broadcast from a
 * root that is no rank is refused on every rank, naming it, and one where each
 * rank passes another length is refused on every rank but the root, naming the
 * root's length and its own.  Rank 0 prints "test_boot: P ranks on N
 * nodes via T: ok (plan DIGEST, ring ...)"; errors print "test_boot: rank R:
 * MESSAGE" and exit with dpt_err_exit_status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_boot.h"
#define DPT_CHECK_RANK lrank
#include "dpt_check.h"

static int lrank = -1;

static void fill(unsigned char *b, size_t n, int root)
{
  for (size_t i = 0; i < n; i++)
    b[i] = (unsigned char)((i * 131u + (unsigned)root * 17u + 7u) & 0xff);
}

static int die(struct dpt_err *err)
{
  const char *r = getenv("PMIX_RANK") ? getenv("PMIX_RANK") : "?";
  if (lrank >= 0)
    fprintf(stderr, "test_boot: rank %d: %s\n", lrank, err->msg);
  else
    fprintf(stderr, "test_boot: rank %s: %s\n", r, err->msg);
  return dpt_err_exit_status(err);
}

/* The blob broadcast's refusals: a root out of range, on every rank; lengths that differ
 * (100 + plan rank) from root 0, on every rank but the root, which sent its bytes (under MPI
 * they stay unreceived: not for a run whose communicator goes on, --comm). */
static void check_blob_misuse(struct dpt_boot *b, int p, int me)
{
  unsigned char buf[200];
  char want[160];
  struct dpt_err e;
  int rc;
  dpt_err_clear(&e);
  rc = dpt_boot_bcast_blob(b, p, buf, 8, &e);
  snprintf(want, sizeof want, "root %d is not a rank of 0..%d", p, p - 1);
  CHECK(rc < 0 && strstr(e.msg, want), "root %d: rc %d, \"%s\"", p, rc, e.msg);
  dpt_err_clear(&e);
  memset(buf, 0, sizeof buf);
  rc = dpt_boot_bcast_blob(b, 0, buf, (size_t)(100 + me), &e);
  if (me == 0) {
    CHECK(rc == 0, "the root of a mismatched broadcast failed: %s", e.msg);
    return;
  }
  snprintf(want, sizeof want, "(root, plan rank 0) %s 100 bytes, rank %d expects %d: every rank "
           "must pass the same length", strcmp(dpt_boot_transport(b), "pmix") ? "sends" : "sent",
           lrank, 100 + me);
  CHECK(rc < 0 && strstr(e.msg, want), "mismatched lengths: rc %d, \"%s\"", rc, e.msg);
}

int main(int argc, char **argv)
{
  const char *transport = NULL, *expect_tr = NULL, *ring = NULL, *digest = NULL, *comm = NULL;
  int nodes = -1, blob_misuse = 0;
  struct dpt_boot_opts o;
  struct dpt_boot *b = NULL;
  struct dpt_comm *c = NULL;
  struct dpt_err err;
  const struct dpt_plan *plan;
  int p, me;

  for (int i = 1; i < argc; i += 2) { /* option value pairs, and one flag */
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--blob-misuse")) {
      blob_misuse = 1;
      i--;
      continue;
    }
    if (!v) {
      fprintf(stderr, "test_boot: %s needs a value\n", a);
      return 2;
    }
    if (!strcmp(a, "--transport"))
      transport = v;
    else if (!strcmp(a, "--expect-transport"))
      expect_tr = v;
    else if (!strcmp(a, "--nodes"))
      nodes = atoi(v);
    else if (!strcmp(a, "--ring"))
      ring = v;
    else if (!strcmp(a, "--digest"))
      digest = v;
    else if (!strcmp(a, "--comm"))
      comm = v;
    else {
      fprintf(stderr, "test_boot: unknown option %s\n", a);
      return 2;
    }
  }
  dpt_err_clear(&err);
  dpt_boot_opts_init(&o);
  o.transport = transport;
  o.comm = comm;
  o.bind = 0;
  if (comm && blob_misuse) {
    fprintf(stderr, "test_boot: --blob-misuse leaves a broadcast unreceived: not with --comm\n");
    return 2;
  }
  if (comm) {
    if (dpt_boot_init(&argc, &argv, &o, &b, &c, &err) < 0)
      return die(&err);
  } else if (dpt_boot_create(&b, &o, &err) < 0) {
    return die(&err);
  }
  lrank = dpt_boot_launcher_rank(b);
  plan = dpt_boot_plan(b);
  p = dpt_boot_size(b);
  me = dpt_boot_rank(b);
  CHECK(plan->n_ranks == p, "plan has %d ranks, job %d", plan->n_ranks, p);
  CHECK(me >= 0 && me < p, "plan rank %d", me);
  CHECK(!strcmp(plan->nodes[plan->ranks[me].node].host, dpt_boot_ctx(b)->node_name),
        "plan rank %d is on %s, this rank on %s", me, plan->nodes[plan->ranks[me].node].host,
        dpt_boot_ctx(b)->node_name);
  CHECK(dpt_boot_launcher_rank_of(b, me) == lrank, "launcher_rank_of(%d) = %d, not %d", me,
        dpt_boot_launcher_rank_of(b, me), lrank);
  if (expect_tr)
    CHECK(!strcmp(dpt_boot_transport(b), expect_tr), "transport %s, expected %s",
          dpt_boot_transport(b), expect_tr);
  if (nodes >= 0)
    CHECK(plan->n_nodes == nodes, "%d nodes, expected %d", plan->n_nodes, nodes);
  if (digest)
    CHECK(!strcmp(plan->digest, digest), "plan digest %s, expected %s", plan->digest, digest);
  {
    char order[512] = "";
    size_t off = 0;
    for (int i = 0; i < plan->n_nodes; i++)
      off += (size_t)snprintf(order + off, sizeof order - off, "%s%s", i ? "," : "",
                              plan->nodes[i].host);
    if (ring)
      CHECK(!strcmp(order, ring), "ring of nodes %s, expected %s", order, ring);
    /* every plan rank exactly once */
    {
      char mine[32], **all = NULL;
      int *seen = calloc((size_t)p, sizeof *seen);
      snprintf(mine, sizeof mine, "%d", me);
      if (!seen || dpt_boot_allgather(b, mine, &all, &err) < 0)
        return die(&err);
      for (int r = 0; r < p; r++) {
        int x = atoi(all[r]);
        CHECK(x >= 0 && x < p && !seen[x]++, "plan rank %d of launcher rank %d repeated", x, r);
        CHECK(dpt_boot_launcher_rank_of(b, x) == r, "launcher_rank_of(%d) != %d", x, r);
      }
      dpt_boot_strings_free(all, p);
      free(seen);
    }
    /* blobs from the first and the last plan rank */
    for (int k = 0; k < 2; k++) {
      int root = k ? p - 1 : 0;
      unsigned char id[DPT_BOOT_NCCL_ID_BYTES], big[1000], want[1000];
      memset(id, 0, sizeof id);
      memset(big, 0, sizeof big);
      if (me == root) {
        fill(id, sizeof id, root);
        fill(big, sizeof big, root + 100);
      }
      if (dpt_boot_bcast_blob(b, root, id, sizeof id, &err) < 0 ||
          dpt_boot_bcast_blob(b, root, big, sizeof big, &err) < 0)
        return die(&err);
      fill(want, sizeof id, root);
      CHECK(!memcmp(id, want, sizeof id), "128-byte blob from plan rank %d differs", root);
      fill(want, sizeof big, root + 100);
      CHECK(!memcmp(big, want, sizeof big), "1000-byte blob from plan rank %d differs", root);
    }
    if (blob_misuse)
      check_blob_misuse(b, p, me);
    if (c) {
      float x = (float)(me + 1);
      CHECK(dpt_comm_rank(c) == me, "communicator rank %d, plan rank %d", dpt_comm_rank(c), me);
      if (dpt_comm_allreduce(c, &x, 1, 0, &err) < 0)
        return die(&err);
      CHECK(x == (float)p * (float)(p + 1) / 2.0f, "all-reduce gave %g", (double)x);
    }
    if (!failures && lrank == 0)
      printf("test_boot: %d ranks on %d nodes via %s: ok (plan %s, ring %s%s%s)\n", p,
             plan->n_nodes, dpt_boot_transport(b), plan->digest, order, c ? ", comm " : "",
             c ? dpt_comm_name(c) : "");
  }
  if (c)
    dpt_boot_fini(b, c);
  else
    dpt_boot_destroy(b);
  return failures ? 1 : 0;
}
