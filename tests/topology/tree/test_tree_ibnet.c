/* test_tree_ibnet — `ibnetdiscover -p` dumps.
 * Acceptance: the groups recovered from the real avakas dump are its leaf
 * switches (exact sizes below) and every host of the dump appears once.
 * Plus small synthetic fabrics: a real multi-level tree (no collapse), a fat
 * tree (collapsed into virtual-core), non-host CAs, and the errors. */
#include "tree_check.h"

/* Host names of the CA lines, found independently of the parser: the text
 * between "( '" and the first blank of the description. */
static int avakas_hosts(const char *path, char names[][64], int max)
{
  FILE *f = fopen(path, "r");
  char line[1024];
  int n = 0;
  if (!f)
    return -1;
  while (fgets(line, sizeof line, f)) {
    char *p;
    if (strncmp(line, "CA ", 3) != 0 || !(p = strstr(line, "( '")))
      continue;
    p += 3;
    size_t l = strcspn(p, " '");
    int dup = 0;
    for (int i = 0; i < n; i++)
      dup |= strncmp(names[i], p, l) == 0 && names[i][l] == '\0';
    if (!dup && n < max) {
      memcpy(names[n], p, l);
      names[n][l] = '\0';
      n++;
    }
  }
  fclose(f);
  return n;
}

static void test_avakas(const char *path)
{
  static char names[1000][64];
  /* hosts per leaf board of the QLogic 12800-180 chassis, L101..L116 */
  static const int want[16] = {17, 18, 18, 17, 18, 18, 18, 18, 18, 18, 18, 17, 17, 17, 18, 16};
  struct dpt_err err = {0};
  struct dpt_tree *t = NULL;
  int n = avakas_hosts(path, names, 1000);

  CHECK(n == 281, "avakas has %d distinct CA hosts", n);
  CHECK(dpt_tree_load_ibnetdiscover(&t, path, &err) == 0, "%s", err.msg);
  if (!t)
    return;
  CHECK(!tree_invariant_violation(t), "%s", tree_invariant_violation(t));
  CHECK(strcmp(t->source, "ibnetdiscover") == 0, "source");
  CHECK(t->n_hosts == n, "%d hosts in the tree, %d in the dump", t->n_hosts, n);
  for (int i = 0; i < n; i++)
    CHECK(dpt_tree_find_host(t, names[i]) >= 0, "host %s missing", names[i]);
  /* fat tree: 9 spine ASICs collapsed into one virtual core over 16 leaves */
  CHECK(t->n_switches == 17 && t->sw[0].is_virtual && strcmp(t->sw[0].name, "virtual-core") == 0,
        "%d switches, root %s", t->n_switches, t->sw[0].name);
  for (int i = 1; i < t->n_switches && i <= 16; i++) {
    char leaf[64];
    int cnt = 0;
    snprintf(leaf, sizeof leaf, "QLogic 12800-180 GUID=0x00066a00e8001310 L%d", 100 + i);
    CHECK(strcmp(t->sw[i].name, leaf) == 0, "sw[%d] = %s, want %s", i, t->sw[i].name, leaf);
    for (int h = 0; h < t->n_hosts; h++)
      cnt += t->hosts[h].sw == i;
    CHECK(cnt == want[i - 1], "%s: %d hosts, want %d", leaf, cnt, want[i - 1]);
    CHECK(cnt >= 14 && cnt <= 18, "%s: %d hosts outside 14..18", leaf, cnt);
    CHECK(t->sw[i].parent == 0 && t->sw[i].uplinks == 18 && t->sw[i].link_gbps == 18 * 32,
          "%s: uplinks %d, %g Gbit/s", leaf, t->sw[i].uplinks, t->sw[i].link_gbps);
  }
  CHECK(t->hosts[dpt_tree_find_host(t, "node008")].link_gbps == 16, "node008 is cabled at 4x DDR");
  CHECK(t->hosts[dpt_tree_find_host(t, "node001")].link_gbps == 32, "4x QDR = 32 Gbit/s of data");
  CHECK(t->hosts[dpt_tree_find_host(t, "avakas-frontend1")].sw == 9, "frontend1 on L109");
  dpt_tree_destroy(t);
}

