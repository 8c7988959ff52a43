/* test_tree_core — builder invariants, O(1) name lookup on large trees,
 * libslurm hostlist expansion and its errors, flat trees, JSON. */
#include "tree_check.h"

static void test_builder(void)
{
  struct dpt_err err = {0};
  struct dpt_tree *t = NULL;
  char name[64];

  /* 3 levels, 20000 hosts; siblings added in reverse name order */
  CHECK(dpt_tree_create(&t, "generated", &err) == 0, "%s", err.msg);
  int spine = dpt_tree_add_switch(t, "spine", -1, &err);
  int pods[10], leaves[100];
  for (int p = 9; p >= 0; p--) {
    snprintf(name, sizeof name, "pod%d", p);
    pods[p] = dpt_tree_add_switch(t, name, spine, &err);
  }
  for (int l = 0; l < 100; l++) {
    snprintf(name, sizeof name, "leaf%d", l);
    leaves[l] = dpt_tree_add_switch(t, name, pods[l % 10], &err);
  }
  for (int h = 0; h < 20000; h++) {
    snprintf(name, sizeof name, "node%05d", h);
    CHECK(dpt_tree_add_host(t, name, leaves[h % 100], &err) == h, "add host %d: %s", h, err.msg);
  }
  CHECK(dpt_tree_add_host(t, "node00007", leaves[0], &err) == DPT_E_INPUT && strstr(err.msg, "added twice"),
        "duplicate host: %s", err.msg);
  CHECK(dpt_tree_add_switch(t, "pod3", spine, &err) == DPT_E_INPUT, "duplicate switch");
  CHECK(dpt_tree_add_switch(t, "x", 5000, &err) == DPT_E_INPUT && strstr(err.msg, "out of range"), "bad parent");
  CHECK(dpt_tree_add_host(t, "has space", leaves[0], &err) == DPT_E_INPUT, "blank in host name");
  CHECK(dpt_tree_finish(t, &err) == 0, "finish: %s", err.msg);
  CHECK(!tree_invariant_violation(t), "%s", tree_invariant_violation(t));
  CHECK(strcmp(t->sw[1].name, "pod0") == 0 && strcmp(t->sw[2].name, "leaf0") == 0 &&
            strcmp(t->sw[3].name, "leaf10") == 0 && strcmp(t->sw[12].name, "pod1") == 0,
        "preorder, natural sibling order: %s %s %s %s", t->sw[1].name, t->sw[2].name, t->sw[3].name, t->sw[12].name);
  for (int h = 0; h < 20000; h++) {
    snprintf(name, sizeof name, "node%05d", h);
    CHECK(dpt_tree_find_host(t, name) == h, "find %s", name);
    CHECK(strcmp(t->sw[t->hosts[h].sw].name + 4, name + 4) != 0 || 1, "noop");
  }
  CHECK(dpt_tree_find_host(t, "node20000") == -1 && dpt_tree_find_host(t, "") == -1, "absent");
  CHECK(t->hosts[123].sw == dpt_tree_find_switch(t, "leaf23"), "host keeps its leaf after reordering");

  /* a hand-made struct without index: linear lookups still work */
  struct dpt_tree copy = *t;
  copy.index = NULL;
  CHECK(dpt_tree_find_host(&copy, "node19999") == 19999 && dpt_tree_find_switch(&copy, "pod7") >= 0, "linear");
  dpt_tree_destroy(t);

  /* finish() errors */
  t = NULL;
  dpt_tree_create(&t, "bad", &err);
  int r = dpt_tree_add_switch(t, "r", -1, &err);
  int a = dpt_tree_add_switch(t, "a", r, &err);
  dpt_tree_add_host(t, "h1", r, &err);
  dpt_tree_add_host(t, "h2", a, &err);
  CHECK(dpt_tree_finish(t, &err) == DPT_E_INPUT && strstr(err.msg, "both hosts"), "hosts + children: %s", err.msg);
  dpt_tree_destroy(t);
  dpt_tree_create(&t, "bad", &err);
  r = dpt_tree_add_switch(t, "r", -1, &err);
  dpt_tree_add_switch(t, "empty", r, &err);
  a = dpt_tree_add_switch(t, "a", r, &err);
  dpt_tree_add_host(t, "h1", a, &err);
  CHECK(dpt_tree_finish(t, &err) == DPT_E_INPUT && strstr(err.msg, "'empty' has no hosts"), "empty: %s", err.msg);
  dpt_tree_destroy(t);
  dpt_tree_create(&t, "bad", &err);
  dpt_tree_add_switch(t, "r", -1, &err);
  CHECK(dpt_tree_finish(t, &err) == DPT_E_INPUT && strstr(err.msg, "no hosts"), "no hosts: %s", err.msg);
  dpt_tree_destroy(t);
}

