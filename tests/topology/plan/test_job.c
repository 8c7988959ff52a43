/* test_job.c — topology/dpt_job: a job description into the planner's inputs,
 * and the one oversubscription rule.
 *
 *   test_job DATA_DIR MN1_XML NODE_2CORE_XML NODE_2CORE_1GPU_XML WORK_DIR
 *
 * - Every tree source gives the planner the tree its loader gives, and the
 *   cluster of data/cluster.conf planned from topology.conf, from the address
 *   list file, from SLURM_TOPOLOGY_ADDR strings (one per rank, hosts repeated)
 *   and from a tree the caller built has one digest; a flat job has the flat
 *   tree's.  dpt_job_plan() == dpt_plan_compute() on dpt_job_inputs().
 * - Every node source: one XML, a directory of per-host XMLs (the same file
 *   copied: the same digest; another node for one host: its own GPUs),
 *   HWLOC_XMLFILE through LOCAL, a GPU count, a node the caller loaded.
 * - The rule: more ranks than GPUs, more ranks than cores on a node without
 *   GPUs, more than ranks-per-gpu per GPU are refused (DPT_E_INPUT) with a
 *   message naming the host, what would be shared and --oversubscribe; with
 *   oversubscribe the plan shares and the note says what; without sharing the
 *   note is empty and nothing is refused (8 ranks on the 8-GPU node).
 *   dpt_job_sharing() agrees with the plans' GPUs and cpusets.
 * - dpt_job_from_env reads DPT_PLAN_XML / DPT_PLAN_GPUS / DPT_PLAN_THREADS /
 *   DPT_FP16 / DPT_OVERSUBSCRIBE and refuses bad values naming the variable.
 * - Errors carry the caller's names of its inputs (hosts_what, tree_what,
 *   node_what). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_check.h"
#include "dpt_job.h"

static const char *g_data, *g_mn1, *g_cpu2, *g_gpu1, *g_work;

/* Plan job; on success return the digest (static buffer) and the note, else "" and the error. */
static const char *plan_of(const struct dpt_job *job, char *note, size_t note_len, struct dpt_err *e,
                           struct dpt_plan **keep)
{
  static char d[17];
  struct dpt_plan *p = NULL;
  dpt_err_clear(e);
  d[0] = '\0';
  if (dpt_job_plan(&p, job, note, note_len, e) == 0) {
    snprintf(d, sizeof d, "%s", p->digest);
    CHECK(e->code == 0, "success with an error set: %s", e->msg);
  } else {
    CHECK(p == NULL, "a refused job left a plan");
  }
  if (keep)
    *keep = p;
  else
    dpt_plan_destroy(p);
  return d;
}

static void path(char *buf, size_t len, const char *dir, const char *name)
{
  snprintf(buf, len, "%s/%s", dir, name);
}