/* Synthetic dump: cable lines from both ends. */
static void cable(char **buf, size_t *len, FILE *f, const char *at, unsigned long long ag, int ap, const char *ad,
                  const char *bt, unsigned long long bg, int bp, const char *bd, const char *speed)
{
  (void)buf;
  (void)len;
  fprintf(f, "%s %5d %2d 0x%016llx 4x %s - %s %5d %2d 0x%016llx ( '%s' - '%s' )\n", at, 1, ap, ag, speed, bt, 2,
          bp, bg, ad, bd);
  fprintf(f, "%s %5d %2d 0x%016llx 4x %s - %s %5d %2d 0x%016llx ( '%s' - '%s' )\n", bt, 2, bp, bg, speed, at, 1,
          ap, ag, bd, ad);
}

static struct dpt_tree *parse_str(const char *s, size_t n, struct dpt_err *err)
{
  struct dpt_tree *t = NULL;
  dpt_tree_parse_ibnetdiscover(&t, s, n, "ib.txt", err);
  return t;
}

static void test_synthetic(void)
{
  char *buf = NULL;
  size_t len = 0;
  struct dpt_err err = {0};
  struct dpt_tree *t;
  FILE *f = open_memstream(&buf, &len);
  /* top T over spines S1, S2; S1 over leaves A, B; S2 over leaf C: a real tree */
  fprintf(f, "DR path slid 0; dlid 0; 0 -> new Switch {0000000000000a00} portnum 0 lid 0-0 \"\"\n");
  cable(&buf, &len, f, "SW", 0x100, 1, "top", "SW", 0x200, 1, "spine1", "EDR");
  cable(&buf, &len, f, "SW", 0x100, 2, "top", "SW", 0x300, 1, "spine2", "EDR");
  cable(&buf, &len, f, "SW", 0x200, 2, "spine1", "SW", 0xa00, 9, "leafA", "EDR");
  cable(&buf, &len, f, "SW", 0x200, 3, "spine1", "SW", 0xa00, 10, "leafA", "EDR");
  cable(&buf, &len, f, "SW", 0x200, 4, "spine1", "SW", 0xb00, 9, "leafB", "EDR");
  cable(&buf, &len, f, "SW", 0x300, 2, "spine2", "SW", 0xc00, 9, "leafC", "HDR");
  for (int i = 0; i < 6; i++) {
    char d[64];
    snprintf(d, sizeof d, "n%d.cluster mlx5_0", i + 1);
    cable(&buf, &len, f, "CA", 0x1000 + (unsigned)i, 1, d, "SW", i < 2 ? 0xa00 : i < 4 ? 0xb00 : 0xc00, 1 + i % 2,
          i < 2 ? "leafA" : i < 4 ? "leafB" : "leafC", "EDR");
  }
  /* non-host CAs are ignored; an unconnected port line is skipped */
  cable(&buf, &len, f, "CA", 0x2000, 1, "Mellanox Technologies Aggregation Node", "SW", 0xc00, 5, "leafC", "HDR");
  fprintf(f, "SW     2  7 0x0000000000000c00 4x SDR                                    'leafC'\n");
  fflush(f);
  t = parse_str(buf, len, &err);
  CHECK(t != NULL, "tree fabric: %s", err.msg);
  if (t) {
    CHECK(!tree_invariant_violation(t), "%s", tree_invariant_violation(t));
    CHECK(t->n_switches == 6 && strcmp(t->sw[0].name, "top") == 0 && !t->sw[0].is_virtual, "root %s", t->sw[0].name);
    CHECK(t->n_hosts == 6 && dpt_tree_find_host(t, "n1") >= 0, "6 hosts, domain dropped");
    int a = dpt_tree_find_switch(t, "leafA"), s1 = dpt_tree_find_switch(t, "spine1"),
        c = dpt_tree_find_switch(t, "leafC");
    CHECK(a > 0 && t->sw[a].parent == s1 && t->sw[a].uplinks == 2 && t->sw[a].link_gbps == 200,
          "leafA: 2 EDR cables to spine1 = 200 Gbit/s (%d, %g)", a > 0 ? t->sw[a].uplinks : -1,
          a > 0 ? t->sw[a].link_gbps : -1);
    CHECK(c > 0 && t->sw[c].link_gbps == 200, "leafC: one HDR 4x cable = 200");
    CHECK(t->sw[s1].parent == 0 && t->sw[s1].depth == 1 && t->sw[a].depth == 2, "depths");
    dpt_tree_destroy(t);
  }
  fclose(f);
  free(buf);
  buf = NULL;

  /* fat tree: every leaf cabled to both spines -> virtual-core */
  f = open_memstream(&buf, &len);
  for (int l = 0; l < 2; l++)
    for (int s = 0; s < 2; s++)
      cable(&buf, &len, f, "SW", 0xa00 + 0x100 * (unsigned)l, 10 + s, l ? "leaf2" : "leaf1", "SW",
            0x100 + 0x100 * (unsigned)s, 1 + l, s ? "spine2" : "spine1", "FDR");
  cable(&buf, &len, f, "CA", 0x1001, 1, "h1 HCA-1", "SW", 0xa00, 1, "leaf1", "FDR");
  cable(&buf, &len, f, "CA", 0x1002, 1, "h2 HCA-1", "SW", 0xb00, 1, "leaf2", "FDR");
  cable(&buf, &len, f, "CA", 0x1003, 1, "h2 HCA-2", "SW", 0xb00, 2, "leaf2", "FDR"); /* dual-port on one leaf */
  fflush(f);
  t = parse_str(buf, len, &err);
  CHECK(t != NULL, "fat tree: %s", err.msg);
  if (t) {
    CHECK(t->n_switches == 3 && t->sw[0].is_virtual && strcmp(t->sw[0].name, "virtual-core") == 0, "collapsed");
    CHECK(t->sw[1].uplinks == 2 && t->sw[1].link_gbps == 2 * 4 * 13.64, "leaf1 uplinks %g", t->sw[1].link_gbps);
    CHECK(t->hosts[dpt_tree_find_host(t, "h2")].link_gbps == 2 * 4 * 13.64, "dual-port host");
    dpt_tree_destroy(t);
  }
  fclose(f);
  free(buf);
  buf = NULL;

  /* errors */
  struct {
    const char *text;
    const char *frag;
  } bad[] = {
      {"", "no connected port lines"},
      {"hello world\n", "ib.txt:1: not an `ibnetdiscover -p` line"},
      {"SW 1 2 0xzz 4x QDR\n", "ib.txt:1: not an"},
      {"SW 1 1 0x10 4x QDR - CA 2 1 0x20 ( 'sw' - 'h1 HCA-1' )\n"
       "SW 1 1 0x10 4x QDR - CA 3 1 0x30 ( 'sw' - 'h2 HCA-1' )\n",
       "ib.txt:2: port 1 of 0x0000000000000010 is linked to 0x0000000000000030"},
      {"SW 1 1 0x10 4x QDR - CA 2 1 0x20 ( 'swA' - 'h1 HCA-1' )\n"
       "SW 5 1 0x50 4x QDR - CA 3 1 0x30 ( 'swB' - 'h1 HCA-2' )\n",
       "host 'h1' has HCA ports on two leaf switches"},
      {"SW 1 1 0x10 4x QDR - CA 2 1 0x20 ( 'sw' - 'MF0;sw01:SX6036/U1' )\n", "no host HCA"},
      {"SW 1 1 0x10 4x QDR - CA 2 1 0x20 ( 'sw' - 'h1 HCA-1'\n", "ib.txt:1: not an"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memset(&err, 0, sizeof err);
    t = parse_str(bad[i].text, strlen(bad[i].text), &err);
    CHECK(!t && err.code == DPT_E_INPUT && strstr(err.msg, bad[i].frag), "case %zu: '%s' lacks '%s'", i, err.msg,
          bad[i].frag);
    dpt_tree_destroy(t);
  }
}

int main(int argc, char **argv)
{
  if (argc < 2) {
    fprintf(stderr, "usage: test_tree_ibnet AVAKAS_DUMP\n");
    return 2;
  }
  test_avakas(argv[1]);
  test_synthetic();
  if (failures)
    fprintf(stderr, "test_tree_ibnet: %d checks failed\n", failures);
  else
    printf("test_tree_ibnet: all checks passed\n");
  return failures ? 1 : 0;
}
