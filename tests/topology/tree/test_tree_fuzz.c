/* test_tree_fuzz — deterministic mutation testing of the three parsers.
 * Seeds: the test topology.conf / address list, etc/mn1/topology.conf and the
 * real avakas ibnetdiscover dump.  Each mutant (byte flips, insertions of
 * syntax characters, deletions, duplicated or swapped lines, truncation) must
 * either parse into a tree satisfying every invariant, or fail with
 * DPT_E_INPUT and a message that names the input.  Run under ASan+UBSan too.
 *   test_tree_fuzz DATA_DIR AVAKAS MN1_CONF [ITERATIONS] */
#include <stdint.h>

#include "dpt_file.h"
#include "tree_check.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void) /* splitmix64 */
{
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static char *slurp(const char *path, size_t *len)
{
  char *b;
  struct dpt_err err = {0};
  if (dpt_file_read(path, "test input", NULL, 0, &b, len, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return NULL;
  }
  return b;
}

/* One mutant of seed[0..len) into out (capacity len * 2 + 64); returns its length. */
static size_t mutate(const char *seed, size_t len, char *out)
{
  static const char alphabet[] = "[]-,=.'\"\\#\n\t 0123456789xSWCA()abn:;\0";
  size_t n = len;
  memcpy(out, seed, len);
  int rounds = 1 + (int)(rng() % 4);
  for (int r = 0; r < rounds; r++) {
    size_t at = n ? (size_t)(rng() % n) : 0;
    switch (rng() % 7) {
    case 0: /* flip a byte */
      if (n)
        out[at] = (char)(rng() & 0xff);
      break;
    case 1: /* overwrite with a syntax character */
      if (n)
        out[at] = alphabet[rng() % (sizeof alphabet - 1)];
      break;
    case 2: /* insert a syntax character */
      if (n < 2 * len + 32) {
        memmove(out + at + 1, out + at, n - at);
        out[at] = alphabet[rng() % (sizeof alphabet - 1)];
        n++;
      }
      break;
    case 3: { /* delete a range */
      size_t k = (size_t)(rng() % 16);
      if (at + k > n)
        k = n - at;
      memmove(out + at, out + at + k, n - at - k);
      n -= k;
      break;
    }
    case 4: { /* duplicate a range (e.g. a line) */
      size_t k = (size_t)(rng() % 80);
      if (at + k > n)
        k = n - at;
      if (n + k <= 2 * len + 32) {
        memmove(out + at + k, out + at, n - at);
        n += k;
      }
      break;
    }
    case 5: /* truncate */
      n = at;
      break;
    case 6: { /* swap two bytes far apart */
      size_t b = n ? (size_t)(rng() % n) : 0;
      if (n) {
        char c = out[at];
        out[at] = out[b];
        out[b] = c;
      }
      break;
    }
    }
  }
  return n;
}

typedef int (*parse_fn)(struct dpt_tree **, const char *, size_t, const char *, struct dpt_err *);

static void fuzz(const char *what, parse_fn fn, const char *seed, size_t len, int iters)
{
  char *buf = malloc(2 * len + 64);
  int ok = 0, rejected = 0;
  for (int i = 0; i < iters; i++) {
    struct dpt_err err = {0};
    struct dpt_tree *t = NULL;
    size_t n = mutate(seed, len, buf);
    /* a fresh heap copy of exactly n bytes: ASan sees any over-read */
    char *exact = malloc(n ? n : 1);
    memcpy(exact, buf, n);
    int rc = fn(&t, exact, n, "mutant", &err);
    if (rc == 0) {
      const char *why = t ? tree_invariant_violation(t) : "NULL tree";
      CHECK(!why, "%s mutant %d: accepted but %s", what, i, why);
      json_t *j = t ? dpt_tree_to_json(t) : NULL;
      CHECK(j != NULL, "%s mutant %d: JSON failed", what, i);
      json_decref(j);
      ok++;
    } else {
      CHECK(rc == DPT_E_INPUT && !t && strncmp(err.msg, "mutant", 6) == 0 && strlen(err.msg) > 12,
            "%s mutant %d: rc %d, message '%s'", what, i, rc, err.msg);
      rejected++;
    }
    dpt_tree_destroy(t);
    free(exact);
  }
  printf("%s: %d mutants accepted, %d rejected\n", what, ok, rejected);
  /* both outcomes must occur, or the mutator (or the parser) is broken */
  CHECK(ok > 0 && rejected > 0, "%s: %d accepted, %d rejected", what, ok, rejected);
  free(buf);
}

int main(int argc, char **argv)
{
  char path[4096];
  size_t len;
  char *s;
  int iters = argc > 4 ? atoi(argv[4]) : 3000;

  if (argc < 4) {
    fprintf(stderr, "usage: test_tree_fuzz DATA_DIR AVAKAS MN1_CONF [ITERATIONS]\n");
    return 2;
  }
  snprintf(path, sizeof path, "%s/cluster.conf", argv[1]);
  if ((s = slurp(path, &len))) {
    fuzz("cluster.conf", dpt_tree_parse_topology_conf, s, len, iters);
    free(s);
  } else
    CHECK(0, "cannot read %s", path);
  if ((s = slurp(argv[3], &len))) {
    fuzz("mn1 topology.conf", dpt_tree_parse_topology_conf, s, len, iters);
    free(s);
  } else
    CHECK(0, "cannot read %s", argv[3]);
  snprintf(path, sizeof path, "%s/cluster.addr", argv[1]);
  if ((s = slurp(path, &len))) {
    fuzz("cluster.addr", dpt_tree_parse_addr_list, s, len, iters);
    free(s);
  } else
    CHECK(0, "cannot read %s", path);
  if ((s = slurp(argv[2], &len))) {
    /* a slice of port lines (fast; the dump starts with "DR path" lines),
     * then a few hundred full-size mutants */
    const char *mid = strstr(s, "\nCA ");
    if (mid) {
      size_t off = (size_t)(mid + 1 - s), k = 0;
      int lines = 0;
      while (off + k < len && lines < 200)
        lines += s[off + k++] == '\n';
      fuzz("avakas (port lines)", dpt_tree_parse_ibnetdiscover, s + off, k, iters);
    } else
      CHECK(0, "no CA line in %s", argv[2]);
    fuzz("avakas (full)", dpt_tree_parse_ibnetdiscover, s, len, iters / 10);
    free(s);
  } else
    CHECK(0, "cannot read %s", argv[2]);
  if (failures)
    fprintf(stderr, "test_tree_fuzz: %d checks failed\n", failures);
  else
    printf("test_tree_fuzz: all checks passed\n");
  return failures ? 1 : 0;
}
