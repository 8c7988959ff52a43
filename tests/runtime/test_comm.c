/* test_comm.c — multi-rank property test of every communicator.
 *
 * Run under mpirun (any number of ranks) or dpt-launch.  For each communicator
 * named with --comm, and each size in {0, 1, p-1, p, p+1, prime 1009, 7919,
 * 65537, --large}: integer-valued floats must sum exactly (in place), average
 * must equal the exact sum / p, fp16 on the wire must stay within the bound of
 * dpt_comm.h on random data in [-1, 1], and every rank must end with the same
 * bytes.  Also: repeated calls, two overlapping non-blocking all-reduces
 * (double buffering), ring order following --perm (the recorded peers), and
 * --rpn L: pretend L ranks per node (hierarchical with several nodes).
 * Every rank regenerates every rank's input, so the exact reference needs no
 * communication. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_comm.h"
#include "dpt_ctx.h"
#define DPT_CHECK_RANK wrank
#define DPT_CHECK_SHOW_MAX 20 /* a broken collective fails at every element */
#include "dpt_check.h"

static int wrank;

static uint64_t mix(uint64_t x)
{
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Integer-valued input of rank q, element j, call `call`: exact in fp32 sums. */
static float int_val(int q, size_t j, int call)
{
  return (float)((int)(mix((uint64_t)q * 1000003u + j * 7u + (uint64_t)call * 13u) % 2001) - 1000);
}

static float rnd_val(int q, size_t j, int call)
{
  uint64_t x = mix(((uint64_t)q << 40) ^ (j * 0x100000001b3ull) ^ ((uint64_t)call << 56));
  return (float)((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static uint64_t hash_bytes(const float *x, size_t n)
{
  uint64_t h = 1469598103934665603ull;
  const unsigned char *b = (const unsigned char *)x;
  for (size_t i = 0; i < n * sizeof *x; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static void same_everywhere(MPI_Comm w, const float *x, size_t n, const char *what)
{
  uint64_t h = hash_bytes(x, n), lo, hi;
  MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, w);
  MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, w);
  CHECK(lo == hi, "%s: ranks ended with different results", what);
}

/* One all-reduce of n floats; kind 0 = integers sum, 1 = integers average,
 * 2 = random fp16 sum, 3 = random fp16 average. */
static void check_one(struct dpt_comm *c, MPI_Comm w, size_t n, int kind, int call)
{
  int p = dpt_comm_size(c), me = dpt_comm_rank(c);
  unsigned flags = (kind & 1 ? DPT_COMM_AVG : 0) | (kind >= 2 ? DPT_COMM_FP16 : 0);
  float *x = malloc(n * sizeof *x + 4);
  struct dpt_err err;
  char what[160];
  int rc;
  double worst = 0.0;

  snprintf(what, sizeof what, "%s n=%zu %s%s call %d", dpt_comm_name(c), n,
           kind >= 2 ? "fp16" : "int", kind & 1 ? " avg" : " sum", call);
  for (size_t j = 0; j < n; j++)
    x[j] = kind >= 2 ? rnd_val(me, j, call) : int_val(me, j, call);
  rc = dpt_comm_allreduce(c, x, n, flags, &err);
  CHECK(rc == 0, "%s: %s", what, err.msg);
  for (size_t j = 0; j < n && rc == 0; j++) {
    if (kind < 2) {
      float s = 0.0f; /* integers below 2^24: exact in any order */
      for (int q = 0; q < p; q++)
        s += int_val(q, j, call);
      if (kind & 1)
        s /= (float)p;
      if (x[j] != s) {
        CHECK(0, "%s: element %zu is %.9g, exact %.9g", what, j, x[j], s);
        break;
      }
    } else {
      double s = 0.0, a = 0.0, bound, e;
      for (int q = 0; q < p; q++) {
        double v = rnd_val(q, j, call);
        s += v;
        a += fabs(v);
      }
      bound = (p + 1) * ldexp(1.0, -11) * a + 1e-6 * a + 1e-7;
      if (kind & 1) {
        s /= p;
        bound /= p;
      }
      e = fabs(x[j] - s);
      if (e / (bound > 0 ? bound : 1) > worst)
        worst = e / (bound > 0 ? bound : 1);
      if (!(e <= bound)) {
        CHECK(0, "%s: element %zu is %.9g, exact %.9g, error %.3g > bound %.3g", what, j, x[j],
              s, e, bound);
        break;
      }
    }
  }
  same_everywhere(w, x, n, what);
  free(x);
}

static void check_nonblocking(struct dpt_comm *c, MPI_Comm w, size_t n)
{
  int p = dpt_comm_size(c), me = dpt_comm_rank(c);
  float *a = malloc(n * sizeof *a + 4), *b = malloc(n * sizeof *b + 4);
  struct dpt_comm_req *ra = NULL, *rb = NULL;
  struct dpt_err err;
  int rc;

  for (size_t j = 0; j < n; j++) {
    a[j] = int_val(me, j, 100);
    b[j] = int_val(me, j, 101);
  }
  rc = dpt_comm_start(c, a, n, DPT_COMM_SUM, &ra, &err);
  CHECK(rc == 0, "start a: %s", err.msg);
  rc = dpt_comm_start(c, b, n, DPT_COMM_AVG, &rb, &err);
  CHECK(rc == 0, "start b: %s", err.msg);
  /* "compute" while they run */
  {
    volatile double acc = 0;
    for (int i = 0; i < 100000; i++)
      acc += i * 0.5;
    (void)acc;
  }
  rc = dpt_comm_wait(c, rb, &err); /* waiting out of order is allowed */
  CHECK(rc == 0, "wait b: %s", err.msg);
  rc = dpt_comm_wait(c, ra, &err);
  CHECK(rc == 0, "wait a: %s", err.msg);
  for (size_t j = 0; j < n; j++) {
    float sa = 0, sb = 0;
    for (int q = 0; q < p; q++) {
      sa += int_val(q, j, 100);
      sb += int_val(q, j, 101);
    }
    sb /= (float)p;
    if (a[j] != sa || b[j] != sb) {
      CHECK(0, "%s non-blocking n=%zu element %zu: %g/%g, exact %g/%g", dpt_comm_name(c), n, j,
            a[j], b[j], sa, sb);
      break;
    }
  }
  same_everywhere(w, a, n, "non-blocking a");
  /* host communicators cannot wait for a device event (dpt_comm_start_after): refused
   * before anything is queued, on every rank alike, saying why */
  if (strcmp(dpt_comm_name(c), "nccl")) {
    int token;
    ra = (struct dpt_comm_req *)&token;
    rc = dpt_comm_start_after(c, a, n, DPT_COMM_SUM, &token, &ra, &err);
    CHECK(rc == DPT_E_INPUT && ra == NULL && strstr(err.msg, "device event") && strstr(err.msg, dpt_comm_name(c)),
          "%s: start_after with an event: rc %d, %s", dpt_comm_name(c), rc, err.msg);
    rc = dpt_comm_start_after(c, b, n, DPT_COMM_SUM, NULL, &rb, &err); /* NULL event = dpt_comm_start */
    CHECK(rc == 0 && dpt_comm_wait(c, rb, &err) == 0, "%s: start_after without an event: %s", dpt_comm_name(c),
          err.msg);
  }
  free(a);
  free(b);
}

/* The same permutation on every rank: world rank -> ring position. */
static void permutation(int *pos, int p, unsigned seed)
{
  for (int i = 0; i < p; i++)
    pos[i] = i;
  for (int i = p - 1; i > 0; i--) {
    int j = (int)(mix(seed * 131u + (unsigned)i) % (uint64_t)(i + 1)), t = pos[i];
    pos[i] = pos[j];
    pos[j] = t;
  }
}

int main(int argc, char **argv)
{
  struct dpt_err err;
  const char *comms[8];
  int ncomms = 0, p, rpn = 0, use_ctx = 0, all_fail = 0;
  unsigned perm_seed = 0;
  size_t large = 1000003;
  int *pos = NULL, *world_at = NULL;

  if (dpt_comm_mpi_init(&argc, &argv, &err) < 0) {
    fprintf(stderr, "test_comm: %s\n", err.msg);
    return 1;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  /* under mpirun / dpt-launch (a PMIx server): no rank went on before every rank was out of
   * MPI_Init (Open MPI 4.1's start-up race, runtime/dpt_comm_init.c) */
  int up = dpt_comm_mpi_up_ranks();
  if (up >= 0 && getenv("PMIX_NAMESPACE") && up != (p > 1 ? p : 0)) {
    fprintf(stderr, "test_comm: rank %d: dpt_comm_mpi_init read %d ranks' start-up keys, "
                    "expected %d (every rank out of MPI_Init before the first message)\n",
            wrank, up, p > 1 ? p : 0);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--comm") && i + 1 < argc && ncomms < 8)
      comms[ncomms++] = argv[++i];
    else if (!strcmp(argv[i], "--perm") && i + 1 < argc)
      perm_seed = (unsigned)strtoul(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--rpn") && i + 1 < argc)
      rpn = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--large") && i + 1 < argc)
      large = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--ctx"))
      use_ctx = 1; /* ring position = the plan rank dpt-launch gave us */
    else {
      fprintf(stderr, "usage: test_comm [--comm NAME]... [--perm SEED] [--rpn L] [--large N] "
                      "[--ctx]\n");
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (!ncomms) {
    comms[ncomms++] = "mpi";
    comms[ncomms++] = "ring";
    comms[ncomms++] = "hierarchical";
  }
  pos = malloc(sizeof *pos * (size_t)p);
  world_at = malloc(sizeof *world_at * (size_t)p);
  permutation(pos, p, perm_seed);
  if (!perm_seed)
    for (int i = 0; i < p; i++)
      pos[i] = i;
  if (use_ctx) {
    struct dpt_ctx ctx;
    if (dpt_ctx_from_env(&ctx, &err) < 0) {
      fprintf(stderr, "test_comm: %s\n", err.msg);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    CHECK(ctx.size == p, "context size %d != MPI size %d (%s)", ctx.size, p, ctx.source);
    MPI_Allgather(&ctx.rank, 1, MPI_INT, pos, 1, MPI_INT, MPI_COMM_WORLD);
  }
  for (int i = 0; i < p; i++)
    world_at[pos[i]] = i;

  for (int ci = 0; ci < ncomms; ci++) {
    struct dpt_comm_opts o;
    struct dpt_comm *c = NULL;
    size_t sizes[] = {0, 1, (size_t)(p > 1 ? p - 1 : 1), (size_t)p, (size_t)p + 1, 1009, 7919,
                      65537, large};
    int rc;

    dpt_comm_opts_init(&o);
    o.name = comms[ci];
    o.ring_pos = pos[wrank];
    o.record_peers = 1;
    o.watchdog_s = 120;
    o.chunk_bytes = 4096; /* small chunks: many pipeline steps even for small sizes */
    if (rpn > 0)
      o.node = pos[wrank] / rpn;
    rc = dpt_comm_create(&c, MPI_COMM_WORLD, &o, &err);
    if (rc < 0) {
      CHECK(0, "create %s: %s", comms[ci], err.msg);
      continue;
    }
    CHECK(dpt_comm_rank(c) == pos[wrank], "%s: rank %d != ring position %d", comms[ci],
          dpt_comm_rank(c), pos[wrank]);
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
      for (int kind = 0; kind < 4; kind++)
        check_one(c, MPI_COMM_WORLD, sizes[si], kind, (int)si * 4 + kind);
    for (int call = 0; call < 3; call++) /* repeated calls on one buffer size */
      check_one(c, MPI_COMM_WORLD, 4099, 0, 1000 + call);
    check_nonblocking(c, MPI_COMM_WORLD, 50021);
    check_nonblocking(c, MPI_COMM_WORLD, 3);

    /* The ring communicator follows the ring order exactly. */
    if (!strcmp(comms[ci], "ring") && p > 1) {
      int s[64], r[64], n = dpt_comm_peers(c, s, r, 64), me = pos[wrank];
      CHECK(n == 1, "ring: %d distinct peer pairs, expected 1", n);
      CHECK(n >= 1 && s[0] == world_at[(me + 1) % p] && r[0] == world_at[(me + p - 1) % p],
            "ring: position %d sent to world rank %d and received from %d; ring order says %d "
            "and %d", me, n ? s[0] : -1, n ? r[0] : -1, world_at[(me + 1) % p],
            world_at[(me + p - 1) % p]);
    }
    if (!strcmp(comms[ci], "hierarchical") && rpn > 0 && p % rpn == 0 && p > rpn) {
      int s[64], r[64], n = dpt_comm_peers(c, s, r, 64), me = pos[wrank];
      int node = me / rpn, l = me % rpn, N = p / rpn;
      int in_s = world_at[node * rpn + (l + 1) % rpn], in_r = world_at[node * rpn + (l + rpn - 1) % rpn];
      int x_s = world_at[((node + 1) % N) * rpn + l], x_r = world_at[((node + N - 1) % N) * rpn + l];
      int ok_in = rpn == 1, ok_x = 0;
      for (int i = 0; i < n; i++) {
        ok_in |= s[i] == in_s && r[i] == in_r;
        ok_x |= s[i] == x_s && r[i] == x_r;
      }
      CHECK(ok_in && ok_x && n == (rpn > 1 ? 2 : 1),
            "hierarchical: position %d used %d peer pairs; expected in-node %d->%d and "
            "cross-node %d->%d", me, n, in_r, in_s, x_r, x_s);
    }
    dpt_comm_destroy(c);
  }

  MPI_Allreduce(&failures, &all_fail, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (wrank == 0)
    printf("test_comm: %d ranks, %d communicator(s): %s (%d failures)\n", p, ncomms,
           all_fail ? "FAILED" : "ok", all_fail);
  free(pos);
  free(world_at);
  MPI_Finalize();
  return all_fail ? 1 : 0;
}
