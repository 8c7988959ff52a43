/* plan_testlib.c — see plan_testlib.h */
#include "plan_testlib.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int failures;

uint64_t pt_rand(uint64_t *state)
{
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

int pt_rand_int(uint64_t *state, int lo, int hi)
{
  return lo + (int)(pt_rand(state) % (uint64_t)(hi - lo + 1));
}

void pt_shuffle(uint64_t *state, const char **v, int n)
{
  for (int i = n - 1; i > 0; i--) {
    int j = pt_rand_int(state, 0, i);
    const char *t = v[i];
    v[i] = v[j];
    v[j] = t;
  }
}

static void *xrealloc(void *p, size_t n)
{
  void *q = realloc(p, n);
  if (!q) {
    fprintf(stderr, "out of memory\n");
    abort();
  }
  return q;
}

struct dpt_tree *pt_tree_new(const char *source)
{
  struct dpt_tree *t = calloc(1, sizeof *t);
  if (!t)
    abort();
  snprintf(t->source, sizeof t->source, "%s", source);
  return t;
}

int pt_tree_add_switch(struct dpt_tree *t, const char *name, int parent, double gbps)
{
  t->sw = xrealloc(t->sw, sizeof *t->sw * (size_t)(t->n_switches + 1));
  struct dpt_tree_switch *s = &t->sw[t->n_switches];
  memset(s, 0, sizeof *s);
  snprintf(s->name, sizeof s->name, "%s", name);
  s->parent = parent;
  s->depth = parent >= 0 ? t->sw[parent].depth + 1 : 0;
  s->link_gbps = gbps;
  return t->n_switches++;
}

int pt_tree_add_host(struct dpt_tree *t, const char *name, int sw, double gbps)
{
  t->hosts = xrealloc(t->hosts, sizeof *t->hosts * (size_t)(t->n_hosts + 1));
  struct dpt_tree_host *h = &t->hosts[t->n_hosts];
  memset(h, 0, sizeof *h);
  snprintf(h->name, sizeof h->name, "%s", name);
  h->sw = sw;
  h->link_gbps = gbps;
  return t->n_hosts++;
}

void pt_tree_free(struct dpt_tree *t)
{
  if (!t)
    return;
  free(t->sw);
  free(t->hosts);
  free(t);
}

static int *perm(uint64_t *rng, int n)
{
  int *p = malloc(sizeof *p * (size_t)(n ? n : 1));
  if (!p)
    abort();
  for (int i = 0; i < n; i++)
    p[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = pt_rand_int(rng, 0, i), x = p[i];
    p[i] = p[j];
    p[j] = x;
  }
  return p;
}

struct dpt_tree *pt_tree_permute(const struct dpt_tree *t, uint64_t seed)
{
  struct dpt_tree *u = pt_tree_new(t->source);
  int *ps = perm(&seed, t->n_switches), *ph = perm(&seed, t->n_hosts);
  u->n_switches = t->n_switches;
  u->n_hosts = t->n_hosts;
  u->sw = calloc((size_t)t->n_switches, sizeof *u->sw);
  u->hosts = calloc((size_t)(t->n_hosts ? t->n_hosts : 1), sizeof *u->hosts);
  if (!u->sw || !u->hosts)
    abort();
  for (int s = 0; s < t->n_switches; s++) {
    u->sw[ps[s]] = t->sw[s];
    u->sw[ps[s]].parent = t->sw[s].parent >= 0 ? ps[t->sw[s].parent] : -1;
  }
  for (int h = 0; h < t->n_hosts; h++) {
    u->hosts[ph[h]] = t->hosts[h];
    u->hosts[ph[h]].sw = ps[t->hosts[h].sw];
  }
  free(ps);
  free(ph);
  return u;
}

static void grow(struct dpt_tree *t, uint64_t *rng, int parent, int level, int levels)
{
  if (level == levels - 1) {
    int hosts = pt_rand_int(rng, 1, 20);
    for (int i = 0; i < hosts; i++)
      pt_tree_add_host(t, "?", parent, 0);
    return;
  }
  int fan = pt_rand_int(rng, 1, 4);
  if (pt_rand_int(rng, 0, 7) == 0) { /* hosts straight on an inner switch */
    int hosts = pt_rand_int(rng, 1, 3);
    for (int i = 0; i < hosts; i++)
      pt_tree_add_host(t, "?", parent, 0);
  }
  for (int i = 0; i < fan; i++) {
    int s = pt_tree_add_switch(t, "?", parent, 0);
    /* some branches stop early: leaves at several depths */
    int stop = pt_rand_int(rng, 0, 5) == 0 ? level + 1 : levels - 1;
    grow(t, rng, s, level + 1, stop + 1 > levels ? levels : stop + 1);
  }
}

struct dpt_tree *pt_tree_random(uint64_t *rng)
{
  struct dpt_tree *t = pt_tree_new("random");
  int levels = pt_rand_int(rng, 1, 4);
  int root = pt_tree_add_switch(t, "?", -1, 0);
  grow(t, rng, root, 0, levels);
  /* names in shuffled order, so that index order, name order and walk order differ */
  int *ps = perm(rng, t->n_switches), *ph = perm(rng, t->n_hosts);
  static const char *const prefix[] = {"h", "gpu", "h0"};
  int pre = pt_rand_int(rng, 0, 2);
  for (int s = 0; s < t->n_switches; s++)
    snprintf(t->sw[s].name, sizeof t->sw[s].name, "sw%d", ps[s]);
  for (int h = 0; h < t->n_hosts; h++)
    snprintf(t->hosts[h].name, sizeof t->hosts[h].name, "%s%d", prefix[pre], ph[h] + 1);
  free(ps);
  free(ph);
  if (pt_rand_int(rng, 0, 3) == 0) { /* some link speeds */
    for (int s = 1; s < t->n_switches; s++)
      t->sw[s].link_gbps = pt_rand_int(rng, 0, 1) ? 200 : 50;
    for (int h = 0; h < t->n_hosts; h++)
      t->hosts[h].link_gbps = pt_rand_int(rng, 0, 1) ? 100 : 0;
  }
  return t;
}

struct dpt_tree *pt_tree_mn1(void)
{
  struct dpt_tree *t = pt_tree_new("mn1");
  int core = pt_tree_add_switch(t, "core", -1, 0);
  char name[64];
  for (int l = 0; l < 8; l++) {
    snprintf(name, sizeof name, "leaf%d", l + 1);
    int s = pt_tree_add_switch(t, name, core, 0);
    for (int i = 0; i < 16; i++) {
      snprintf(name, sizeof name, "mn1-%03d", l * 16 + i + 1);
      pt_tree_add_host(t, name, s, 0);
    }
  }
  return t;
}

struct dpt_node *pt_node_plain(int n_gpus)
{
  struct dpt_node *n = calloc(1, sizeof *n);
  if (!n)
    abort();
  snprintf(n->source, sizeof n->source, "plain:%d", n_gpus);
  n->n_gpus = n_gpus;
  n->gpus = calloc((size_t)(n_gpus ? n_gpus : 1), sizeof *n->gpus);
  n->gpu_gpu = calloc((size_t)(n_gpus ? n_gpus * n_gpus : 1), sizeof *n->gpu_gpu);
  n->cpuset = hwloc_bitmap_alloc();
  for (int g = 0; g < n_gpus; g++) {
    n->gpus[g].index = g;
    snprintf(n->gpus[g].busid, sizeof n->gpus[g].busid, "0000:%02x:00.0", 0x10 + g);
    n->gpus[g].numa = -1;
    n->gpus[g].package = -1;
    n->gpus[g].cpuset = hwloc_bitmap_alloc();
    for (int h = 0; h < n_gpus; h++)
      n->gpu_gpu[g * n_gpus + h].cls = g == h ? DPT_PATH_X : DPT_PATH_UNKNOWN;
  }
  return n;
}

static struct dpt_node *mn1_machine(void)
{
  struct dpt_node *n = calloc(1, sizeof *n);
  if (!n)
    abort();
  snprintf(n->hostname, sizeof n->hostname, "mn1-node");
  snprintf(n->source, sizeof n->source, "pt_node_mn1");
  if (hwloc_topology_init(&n->topo) || hwloc_topology_set_synthetic(n->topo, "pack:2 core:10 pu:2") ||
      hwloc_topology_load(n->topo))
    abort();
  n->n_packages = 2;
  n->n_cores = 20;
  n->n_pus = 40;
  n->n_numa = 2;
  n->numa = calloc(2, sizeof *n->numa);
  for (int i = 0; i < 2; i++) {
    hwloc_obj_t pk = hwloc_get_obj_by_type(n->topo, HWLOC_OBJ_PACKAGE, (unsigned)i);
    n->numa[i].os_index = i;
    n->numa[i].package = i;
    n->numa[i].cpuset = hwloc_bitmap_dup(pk->cpuset);
  }
  n->cpuset = hwloc_bitmap_dup(hwloc_topology_get_topology_cpuset(n->topo));
  return n;
}

struct dpt_node *pt_node_cpu_only(void)
{
  struct dpt_node *n = mn1_machine();
  n->gpus = calloc(1, sizeof *n->gpus);
  n->gpu_gpu = calloc(1, sizeof *n->gpu_gpu);
  return n;
}

struct dpt_node *pt_node_mn1(unsigned hca_mask)
{
  struct dpt_node *n = mn1_machine();
  n->n_gpus = 8;
  n->gpus = calloc(8, sizeof *n->gpus);
  n->gpu_gpu = calloc(64, sizeof *n->gpu_gpu);
  for (int g = 0; g < 8; g++) {
    n->gpus[g].index = g;
    snprintf(n->gpus[g].osdev, sizeof n->gpus[g].osdev, "cuda%d", g);
    snprintf(n->gpus[g].busid, sizeof n->gpus[g].busid, "0000:%02x:00.0", 0x04 + 0x20 * (g / 2) + g % 2);
    snprintf(n->gpus[g].model, sizeof n->gpus[g].model, "Tesla P100-PCIE-16GB");
    n->gpus[g].numa = g / 4;
    n->gpus[g].package = g / 4;
    n->gpus[g].cpuset = hwloc_bitmap_dup(n->numa[g / 4].cpuset);
    for (int h = 0; h < 8; h++) {
      struct dpt_path *p = &n->gpu_gpu[g * 8 + h];
      p->cls = g == h ? DPT_PATH_X : g / 2 == h / 2 ? DPT_PATH_PIX : g / 4 == h / 4 ? DPT_PATH_NODE
                                                                                  : DPT_PATH_SYS;
    }
  }
  int sw_of[4];
  for (int s = 0; s < 4; s++)
    if (hca_mask & (1u << s))
      sw_of[n->n_hcas++] = s;
  n->hcas = calloc((size_t)(n->n_hcas ? n->n_hcas : 1), sizeof *n->hcas);
  n->gpu_hca = calloc((size_t)(8 * (n->n_hcas ? n->n_hcas : 1)), sizeof *n->gpu_hca);
  for (int h = 0; h < n->n_hcas; h++) {
    int s = sw_of[h];
    struct dpt_node_hca *c = &n->hcas[h];
    c->index = h;
    snprintf(c->name, sizeof c->name, "mlx5_%d", s);
    snprintf(c->kind, sizeof c->kind, "InfiniBand");
    snprintf(c->busid, sizeof c->busid, "0000:%02x:00.0", 0x08 + 0x20 * s);
    snprintf(c->netdev, sizeof c->netdev, "ib%d", s);
    snprintf(c->port_state, sizeof c->port_state, "ACTIVE");
    c->numa = s / 2;
    c->cpuset = hwloc_bitmap_dup(n->numa[s / 2].cpuset);
    for (int g = 0; g < 8; g++)
      n->gpu_hca[g * n->n_hcas + h].cls = g / 2 == s ? DPT_PATH_PIX : g / 4 == s / 2 ? DPT_PATH_NODE
                                                                                    : DPT_PATH_SYS;
  }
  return n;
}

int pt_plan(struct dpt_plan **out, const struct dpt_tree *t, const char *const *hosts, int n,
            const struct dpt_node *node, const struct dpt_plan_opts *o, struct dpt_err *err)
{
  const struct dpt_node **topos = malloc(sizeof *topos * (size_t)n);
  if (!topos)
    abort();
  for (int i = 0; i < n; i++)
    topos[i] = node;
  int rc = dpt_plan_compute(out, t, hosts, n, topos, o, err);
  free(topos);
  return rc;
}

/* ---------------------------------------------------------------- checker */

struct chk {
  int bad;
  char *why;
  size_t len;
};

static void fail(struct chk *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct chk *c, const char *fmt, ...)
{
  if (c->bad++ == 0 && c->why) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, c->len, fmt, ap);
    va_end(ap);
  }
}