static void test_tree_sources(void)
{
  char conf[4096], addr[4096], note[512], d_conf[17], d_addr[17];
  struct dpt_job j;
  struct dpt_err e;
  struct dpt_job_inputs in;
  struct dpt_plan *direct = NULL, *via = NULL;

  path(conf, sizeof conf, g_data, "cluster.conf");
  path(addr, sizeof addr, g_data, "cluster.addr");
  dpt_job_init(&j);
  j.hostlist = "node[01-16]";
  j.node_source = DPT_JOB_NODE_GPUS;
  j.gpus_per_node = 4;
  j.tree_source = DPT_JOB_TREE_TOPOLOGY_CONF;
  j.tree_path = conf;
  snprintf(d_conf, sizeof d_conf, "%s", plan_of(&j, note, sizeof note, &e, NULL));
  CHECK(d_conf[0], "topology.conf: %s", e.msg);
  CHECK(!note[0], "a note without oversubscription: %s", note);
  j.tree_source = DPT_JOB_TREE_ADDR_LIST;
  j.tree_path = addr;
  snprintf(d_addr, sizeof d_addr, "%s", plan_of(&j, note, sizeof note, &e, NULL));
  CHECK(!strcmp(d_conf, d_addr), "topology.conf %s vs addr list %s (%s)", d_conf, d_addr, e.msg);

  /* SLURM_TOPOLOGY_ADDR strings of 2 ranks per host, in rank order (hosts repeat) */
  {
    const char *hosts[16], *addrs[32], *pats[32];
    char hb[16][16], ab[16][64];
    const char *leaf[] = {"pod1.leaf1", "pod1.leaf2", "pod2.leaf3", "pod2.leaf4"};
    for (int i = 0; i < 16; i++) {
      snprintf(hb[i], sizeof hb[i], "node%02d", i + 1);
      hosts[i] = hb[i];
      snprintf(ab[i], sizeof ab[i], "spine.%s.%s", leaf[i % 4], hb[i]);
      addrs[2 * i] = addrs[2 * i + 1] = ab[i];
      pats[2 * i] = pats[2 * i + 1] = "switch.switch.switch.node";
    }
    /* as cluster.conf: node01,05,... on leaf1, node02,06,... on leaf2, node03,... leaf3, node04,... leaf4 */
    dpt_job_init(&j);
    j.hosts = hosts;
    j.n_hosts = 16;
    j.node_source = DPT_JOB_NODE_GPUS;
    j.gpus_per_node = 4;
    j.tree_source = DPT_JOB_TREE_ADDRS;
    j.addrs = addrs;
    j.patterns = pats;
    j.n_addrs = 32;
    const char *d = plan_of(&j, NULL, 0, &e, NULL);
    CHECK(!strcmp(d, d_conf), "ADDRS strings %s vs topology.conf %s (%s)", d, d_conf, e.msg);

    /* a tree the caller built (GIVEN): the one topology.conf gives */
    struct dpt_tree *t = NULL;
    CHECK(dpt_tree_load_topology_conf(&t, conf, &e) == 0, "%s", e.msg);
    j.tree_source = DPT_JOB_TREE_GIVEN;
    j.tree = t;
    d = plan_of(&j, NULL, 0, &e, NULL);
    CHECK(!strcmp(d, d_conf), "GIVEN tree %s vs topology.conf %s (%s)", d, d_conf, e.msg);

    /* dpt_job_plan is dpt_plan_compute on dpt_job_inputs */
    CHECK(dpt_job_inputs(&in, &j, &e) == 0 && in.n_hosts == 16 && in.tree == t && in.topos[0] == in.topos[15] &&
              in.topos[0]->n_gpus == 4 && in.opts.ranks_per_node == 0 && !in.opts.allow_oversubscribe,
          "inputs: %d hosts, %s", in.n_hosts, e.msg);
    CHECK(dpt_plan_compute(&direct, in.tree, (const char *const *)in.hosts, in.n_hosts, in.topos, &in.opts, &e) == 0,
          "%s", e.msg);
    plan_of(&j, NULL, 0, &e, &via);
    CHECK(direct && via && !strcmp(direct->digest, via->digest), "dpt_plan_compute %s vs dpt_job_plan %s",
          direct ? direct->digest : "-", via ? via->digest : "-");
    dpt_job_inputs_free(&in);
    dpt_job_inputs_free(&in); /* twice: safe */
    dpt_plan_destroy(direct);
    dpt_plan_destroy(via);
    dpt_tree_destroy(t);
  }

  /* flat: every host under one switch */
  dpt_job_init(&j);
  j.hostlist = "a,b,c";
  j.node_source = DPT_JOB_NODE_GPUS;
  j.gpus_per_node = 2;
  CHECK(dpt_job_inputs(&in, &j, &e) == 0 && in.tree && !strcmp(in.tree->source, "flat") && in.n_hosts == 3 &&
            !strcmp(in.hosts[2], "c"),
        "flat: %s", e.msg);
  dpt_job_inputs_free(&in);
}

