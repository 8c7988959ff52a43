/* test_ctx.c — dpt_ctx from each launcher's environment, who started the ranks
 * (srun --dpt sets dpt-launch's variables; mpirun in an sbatch script leaves
 * SLURM_PROCID), and clear errors for missing, malformed and inconsistent variables. */
#include <stdio.h>
#include <string.h>

#include "dpt_ctx.h"

static int failures;

struct env {
  const char *kv[24]; /* "NAME=value" */
};

static const char *get(void *arg, const char *name)
{
  const struct env *e = arg;
  size_t n = strlen(name);
  for (int i = 0; e->kv[i]; i++)
    if (!strncmp(e->kv[i], name, n) && e->kv[i][n] == '=')
      return e->kv[i] + n + 1;
  return NULL;
}

static void ok(const char *name, struct env e, const char *source, const char *launcher, int rank,
               int size, int lr, int ls, int node, int nn)
{
  struct dpt_ctx c;
  struct dpt_err err;
  dpt_err_clear(&err);
  if (dpt_ctx_load(&c, get, &e, &err) < 0) {
    failures++;
    fprintf(stderr, "FAIL %s: unexpected error: %s\n", name, err.msg);
    return;
  }
  if (strcmp(c.source, source) || strcmp(c.launcher, launcher) ||
      strcmp(dpt_ctx_launcher(get, &e), launcher) || c.rank != rank || c.size != size || c.local_rank != lr ||
      c.local_size != ls || c.node_id != node || c.n_nodes != nn) {
    char d[512];
    dpt_ctx_describe(&c, d, sizeof d);
    failures++;
    fprintf(stderr, "FAIL %s: got %s (%s variables), expected via %s (%s variables)\n", name, d,
            c.source, launcher, source);
  }
}

/* Must fail with DPT_E_INPUT and a message containing each of the needles. */
static void bad(const char *name, struct env e, const char *needle1, const char *needle2)
{
  struct dpt_ctx c;
  struct dpt_err err;
  dpt_err_clear(&err);
  if (dpt_ctx_load(&c, get, &e, &err) != DPT_E_INPUT || !strstr(err.msg, needle1) ||
      (needle2 && !strstr(err.msg, needle2))) {
    failures++;
    fprintf(stderr, "FAIL %s: expected an input error naming %s%s%s, got code %d \"%s\"\n",
            name, needle1, needle2 ? " and " : "", needle2 ? needle2 : "", err.code, err.msg);
  }
}

