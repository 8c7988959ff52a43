/* test_tree_nomem — the switch-tree readers when memory runs out.
 *
 * The test is linked with -Wl,--wrap for malloc, calloc, realloc, strdup and
 * strndup, so every allocation made by the test and by the static dpt_topology
 * library goes through the counter below.  For a reader and an input the test
 * first counts the allocations K of a good parse, then fails the Nth one alone
 * for N = 1..K.  Property, for every N:
 *   - the reader returns DPT_E_NOMEM, err holds the same code and "out of
 *     memory", and *out stays NULL (one failed allocation is never swallowed
 *     nor reported as bad input);
 *   - nothing it allocated survives (LeakSanitizer, in the ASan build's run);
 *   - with the counter disarmed again, the same input gives the same tree.
 * Every N is tried, also for the real avakas dump (about 4,300 allocations).
 * Allocations made inside libslurm (hostlist ranges) are not counted. */
#define _GNU_SOURCE
#include <errno.h>

#include "tree_check.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);

static long alloc_count; /* allocations seen since the last reset */
static long fail_at;     /* fail the allocation with this number (1-based), 0: none */

static int alloc_fails(void)
{
  if (++alloc_count != fail_at)
    return 0;
  errno = ENOMEM;
  return 1;
}

void *__wrap_malloc(size_t n)
{
  return alloc_fails() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t k, size_t n)
{
  return alloc_fails() ? NULL : __real_calloc(k, n);
}

void *__wrap_realloc(void *p, size_t n)
{
  return alloc_fails() ? NULL : __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
  return alloc_fails() ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
  return alloc_fails() ? NULL : __real_strndup(s, n);
}

typedef int (*tree_parse_fn)(struct dpt_tree **out, const char *buf, size_t len, const char *name,
                             struct dpt_err *err);

static struct dpt_tree *parse_counted(tree_parse_fn parse, const char *buf, size_t len, long fail, long *count,
                                      struct dpt_err *err)
{
  struct dpt_tree *t = NULL;
  memset(err, 0, sizeof *err);
  alloc_count = 0;
  fail_at = fail;
  int rc = parse(&t, buf, len, "input", err);
  fail_at = 0;
  *count = alloc_count;
  CHECK(rc < 0 ? !t && rc == err->code : t && err->code == 0,
        "allocation %ld failed: the reader returned %d, a tree %p and error code %d ('%s')", fail, rc, (void *)t,
        err->code, err->msg);
  return t;
}

static void check_reader(const char *what, tree_parse_fn parse, const char *buf, size_t len)
{
  struct dpt_err err;
  long k, seen;
  struct dpt_tree *good = parse_counted(parse, buf, len, 0, &k, &err);

  CHECK(good != NULL, "%s: the input does not parse: %s", what, err.msg);
  if (!good)
    return;
  CHECK(k > 0, "%s: no allocation was counted: is the test linked with -Wl,--wrap?", what);
  for (long n = 1; n <= k; n++) {
    struct dpt_tree *t = parse_counted(parse, buf, len, n, &seen, &err);
    CHECK(!t && err.code == DPT_E_NOMEM && strstr(err.msg, "out of memory"),
          "%s: allocation %ld of %ld failed: tree %p, code %d, '%s' (want DPT_E_NOMEM, 'out of memory')", what,
          n, k, (void *)t, err.code, err.msg);
    dpt_tree_destroy(t);
  }
  struct dpt_tree *again = parse_counted(parse, buf, len, 0, &seen, &err);
  CHECK(again && seen == k, "%s: a parse after the failures: %s, %ld allocations (first: %ld)", what,
        again ? "ok" : err.msg, seen, k);
  if (again) {
    const char *d = tree_structure_diff(good, again);
    CHECK(!d, "%s: the tree changed after the failures: %s", what, d);
  }
  printf("%s: %ld allocations, each failed in turn\n", what, k);
  dpt_tree_destroy(good);
  dpt_tree_destroy(again);
}

static char *read_file(const char *path, size_t *len)
{
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  long n;
  if (!f || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
      !(buf = malloc((size_t)n + 1)) || fread(buf, 1, (size_t)n, f) != (size_t)n) {
    fprintf(stderr, "test_tree_nomem: cannot read %s\n", path);
    free(buf);
    buf = NULL;
  } else {
    buf[n] = '\0';
    *len = (size_t)n;
  }
  if (f)
    fclose(f);
  return buf;
}

