/* test_report_errfiles.c — the ranks' error files (<report>.rank<N>.err, dpt.error/1, what
 * runtime/dpt_watchdog writes for a failing rank) end up in the report rank 0 writes, and are
 * removed once it is written: a failed run leaves its report, not a trail of files.
 *
 *   test_report_errfiles DIR
 *
 * Rank 0 of 3 (no gather: its part only) with its own error recorded, and error files of
 * ranks 0 (the same error: not repeated), 1 (a watchdog naming rank 2) and 2 (a signal); a
 * file that is not dpt.error/1 (rank 3's name, out of range anyway, and one of rank 1's
 * siblings) stays.  A report that cannot be written removes nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dpt_check.h"
#include "dpt_report.h"

static void write_text(const char *path, const char *text)
{
  FILE *f = fopen(path, "w");
  CHECK(f != NULL, "cannot write %s", path);
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

int main(int argc, char **argv)
{
  char rp[1024], e0[1100], e1[1100], e2[1100], e3[1100], bad[1100];
  struct dpt_report *rep = NULL;
  struct dpt_err err, mine;
  json_t *doc = NULL;
  char *argv0[] = {"test_report_errfiles", NULL};

  if (argc != 2) {
    fprintf(stderr, "usage: test_report_errfiles DIR\n");
    return 2;
  }
  snprintf(rp, sizeof rp, "%.1000s/errfiles.json", argv[1]);
  snprintf(e0, sizeof e0, "%s.rank0.err", rp);
  snprintf(e1, sizeof e1, "%s.rank1.err", rp);
  snprintf(e2, sizeof e2, "%s.rank2.err", rp);
  snprintf(e3, sizeof e3, "%s.rank3.err", rp);
  snprintf(bad, sizeof bad, "%s.rank1.err.tmp.1", rp);
  unlink(rp);
  write_text(e0, "{\"schema\": \"dpt.error/1\", \"kind\": \"error\", \"time\": \"2026-11-23T22:43:25Z\", \"rank\": 0, "
                 "\"node\": \"vm\", \"pid\": 1, \"phase\": \"startup\", \"step\": -1, \"message\": \"no data here\", "
                 "\"suspect\": null}\n");
  write_text(e1, "{\"schema\": \"dpt.error/1\", \"kind\": \"watchdog\", \"time\": \"2026-11-23T22:43:26Z\", \"rank\": 1, "
                 "\"node\": \"vm\", \"pid\": 2, \"phase\": \"allreduce\", \"step\": 7, \"message\": \"dpt watchdog: rank 1: "
                 "a peer died\", \"suspect\": {\"rank\": 2, \"node\": \"vm\", \"phase\": \"allreduce (step 7)\"}}\n");
  write_text(e2, "{\"schema\": \"dpt.error/1\", \"kind\": \"signal\", \"signal\": \"SIGSEGV\", \"rank\": 2, \"node\": "
                 "\"vm\", \"pid\": 3, \"phase\": \"allreduce\", \"step\": 7, \"message\": \"rank 2 on vm died of SIGSEGV "
                 "in phase allreduce\", \"suspect\": {\"rank\": 2, \"node\": \"vm\", \"phase\": \"allreduce\"}}\n");
  write_text(e3, "{\"schema\": \"dpt.error/1\", \"rank\": 3, \"message\": \"rank 3 is not in this job\"}\n");
  write_text(bad, "half a file");

  /* a report that cannot be written (its path is a directory): its error files stay */
  {
    char dirpath[1100], dirent[1200];
    snprintf(dirpath, sizeof dirpath, "%.1000s/isdir.json", argv[1]);
    snprintf(dirent, sizeof dirent, "%s.rank1.err", dirpath);
    rmdir(dirpath);
    CHECK(mkdir(dirpath, 0755) == 0, "mkdir %s", dirpath);
    write_text(dirent, "{\"schema\": \"dpt.error/1\", \"rank\": 1, \"node\": \"vm\", \"message\": \"kept\"}\n");
    dpt_err_clear(&err);
    CHECK(dpt_report_create(&rep, "dpt-train", 1, argv0, 0, 3, &err) == 0, "%s", err.msg);
    CHECK(dpt_report_finish(rep, NULL, dirpath, NULL, &err) < 0 && strstr(err.msg, dirpath) &&
              strstr(err.msg, "report (--report / DPT_REPORT)"),
          "a report over a directory: %s", err.msg);
    CHECK(exists(dirent), "the error file of a report that was not written was removed");
    dpt_report_destroy(rep);
    rep = NULL;
    unlink(dirent);
    rmdir(dirpath);
  }

  dpt_err_clear(&err);
  dpt_err_set(&mine, DPT_E_INPUT, "no data here");
  CHECK(dpt_report_create(&rep, "dpt-train", 1, argv0, 0, 3, &err) == 0, "%s", err.msg);
  dpt_report_set_error(rep, &mine);
  dpt_report_set_exit_status(rep, 2);
  CHECK(dpt_report_finish(rep, NULL, rp, NULL, &err) == 0, "finish: %s", err.msg);
  dpt_report_destroy(rep);

  CHECK(!exists(e0) && !exists(e1) && !exists(e2), "error files left: %s %s %s", exists(e0) ? e0 : "",
        exists(e1) ? e1 : "", exists(e2) ? e2 : "");
  CHECK(exists(e3) && exists(bad), "a file that is not a rank's error file was removed");
  CHECK(dpt_report_load(rp, &doc, &err) == 0, "the report: %s", err.msg);
  if (doc) {
    json_t *errors = json_object_get(doc, "errors"), *e;
    size_t i;
    int n0 = 0, n1 = 0, n2 = 0;
    json_array_foreach(errors, i, e) {
      json_int_t r = json_integer_value(json_object_get(e, "rank"));
      const char *m = json_string_value(json_object_get(e, "message"));
      if (r == 0 && m && !strcmp(m, "no data here"))
        n0++;
      if (r == 1 && m && strstr(m, "a peer died")) {
        n1++;
        CHECK(!strcmp(json_string_value(json_object_get(e, "kind")), "watchdog") &&
                  !strcmp(json_string_value(json_object_get(e, "phase")), "allreduce") &&
                  json_integer_value(json_object_get(e, "step")) == 7 &&
                  json_integer_value(json_object_get(json_object_get(e, "suspect"), "rank")) == 2 &&
                  !strcmp(json_string_value(json_object_get(e, "host")), "vm") &&
                  !strcmp(json_string_value(json_object_get(e, "file")), "errfiles.json.rank1.err"),
              "rank 1's error as absorbed: %s", json_dumps(e, JSON_COMPACT));
      }
      if (r == 2 && m && strstr(m, "SIGSEGV"))
        n2++;
      CHECK(!m || !strstr(m, "rank 3"), "rank 3 (not in the job) absorbed");
    }
    CHECK(n0 == 1 && n1 == 1 && n2 == 1, "errors: rank 0 x%d (its own, once), rank 1 x%d, rank 2 x%d:\n%s", n0, n1,
          n2, json_dumps(errors, JSON_INDENT(1)));
    json_decref(doc);
  }
  unlink(rp);
  unlink(e3);
  unlink(bad);
  if (!failures)
    printf("test_report_errfiles: ok\n");
  return failures != 0;
}