static void test_node_sources(void)
{
  char dir[1024], cmd[16384], d_xml[17];
  struct dpt_job j;
  struct dpt_err e;
  struct dpt_node *node = NULL;
  const char *d;

  dpt_job_init(&j);
  j.hostlist = "mn[001-003]";
  j.node_source = DPT_JOB_NODE_XML;
  j.node_path = g_mn1;
  snprintf(d_xml, sizeof d_xml, "%s", plan_of(&j, NULL, 0, &e, NULL));
  CHECK(d_xml[0], "XML: %s", e.msg);

  /* LOCAL with HWLOC_XMLFILE: that file */
  setenv("HWLOC_XMLFILE", g_mn1, 1);
  j.node_source = DPT_JOB_NODE_LOCAL;
  d = plan_of(&j, NULL, 0, &e, NULL);
  CHECK(!strcmp(d, d_xml), "LOCAL via HWLOC_XMLFILE %s vs XML %s (%s)", d, d_xml, e.msg);
  unsetenv("HWLOC_XMLFILE");

  /* GIVEN: the caller's node */
  CHECK(dpt_node_load(&node, g_mn1, &e) == 0, "%s", e.msg);
  j.node_source = DPT_JOB_NODE_GIVEN;
  j.node = node;
  d = plan_of(&j, NULL, 0, &e, NULL);
  CHECK(!strcmp(d, d_xml), "GIVEN %s vs XML %s (%s)", d, d_xml, e.msg);
  dpt_node_destroy(node);

  /* XML_DIR: the same file per host, then one host with the 1-GPU node */
  snprintf(dir, sizeof dir, "%.900s/job-xml-dir", g_work);
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && for h in mn001 mn002 mn003; do cp '%s' '%s'/$h.xml; done",
           dir, dir, g_mn1, dir);
  CHECK(system(cmd) == 0, "%s", cmd);
  j.node_source = DPT_JOB_NODE_XML_DIR;
  j.node_path = dir;
  d = plan_of(&j, NULL, 0, &e, NULL);
  CHECK(!strcmp(d, d_xml), "XML_DIR of copies %s vs XML %s (%s)", d, d_xml, e.msg);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s/mn002.xml'", g_gpu1, dir);
  CHECK(system(cmd) == 0, "%s", cmd);
  {
    struct dpt_plan *p = NULL;
    plan_of(&j, NULL, 0, &e, &p);
    CHECK(p && p->n_ranks == 17 && p->nodes[1].n_gpus == 1, "per-host XMLs: %d ranks (%s)", p ? p->n_ranks : -1,
          e.msg);
    dpt_plan_destroy(p);
  }
  snprintf(cmd, sizeof cmd, "rm -f '%s/mn003.xml'", dir);
  CHECK(system(cmd) == 0, "%s", cmd);
  j.node_what = "--node-xml-dir DIR";
  plan_of(&j, NULL, 0, &e, NULL);
  CHECK(e.code == DPT_E_INPUT && strstr(e.msg, "--node-xml-dir DIR: host mn003: ") && strstr(e.msg, "mn003.xml"),
        "missing per-host XML: %s", e.msg);

  /* GPUS: a node known by its GPU count */
  dpt_job_init(&j);
  j.hostlist = "n1";
  j.node_source = DPT_JOB_NODE_GPUS;
  j.gpus_per_node = 3;
  struct dpt_plan *p = NULL;
  plan_of(&j, NULL, 0, &e, &p);
  CHECK(p && p->n_ranks == 3 && !p->ranks[0].cpuset[0], "GPU count: %s", e.msg);
  dpt_plan_destroy(p);

  /* dpt_job_load_node: what the bootstrap loads for itself */
  j.node_source = DPT_JOB_NODE_XML;
  j.node_path = g_cpu2;
  node = NULL;
  CHECK(dpt_job_load_node(&j, "x", &node, &e) == 0 && node && node->n_cores == 2 && node->n_gpus == 0, "%s",
        e.msg);
  dpt_node_destroy(node);
}

