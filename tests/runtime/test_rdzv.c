/* test_rdzv.c — the frameworks' rendezvous variables (runtime/dpt_rdzv.h).
 *
 * On a plan of 2 nodes x 2 GPUs (h1, h2; ring h1 h2):
 *   - defaults: MASTER_ADDR = plan rank 0's host, MASTER_PORT 29500, GROUP_RANK the node's
 *     plan index, torchrun's TORCHELASTIC_* (agent store False), RANK etc. from dpt_bind;
 *   - the launcher's DPT_MASTER_ADDR/PORT/RUN_ID, read through a getter that reuses ONE
 *     buffer for every call (as the SPANK plugin's does: a value read first must not be
 *     overwritten by the next read);
 *   - the user's MASTER_PORT kept and reported; MASTER_ADDR kept when it names plan rank
 *     0's host (same string, or a common resolved address: localhost = 127.0.0.1), an
 *     error naming rank, node and both values otherwise; bad ports are errors;
 *   - dpt_rdzv_port's derivation and range; dpt_rdzv_port_check on a port held by a
 *     listener (refused, errno text) and after it closed (free). */
#define _GNU_SOURCE
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dpt_bind.h"
#include "dpt_node.h"
#include "dpt_plan.h"
#include "dpt_rdzv.h"
#include "dpt_tree.h"

#include "dpt_check.h"

#define NV 64
struct env {
  char name[NV][64];
  char value[NV][512];
  int n;
  char one[512]; /* the single buffer of one_get */
};

static int env_find(struct env *e, const char *name)
{
  for (int i = 0; i < e->n; i++)
    if (!strcmp(e->name[i], name))
      return i;
  return -1;
}

static int env_set(void *arg, const char *name, const char *value)
{
  struct env *e = arg;
  int i = env_find(e, name);
  if (!value) {
    if (i >= 0)
      e->name[i][0] = '\0';
    return 0;
  }
  if (i < 0) {
    if (e->n == NV)
      return DPT_E_NOMEM;
    i = e->n++;
    snprintf(e->name[i], sizeof e->name[i], "%s", name);
  }
  snprintf(e->value[i], sizeof e->value[i], "%s", value);
  return 0;
}

/* Returns the value in the same buffer every time, like spank_getenv into one buffer. */
static const char *one_get(void *arg, const char *name)
{
  struct env *e = arg;
  int i = env_find(e, name);
  if (i < 0)
    return NULL;
  snprintf(e->one, sizeof e->one, "%s", e->value[i]);
  return e->one;
}

static const char *val(struct env *e, const char *name)
{
  int i = env_find(e, name);
  return i >= 0 ? e->value[i] : "(unset)";
}

static struct dpt_plan *two_nodes(void)
{
  const char *hosts[2] = {"h1", "h2"};
  struct dpt_node *n[2] = {NULL, NULL};
  const struct dpt_node *topos[2];
  struct dpt_tree *tree = NULL;
  struct dpt_plan *plan = NULL;
  struct dpt_plan_opts po;
  struct dpt_err err;
  dpt_err_clear(&err);
  dpt_plan_opts_init(&po);
  if (dpt_node_synthetic(&n[0], "h1", 2, &err) < 0 || dpt_node_synthetic(&n[1], "h2", 2, &err) < 0 ||
      dpt_tree_flat(&tree, hosts, 2, &err) < 0)
    goto out;
  topos[0] = n[0];
  topos[1] = n[1];
  if (dpt_plan_compute(&plan, tree, hosts, 2, topos, &po, &err) < 0)
    fprintf(stderr, "test_rdzv: plan: %s\n", err.msg);
out:
  if (err.msg[0])
    fprintf(stderr, "test_rdzv: %s\n", err.msg);
  dpt_tree_destroy(tree);
  dpt_node_destroy(n[0]);
  dpt_node_destroy(n[1]);
  return plan;
}

static int run(const struct dpt_plan *plan, int rank, struct env *e, char *report, size_t len,
               struct dpt_err *err)
{
  dpt_err_clear(err);
  return dpt_bind_env_report(plan, rank, one_get, e, env_set, e, report, len, err);
}

