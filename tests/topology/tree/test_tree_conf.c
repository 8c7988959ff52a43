/* test_tree_conf — topology.conf: ranges, nesting, LinkSpeed semantics,
 * Slurm's syntax (case, quotes, continuation, comments, escapes), a virtual
 * root over several top switches, and every error with its line number. */
#include "tree_check.h"

static struct dpt_tree *parse(const char *text, struct dpt_err *err)
{
  struct dpt_tree *t = NULL;
  int rc = dpt_tree_parse_topology_conf(&t, text, strlen(text), "t.conf", err);
  if (rc < 0)
    return NULL;
  return t;
}

static void test_cluster_file(const char *path)
{
  struct dpt_err err = {0};
  struct dpt_tree *t = NULL;
  int rc = dpt_tree_load_topology_conf(&t, path, &err);
  CHECK(rc == 0, "load %s: %s", path, err.msg);
  if (rc)
    return;
  CHECK(!tree_invariant_violation(t), "%s", tree_invariant_violation(t));
  CHECK(strcmp(t->source, "topology.conf") == 0, "source %s", t->source);
  CHECK(t->n_switches == 8 && t->n_hosts == 18, "%d switches %d hosts", t->n_switches, t->n_hosts);
  /* ranges expanded by libslurm, nesting, siblings in natural order */
  const char *order[] = {"core", "edge", "pod1", "leaf1", "leaf2", "pod2", "leaf3", "leaf4"};
  for (int i = 0; i < 8 && i < t->n_switches; i++)
    CHECK(strcmp(t->sw[i].name, order[i]) == 0, "sw[%d] = %s, want %s", i, t->sw[i].name, order[i]);
  int leaf2 = dpt_tree_find_switch(t, "leaf2"), leaf3 = dpt_tree_find_switch(t, "leaf3"),
      leaf4 = dpt_tree_find_switch(t, "leaf4"), pod1 = dpt_tree_find_switch(t, "pod1"),
      edge = dpt_tree_find_switch(t, "edge");
  CHECK(t->hosts[dpt_tree_find_host(t, "gpu010")].sw == leaf2, "gpu010 under leaf2");
  CHECK(t->hosts[dpt_tree_find_host(t, "gpu013")].sw == leaf3, "gpu013 under leaf3 (continued line)");
  CHECK(t->hosts[dpt_tree_find_host(t, "gpu016")].sw == leaf4, "gpu016 under quoted leaf4");
  CHECK(t->hosts[dpt_tree_find_host(t, "login2")].sw == edge, "login2 under edge");
  CHECK(t->sw[leaf2].parent == pod1 && t->sw[pod1].parent == 0 && t->sw[edge].parent == 0, "parents");
  CHECK(t->sw[leaf2].depth == 2 && t->sw[edge].depth == 1, "depths");
  /* LinkSpeed: a link runs at the lower LinkSpeed of its two ends */
  CHECK(t->sw[0].link_gbps == 0 && t->sw[0].link_speed == 200, "root: no uplink, LinkSpeed 200");
  CHECK(t->sw[pod1].link_gbps == 100, "pod1 uplink min(100,200) = %g", t->sw[pod1].link_gbps);
  CHECK(t->sw[leaf3].link_gbps == 56, "leaf3 uplink min(56,100) = %g", t->sw[leaf3].link_gbps);
  CHECK(t->sw[leaf4].link_gbps == 100 && t->sw[leaf4].link_speed == 0, "leaf4: parent's 100");
  CHECK(t->sw[edge].link_gbps == 25, "edge uplink %g", t->sw[edge].link_gbps);
  CHECK(t->hosts[dpt_tree_find_host(t, "gpu011")].link_gbps == 56, "host link = leaf LinkSpeed");
  CHECK(t->hosts[dpt_tree_find_host(t, "gpu015")].link_gbps == 0, "host link unknown without LinkSpeed");
  CHECK(t->hosts[0].line == 9 && strcmp(t->hosts[0].name, "gpu001") == 0, "hosts in input order, line %d",
        t->hosts[0].line);
  CHECK(t->sw[leaf3].line == 11, "continued entry reported at its first line: %d", t->sw[leaf3].line);
  CHECK(dpt_tree_find_host(t, "gpu017") == -1 && dpt_tree_find_host(t, "core") == -1, "absent names");
  json_t *j = dpt_tree_to_json(t);
  CHECK(j && strcmp(json_string_value(json_object_get(j, "schema")), "dpt.tree/1") == 0, "schema");
  CHECK(json_array_size(json_object_get(j, "switches")) == 8 && json_array_size(json_object_get(j, "hosts")) == 18,
        "json sizes");
  json_decref(j);
  dpt_tree_destroy(t);
}

