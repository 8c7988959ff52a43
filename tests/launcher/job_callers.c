/* job_callers.c — the planner paths of the two callers that are libraries, for
 * callers_agree.sh (which runs the other three as tools):
 *
 *   job_callers spank HOST NODE_XML TASKS_PER_NODE RANKS_PER_GPU
 *       srun --dpt's path: dpt_spank_local_compute() for a one-node step on HOST
 *       with --dpt=topology=NODE_XML[,ranks-per-gpu=K] (K 0: not given), as
 *       slurm_spank_local_user_init calls it;
 *   job_callers report BYTES FP16
 *       the job report's path: dpt_report_plan_from_launch() with the variables
 *       dpt-launch gives its ranks (DPT_NODE_NAME, DPT_LOCAL_SIZE, DPT_N_NODES,
 *       DPT_PLAN_DIGEST, DPT_PLAN_XML, DPT_OVERSUBSCRIBE: set by the caller).
 *
 * Prints "digest D" (spank: the plan's; report: the embedded plan's, then
 * "launch_digest L" and "predicted_s P" when embedded) and "note N" when ranks
 * share GPUs or cores, exit 0; or "refused: MESSAGE" and the error's exit
 * status (2 for bad input).  The report prints "not embedded" (exit 3) when
 * the launcher's digest is not the plan it computes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_report.h"
#include "dpt_spank_local.h"

static int refused(const struct dpt_err *e)
{
  printf("refused: %s\n", e->msg);
  return dpt_err_exit_status(e);
}

static int spank(char **argv)
{
  struct dpt_spank_opts o;
  struct dpt_plan *plan = NULL;
  struct dpt_err e;
  char *enc = NULL, note[600];
  const char *hosts[1] = {argv[0]};

  dpt_err_clear(&e);
  dpt_spank_opts_init(&o);
  snprintf(o.topology, sizeof o.topology, "%s", argv[1]);
  o.ranks_per_gpu = atoi(argv[3]);
  if (dpt_spank_local_compute(&o, NULL, hosts, 1, atoi(argv[2]), &plan, &enc, note, sizeof note, &e) < 0)
    return refused(&e);
  printf("digest %s\n", plan->digest);
  if (note[0])
    printf("note %s\n", note);
  dpt_plan_destroy(plan);
  free(enc);
  return 0;
}

static int report(char **argv)
{
  struct dpt_report *rep = NULL;
  struct dpt_err e;
  json_t *doc = NULL;
  char *cmd[] = {"job_callers", "report", NULL};
  int rc;

  dpt_err_clear(&e);
  if (dpt_report_create(&rep, "job_callers", 2, cmd, 0, 1, &e) < 0)
    return refused(&e);
  dpt_report_set_allreduce(rep, strtoull(argv[0], NULL, 10), -1);
  rc = dpt_report_plan_from_launch(rep, strtoull(argv[0], NULL, 10), atoi(argv[1]), &e);
  if (rc < 0) {
    dpt_report_destroy(rep);
    return refused(&e);
  }
  if (rc == 0) {
    printf("not embedded\n");
    dpt_report_destroy(rep);
    return 3;
  }
  if (!(doc = dpt_report_to_json(rep, &e))) {
    dpt_report_destroy(rep);
    return refused(&e);
  }
  const json_t *job = json_object_get(doc, "job"), *ar = json_object_get(doc, "allreduce");
  printf("digest %s\n", json_string_value(json_object_get(json_object_get(doc, "plan"), "digest")));
  printf("launch_digest %s\n", json_string_value(json_object_get(job, "launch_digest")));
  printf("plan size_bytes %lld\n",
         (long long)json_integer_value(json_object_get(json_object_get(doc, "plan"), "size_bytes")));
  printf("predicted_s %.9g\n", json_number_value(json_object_get(ar, "predicted_s")));
  if (json_string_value(json_object_get(job, "oversubscribed")))
    printf("note %s\n", json_string_value(json_object_get(job, "oversubscribed")));
  json_decref(doc);
  dpt_report_destroy(rep);
  return 0;
}

int main(int argc, char **argv)
{
  if (argc == 6 && !strcmp(argv[1], "spank"))
    return spank(argv + 2);
  if (argc == 4 && !strcmp(argv[1], "report"))
    return report(argv + 2);
  fprintf(stderr, "usage: job_callers spank HOST NODE_XML TASKS_PER_NODE RANKS_PER_GPU\n"
                  "       job_callers report BYTES FP16\n");
  return 2;
}
