/* test_tree_addr — SLURM_TOPOLOGY_ADDR / _PATTERN strings.
 * Acceptance: the addresses of a cluster give the same tree as its
 * topology.conf (static files, and addresses generated from topology.conf the
 * way Slurm 22.05's topology/tree topo_get_node_addr() builds them). */
#include "tree_check.h"

/* Slurm's levels: leaf switches 0, others 1 + the highest child level. */
static void slurm_levels(const struct dpt_tree *t, int *level)
{
  for (int i = 0; i < t->n_switches; i++)
    level[i] = 0;
  for (int i = t->n_switches - 1; i > 0; i--) { /* preorder: children after parents */
    int p = t->sw[i].parent;
    if (level[p] < level[i] + 1)
      level[p] = level[i] + 1;
  }
}

/* Addresses as Slurm prints them: for each level from the highest down to 0,
 * the switch on the host's path at that level or nothing, '.'-separated, then
 * the host.  Virtual switches are not in Slurm. */
static int slurm_addrs(const struct dpt_tree *t, char ***addrs, char ***pats)
{
  int *level = calloc((size_t)t->n_switches, sizeof *level), top = 0;
  slurm_levels(t, level);
  for (int i = 0; i < t->n_switches; i++)
    if (!t->sw[i].is_virtual && level[i] > top)
      top = level[i];
  *addrs = calloc((size_t)t->n_hosts, sizeof **addrs);
  *pats = calloc((size_t)t->n_hosts, sizeof **pats);
  for (int h = 0; h < t->n_hosts; h++) {
    char buf[1024] = "", pat[1024] = "";
    for (int l = top; l >= 0; l--) {
      for (int s = t->hosts[h].sw; s >= 0; s = t->sw[s].parent)
        if (!t->sw[s].is_virtual && level[s] == l)
          strcat(buf, t->sw[s].name);
      strcat(buf, ".");
      strcat(pat, "switch.");
    }
    strcat(buf, t->hosts[h].name);
    strcat(pat, "node");
    (*addrs)[h] = strdup(buf);
    (*pats)[h] = strdup(pat);
  }
  free(level);
  return t->n_hosts;
}

static void test_generated(const char *what, struct dpt_tree *conf)
{
  char **a, **p;
  struct dpt_err err = {0};
  struct dpt_tree *t = NULL;
  int n = slurm_addrs(conf, &a, &p);
  /* feed them in reverse order: order must not matter */
  const char **ra = calloc((size_t)n, sizeof *ra), **rp = calloc((size_t)n, sizeof *rp);
  for (int i = 0; i < n; i++) {
    ra[i] = a[n - 1 - i];
    rp[i] = p[n - 1 - i];
  }
  CHECK(dpt_tree_from_addrs(&t, ra, rp, n, &err) == 0, "%s: %s", what, err.msg);
  if (t) {
    const char *d = tree_structure_diff(conf, t);
    CHECK(!d, "%s: addresses give another tree: %s", what, d);
    CHECK(!tree_invariant_violation(t), "%s", tree_invariant_violation(t));
  }
  dpt_tree_destroy(t);
  for (int i = 0; i < n; i++) {
    free(a[i]);
    free(p[i]);
  }
  free(a);
  free(p);
  free(ra);
  free(rp);
}

static struct dpt_tree *conf_from(const char *text)
{
  struct dpt_err err = {0};
  struct dpt_tree *t = NULL;
  if (dpt_tree_parse_topology_conf(&t, text, strlen(text), "gen.conf", &err) < 0)
    fprintf(stderr, "conf: %s\n", err.msg);
  return t;
}

struct bad {
  const char *addr[3], *pat[3];
  int n;
  const char *frag;
};

