/* fuzz_spank_opts.c — deterministic mutation fuzzing of the two parsers that
 * read user-controlled bytes in Slurm's processes: the --dpt option value
 * (parsed as root in slurmstepd) and the DPT_SPANK_PLAN transport (decoded in
 * the task).  Seeds are valid inputs; mutations flip bits, insert/delete/
 * duplicate bytes, splice separators and high bytes, and grow inputs past the
 * limits.  Properties: only 0 or DPT_E_INPUT come back; a rejected input
 * leaves the options untouched and gives a printable message; an accepted one
 * gives in-range values.  Run it under ASan+UBSan (-DDPT_SANITIZE=ON).
 * usage: fuzz_spank_opts [iterations] [seed] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_spank_opts.h"
#include "dpt_spank_plan.h"

static uint64_t rng;
static uint64_t next(void) /* splitmix64 */
{
  uint64_t z = (rng += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
static size_t below(size_t n) { return n ? (size_t)(next() % n) : 0; }

static const char *const opt_seeds[] = {
    "comm=ring,fp16", "comm=nccl,ranks-per-gpu=2,threads=4,verbose=2", "topology=/etc/dpt/node.xml",
    "report=/tmp/r.json,tree=flat,bind=strict", "fp16=off,verbose", "tree=/etc/slurm/topology.conf",
    "", "bogus", "comm=hierarchical,bind=none,fp16=yes,threads=0",
};
static const char *const plan_seeds[] = {
    "dpt1;52ecc49dcf2be115;4;n1/0/0,n2/2/0;mlx5_0,mlx5_1/0+0000:1a:00.0+0+2+0-1,16-17/1+0000:1b:00.0+0+2+2-3",
    "dpt1;0123456789abcdef;3;a/0/0,b/1/1,c/2/0;/-1++-1+1+|mlx5_0/3+0000:3b:00.0+1+8+8-15",
};
static const char splice[] = ",=;/+|-x0\xff\xc3\x01 ";

static size_t mutate(char *buf, size_t len, size_t cap)
{
  int rounds = 1 + (int)below(8);
  for (int r = 0; r < rounds; r++) {
    switch (below(7)) {
    case 0: /* bit flip */
      if (len) buf[below(len)] ^= (char)(1u << below(8));
      break;
    case 1: /* insert a separator or a nasty byte */
      if (len + 1 < cap) {
        size_t at = below(len + 1);
        memmove(buf + at + 1, buf + at, len - at);
        buf[at] = splice[below(sizeof splice - 1)];
        len++;
      }
      break;
    case 2: /* delete a run */
      if (len) {
        size_t at = below(len), n = 1 + below(len - at);
        memmove(buf + at, buf + at + n, len - at - n);
        len -= n;
      }
      break;
    case 3: /* duplicate a run */
      if (len) {
        size_t at = below(len), n = 1 + below(len - at);
        if (len + n < cap) {
          memmove(buf + at + n, buf + at, len - at);
          len += n;
        }
      }
      break;
    case 4: /* random byte */
      if (len) buf[below(len)] = (char)(1 + below(255));
      break;
    case 5: /* grow a lot: past the limits */
      while (len + 1 < cap && below(4) != 0) {
        size_t n = 1 + below(3000);
        if (len + n >= cap) n = cap - len - 1;
        memset(buf + len, "x9,=/"[below(5)], n);
        len += n;
      }
      break;
    case 6: /* digit swap */
      if (len) buf[below(len)] = (char)('0' + below(10));
      break;
    }
  }
  buf[len] = '\0';
  /* NUL bytes from flips end the string early: that is part of the test */
  return strlen(buf);
}

static int printable(const char *s)
{
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
      return 0;
  return 1;
}

int main(int argc, char **argv)
{
  long iters = argc > 1 ? atol(argv[1]) : 40000;
  rng = argc > 2 ? strtoull(argv[2], NULL, 0) : 0x5eed;
  size_t cap = 20000;
  char *buf = malloc(cap);
  long accepted = 0, rejected = 0, p_ok = 0, p_bad = 0;
  int fail = 0;

  for (long it = 0; it < iters && !fail; it++) {
    /* --dpt value */
    const char *seed = opt_seeds[below(sizeof opt_seeds / sizeof *opt_seeds)];
    snprintf(buf, cap, "%s", seed);
    mutate(buf, strlen(buf), cap);
    struct dpt_spank_opts o, before;
    struct dpt_err e;
    dpt_spank_opts_init(&o);
    before = o;
    dpt_err_clear(&e);
    int rc = dpt_spank_opts_apply(&o, buf, "--dpt", &e);
    if (rc == 0) {
      accepted++;
      if (o.ranks_per_gpu < 0 || o.ranks_per_gpu > 64 || o.threads < 0 || o.threads > 4096 ||
          o.verbose < 0 || o.verbose > 3 || (unsigned)o.bind > 2 || !printable(o.comm) ||
          !printable(o.report) || !printable(o.topology) || !printable(o.tree) ||
          strnlen(o.report, sizeof o.report) == sizeof o.report) {
        fprintf(stderr, "iteration %ld: accepted out-of-range options from '%.80s'\n", it, buf);
        fail = 1;
      }
    } else if (rc == DPT_E_INPUT) {
      rejected++;
      if (memcmp(&o, &before, sizeof o) != 0 || !e.msg[0] || !printable(e.msg)) {
        fprintf(stderr, "iteration %ld: bad rejection of '%.80s': %s\n", it, buf, e.msg);
        fail = 1;
      }
    } else {
      fprintf(stderr, "iteration %ld: unexpected rc %d\n", it, rc);
      fail = 1;
    }

    /* DPT_SPANK_PLAN */
    int which = (int)below(2);
    snprintf(buf, cap, "%s", plan_seeds[which]);
    if (below(4) != 0) /* one time in four the seed itself: the success path stays exercised */
      mutate(buf, strlen(buf), cap);
    struct dpt_spank_task t;
    int node = (int)below(4) - 1, local = (int)below(4) - 1, count = (int)below(4);
    if (below(2)) { /* coordinates that fit the seed */
      node = (int)below(which ? 3 : 2);
      count = which ? 1 : 2;
      local = (int)below((size_t)count);
    }
    struct dpt_plan *pl = NULL;
    int want_plan = (int)below(2);
    rc = dpt_spank_plan_decode(buf, node, below(2) ? NULL : "n1", local, count, &t, want_plan ? &pl : NULL, &e);
    if (rc == 0 && want_plan && (!pl || pl->n_ranks != t.world || pl->ranks[t.rank.rank].rank != t.rank.rank ||
                                 strcmp(pl->nodes[t.node_ring].host, t.node.host) != 0)) {
      fprintf(stderr, "iteration %ld: the decoded plan disagrees with the task entry\n", it);
      fail = 1;
    }
    if (rc != 0 && pl) {
      fprintf(stderr, "iteration %ld: a plan came back with an error\n", it);
      fail = 1;
    }
    dpt_plan_destroy(pl);
    if (rc == 0) {
      p_ok++;
      if (t.rank.rank < 0 || t.rank.rank >= t.world || t.node.first_rank + t.node.n_ranks > t.world ||
          t.rank.local_rank != local || t.node.n_ranks != count || t.rank.gpu < -1 || t.rank.threads < 0 ||
          !printable(t.rank.cpuset) || !printable(t.node.hcas) || !printable(t.node.host) ||
          strlen(t.digest) != 16) {
        fprintf(stderr, "iteration %ld: decoded out-of-range task from '%.120s'\n", it, buf);
        fail = 1;
      }
    } else if (rc == DPT_E_INPUT) {
      p_bad++;
      if (!e.msg[0] || !printable(e.msg)) {
        fprintf(stderr, "iteration %ld: bad message for '%.80s'\n", it, buf);
        fail = 1;
      }
    } else {
      fprintf(stderr, "iteration %ld: decode rc %d\n", it, rc);
      fail = 1;
    }
  }
  free(buf);
  printf("fuzz_spank_opts: %ld iterations: options %ld accepted %ld rejected; plans %ld decoded %ld rejected\n",
         iters, accepted, rejected, p_ok, p_bad);
  /* the mutations must exercise both outcomes, or the fuzzer tests nothing */
  if (!fail && (accepted == 0 || rejected == 0 || p_ok == 0 || p_bad == 0)) {
    fprintf(stderr, "fuzz_spank_opts: an outcome never happened: the mutator is broken\n");
    fail = 1;
  }
  return fail;
}
