/* test_comm_gpu.c — one GPU per rank for the nccl communicator (issue 14).
 *
 * Without arguments: dpt_comm_gpu_choose on hand-made cases (distinct GPUs,
 * two ranks on one GPU with --comm nccl -> refused naming ranks, bus id, host
 * and --comm ring; --comm auto -> the ring and a note; the same bus id on two
 * hosts is two GPUs; case of hex digits; a rank without a bus id; other names
 * untouched; the list of many sharing ranks) and a property check against a
 * brute-force rule on random placements.
 * With --agree (under mpirun, any number of ranks): dpt_comm_gpu_agree over a
 * ring in a permuted order gives every rank the same answer, naming ring
 * positions; and dpt_comm_gpu_resolve for device 0 of every rank: without a
 * GPU (or without NCCL in the build) what the build says, with a GPU the ring
 * (all ranks of this host on device 0), and the nccl communicator on device 0
 * refused with the bus id before NCCL is called. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_comm.h"
#ifdef DPT_HAVE_NCCL
#include <cuda_runtime.h>
#endif
static int wrank;
#define DPT_CHECK_RANK wrank
#include "dpt_check.h"

static const char *choose(const char *req, int n, const char *const *h, const char *const *b, char *note,
                          struct dpt_err *e)
{
  memset(e, 0, sizeof *e);
  return dpt_comm_gpu_choose(req, n, h, b, note, 512, e);
}

static void cases(void)
{
  char note[512];
  struct dpt_err e;
  const char *h2[] = {"gpu1", "gpu1"}, *hh[] = {"gpu1", "gpu2"};
  const char *dist[] = {"0000:19:00.0", "0000:3B:00.0"}, *same[] = {"0000:65:00.0", "0000:65:00.0"};
  const char *r;

  r = choose("nccl", 2, h2, dist, note, &e);
  CHECK(r && !strcmp(r, "nccl") && !note[0], "distinct GPUs, nccl: got %s, note '%s'", r ? r : "NULL", note);
  r = choose("auto", 2, h2, dist, note, &e);
  CHECK(r && !strcmp(r, "nccl") && !note[0], "distinct GPUs, auto: got %s, note '%s'", r ? r : "NULL", note);

  r = choose("nccl", 2, h2, same, note, &e);
  CHECK(!r && e.code == DPT_E_INPUT, "one GPU, nccl: not refused (got %s, code %d)", r ? r : "NULL", e.code);
  CHECK(strstr(e.msg, "ranks 0 and 1 share one GPU (PCI bus id 0000:65:00.0 on gpu1)") &&
        strstr(e.msg, "use --comm ring") && strstr(e.msg, "invalid usage"),
        "one GPU, nccl: message does not name ranks, bus id, host and --comm ring: %s", e.msg);
  CHECK(!note[0], "refusal with a note: %s", note);

  r = choose("auto", 2, h2, same, note, &e);
  CHECK(r && !strcmp(r, "ring") && !e.code, "one GPU, auto: got %s (%s)", r ? r : "NULL", e.msg);
  CHECK(strstr(note, "ranks 0 and 1 share one GPU (PCI bus id 0000:65:00.0 on gpu1)") && strstr(note, "ring"),
        "one GPU, auto: the note does not say why the ring: '%s'", note);

  /* the same bus id on two machines is two GPUs */
  r = choose("nccl", 2, hh, same, note, &e);
  CHECK(r && !strcmp(r, "nccl"), "same bus id on two hosts: got %s (%s)", r ? r : "NULL", e.msg);

  /* hex digits in either case name one device */
  const char *cased[] = {"0000:6A:00.0", "0000:6a:00.0"};
  r = choose("nccl", 2, h2, cased, note, &e);
  CHECK(!r && strstr(e.msg, "0000:6A:00.0"), "bus ids differing in case only: got %s", r ? r : "NULL");

  /* a rank that could not name its GPU: refused for nccl and auto, naming it */
  const char *gap[] = {"0000:19:00.0", "", "0000:3B:00.0"}, *h3[] = {"a", "b", "c"};
  for (int i = 0; i < 2; i++) {
    const char *req = i ? "auto" : "nccl";
    r = choose(req, 3, h3, gap, note, &e);
    CHECK(!r && e.code == DPT_E_RUNTIME && strstr(e.msg, "rank 1 (b) could not name its GPU"),
          "%s, rank without bus id: got %s, %s", req, r ? r : "NULL", e.msg);
  }
  const char *nul[] = {"0000:19:00.0", NULL};
  r = choose("nccl", 2, h2, nul, note, &e);
  CHECK(!r && strstr(e.msg, "rank 1 (gpu1)"), "NULL bus id: got %s, %s", r ? r : "NULL", e.msg);

  /* other communicators are the caller's choice: returned as they are */
  r = choose("ring", 2, h2, same, note, &e);
  CHECK(r && !strcmp(r, "ring") && !e.code, "ring is not the GPU check's business: got %s", r ? r : "NULL");
  r = choose("hierarchical", 2, h2, gap, note, &e);
  CHECK(r && !strcmp(r, "hierarchical"), "hierarchical: got %s", r ? r : "NULL");

  /* one rank */
  r = choose("nccl", 1, h2, same, note, &e);
  CHECK(r && !strcmp(r, "nccl"), "one rank: got %s", r ? r : "NULL");

  /* the first shared GPU in ring order, with every rank on it */
  const char *h4[] = {"n", "n", "n", "n"}, *b4[] = {"0000:01:00.0", "0000:02:00.0", "0000:01:00.0", "0000:02:00.0"};
  r = choose("nccl", 4, h4, b4, note, &e);
  CHECK(!r && strstr(e.msg, "ranks 0 and 2 share one GPU (PCI bus id 0000:01:00.0 on n)"), "2 pairs: %s", e.msg);
  const char *b3[] = {"0000:09:00.0", "0000:01:00.0", "0000:01:00.0", "0000:01:00.0"};
  r = choose("auto", 4, h4, b3, note, &e);
  CHECK(r && !strcmp(r, "ring") && strstr(note, "ranks 1, 2 and 3 share one GPU (PCI bus id 0000:01:00.0"),
        "3 ranks on one GPU: %s", note);
  const char *h9[9], *b9[9];
  for (int i = 0; i < 9; i++) h9[i] = "n", b9[i] = "0000:01:00.0";
  r = choose("nccl", 9, h9, b9, note, &e);
  CHECK(!r && strstr(e.msg, "ranks 0, 1, 2, 3, 4, 5, ... (9 ranks) share one GPU"), "9 ranks: %s", e.msg);
}