int main(void)
{
  ok("none", (struct env){{NULL}}, "single", "single", 0, 1, 0, 1, 0, 1);
  ok("slurm", (struct env){{"SLURM_PROCID=5", "SLURM_NTASKS=8", "SLURM_LOCALID=1",
                            "SLURM_NODEID=2", "SLURM_NNODES=4", "SLURM_TASKS_PER_NODE=2(x4)",
                            "SLURMD_NODENAME=n3", NULL}},
     "slurm", "srun", 5, 8, 1, 2, 2, 4);
  ok("slurm uneven", (struct env){{"SLURM_PROCID=6", "SLURM_NPROCS=7", "SLURM_LOCALID=0",
                                   "SLURM_NODEID=2", "SLURM_NNODES=3",
                                   "SLURM_TASKS_PER_NODE=3(x2),1", NULL}},
     "slurm", "srun", 6, 7, 0, 1, 2, 3);
  /* dpt_boot_init bound the rank itself (DPT_LAUNCHER=boot): srun still started it */
  ok("slurm, bound by dpt_boot_init", (struct env){{"DPT_LAUNCHER=boot", "SLURM_PROCID=1",
                                                     "SLURM_NTASKS=2", "SLURM_LOCALID=1",
                                                     "SLURM_NODEID=0", NULL}},
     "slurm", "srun", 1, 2, 1, -1, 0, -1);
  /* mpirun in an sbatch script: its ranks inherit the batch step's SLURM_PROCID */
  ok("ompi", (struct env){{"OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4",
                           "OMPI_COMM_WORLD_LOCAL_RANK=3", "OMPI_COMM_WORLD_LOCAL_SIZE=4",
                           "PMIX_RANK=3", "PMIX_NAMESPACE=ns", "SLURM_PROCID=0",
                           "SLURM_NTASKS=1", NULL}},
     "ompi", "mpirun", 3, 4, 3, 4, -1, -1);
  ok("pmix only", (struct env){{"PMIX_RANK=2", "PMIX_NAMESPACE=slurm.pmix.1.0", NULL}}, "pmix",
     "pmix", 2, -1, -1, -1, -1, -1);
  ok("dpt-launch", (struct env){{"DPT_RANK=1", "DPT_SIZE=2", "DPT_LOCAL_RANK=1",
                                 "DPT_LOCAL_SIZE=2", "DPT_NODE_ID=0", "DPT_N_NODES=1",
                                 "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", NULL}},
     "dpt-launch", "dpt-launch", 1, 2, 1, 2, 0, 1);
  /* srun --dpt: the plugin sets dpt-launch's variables and DPT_LAUNCHER=spank */
  ok("spank", (struct env){{"DPT_LAUNCHER=spank", "DPT_RANK=5", "DPT_SIZE=8", "DPT_LOCAL_RANK=1",
                            "DPT_LOCAL_SIZE=2", "DPT_NODE_ID=2", "DPT_N_NODES=4",
                            "SLURM_PROCID=5", "SLURM_NTASKS=8", "SLURM_LOCALID=1",
                            "SLURM_NODEID=2", "PMIX_RANK=5", NULL}},
     "dpt-launch", "spank", 5, 8, 1, 2, 2, 4);
  /* a value that names no dpt launcher is not taken for one */
  ok("unknown DPT_LAUNCHER", (struct env){{"DPT_LAUNCHER=torchrun", "PMIX_RANK=0", NULL}}, "pmix",
     "pmix", 0, -1, -1, -1, -1, -1);

  bad("slurm missing ntasks", (struct env){{"SLURM_PROCID=1", "SLURM_LOCALID=0", NULL}},
      "SLURM_PROCID", "SLURM_NPROCS");
  bad("slurm missing localid", (struct env){{"SLURM_PROCID=1", "SLURM_NTASKS=2",
                                             "SLURM_NODEID=0", NULL}},
      "SLURM_LOCALID", NULL);
  bad("rank >= size", (struct env){{"SLURM_PROCID=4", "SLURM_NTASKS=4", "SLURM_LOCALID=0",
                                    "SLURM_NODEID=0", NULL}},
      "SLURM_PROCID=4", "SLURM_NTASKS=4");
  bad("not a number", (struct env){{"OMPI_COMM_WORLD_RANK=x1", "OMPI_COMM_WORLD_SIZE=2", NULL}},
      "OMPI_COMM_WORLD_RANK", "x1");
  bad("ompi vs pmix", (struct env){{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2",
                                    "PMIX_RANK=0", NULL}},
      "OMPI_COMM_WORLD_RANK=1", "PMIX_RANK=0");
  bad("dpt vs ompi", (struct env){{"DPT_RANK=0", "DPT_SIZE=2", "OMPI_COMM_WORLD_RANK=1",
                                   "OMPI_COMM_WORLD_SIZE=2", NULL}},
      "DPT_RANK=0", "OMPI_COMM_WORLD_RANK=1");
  bad("dpt size vs ompi", (struct env){{"DPT_RANK=0", "DPT_SIZE=2", "OMPI_COMM_WORLD_RANK=0",
                                        "OMPI_COMM_WORLD_SIZE=3", NULL}},
      "DPT_SIZE=2", "OMPI_COMM_WORLD_SIZE=3");
  bad("size zero", (struct env){{"DPT_RANK=0", "DPT_SIZE=0", NULL}}, "DPT_SIZE=0", NULL);
  bad("bad tasks per node", (struct env){{"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0",
                                          "SLURM_NODEID=3", "SLURM_TASKS_PER_NODE=2(x2)", NULL}},
      "SLURM_TASKS_PER_NODE", "SLURM_NODEID=3");
  bad("local rank >= local size", (struct env){{"DPT_RANK=0", "DPT_SIZE=4", "DPT_LOCAL_RANK=2",
                                                "DPT_LOCAL_SIZE=2", NULL}},
      "local rank=2", "local size=2");
  printf("ctx: %s (%d failures)\n", failures ? "FAILED" : "ok", failures);
  return failures ? 1 : 0;
}
