/* fuzz_report.c — job reports (dpt.report/1) through the reader `dpt-report`
 * uses: dpt_report_load() (JSON with duplicate keys rejected, then
 * dpt_report_validate()), and for a document it accepts, what `dpt-report`
 * does with it (dpt_report_view.h, the tool's own renderers): the terminal
 * summary (alone and with the document as its own --baseline), --compare of it
 * against itself and the HTML page.
 * Input: the file.  Seeds: the reports of real runs in tests/report/data
 * (tests/fuzz/make-corpus.sh copies them to corpus/report).
 * Properties: 0 or DPT_E_INPUT with a message naming the file; an accepted
 * document validates again from memory; the renderers finish without a
 * sanitizer report. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "dpt_err.h"
#include "dpt_report.h"
#include "dpt_report_view.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char path[600], html_path[600];
  struct dpt_err err;
  json_t *doc = NULL;
  int rc;

  dpt_err_clear(&err);
  fuzz_write_file("report.json", data, size, path, sizeof path);
  rc = dpt_report_load(path, &doc, &err);
  if (rc) {
    fuzz_check_error(rc, &err);
    FUZZ_CHECK(rc == DPT_E_INPUT);
    FUZZ_CHECK(strstr(err.msg, path) != NULL); /* the message names the file */
    FUZZ_CHECK(doc == NULL);
    return 0;
  }
  FUZZ_CHECK(doc != NULL);
  FUZZ_CHECK(dpt_report_validate(doc, "again", &err) == 0);

  FILE *sink = fopen("/dev/null", "w");
  FUZZ_CHECK(sink != NULL);
  dpt_report_view_summary(sink, path, doc, NULL, NULL);
  dpt_report_view_summary(sink, path, doc, doc, path);
  char *files[2] = {path, path};
  json_t *docs[2] = {doc, doc};
  dpt_report_view_compare(sink, files, docs, 2);
  fclose(sink);
  snprintf(html_path, sizeof html_path, "%s/report.html", fuzz_tmpdir());
  rc = dpt_report_view_html(html_path, files, docs, 2, &err);
  FUZZ_CHECK(rc == 0 || (err.code == rc && err.msg[0]));
  json_decref(doc);
  return 0;
}