/* refused: DPT_E_INPUT, every want[] in the message */
static void refused(const struct dpt_job *j, const char *what, const char *const *want)
{
  struct dpt_err e;
  char note[512] = "x";
  const char *d = plan_of(j, note, sizeof note, &e, NULL);
  CHECK(!d[0] && e.code == DPT_E_INPUT, "%s: not refused (digest %s)", what, d);
  CHECK(!note[0], "%s: a refused job left a note: %s", what, note);
  for (int i = 0; want[i]; i++)
    CHECK(strstr(e.msg, want[i]) != NULL, "%s: message lacks '%s': %s", what, want[i], e.msg);
}

/* A job of `ranks` ranks on host, the node from xml. */
static void xml_job(struct dpt_job *j, const char *host, const char *xml, int ranks)
{
  dpt_job_init(j);
  j->hostlist = host;
  j->node_source = DPT_JOB_NODE_XML;
  j->node_path = xml;
  j->ranks_per_node = ranks;
}

static void test_rule(void)
{
  struct dpt_job j;
  struct dpt_err e;
  struct dpt_plan *p = NULL;
  char note[512], what[512];

  /* more ranks than GPUs */
  dpt_job_init(&j);
  j.hostlist = "n[1-2]";
  j.node_source = DPT_JOB_NODE_GPUS;
  j.gpus_per_node = 2;
  j.ranks_per_node = 3;
  refused(&j, "3 ranks on 2 GPUs",
          (const char *const[]){"host 'n1': 3 ranks per node", "has 2 GPUs", "use at most 2 ranks per node",
                                "--oversubscribe", "ranks-per-gpu", "DPT_OVERSUBSCRIBE=1", NULL});
  j.oversubscribe = 1;
  plan_of(&j, note, sizeof note, &e, &p);
  CHECK(p && p->n_ranks == 6 && !strncmp(note, "oversubscribed as asked: host 'n", 32) && strstr(note, "share GPU"),
        "asked: %s / %s", note, e.msg);
  CHECK(p && dpt_job_sharing(p, what, sizeof what) == 2 && strstr(what, "3 ranks on 2 GPUs"), "sharing: %s", what);
  CHECK(p && p->opts.allow_oversubscribe == 1, "the plan does not say it allows oversubscription");
  dpt_plan_destroy(p);

  /* more ranks than cores on a node without GPUs */
  xml_job(&j, "vm", g_cpu2, 3);
  refused(&j, "3 CPU ranks on 2 cores",
          (const char *const[]){"host 'vm': 3 ranks on CPUs 0-1: ranks 0 and 1 share CPUs 0", "has 2 cores",
                                "use at most 2 ranks per node", "--oversubscribe", NULL});
  j.ranks_per_node = 2;
  plan_of(&j, note, sizeof note, &e, &p);
  CHECK(p && !note[0] && dpt_job_sharing(p, what, sizeof what) == 0 && !what[0] &&
            strcmp(p->ranks[0].cpuset, p->ranks[1].cpuset),
        "2 ranks on 2 cores: %s %s (%s)", note, what, e.msg);
  dpt_plan_destroy(p);
  j.ranks_per_node = 3;
  j.threads_per_rank = 1; /* fewer threads do not make disjoint cpusets */
  refused(&j, "3 CPU ranks, 1 thread each", (const char *const[]){"share CPUs", NULL});
  j.oversubscribe = 1;
  plan_of(&j, note, sizeof note, &e, &p);
  CHECK(p && strstr(note, "oversubscribed as asked: host 'vm': 3 ranks on CPUs 0-1"), "asked: %s (%s)", note, e.msg);
  dpt_plan_destroy(p);

  /* one GPU, two ranks */
  xml_job(&j, "g", g_gpu1, 2);
  refused(&j, "2 ranks on 1 GPU",
          (const char *const[]){"host 'g': 2 ranks per node", "has 1 GPU:", "use at most 1 rank per node",
                                "--oversubscribe", NULL});
  j.oversubscribe = 1;
  plan_of(&j, note, sizeof note, &e, &p);
  CHECK(p && p->ranks[0].gpu == 0 && p->ranks[1].gpu == 0 && strstr(note, "2 ranks on 1 GPU: ranks 0 and 1 share GPU 0"),
        "asked: %s (%s)", note, e.msg);
  dpt_plan_destroy(p);

  /* ranks-per-gpu: asks for oversubscription, up to K ranks per GPU */
  xml_job(&j, "n[1-2]", g_mn1, 17);
  j.ranks_per_gpu = 2;
  refused(&j, "17 ranks, 8 GPUs, ranks-per-gpu=2",
          (const char *const[]){"host 'n1': 17 ranks per node", "8 GPUs and ranks-per-gpu=2 allows 16", NULL});
  j.ranks_per_node = 16;
  plan_of(&j, note, sizeof note, &e, &p);
  CHECK(p && p->n_ranks == 32 && strstr(note, "16 ranks on 8 GPUs"), "ranks-per-gpu=2: %s (%s)", note, e.msg);
  dpt_plan_destroy(p);

  /* one rank per GPU of the 8-GPU node: nothing shared, nothing said */
  j.ranks_per_gpu = 0;
  j.ranks_per_node = 0;
  plan_of(&j, note, sizeof note, &e, &p);
  CHECK(p && p->n_ranks == 16 && !note[0] && dpt_job_sharing(p, NULL, 0) == 0, "8 GPUs, 8 ranks: %s (%s)", note,
        e.msg);
  dpt_plan_destroy(p);
  CHECK(dpt_job_sharing(NULL, what, sizeof what) == 0 && !what[0], "no plan shares nothing");
}