static int tree_host(const struct dpt_tree *t, const char *name)
{
  for (int h = 0; h < t->n_hosts; h++)
    if (!strcmp(t->hosts[h].name, name))
      return h;
  return -1;
}

static int is_under(const struct dpt_tree *t, int s, int anc)
{
  for (; s >= 0; s = t->sw[s].parent)
    if (s == anc)
      return 1;
  return 0;
}

int pt_check_plan(const struct dpt_plan *p, const struct dpt_tree *t, const char *const *hosts,
                  int n, char *why, size_t len)
{
  struct chk c = {0, why, len};
  int *seen = calloc((size_t)n, sizeof *seen), *leaf = calloc((size_t)n, sizeof *leaf);
  int *up_s = calloc((size_t)t->n_switches, sizeof *up_s);
  int *down_s = calloc((size_t)t->n_switches, sizeof *down_s);
  int *up_h = calloc((size_t)n, sizeof *up_h), *down_h = calloc((size_t)n, sizeof *down_h);
  int next = 0;

  if (why && len)
    why[0] = '\0';
  if (!seen || !leaf || !up_s || !down_s || !up_h || !down_h)
    abort();
  if (p->n_nodes != n)
    fail(&c, "n_nodes %d != %d hosts", p->n_nodes, n);
  for (int k = 0; k < p->n_nodes && k < n; k++) {
    const struct dpt_plan_node *nd = &p->nodes[k];
    if (nd->host_index < 0 || nd->host_index >= n || seen[nd->host_index]++) {
      fail(&c, "node %d: host_index %d not a permutation", k, nd->host_index);
      continue;
    }
    if (strcmp(nd->host, hosts[nd->host_index]))
      fail(&c, "node %d: host %s != hosts[%d] %s", k, nd->host, nd->host_index,
           hosts[nd->host_index]);
    int th = tree_host(t, nd->host);
    leaf[k] = th >= 0 ? t->hosts[th].sw : -1;
    if (th < 0)
      fail(&c, "node %d: host %s not in tree", k, nd->host);
    else if (strcmp(nd->group, t->sw[leaf[k]].name))
      fail(&c, "node %d: group %s != leaf %s", k, nd->group, t->sw[leaf[k]].name);
    if (nd->first_rank != next)
      fail(&c, "node %d: first_rank %d, expected %d (blocks not contiguous)", k, nd->first_rank, next);
    for (int j = 0; j < nd->n_ranks; j++) {
      int r = nd->first_rank + j;
      if (r >= p->n_ranks) {
        fail(&c, "node %d: rank %d beyond n_ranks %d", k, r, p->n_ranks);
        break;
      }
      const struct dpt_plan_rank *rk = &p->ranks[r];
      if (rk->rank != r || rk->node != k || rk->local_rank != j)
        fail(&c, "rank %d: (rank %d node %d local %d), expected (%d %d %d)", r, rk->rank, rk->node,
             rk->local_rank, r, k, j);
      if (nd->n_gpus > 0 && (rk->gpu < 0 || rk->gpu >= nd->n_gpus))
        fail(&c, "rank %d: gpu %d out of [0,%d)", r, rk->gpu, nd->n_gpus);
      if (nd->n_ranks <= nd->n_gpus)
        for (int i = 0; i < j; i++)
          if (p->ranks[nd->first_rank + i].gpu == rk->gpu)
            fail(&c, "node %s: ranks %d and %d share GPU %d", nd->host, nd->first_rank + i, r, rk->gpu);
    }
    next += nd->n_ranks;
  }
  if (next != p->n_ranks)
    fail(&c, "ranks in node blocks %d != n_ranks %d", next, p->n_ranks);
  /* every subtree is one contiguous run */
  for (int s = 0; s < t->n_switches && !c.bad; s++) {
    int lo = -1, hi = -1, cnt = 0;
    for (int k = 0; k < n; k++)
      if (is_under(t, leaf[k], s)) {
        if (lo < 0)
          lo = k;
        hi = k;
        cnt++;
      }
    if (cnt && hi - lo + 1 != cnt)
      fail(&c, "subtree of switch %s: %d nodes spread over ring positions %d..%d", t->sw[s].name,
           cnt, lo, hi);
  }
  /* recount the planned ring's flows */
  int groups = 0, hops = 0;
  for (int k = 0; k < n && !c.bad; k++)
    if (k == 0 || leaf[k] != leaf[k - 1]) {
      groups++;
      for (int q = 0; q < k; q++)
        if (leaf[q] == leaf[k])
          fail(&c, "group %s visited twice", t->sw[leaf[k]].name);
    }
  for (int k = 0; k < n && n >= 2 && !c.bad; k++) {
    int b = (k + 1) % n, x, y, lca = -1;
    for (x = leaf[k]; x >= 0 && lca < 0; x = t->sw[x].parent)
      if (is_under(t, leaf[b], x))
        lca = x;
    up_h[k]++;
    down_h[b]++;
    for (x = leaf[k]; x != lca; x = t->sw[x].parent)
      up_s[x]++;
    for (y = leaf[b]; y != lca; y = t->sw[y].parent)
      down_s[y]++;
    if (leaf[k] != leaf[b])
      hops++;
  }
  if (!c.bad && p->n_alts >= 1) {
    const struct dpt_plan_alt *a = &p->alts[0];
    int total = 0, listed = 0;
    for (int k = 0; k < n; k++)
      total += up_h[k] + down_h[k];
    for (int s = 0; s < t->n_switches; s++) {
      total += up_s[s] + down_s[s];
      if (up_s[s] > 1 || down_s[s] > 1)
        fail(&c, "switch %s: %d up / %d down flows", t->sw[s].name, up_s[s], down_s[s]);
    }
    for (int k = 0; k < n; k++)
      if (up_h[k] > 1 || down_h[k] > 1)
        fail(&c, "host %s: %d up / %d down flows", p->nodes[k].host, up_h[k], down_h[k]);
    for (int i = 0; i < a->n_links; i++) {
      const struct dpt_plan_link *l = &a->links[i];
      int want = -1;
      listed += l->flows;
      for (int k = 0; k < n; k++) {
        if (!strcmp(l->from, p->nodes[k].host))
          want = up_h[k];
        else if (!strcmp(l->to, p->nodes[k].host))
          want = down_h[k];
      }
      for (int s = 0; s < t->n_switches && want < 0; s++) {
        int par = t->sw[s].parent;
        if (par < 0)
          continue;
        if (!strcmp(l->from, t->sw[s].name) && !strcmp(l->to, t->sw[par].name))
          want = up_s[s];
        else if (!strcmp(l->to, t->sw[s].name) && !strcmp(l->from, t->sw[par].name))
          want = down_s[s];
      }
      if (want != l->flows)
        fail(&c, "link %s -> %s: planner says %d flows, recount %d", l->from, l->to, l->flows, want);
    }
    if (listed != total)
      fail(&c, "planner lists %d flows in all, recount %d", listed, total);
    if (a->inter_group_hops != hops || hops != (groups > 1 ? groups : 0))
      fail(&c, "inter-group hops %d, recount %d, groups %d", a->inter_group_hops, hops, groups);
    if (a->busiest_flows != (n >= 2 ? 1 : 0))
      fail(&c, "planned busiest_flows %d", a->busiest_flows);
    if (strcmp(a->name, "planned"))
      fail(&c, "alts[0] is '%s'", a->name);
    for (int k = 0; k < n; k++)
      if (a->node_order[k] != p->nodes[k].host_index)
        fail(&c, "planned node_order[%d] %d != nodes[%d].host_index %d", k, a->node_order[k], k,
             p->nodes[k].host_index);
  }
  if (p->n_alts >= 2)
    for (int k = 0; k < n; k++)
      if (p->alts[1].node_order[k] != k)
        fail(&c, "slurm-order node_order[%d] = %d", k, p->alts[1].node_order[k]);
  free(seen);
  free(leaf);
  free(up_s);
  free(down_s);
  free(up_h);
  free(down_h);
  return c.bad;
}
