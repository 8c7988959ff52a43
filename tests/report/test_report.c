/* test_report — runtime/dpt_report without MPI: nearest-rank percentiles, the
 * gather through a hook (3 ranks in one process), throughput and scaling
 * efficiency, errors per rank, a failed gather (partial report + per-rank
 * file), path naming (Slurm, DPT_REPORT patterns), the atomic writes (synced
 * and hand-off), validation messages naming the field.   usage: test_report OUTDIR */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dpt_check.h"
#include "dpt_report.h"

#define NEAR(a, b) (fabs((double)(a) - (double)(b)) <= 1e-9 * (1 + fabs((double)(b))))

/* In-memory gather: ranks 1..p-1 call first and deposit their parts; rank 0 collects. */
struct mem_gather {
  int p, fail;
  char *parts[8];
  size_t lens[8];
  int next;
};

static int mem_gather_fn(void *arg, const char *mine, size_t len, char **all, size_t **lens, struct dpt_err *err)
{
  struct mem_gather *g = arg;
  int r = g->next++;
  *all = NULL;
  *lens = NULL;
  if (g->fail)
    return dpt_err_set(err, DPT_E_RUNTIME, "peer 2 is gone (test)");
  g->parts[r] = strndup(mine, len);
  g->lens[r] = len;
  if (r != g->p - 1)
    return 0;
  /* the last caller plays rank 0: parts arrive as ranks 1, 2, ..., 0 */
  size_t total = 0;
  for (int i = 0; i < g->p; i++)
    total += g->lens[i];
  *all = malloc(total);
  *lens = malloc(sizeof **lens * (size_t)g->p);
  size_t at = 0;
  for (int q = 0; q < g->p; q++) {
    int src = q == 0 ? g->p - 1 : q - 1; /* rank q's part */
    memcpy(*all + at, g->parts[src], g->lens[src]);
    (*lens)[q] = g->lens[src];
    at += g->lens[src];
  }
  for (int i = 0; i < g->p; i++)
    free(g->parts[i]);
  return 0;
}

static json_t *load(const char *path)
{
  json_t *d = NULL;
  struct dpt_err e;
  if (dpt_report_load(path, &d, &e))
    fprintf(stderr, "load: %s\n", e.msg);
  return d;
}

static double jnum(json_t *d, const char *a, const char *b)
{
  return json_number_value(json_object_get(json_object_get(d, a), b));
}