/* A real tree (top > spine1 > leafA, leafB; top > spine2 > leafC) with a dual-port host, a CA
 * that is no host and a port without a peer, then a fat tree that collapses into virtual-core. */
static const char tree_dump[] =
    "SW 1 1 0x0100 4x EDR - SW 2 1 0x0200 ( 'top' - 'spine1' )\n"
    "SW 1 2 0x0100 4x EDR - SW 3 1 0x0300 ( 'top' - 'spine2' )\n"
    "SW 2 1 0x0200 4x EDR - SW 1 1 0x0100 ( 'spine1' - 'top' )\n"
    "SW 2 2 0x0200 4x EDR - SW 4 9 0x0a00 ( 'spine1' - 'leafA' )\n"
    "SW 2 3 0x0200 4x EDR - SW 5 9 0x0b00 ( 'spine1' - 'leafB' )\n"
    "SW 3 2 0x0300 4x HDR - SW 6 9 0x0c00 ( 'spine2' - 'leafC' )\n"
    "CA 7 1 0x1001 4x EDR - SW 4 1 0x0a00 ( 'n1.cluster mlx5_0' - 'leafA' )\n"
    "CA 8 1 0x1002 4x EDR - SW 4 2 0x0a00 ( 'n1.cluster mlx5_1' - 'leafA' )\n"
    "CA 9 1 0x1003 4x EDR - SW 5 1 0x0b00 ( 'n2 HCA-1' - 'leafB' )\n"
    "SW 6 1 0x0c00 4x EDR - CA 10 1 0x1004 ( 'leafC' - 'n3 HCA-1' )\n"
    "CA 11 1 0x2000 4x HDR - SW 6 5 0x0c00 ( 'Mellanox Technologies Aggregation Node' - 'leafC' )\n"
    "SW 6 7 0x0c00 4x SDR 'leafC'\n";
static const char fat_dump[] =
    "SW 1 10 0x0a00 4x FDR - SW 3 1 0x0100 ( 'leaf1' - 'spine1' )\n"
    "SW 1 11 0x0a00 4x FDR - SW 4 1 0x0200 ( 'leaf1' - 'spine2' )\n"
    "SW 2 10 0x0b00 4x FDR - SW 3 2 0x0100 ( 'leaf2' - 'spine1' )\n"
    "SW 2 11 0x0b00 4x FDR - SW 4 2 0x0200 ( 'leaf2' - 'spine2' )\n"
    "CA 5 1 0x1001 4x FDR - SW 1 1 0x0a00 ( 'h1 HCA-1' - 'leaf1' )\n"
    "CA 6 1 0x1002 4x FDR - SW 2 1 0x0b00 ( 'h2 HCA-1' - 'leaf2' )\n";

/* The reader on the file at path (its allocations are counted from the parse on). */
static void check_file(const char *what, tree_parse_fn parse, const char *path)
{
  size_t len = 0;
  char *buf = read_file(path, &len);
  if (!buf) {
    failures++;
    return;
  }
  check_reader(what, parse, buf, len);
  free(buf);
}

int main(int argc, char **argv)
{
  char path[4096];

  if (argc < 4) {
    fprintf(stderr, "usage: test_tree_nomem AVAKAS_IBNETDISCOVER_DUMP TREE_DATA_DIR MN1_TOPOLOGY_CONF\n");
    return 2;
  }
  check_reader("ibnetdiscover: tree", dpt_tree_parse_ibnetdiscover, tree_dump, sizeof tree_dump - 1);
  check_reader("ibnetdiscover: fat tree", dpt_tree_parse_ibnetdiscover, fat_dump, sizeof fat_dump - 1);
  check_file("ibnetdiscover: avakas", dpt_tree_parse_ibnetdiscover, argv[1]);
  snprintf(path, sizeof path, "%s/cluster.conf", argv[2]);
  check_file("topology.conf: cluster", dpt_tree_parse_topology_conf, path);
  check_file("topology.conf: MN-1", dpt_tree_parse_topology_conf, argv[3]);
  snprintf(path, sizeof path, "%s/cluster.addr", argv[2]);
  check_file("SLURM_TOPOLOGY_ADDR list: cluster", dpt_tree_parse_addr_list, path);
  if (failures)
    fprintf(stderr, "test_tree_nomem: %d checks failed\n", failures);
  else
    printf("test_tree_nomem: all checks passed\n");
  return failures ? 1 : 0;
}