static void test_errors(void)
{
  static const struct bad cases[] = {
      {{"core.s1.n1", "core.s2.n1"}, {NULL, NULL}, 2, "host 'n1' has SLURM_TOPOLOGY_ADDR 'core.s2.n1' here but 'core.s1.n1' at SLURM_TOPOLOGY_ADDR entry 0"},
      {{"core.s1.n1", "s1.n2"}, {NULL, NULL}, 2, "switch 's1' is at level 0 in 's1.n2' but at level 1"},
      {{"a.s1.n1", "b.s1.n2"}, {NULL, NULL}, 2, "switch 's1' has two parents: 'b' here"},
      {{"core.s1.n1", "n2"}, {"switch.switch.node", "node"}, 2, "host 'n2' is in no switch"},
      {{"core.s[1-2].n1"}, {NULL}, 1, "under several switches at level 1"},
      {{"core.s1.n1"}, {"switch.node.switch"}, 1, "is not \"switch.\""},
      {{"core.n1"}, {"switch.switch.node"}, 1, "has 2 components but its pattern"},
      {{"core.s1."}, {NULL}, 1, "host name '' is empty"},
      {{""}, {NULL}, 1, "empty SLURM_TOPOLOGY_ADDR"},
      {{"core.s1 x.n1"}, {NULL}, 1, "blanks"},
      {{"core.s1.n1", "core.n2"}, {"switch.switch.node", "switch.node"}, 2, "switch 'core' has both hosts"},
      {{"core.0123456789012345678901234567890123456789012345678901234567890123.n1"}, {NULL}, 1, "longer than 63"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct dpt_err err = {0};
    struct dpt_tree *t = NULL;
    int rc = dpt_tree_from_addrs(&t, cases[i].addr, cases[i].pat, cases[i].n, &err);
    CHECK(rc == DPT_E_INPUT && !t, "case %zu accepted", i);
    CHECK(strstr(err.msg, cases[i].frag) != NULL, "case %zu: '%s' lacks '%s'", i, err.msg, cases[i].frag);
    dpt_tree_destroy(t);
  }
  /* file errors name the line */
  {
    const char *txt = "# x\ncore.s1.n1 switch.switch.node\ncore.s1.n2 switch.switch.node extra\n";
    struct dpt_err err = {0};
    struct dpt_tree *t = NULL;
    CHECK(dpt_tree_parse_addr_list(&t, txt, strlen(txt), "a.txt", &err) == DPT_E_INPUT &&
              strstr(err.msg, "a.txt:3: ") == err.msg && strstr(err.msg, "third word"),
          "third word: %s", err.msg);
    txt = "core.s1.n1\ncore.s2.n1\n";
    CHECK(dpt_tree_parse_addr_list(&t, txt, strlen(txt), "a.txt", &err) == DPT_E_INPUT &&
              strstr(err.msg, "a.txt:2: ") == err.msg && strstr(err.msg, "at a.txt:1"),
          "conflict: %s", err.msg);
    txt = "# nothing\n\n";
    CHECK(dpt_tree_parse_addr_list(&t, txt, strlen(txt), "a.txt", &err) == DPT_E_INPUT &&
              strstr(err.msg, "no SLURM_TOPOLOGY_ADDR lines"),
          "empty: %s", err.msg);
  }
}

static void test_special(void)
{
  struct dpt_err err = {0};
  struct dpt_tree *t = NULL;
  /* no switches at all (Slurm without topology: pattern "node"): flat */
  const char *fa[] = {"n2", "n1", "n3"}, *fp[] = {"node", "node", "node"};
  CHECK(dpt_tree_from_addrs(&t, fa, fp, 3, &err) == 0, "flat: %s", err.msg);
  if (t) {
    CHECK(t->n_switches == 1 && t->sw[0].is_virtual && strcmp(t->sw[0].name, "flat") == 0 && t->n_hosts == 3,
          "flat tree");
    dpt_tree_destroy(t);
  }
  /* host names with dots, thanks to the pattern */
  const char *da[] = {"core.leaf1.n1.cluster.org"}, *dp[] = {"switch.switch.node"};
  CHECK(dpt_tree_from_addrs(&t, da, dp, 1, &err) == 0 && t && dpt_tree_find_host(t, "n1.cluster.org") == 0 &&
            t->n_switches == 2,
        "dotted host: %s", err.msg);
  dpt_tree_destroy(t);
  t = NULL;
  /* several top-level switches: virtual root, as with topology.conf */
  const char *ta[] = {"a.n1", "b.n2"};
  CHECK(dpt_tree_from_addrs(&t, ta, NULL, 2, &err) == 0 && t && t->sw[0].is_virtual && t->n_switches == 3,
        "virtual root: %s", err.msg);
  dpt_tree_destroy(t);
}

/* One line per task: a host repeated with the same address (the pattern's case aside) is one host; each
 * switch and host keeps the line that first named it (an srun -l label and comments aside). */
static void test_repeats_and_lines(void)
{
  struct dpt_err err = {0};
  struct dpt_tree *t = NULL;
  const char *ra[] = {"core.s1.n1", "core.s1.n1", "core.s1.n2"};
  const char *rp[] = {"switch.switch.node", "SWITCH.Switch.NODE", "switch.switch.node"};
  const char *txt = "# srun -l output\n 0: core.s1.n1 switch.switch.node\ncore.s2.n2 switch.switch.node # 2nd\n"
                    "1: core.s1.n1 switch.switch.node\n\ncore.s1.n3 switch.switch.node\n";
  int s1, s2, core;

  CHECK(dpt_tree_from_addrs(&t, ra, rp, 3, &err) == 0 && t && t->n_hosts == 2 && t->n_switches == 2,
        "repeated host: %s", err.msg);
  dpt_tree_destroy(t);
  t = NULL;
  CHECK(dpt_tree_parse_addr_list(&t, txt, strlen(txt), "tasks.txt", &err) == 0 && t, "lines: %s", err.msg);
  if (!t)
    return;
  core = dpt_tree_find_switch(t, "core");
  s1 = dpt_tree_find_switch(t, "s1");
  s2 = dpt_tree_find_switch(t, "s2");
  CHECK(t->n_hosts == 3 && t->n_switches == 3 && core >= 0 && s1 >= 0 && s2 >= 0, "lines: tree shape");
  if (core >= 0 && s1 >= 0 && s2 >= 0)
    CHECK(t->sw[core].line == 2 && t->sw[s1].line == 2 && t->sw[s2].line == 3, "switch lines %d %d %d",
          t->sw[core].line, t->sw[s1].line, t->sw[s2].line);
  for (int h = 0; h < t->n_hosts; h++) {
    int want = strcmp(t->hosts[h].name, "n1") == 0 ? 2 : strcmp(t->hosts[h].name, "n2") == 0 ? 3 : 6;
    CHECK(t->hosts[h].line == want, "host %s: line %d, want %d", t->hosts[h].name, t->hosts[h].line, want);
    CHECK(t->hosts[h].sw == (strcmp(t->hosts[h].name, "n2") == 0 ? s2 : s1), "host %s: leaf %d",
          t->hosts[h].name, t->hosts[h].sw);
  }
  dpt_tree_destroy(t);
}

int main(int argc, char **argv)
{
  struct dpt_err err = {0};
  struct dpt_tree *conf = NULL, *addr = NULL;
  char path[4096];

  if (argc < 3) {
    fprintf(stderr, "usage: test_tree_addr DATA_DIR MN1_TOPOLOGY_CONF\n");
    return 2;
  }
  /* static files: cluster.conf and cluster.addr describe the same cluster */
  snprintf(path, sizeof path, "%s/cluster.conf", argv[1]);
  CHECK(dpt_tree_load_topology_conf(&conf, path, &err) == 0, "%s", err.msg);
  snprintf(path, sizeof path, "%s/cluster.addr", argv[1]);
  CHECK(dpt_tree_load_addr_list(&addr, path, &err) == 0, "%s", err.msg);
  if (conf && addr) {
    const char *d = tree_structure_diff(conf, addr);
    CHECK(!d, "cluster.conf and cluster.addr differ: %s", d);
    CHECK(strcmp(addr->source, "addr") == 0, "source");
    test_generated("cluster.conf", conf);
  }
  dpt_tree_destroy(conf);
  dpt_tree_destroy(addr);
  conf = NULL;
  CHECK(dpt_tree_load_topology_conf(&conf, argv[2], &err) == 0, "%s", err.msg);
  if (conf) {
    test_generated("etc/mn1/topology.conf", conf);
    dpt_tree_destroy(conf);
  }
  /* deeper and unbalanced trees, and a forest */
  const char *gens[] = {
      "SwitchName=r Switches=x,y\nSwitchName=x Switches=x1,x2\nSwitchName=x1 Switches=l1\n"
      "SwitchName=l1 Nodes=a[1-3]\nSwitchName=x2 Nodes=b[1-2]\nSwitchName=y Nodes=c[10-12]\n",
      "SwitchName=t1 Switches=l[1-2]\nSwitchName=l1 Nodes=a[1-2]\nSwitchName=l2 Nodes=b[1-2]\n"
      "SwitchName=t2 Nodes=c[1-2]\n",
  };
  for (size_t i = 0; i < sizeof gens / sizeof gens[0]; i++) {
    struct dpt_tree *g = conf_from(gens[i]);
    CHECK(g != NULL, "generated conf %zu", i);
    if (g)
      test_generated(gens[i], g);
    dpt_tree_destroy(g);
  }
  test_errors();
  test_special();
  test_repeats_and_lines();
  if (failures)
    fprintf(stderr, "test_tree_addr: %d checks failed\n", failures);
  else
    printf("test_tree_addr: all checks passed\n");
  return failures ? 1 : 0;
}