int main(int argc, char **argv)
{
  char dir[1024], path[2048], p2[2048], got[4096];
  struct dpt_err err = {0};
  struct dpt_report *r[3] = {0};
  char *args[] = {"trainer", "--epochs", "2", NULL};

  if (argc != 2)
    return 2;
  snprintf(dir, sizeof dir, "%s", argv[1]);
  mkdir(dir, 0777);
  unsetenv("DPT_REPORT");
  unsetenv("SLURM_JOB_ID");
  unsetenv("SLURM_STEP_ID");

  /* percentiles: forward = 1..100 ms in shuffled order -> nearest rank */
  CHECK(!dpt_report_create(&r[0], "trainer", 3, args, 0, 1, &err), "%s", err.msg);
  for (int i = 0; i < 100; i++) {
    struct dpt_report_step s = {0};
    s.forward = ((i * 37) % 100 + 1) * 1e-3;
    s.data_wait = 1e-3;
    s.images = 32;
    CHECK(!dpt_report_add_step(r[0], &s, &err), "%s", err.msg);
  }
  json_t *d = dpt_report_to_json(r[0], &err);
  CHECK(d && !dpt_report_validate(d, "to_json", &err), "%s", err.msg);
  json_t *fw = json_object_get(json_object_get(json_array_get(json_object_get(d, "ranks"), 0), "phases"), "forward");
  CHECK(NEAR(json_number_value(json_object_get(fw, "p50_s")), 0.050), "p50 %g", json_number_value(json_object_get(fw, "p50_s")));
  CHECK(NEAR(json_number_value(json_object_get(fw, "p90_s")), 0.090), "p90");
  CHECK(NEAR(json_number_value(json_object_get(fw, "p99_s")), 0.099), "p99");
  CHECK(NEAR(json_number_value(json_object_get(fw, "max_s")), 0.100), "max");
  CHECK(NEAR(json_number_value(json_object_get(fw, "total_s")), 5.050), "total");
  CHECK(NEAR(json_number_value(json_object_get(fw, "mean_s")), 0.0505), "mean");
  /* step = sum of the phases when not given: 3200 images / (5.05 + 0.1) s */
  CHECK(NEAR(jnum(d, "throughput", "images_per_s"), 3200 / 5.15), "images/s %g", jnum(d, "throughput", "images_per_s"));
  CHECK(!json_is_true(json_object_get(json_object_get(d, "job"), "partial")), "single rank is complete");
  json_decref(d);
  struct dpt_report_step neg = {0};
  neg.update = -1;
  CHECK(dpt_report_add_step(r[0], &neg, &err) == DPT_E_INPUT && strstr(err.msg, "update = -1"), "%s", err.msg);
  dpt_report_destroy(r[0]);
  r[0] = NULL;

  /* baseline: 1 rank, 10 steps of 0.1 s x 32 images = 320 images/s */
  snprintf(path, sizeof path, "%s/base.json", dir);
  CHECK(!dpt_report_create(&r[0], "trainer", 3, args, 0, 1, &err), "%s", err.msg);
  for (int i = 0; i < 10; i++) {
    struct dpt_report_step s = {.forward = 0.06, .backward = 0.04, .images = 32};
    dpt_report_add_step(r[0], &s, &err);
  }
  CHECK(!dpt_report_finish(r[0], NULL, path, got, &err) && !strcmp(got, path), "%s", err.msg);
  dpt_report_destroy(r[0]);
  r[0] = NULL;

  /* 3 ranks through the gather hook: 0.125 s steps of 32 images -> 256 images/s each */
  struct mem_gather g = {.p = 3};
  struct dpt_report_gather gh = {mem_gather_fn, &g};
  for (int k = 0; k < 3; k++) {
    CHECK(!dpt_report_create(&r[k], "trainer", 3, args, k, 3, &err), "%s", err.msg);
    dpt_report_set_baseline(r[k], path);
    dpt_report_set_allreduce(r[k], 1000, -1);
    for (int i = 0; i < 10; i++) {
      struct dpt_report_step s = {.forward = 0.05, .backward = 0.05, .allreduce = 0.01 * (k + 1),
                                  .allreduce_exposed = 0.01 * (k + 1), .step = 0.125, .images = 32};
      dpt_report_add_step(r[k], &s, &err);
    }
  }
  struct dpt_report_epoch e;
  dpt_report_epoch_init(&e);
  e.epoch = 1;
  e.val_top1 = 0.5;
  CHECK(!dpt_report_add_epoch(r[0], &e, &err), "%s", err.msg);
  dpt_err_set(&err, DPT_E_RUNTIME, "rank 2 saw something odd");
  dpt_report_set_error(r[2], &err);
  snprintf(p2, sizeof p2, "%s/three.json", dir);
  CHECK(!dpt_report_finish(r[1], &gh, p2, NULL, &err), "%s", err.msg);
  CHECK(!dpt_report_finish(r[2], &gh, p2, NULL, &err), "%s", err.msg);
  CHECK(!dpt_report_finish(r[0], &gh, p2, NULL, &err), "%s", err.msg);
  d = load(p2);
  CHECK(d, "three.json");
  if (d) {
    json_t *ranks = json_object_get(d, "ranks");
    CHECK(json_array_size(ranks) == 3, "ranks");
    for (int k = 0; k < 3; k++)
      CHECK(json_integer_value(json_object_get(json_array_get(ranks, k), "rank")) == k, "rank order %d", k);
    CHECK(NEAR(jnum(d, "throughput", "images_per_s"), 768), "total %g", jnum(d, "throughput", "images_per_s"));
    /* measured all-reduce: the slowest rank's median */
    CHECK(NEAR(jnum(d, "allreduce", "measured_s"), 0.03), "measured %g", jnum(d, "allreduce", "measured_s"));
    /* e = t / (t0 * n / n0) = 768 / (320 * 3) = 0.8; speed-up 2.4 */
    CHECK(NEAR(jnum(d, "scaling", "efficiency"), 0.8), "efficiency %g", jnum(d, "scaling", "efficiency"));
    CHECK(NEAR(jnum(d, "scaling", "speedup"), 2.4), "speedup");
    json_t *errs = json_object_get(d, "errors");
    CHECK(json_array_size(errs) == 1 && json_integer_value(json_object_get(json_array_get(errs, 0), "rank")) == 2 &&
              strstr(json_string_value(json_object_get(json_array_get(errs, 0), "message")), "odd"),
          "errors name rank 2");
    CHECK(json_array_size(json_object_get(d, "learning_curve")) == 1, "curve");
    CHECK(!json_is_true(json_object_get(json_object_get(d, "job"), "partial")), "complete");
    json_decref(d);
  }
  snprintf(got, sizeof got, "%s.tmp.%ld", p2, (long)getpid());
  CHECK(access(got, F_OK) != 0, "no temporary file left");
  for (int k = 0; k < 3; k++)
    dpt_report_destroy(r[k]);

  /* a failed gather: rank 0 writes a partial report naming the failure, rank 1 its own part */
  struct mem_gather gf = {.p = 2, .fail = 1};
  struct dpt_report_gather ghf = {mem_gather_fn, &gf};
  snprintf(p2, sizeof p2, "%s/failed.json", dir);
  for (int k = 1; k >= 0; k--) {
    CHECK(!dpt_report_create(&r[k], "trainer", 3, args, k, 2, &err), "%s", err.msg);
    CHECK(dpt_report_finish(r[k], &ghf, p2, NULL, &err) == DPT_E_RUNTIME && strstr(err.msg, "peer 2 is gone"),
          "%s", err.msg);
    dpt_report_destroy(r[k]);
  }
  d = load(p2);
  CHECK(d && json_is_true(json_object_get(json_object_get(d, "job"), "partial")), "partial");
  CHECK(d && strstr(json_string_value(json_object_get(json_array_get(json_object_get(d, "errors"), 0), "message")),
                    "gathering the ranks' parts failed"), "gather failure recorded");
  json_decref(d);
  snprintf(got, sizeof got, "%s.rank1", p2);
  d = load(got);
  CHECK(d && json_integer_value(json_object_get(json_array_get(json_object_get(d, "ranks"), 0), "rank")) == 1,
        "rank 1 wrote its own part");
  json_decref(d);

  /* paths */
  CHECK(!dpt_report_create(&r[0], "dpt-bench", 0, NULL, 0, 1, &err), "%s", err.msg);
  CHECK(dpt_report_path(r[0], NULL, got, sizeof got, &err) > 0 && !strncmp(got, "dpt-report-dpt-bench-", 21),
        "%s", got);
  setenv("SLURM_JOB_ID", "4242", 1);
  CHECK(dpt_report_path(r[0], NULL, got, sizeof got, &err) > 0 && !strcmp(got, "dpt-report-4242.json"), "%s", got);
  setenv("SLURM_STEP_ID", "3", 1);
  CHECK(dpt_report_path(r[0], NULL, got, sizeof got, &err) > 0 && !strcmp(got, "dpt-report-4242.3.json"), "%s", got);
  setenv("DPT_REPORT", "/tmp/r-%j.%s-%%.json", 1);
  CHECK(dpt_report_path(r[0], NULL, got, sizeof got, &err) > 0 && !strcmp(got, "/tmp/r-4242.3-%.json"), "%s", got);
  CHECK(dpt_report_path(r[0], "flag.json", got, sizeof got, &err) > 0 && !strcmp(got, "flag.json"), "%s", got);
  setenv("DPT_REPORT", "r-%x.json", 1);
  CHECK(dpt_report_path(r[0], NULL, got, sizeof got, &err) == DPT_E_INPUT && strstr(err.msg, "unknown %x"), "%s",
        err.msg);
  CHECK(dpt_report_path(r[0], NULL, got, 8, &err) == DPT_E_INPUT, "too long");
  unsetenv("DPT_REPORT");
  unsetenv("SLURM_JOB_ID");
  unsetenv("SLURM_STEP_ID");
  CHECK(dpt_report_finish(r[0], NULL, "/nonexistent-dir/r.json", NULL, &err) == DPT_E_INPUT &&
            strstr(err.msg, "/nonexistent-dir/r.json.tmp"), "%s", err.msg);
  dpt_report_set_baseline(r[0], "/nonexistent-base.json");
  snprintf(got, sizeof got, "%s/nobase.json", dir);
  CHECK(dpt_report_finish(r[0], NULL, got, NULL, &err) == DPT_E_INPUT && strstr(err.msg, "--baseline") &&
            strstr(err.msg, "/nonexistent-base.json"), "%s", err.msg);
  dpt_report_destroy(r[0]);
  r[0] = NULL;

  /* validation messages name the field */
  json_t *bad = json_pack("{s:s}", "schema", "dpt.report/1");
  CHECK(dpt_report_validate(bad, "x.json", &err) == DPT_E_INPUT && strstr(err.msg, "x.json: missing field program"),
        "%s", err.msg);
  json_decref(bad);
  CHECK(dpt_report_create(&r[0], "t", 0, NULL, 3, 2, &err) == DPT_E_INPUT, "rank >= size refused");

  /* both writes, synced (reports) and not (the supervisors' hand-off parts): the file is replaced
   * whole, no temporary file is left, a missing directory is named */
  int (*writes[2])(const char *, const char *, size_t, struct dpt_err *) = {dpt_report_write_atomic,
                                                                           dpt_report_write_handoff};
  for (int w = 0; w < 2; w++) {
    char buf[64] = "", tmp[4200];
    FILE *f;
    snprintf(got, sizeof got, "%s/write%d.json", dir, w);
    CHECK(!writes[w](got, "{\"a\": 1, \"long\": true}\n", 24, &err), "write %d: %s", w, err.msg);
    CHECK(!writes[w](got, "{\"b\": 2}\n", 9, &err), "rewrite %d: %s", w, err.msg);
    f = fopen(got, "r");
    CHECK(f && fread(buf, 1, sizeof buf - 1, f) == 9 && !strcmp(buf, "{\"b\": 2}\n"), "write %d left '%s'", w, buf);
    if (f)
      fclose(f);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", got, (long)getpid());
    CHECK(access(tmp, F_OK) != 0, "write %d left %s", w, tmp);
    CHECK(writes[w]("/nonexistent-dir/h.json", "x", 1, &err) == DPT_E_INPUT &&
              strstr(err.msg, "/nonexistent-dir/h.json"), "write %d: %s", w, err.msg);
  }

  if (failures)
    fprintf(stderr, "test_report: %d failure(s)\n", failures);
  else
    printf("test_report: ok\n");
  return failures ? 1 : 0;
}