static void test_env(void)
{
  struct dpt_job j;
  struct dpt_err e;

  dpt_job_init(&j);
  setenv("DPT_PLAN_XML", g_mn1, 1);
  setenv("DPT_PLAN_GPUS", "3", 1);
  setenv("DPT_PLAN_THREADS", "4", 1);
  setenv("DPT_FP16", "1", 1);
  setenv("DPT_OVERSUBSCRIBE", "1", 1);
  CHECK(dpt_job_from_env(&j, &e) == 0 && j.node_source == DPT_JOB_NODE_XML && !strcmp(j.node_path, g_mn1) &&
            j.threads_per_rank == 4 && j.model.fp16 == 1 && j.oversubscribe == 1,
        "env: %s", e.msg);
  unsetenv("DPT_PLAN_XML");
  dpt_job_init(&j);
  CHECK(dpt_job_from_env(&j, &e) == 0 && j.node_source == DPT_JOB_NODE_GPUS && j.gpus_per_node == 3, "GPUS: %s",
        e.msg);
  const char *bad[][2] = {{"DPT_PLAN_GPUS", "0"}, {"DPT_PLAN_THREADS", "-1"}, {"DPT_FP16", "2"},
                          {"DPT_OVERSUBSCRIBE", "yes"}};
  for (int i = 0; i < 4; i++) {
    char was[64];
    snprintf(was, sizeof was, "%s", getenv(bad[i][0]) ? getenv(bad[i][0]) : "");
    setenv(bad[i][0], bad[i][1], 1);
    dpt_job_init(&j);
    dpt_err_clear(&e);
    CHECK(dpt_job_from_env(&j, &e) == DPT_E_INPUT && strstr(e.msg, bad[i][0]), "%s=%s: %s", bad[i][0], bad[i][1],
          e.msg);
    if (was[0])
      setenv(bad[i][0], was, 1);
    else
      unsetenv(bad[i][0]);
  }
  unsetenv("DPT_PLAN_GPUS");
  unsetenv("DPT_PLAN_THREADS");
  unsetenv("DPT_FP16");
  unsetenv("DPT_OVERSUBSCRIBE");
  dpt_job_init(&j);
  CHECK(dpt_job_from_env(&j, &e) == 0 && j.node_source == DPT_JOB_NODE_LOCAL && !j.oversubscribe, "unset: %s", e.msg);
}