static void test_hostlist(void)
{
  struct dpt_err err = {0};
  char **v = NULL;
  int n = -1;
  CHECK(dpt_tree_hostlist_expand("n[1-3,7],m2,x[01-02]", &v, &n, &err) == 0 && n == 7, "expand: %s", err.msg);
  if (n == 7) {
    const char *want[] = {"n1", "n2", "n3", "n7", "m2", "x01", "x02"};
    for (int i = 0; i < 7; i++)
      CHECK(strcmp(v[i], want[i]) == 0, "[%d] %s != %s", i, v[i], want[i]);
  }
  dpt_tree_hostlist_free(v, n);
  CHECK(dpt_tree_hostlist_expand("", &v, &n, &err) == 0 && n == 0, "empty list");
  dpt_tree_hostlist_free(v, n);
  const char *bad[][2] = {{"n[3-1]", "libslurm rejects"}, {"n[1-", "never closed"}, {"n1]", "without '['"},
                          {"n[1-[2]]", "nested"},         {"n[a-b]", "libslurm rejects"},
                          {"n[1-100000]", "libslurm rejects"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    v = NULL;
    CHECK(dpt_tree_hostlist_expand(bad[i][0], &v, &n, &err) == DPT_E_INPUT && !v && strstr(err.msg, bad[i][1]) &&
              strstr(err.msg, bad[i][0]),
          "'%s': %s", bad[i][0], err.msg);
  }
}

static void test_flat_json(void)
{
  struct dpt_err err = {0};
  struct dpt_tree *t = NULL;
  const char *hosts[] = {"b1", "a1", "c1"};
  CHECK(dpt_tree_flat(&t, hosts, 3, &err) == 0 && t, "flat: %s", err.msg);
  if (t) {
    CHECK(t->n_switches == 1 && t->sw[0].is_virtual && t->n_hosts == 3 && t->hosts[0].sw == 0 &&
              strcmp(t->hosts[0].name, "b1") == 0 && strcmp(t->source, "flat") == 0,
          "flat tree");
    json_t *j = dpt_tree_to_json(t);
    char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    CHECK(s && strcmp(s, "{\"schema\":\"dpt.tree/1\",\"source\":\"flat\",\"switches\":[{\"name\":\"flat\","
                         "\"parent\":-1,\"depth\":0,\"link_gbps\":0.0,\"link_speed\":0.0,\"uplinks\":0,"
                         "\"virtual\":true}],\"hosts\":[{\"name\":\"b1\",\"switch\":0,\"link_gbps\":0.0},"
                         "{\"name\":\"a1\",\"switch\":0,\"link_gbps\":0.0},{\"name\":\"c1\",\"switch\":0,"
                         "\"link_gbps\":0.0}]}") == 0,
          "json: %s", s);
    free(s);
    json_decref(j);
    dpt_tree_destroy(t);
  }
  const char *dup[] = {"a", "b", "a"};
  t = NULL;
  CHECK(dpt_tree_flat(&t, dup, 3, &err) == DPT_E_INPUT && !t && strstr(err.msg, "'a' is listed twice"), "dup: %s",
        err.msg);
  CHECK(dpt_tree_flat(&t, dup, 0, &err) == DPT_E_INPUT, "no hosts");
}

int main(void)
{
  test_builder();
  test_hostlist();
  test_flat_json();
  if (failures)
    fprintf(stderr, "test_tree_core: %d checks failed\n", failures);
  else
    printf("test_tree_core: all checks passed\n");
  return failures ? 1 : 0;
}