static void test_syntax(void)
{
  struct dpt_err err = {0};
  /* escapes, comments, CRLF, tabs, continuation with comments */
  const char *txt = "# header\r\n"
                    "\tSwitchName=top\tSwitches=a,b   # comment\r\n"
                    "SwitchName=a Nodes=n[1-2],n\\#3 \\   # continued, then a comment\n"
                    "   LinkSpeed=10\n"
                    "\n"
                    "SWITCHNAME=b NODES=m[01-02] LINKSPEED=0\n";
  struct dpt_tree *t = parse(txt, &err);
  CHECK(t != NULL, "parse: %s", err.msg);
  if (!t)
    return;
  CHECK(t->n_hosts == 5 && dpt_tree_find_host(t, "n#3") >= 0, "escaped '#' is part of the name");
  CHECK(t->sw[dpt_tree_find_switch(t, "a")].link_speed == 10, "LinkSpeed on the continued line");
  CHECK(t->sw[dpt_tree_find_switch(t, "b")].line == 6, "line numbers count physical lines");
  dpt_tree_destroy(t);

  /* several top-level switches: a virtual root */
  t = parse("SwitchName=s2 Nodes=b[1-3]\nSwitchName=s1 Nodes=a[1-3] LinkSpeed=40\n", &err);
  CHECK(t != NULL, "forest: %s", err.msg);
  if (t) {
    CHECK(t->n_switches == 3 && t->sw[0].is_virtual && strcmp(t->sw[0].name, "virtual-root") == 0,
          "virtual root: %s", t->sw[0].name);
    CHECK(strcmp(t->sw[1].name, "s1") == 0 && t->sw[1].link_gbps == 40, "s1 keeps its LinkSpeed on the virtual uplink");
    CHECK(!tree_invariant_violation(t), "%s", tree_invariant_violation(t));
    dpt_tree_destroy(t);
  }
  t = parse("SwitchName=virtual-root Nodes=a1\nSwitchName=x Nodes=a2\n", &err);
  CHECK(t && strcmp(t->sw[0].name, "virtual-root-2") == 0, "virtual name does not collide: %s",
        t ? t->sw[0].name : err.msg);
  dpt_tree_destroy(t);
}

struct bad {
  const char *text;
  int line;          /* expected line in "t.conf:LINE:", 0 = none */
  const char *frag;  /* expected message fragment */
};