static void test_errors(void)
{
  struct dpt_job j;
  struct dpt_err e;

  dpt_job_init(&j);
  j.node_source = DPT_JOB_NODE_GPUS;
  j.gpus_per_node = 1;
  j.hostlist = "n[3-1]";
  j.hosts_what = "--nodes 'n[3-1]'";
  plan_of(&j, NULL, 0, &e, NULL);
  CHECK(e.code == DPT_E_INPUT && !strncmp(e.msg, "--nodes 'n[3-1]': hostlist", 26) && strstr(e.msg, "3-1"),
        "hostlist: %s", e.msg);
  j.hostlist = ",";
  j.hosts_what = "--nodes ','";
  plan_of(&j, NULL, 0, &e, NULL);
  CHECK(e.code == DPT_E_INPUT && !strcmp(e.msg, "--nodes ',': no host"), "no host: %s", e.msg);
  j.hostlist = "n[1-2],n1";
  j.hosts_what = NULL;
  plan_of(&j, NULL, 0, &e, NULL);
  CHECK(e.code == DPT_E_INPUT && strstr(e.msg, "n1"), "duplicate host: %s", e.msg);
  j.hostlist = "n1";
  j.tree_source = DPT_JOB_TREE_TOPOLOGY_CONF;
  j.tree_path = "/nonexistent/topology.conf";
  j.tree_what = "--topology-conf /nonexistent/topology.conf";
  plan_of(&j, NULL, 0, &e, NULL);
  CHECK(e.code == DPT_E_INPUT && !strncmp(e.msg, "--topology-conf /nonexistent/topology.conf: ", 44),
        "tree file: %s", e.msg);
  j.tree_source = DPT_JOB_TREE_FLAT;
  j.node_source = DPT_JOB_NODE_XML;
  j.node_path = "/nonexistent/node.xml";
  j.node_what = "--input /nonexistent/node.xml";
  plan_of(&j, NULL, 0, &e, NULL);
  CHECK(e.code == DPT_E_INPUT && !strncmp(e.msg, "--input /nonexistent/node.xml: ", 31), "node XML: %s", e.msg);
  j.node_what = "";
  plan_of(&j, NULL, 0, &e, NULL);
  CHECK(e.code == DPT_E_INPUT && !strncmp(e.msg, "/nonexistent/node.xml", 21), "node XML, no name: %s", e.msg);
  j.node_source = DPT_JOB_NODE_GIVEN;
  plan_of(&j, NULL, 0, &e, NULL);
  CHECK(e.code == DPT_E_INPUT && strstr(e.msg, "no node topology given"), "GIVEN without a node: %s", e.msg);
  j.hostlist = "n[1-70000]";
  j.node_source = DPT_JOB_NODE_GPUS;
  plan_of(&j, NULL, 0, &e, NULL);
  CHECK(e.code == DPT_E_INPUT && strstr(e.msg, "libslurm rejects it: Too many hosts in range"),
        "libslurm's reason in dpt's message: %s", e.msg);
}

int main(int argc, char **argv)
{
  if (argc != 6) {
    fprintf(stderr, "usage: test_job DATA_DIR MN1_XML NODE_2CORE_XML NODE_2CORE_1GPU_XML WORK_DIR\n");
    return 2;
  }
  g_data = argv[1];
  g_mn1 = argv[2];
  g_cpu2 = argv[3];
  g_gpu1 = argv[4];
  g_work = argv[5];
  unsetenv("HWLOC_XMLFILE");
  test_tree_sources();
  test_node_sources();
  test_rule();
  test_env();
  test_errors();
  if (!failures)
    printf("test_job: ok\n");
  return failures != 0;
}