int main(void)
{
  struct dpt_plan *plan = two_nodes();
  struct env e;
  struct dpt_err err;
  char report[512], want[64];
  int rc, r3;

  CHECK(plan && plan->n_ranks == 4 && plan->n_nodes == 2, "a plan of 2 nodes x 2 ranks");
  if (!plan)
    return 1;
  r3 = 3; /* second node, second rank */

  /* defaults */
  memset(&e, 0, sizeof e);
  rc = run(plan, r3, &e, report, sizeof report, &err);
  CHECK(rc == 0, "defaults: %s", err.msg);
  CHECK(!strcmp(val(&e, "MASTER_ADDR"), plan->nodes[plan->ranks[0].node].host), "MASTER_ADDR=%s",
        val(&e, "MASTER_ADDR"));
  CHECK(!strcmp(val(&e, "MASTER_PORT"), "29500"), "MASTER_PORT=%s", val(&e, "MASTER_PORT"));
  snprintf(want, sizeof want, "%d", plan->ranks[r3].node);
  CHECK(!strcmp(val(&e, "GROUP_RANK"), want) && !strcmp(val(&e, "NODE_RANK"), want) &&
            !strcmp(val(&e, "GROUP_WORLD_SIZE"), "2"),
        "GROUP_RANK=%s NODE_RANK=%s GROUP_WORLD_SIZE=%s (plan node %s)", val(&e, "GROUP_RANK"),
        val(&e, "NODE_RANK"), val(&e, "GROUP_WORLD_SIZE"), want);
  CHECK(!strcmp(val(&e, "RANK"), "3") && !strcmp(val(&e, "ROLE_RANK"), "3") &&
            !strcmp(val(&e, "WORLD_SIZE"), "4") && !strcmp(val(&e, "ROLE_WORLD_SIZE"), "4") &&
            !strcmp(val(&e, "LOCAL_RANK"), "1") && !strcmp(val(&e, "LOCAL_WORLD_SIZE"), "2"),
        "ranks: RANK=%s ROLE_RANK=%s LOCAL_RANK=%s", val(&e, "RANK"), val(&e, "ROLE_RANK"),
        val(&e, "LOCAL_RANK"));
  snprintf(want, sizeof want, "dpt-%s", plan->digest);
  CHECK(!strcmp(val(&e, "TORCHELASTIC_RUN_ID"), want) &&
            !strcmp(val(&e, "TORCHELASTIC_USE_AGENT_STORE"), "False") &&
            !strcmp(val(&e, "TORCHELASTIC_RESTART_COUNT"), "0") && !strcmp(val(&e, "ROLE_NAME"), "default"),
        "torchrun's variables: run id %s, agent store %s", val(&e, "TORCHELASTIC_RUN_ID"),
        val(&e, "TORCHELASTIC_USE_AGENT_STORE"));
  CHECK(report[0] == '\0', "nothing kept, report \"%s\"", report);

  /* the launcher's values, read through one buffer */
  memset(&e, 0, sizeof e);
  env_set(&e, "DPT_MASTER_ADDR", "10.1.2.3");
  env_set(&e, "DPT_MASTER_PORT", "23456");
  env_set(&e, "DPT_RUN_ID", "slurm-7.1");
  rc = run(plan, 0, &e, report, sizeof report, &err);
  CHECK(rc == 0 && !strcmp(val(&e, "MASTER_ADDR"), "10.1.2.3") && !strcmp(val(&e, "MASTER_PORT"), "23456") &&
            !strcmp(val(&e, "TORCHELASTIC_RUN_ID"), "slurm-7.1"),
        "launcher's: MASTER_ADDR=%s MASTER_PORT=%s run %s (%s)", val(&e, "MASTER_ADDR"),
        val(&e, "MASTER_PORT"), val(&e, "TORCHELASTIC_RUN_ID"), err.msg);

  /* the user's MASTER_PORT is kept and said (a fresh environment: the run above set
   * CUDA_VISIBLE_DEVICES to rank 0's GPU) */
  memset(&e, 0, sizeof e);
  env_set(&e, "DPT_MASTER_PORT", "23456");
  env_set(&e, "MASTER_PORT", "31000");
  rc = run(plan, 1, &e, report, sizeof report, &err);
  CHECK(rc == 0 && !strcmp(val(&e, "MASTER_PORT"), "31000") &&
            strstr(report, "MASTER_PORT=31000 kept (set by the user; dpt's would be 23456)"),
        "user port: rc %d %s: %s, report \"%s\"", rc, err.msg, val(&e, "MASTER_PORT"), report);
  /* ... and must be a port */
  const char *bad[] = {"0", "65536", "http", "80x", "-1"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    memset(&e, 0, sizeof e);
    env_set(&e, "MASTER_PORT", bad[i]);
    rc = run(plan, 2, &e, report, sizeof report, &err);
    CHECK(rc == DPT_E_INPUT && strstr(err.msg, "rank 2 on h2: MASTER_PORT=\"") &&
              strstr(err.msg, bad[i]) && strstr(err.msg, "is not a TCP port"),
          "MASTER_PORT=%s: rc %d, %s", bad[i], rc, err.msg);
  }
  memset(&e, 0, sizeof e);
  env_set(&e, "DPT_MASTER_PORT", "99999");
  rc = run(plan, 0, &e, report, sizeof report, &err);
  CHECK(rc == DPT_E_INPUT && strstr(err.msg, "DPT_MASTER_PORT=\"99999\" is not a TCP port"),
        "DPT_MASTER_PORT=99999: %s", err.msg);

  /* the user's MASTER_ADDR: kept when it names plan rank 0's host, else an error */
  memset(&e, 0, sizeof e);
  env_set(&e, "MASTER_ADDR", plan->nodes[plan->ranks[0].node].host);
  env_set(&e, "DPT_MASTER_ADDR", "127.0.0.1");
  rc = run(plan, r3, &e, report, sizeof report, &err);
  CHECK(rc == 0 && !strcmp(val(&e, "MASTER_ADDR"), "h1") && strstr(report, "MASTER_ADDR=h1 kept"),
        "user MASTER_ADDR = rank 0's node name: rc %d %s, report \"%s\"", rc, err.msg, report);
  env_set(&e, "MASTER_ADDR", "localhost"); /* resolves to 127.0.0.1 (or ::1 and it) */
  rc = run(plan, r3, &e, report, sizeof report, &err);
  CHECK(rc == 0 && !strcmp(val(&e, "MASTER_ADDR"), "localhost"), "localhost vs 127.0.0.1: %s", err.msg);
  env_set(&e, "MASTER_ADDR", "h2"); /* Slurm's first node, say, but not rank 0's */
  rc = run(plan, r3, &e, report, sizeof report, &err);
  CHECK(rc == DPT_E_INPUT &&
            strstr(err.msg, "rank 3 on h2: MASTER_ADDR=h2 (set before the launch) is not the node of "
                            "plan rank 0 (h1, address 127.0.0.1)") &&
            strstr(err.msg, "Unset MASTER_ADDR"),
        "user MASTER_ADDR of another node: rc %d, %s", rc, err.msg);

  /* the derived port */
  CHECK(dpt_rdzv_port(1, 0) == 20031 && dpt_rdzv_port(1, 1) == 20032 && dpt_rdzv_port(2, 0) == 20062,
        "dpt_rdzv_port(1,0)=%d (1,1)=%d (2,0)=%d", dpt_rdzv_port(1, 0), dpt_rdzv_port(1, 1),
        dpt_rdzv_port(2, 0));
  for (unsigned long j = 0; j < 200000; j += 997) {
    int p = dpt_rdzv_port(j * 4294967ul, j % 7);
    CHECK(p >= DPT_RDZV_PORT_BASE && p < DPT_RDZV_PORT_BASE + DPT_RDZV_PORT_SPAN, "port %d out of range", p);
  }
  CHECK(dpt_rdzv_same_host("localhost", "127.0.0.1", 0) && !dpt_rdzv_same_host("h1", "h2", 0) &&
            !dpt_rdzv_same_host("no-such-host.invalid", "127.0.0.1", 1) && dpt_rdzv_same_host("x", "x", 0),
        "dpt_rdzv_same_host");

  /* a port held by a listener, then free */
  {
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 1) == 0 &&
              getsockname(fd, (struct sockaddr *)&a, &al) == 0,
          "a listener on an ephemeral port");
    port = ntohs(a.sin_port);
    dpt_err_clear(&err);
    rc = dpt_rdzv_port_check(port, &err);
    CHECK(rc == DPT_E_INPUT && strstr(err.msg, "Address already in use"), "held port %d: rc %d %s", port,
          rc, err.msg);
    close(fd);
    dpt_err_clear(&err);
    rc = dpt_rdzv_port_check(port, &err);
    CHECK(rc == 0, "port %d after close: %s", port, err.msg);
    rc = dpt_rdzv_port_check(0, &err);
    CHECK(rc == DPT_E_INPUT, "port 0");
  }
  dpt_plan_destroy(plan);
  if (!failures)
    printf("test_rdzv: MASTER_ADDR/PORT, torchrun's variables, user values, ports: ok\n");
  return failures ? 1 : 0;
}