/* Random placements of n ranks on 2 hosts x 3 GPUs: nccl exactly when no two ranks
 * have the same (host, bus id); auto then gives the ring, nccl a refusal. */
static void property(void)
{
  static const char *const hosts[] = {"h0", "h1"}, *const bus[] = {"0000:17:00.0", "0000:65:00.0", "0000:CA:00.0"};
  unsigned s = 12345;
  for (int t = 0; t < 2000; t++) {
    /* zero-filled: GCC 12 at -O3 cannot see that only the n written slots are read */
    int n = 1 + (int)((s = s * 1103515245u + 12345u) >> 16) % 7, slot[8] = {0};
    const char *h[8] = {0}, *b[8] = {0};
    for (int q = 0; q < n; q++) {
      slot[q] = (int)((s = s * 1103515245u + 12345u) >> 16) % 6;
      h[q] = hosts[slot[q] / 3], b[q] = bus[slot[q] % 3];
    }
    int distinct = 1;
    for (int i = 0; i < n; i++)
      for (int j = i + 1; j < n; j++)
        distinct &= slot[i] != slot[j];
    char note[512];
    struct dpt_err e;
    const char *rn = choose("nccl", n, h, b, note, &e);
    CHECK(distinct ? rn && !strcmp(rn, "nccl") : !rn && e.code == DPT_E_INPUT, "case %d (%d ranks): nccl gave %s",
          t, n, rn ? rn : "NULL");
    const char *ra = choose("auto", n, h, b, note, &e);
    CHECK(ra && !strcmp(ra, distinct ? "nccl" : "ring") && !!note[0] == !distinct,
          "case %d (%d ranks): auto gave %s, note '%s'", t, n, ra ? ra : "NULL", note);
  }
}

