/* test_node_fuzz.c — mutated hwloc XML never crashes dpt_node.
 *
 * usage: test_node_fuzz ITERATIONS SEED FILE.xml...
 * Deterministic (xorshift64* from SEED): each iteration picks a fixture and one
 * to four mutations (byte flips, digit changes, deletions, duplications,
 * truncation, inserted tokens), loads it with dpt_node_load_buffer() and, when
 * it loads, renders the text view and the JSON document.  A rejected input must
 * come back as DPT_E_INPUT with a message naming it.  Run it under ASan/UBSan
 * (-DDPT_SANITIZE=ON) to catch memory errors, not just crashes. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_file.h"
#include "dpt_node.h"

static uint64_t rng_state;

static uint64_t rnd(void)
{
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ULL;
}

static size_t below(size_t n)
{
  return n ? (size_t)(rnd() % n) : 0;
}

struct buf {
  char *p;
  size_t len, cap;
};

static void reserve(struct buf *b, size_t n)
{
  if (n <= b->cap)
    return;
  b->cap = n * 2;
  b->p = realloc(b->p, b->cap);
  if (!b->p) {
    perror("realloc");
    exit(1);
  }
}

static void insert(struct buf *b, size_t at, const char *s, size_t n)
{
  reserve(b, b->len + n);
  memmove(b->p + at + n, b->p + at, b->len - at);
  memcpy(b->p + at, s, n);
  b->len += n;
}

static const char *const tokens[] = {
    "-1", "0", "4294967295", "18446744073709551616", "0xffffffff,0xffffffff,0xffffffff", "\"", "<", ">", "&",
    "&amp;", "</object>", "<object type=\"PCIDev\">", "<object type=\"OSDev\" name=\"cuda9\" subtype=\"CUDA\"/>",
    "nbobjs=\"100000\"", "indexes length=\"-5\"", "os_index=\"-1\"", "cpuset=\"\"", "type=\"NUMANode\"",
    "bridge_type=\"1-0\"", "depth=\"-3\"", "version=\"3.0\"", "\xff\xfe", "OSDev:1", "PCIDev:0", "Package:0"};

static void mutate(struct buf *b)
{
  size_t at = below(b->len);
  switch (below(7)) {
  case 0: /* random bytes */
    for (size_t k = 1 + below(8); k-- && b->len;)
      b->p[below(b->len)] = (char)below(256);
    break;
  case 1: /* a digit becomes another digit */
    for (size_t tries = 0; tries < 64 && b->len; tries++) {
      size_t i = below(b->len);
      if (b->p[i] >= '0' && b->p[i] <= '9') {
        b->p[i] = (char)('0' + below(10));
        break;
      }
    }
    break;
  case 2: { /* delete a range */
    size_t n = 1 + below(64);
    if (at + n > b->len)
      n = b->len - at;
    memmove(b->p + at, b->p + at + n, b->len - at - n);
    b->len -= n;
    break;
  }
  case 3: { /* duplicate a range somewhere else */
    size_t n = 1 + below(256), from = below(b->len);
    if (from + n > b->len)
      n = b->len - from;
    char *tmp = malloc(n ? n : 1);
    if (!tmp)
      exit(1);
    memcpy(tmp, b->p + from, n);
    insert(b, below(b->len + 1), tmp, n);
    free(tmp);
    break;
  }
  case 4: /* truncate */
    b->len = below(b->len + 1);
    break;
  case 5: { /* insert a token */
    const char *t = tokens[below(sizeof tokens / sizeof tokens[0])];
    insert(b, at, t, strlen(t));
    break;
  }
  default: /* overwrite an attribute value start with a token */
    for (size_t tries = 0; tries < 64 && b->len; tries++) {
      size_t i = below(b->len);
      if (b->p[i] == '"' && i + 1 < b->len) {
        const char *t = tokens[below(4)];
        size_t n = strlen(t);
        if (i + 1 + n <= b->len)
          memcpy(b->p + i + 1, t, n);
        break;
      }
    }
    break;
  }
}

static char *slurp(const char *path, size_t *len)
{
  char *b;
  struct dpt_err err;
  if (dpt_file_read(path, "fixture", NULL, 0, &b, len, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    exit(1);
  }
  return b;
}

int main(int argc, char **argv)
{
  if (argc < 4) {
    fprintf(stderr, "usage: test_node_fuzz ITERATIONS SEED FILE.xml...\n");
    return 2;
  }
  long iters = strtol(argv[1], NULL, 10);
  rng_state = strtoull(argv[2], NULL, 0) * 0x9e3779b97f4a7c15ULL + 0x2545f4914f6cdd1dULL;
  if (!rng_state)
    rng_state = 1;
  int nfix = argc - 3;
  char **fix = calloc(nfix, sizeof *fix);
  size_t *fixlen = calloc(nfix, sizeof *fixlen);
  FILE *devnull = fopen("/dev/null", "w");
  long loaded = 0, rejected = 0, bad = 0;
  long dump_it = getenv("DPT_FUZZ_DUMP") ? strtol(getenv("DPT_FUZZ_DUMP"), NULL, 10) : -1;
  if (!fix || !fixlen || !devnull)
    return 1;
  for (int i = 0; i < nfix; i++)
    fix[i] = slurp(argv[3 + i], &fixlen[i]);

  for (long it = 0; it < iters; it++) {
    int f = (int)below(nfix);
    struct buf b = {0};
    reserve(&b, fixlen[f] + 1);
    memcpy(b.p, fix[f], fixlen[f]);
    b.len = fixlen[f];
    for (size_t m = 1 + below(4); m--;)
      mutate(&b);

    struct dpt_err err;
    struct dpt_node *n = NULL;
    char name[64];
    snprintf(name, sizeof name, "mutant-%ld.xml", it);
    if (dump_it == it) { /* DPT_FUZZ_DUMP=N writes mutant N to ./mutant-N.xml (debugging) */
      FILE *d = fopen(name, "wb");
      if (d) {
        fwrite(b.p, 1, b.len, d);
        fclose(d);
      }
    }
    int rc = dpt_node_load_buffer(&n, b.p, b.len, name, &err);
    if (rc == 0) {
      loaded++;
      dpt_node_print(devnull, n);
      dpt_node_print_flags(devnull, n, DPT_NODE_PRINT_PCIE);
      json_t *j = dpt_node_to_json(n);
      char *s = j ? json_dumps(j, 0) : NULL;
      if (!s) {
        fprintf(stderr, "iteration %ld: JSON rendering failed\n", it);
        bad++;
      }
      free(s);
      json_decref(j);
      for (int g = 0; g < n->n_gpus; g++) {
        int near[8];
        dpt_node_nearest_hcas(n, g, near, 8);
      }
      dpt_node_destroy(n);
    } else {
      rejected++;
      if (rc != DPT_E_INPUT || n != NULL || !strstr(err.msg, name)) {
        fprintf(stderr, "iteration %ld: rejection must be DPT_E_INPUT naming the input: rc %d, %s\n", it, rc,
                err.msg);
        bad++;
      }
    }
    free(b.p);
  }
  printf("test_node_fuzz: %ld iterations, %ld loaded, %ld rejected, %ld bad\n", iters, loaded, rejected, bad);
  for (int i = 0; i < nfix; i++)
    free(fix[i]);
  free(fix);
  free(fixlen);
  fclose(devnull);
  /* both outcomes must occur, or the mutations are not exercising the loader */
  return bad == 0 && loaded > 0 && rejected > 0 ? 0 : 1;
}