static void test_errors(void)
{
  static const struct bad cases[] = {
      {"", 0, "no SwitchName= lines"},
      {"# only comments\n\n   \n", 0, "no SwitchName= lines"},
      {"SwitchName=s1 Nodes=n1 Speed=5\n", 1, "unknown key 'Speed'"},
      {"\nSwitchName=s1 Nodes\n", 2, "expected '='"},
      {"SwitchName=s1 =n1\n", 1, "expected Key=Value"},
      {"Nodes=n1 SwitchName=s1\n", 1, "must start with SwitchName="},
      {"SwitchName=s1 Nodes=n[3-1]\n", 1, "libslurm rejects"},
      {"SwitchName=s1 Nodes=n[1-3\n", 1, "never closed"},
      {"SwitchName=s1 Nodes=n1]\n", 1, "']' without '['"},
      {"SwitchName=s0 Switches=s[1-2]\nSwitchName=s1 Nodes=n[1-4]\nSwitchName=s2 Nodes=n[4-6]\n", 3,
       "node 'n4' is under two switches: 's1' (line 2) and 's2' (line 3)"},
      {"SwitchName=s1 Nodes=n[1-3],n2\n", 1, "listed twice in Nodes="},
      {"SwitchName=s1 Nodes=n1\nSwitchName=s2 Nodes=n2\nSwitchName=s1 Nodes=n3\n", 3,
       "switch 's1' is defined twice (lines 1 and 3)"},
      {"SwitchName=a Switches=s1\nSwitchName=b Switches=s1\nSwitchName=s1 Nodes=n1\n", 2,
       "switch 's1' has two parents: 'a' (line 1) and 'b' (line 2)"},
      {"SwitchName=a Switches=s1,s1\nSwitchName=s1 Nodes=n1\n", 1, "twice in Switches="},
      {"SwitchName=top Switches=s[1-3]\nSwitchName=s1 Nodes=n1\nSwitchName=s2 Nodes=n2\n", 1,
       "names unknown switch 's3'"},
      {"SwitchName=a Switches=b\nSwitchName=b Switches=c\nSwitchName=c Switches=a\nSwitchName=d Nodes=n1\n", 1,
       "cycle in Switches= (child -> parent): a (line 1) -> c (line 3) -> b (line 2) -> a"},
      {"SwitchName=a Switches=a\n", 1, "lists itself"},
      {"SwitchName=s1 Nodes=n1 Switches=s2\nSwitchName=s2 Nodes=n2\n", 1, "both Nodes= and Switches="},
      {"SwitchName=s1 LinkSpeed=10\n", 1, "neither Nodes= nor Switches="},
      {"SwitchName=s1 Nodes=n1 LinkSpeed=fast\n", 1, "LinkSpeed 'fast'"},
      {"SwitchName=s1 Nodes=n1 LinkSpeed=-5\n", 1, "LinkSpeed '-5'"},
      {"SwitchName=s1 Nodes=n1 LinkSpeed=1 LinkSpeed=2\n", 1, "LinkSpeed= given twice"},
      {"SwitchName=s1 Nodes=n1 SwitchName=s2\n", 1, "one switch per line"},
      {"SwitchName=s1 \\\n  Nodes=\"n1\n", 1, "unterminated"},
      {"SwitchName=s[1-2] Nodes=n1\n", 1, "is a hostlist"},
      {"SwitchName=s1 Nodes=\"\"\n", 1, "Nodes= is empty"},
      {"SwitchName=s1 Nodes+=n1\n", 1, "'Nodes+=' is not valid"},
      {"Include /etc/slurm/more.conf\n", 1, "Include"},
      {"SwitchName=s1 Nodes=n1\nSwitchName=0123456789012345678901234567890123456789012345678901234567890123 Nodes=n2\n",
       2, "longer than 63"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct dpt_err err = {0};
    struct dpt_tree *t = parse(cases[i].text, &err);
    char prefix[32];
    CHECK(t == NULL, "case %zu accepted: %s", i, cases[i].text);
    dpt_tree_destroy(t);
    CHECK(err.code == DPT_E_INPUT, "case %zu: code %d", i, err.code);
    CHECK(strstr(err.msg, cases[i].frag) != NULL, "case %zu: message '%s' lacks '%s'", i, err.msg, cases[i].frag);
    if (cases[i].line)
      snprintf(prefix, sizeof prefix, "t.conf:%d: ", cases[i].line);
    else
      snprintf(prefix, sizeof prefix, "t.conf: ");
    CHECK(strncmp(err.msg, prefix, strlen(prefix)) == 0, "case %zu: message '%s' does not start with '%s'", i,
          err.msg, prefix);
  }
  /* a NUL byte (binary input) */
  {
    static const char bin[] = "SwitchName=s1 Nodes=n1\nSwitch\0Name=s2\n";
    struct dpt_err err = {0};
    struct dpt_tree *t = NULL;
    CHECK(dpt_tree_parse_topology_conf(&t, bin, sizeof bin - 1, "t.conf", &err) == DPT_E_INPUT &&
              strstr(err.msg, "t.conf:2: NUL byte"),
          "NUL: %s", err.msg);
  }
  /* a missing file */
  {
    struct dpt_err err = {0};
    struct dpt_tree *t = NULL;
    CHECK(dpt_tree_load_topology_conf(&t, "/nonexistent/topology.conf", &err) == DPT_E_INPUT &&
              strstr(err.msg, "/nonexistent/topology.conf") && strstr(err.msg, "No such file"),
          "missing file: %s", err.msg);
  }
}

int main(int argc, char **argv)
{
  if (argc < 2) {
    fprintf(stderr, "usage: test_tree_conf DATA_DIR\n");
    return 2;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/cluster.conf", argv[1]);
  test_cluster_file(path);
  test_syntax();
  test_errors();
  if (failures)
    fprintf(stderr, "test_tree_conf: %d checks failed\n", failures);
  else
    printf("test_tree_conf: all checks passed\n");
  return failures ? 1 : 0;
}