static int agree(int *argc, char ***argv)
{
  struct dpt_err e = {0};
  if (dpt_comm_mpi_init(argc, argv, &e)) {
    fprintf(stderr, "test_comm_gpu: %s\n", e.msg);
    return 1;
  }
  int p;
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  struct dpt_comm_opts o;
  struct dpt_comm *c;
  dpt_comm_opts_init(&o);
  o.name = "ring";
  o.ring_pos = p - 1 - wrank; /* reversed: the messages name ring positions */
  if (dpt_comm_create(&c, MPI_COMM_WORLD, &o, &e)) {
    fprintf(stderr, "test_comm_gpu: rank %d: %s\n", wrank, e.msg);
    return 1;
  }
  int pos = dpt_comm_rank(c);
  char bus[32], note[512];
  const char *r;
  /* every rank its own GPU */
  snprintf(bus, sizeof bus, "0000:%02x:00.0", pos + 1);
  memset(&e, 0, sizeof e);
  r = dpt_comm_gpu_agree(c, "nccl", bus, note, sizeof note, &e);
  CHECK(r && !strcmp(r, "nccl"), "own GPUs: got %s (%s)", r ? r : "NULL", e.msg);
  if (p > 1) {
    /* ring positions 0 and 1 on one GPU, the others on their own */
    snprintf(bus, sizeof bus, "0000:%02x:00.0", pos < 2 ? 0x41 : pos + 1);
    memset(&e, 0, sizeof e);
    r = dpt_comm_gpu_agree(c, "nccl", bus, note, sizeof note, &e);
    CHECK(!r && strstr(e.msg, "ranks 0 and 1 share one GPU (PCI bus id 0000:41:00.0"), "shared, nccl: %s", e.msg);
    memset(&e, 0, sizeof e);
    r = dpt_comm_gpu_agree(c, "auto", bus, note, sizeof note, &e);
    CHECK(r && !strcmp(r, "ring") && strstr(note, "ranks 0 and 1 share one GPU"), "shared, auto: %s, '%s'",
          r ? r : "NULL", note);
    /* the last ring position cannot name its GPU: every rank refuses, naming it */
    snprintf(bus, sizeof bus, "0000:%02x:00.0", pos + 1);
    memset(&e, 0, sizeof e);
    r = dpt_comm_gpu_agree(c, "nccl", pos == p - 1 ? "" : bus, note, sizeof note, &e);
    char want[64];
    snprintf(want, sizeof want, "rank %d (", p - 1);
    CHECK(!r && strstr(e.msg, want) && strstr(e.msg, "could not name its GPU"), "no bus id: %s", e.msg);
  }
  /* --comm auto for device 0 of every rank (one host): CUDA's own answer */
  memset(&e, 0, sizeof e);
  r = dpt_comm_gpu_resolve(c, "auto", 0, note, sizeof note, &e);
#ifdef DPT_HAVE_NCCL
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    CHECK(!r && strstr(e.msg, "cudaDeviceGetPCIBusId(device 0) failed"), "resolve without a GPU: %s",
          r ? r : e.msg);
  } else {
    CHECK(r && !strcmp(r, p > 1 ? "ring" : "nccl") && (p == 1 || strstr(note, "share one GPU")),
          "resolve, %d rank(s) on device 0: %s '%s'", p, r ? r : e.msg, note);
    if (p > 1) { /* the nccl communicator itself, every rank on device 0: refused before NCCL */
      struct dpt_comm *nc = NULL;
      dpt_comm_opts_init(&o);
      o.name = "nccl";
      o.gpu = 0;
      memset(&e, 0, sizeof e);
      int rc = dpt_comm_create(&nc, MPI_COMM_WORLD, &o, &e);
      CHECK(rc == DPT_E_INPUT && strstr(e.msg, "share one GPU (PCI bus id") && strstr(e.msg, "--comm ring"),
            "nccl with %d ranks on device 0: rc %d: %s", p, rc, e.msg);
      dpt_comm_destroy(nc);
    }
  }
#else
  CHECK(r && !strcmp(r, "ring") && !note[0], "resolve without NCCL: %s", r ? r : e.msg);
  memset(&e, 0, sizeof e);
  r = dpt_comm_gpu_resolve(c, "nccl", 0, note, sizeof note, &e);
  CHECK(!r && strstr(e.msg, "\"nccl\" is not in this build"), "resolve nccl without NCCL: %s", r ? r : e.msg);
#endif
  dpt_comm_destroy(c);
  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (wrank == 0 && !all) printf("test_comm_gpu: %d ranks agree: ok\n", p);
  MPI_Finalize();
  return all != 0;
}

int main(int argc, char **argv)
{
  if (argc > 1 && !strcmp(argv[1], "--agree")) return agree(&argc, &argv);
  if (argc > 1) {
    fprintf(stderr, "usage: test_comm_gpu [--agree]   (--agree: under mpirun)\n");
    return 2;
  }
  cases();
  property();
  if (!failures) printf("test_comm_gpu: choose: ok\n");
  return failures != 0;
}
