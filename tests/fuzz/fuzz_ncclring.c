/* fuzz_ncclring.c — a job's output through `dpt-report --nccl-log`'s reader,
 * dpt_ncclring_check() (runtime/dpt_ncclring.c), against a fixed plan: 8 ranks
 * on 4 nodes in 2 switch groups (the tests' interleaved thin tree, ring
 * n1 n3 n2 n4).  Input: the log.  Seeds: NCCL_DEBUG=INFO ring lines as NCCL
 * prints them (agreeing, reversed, differing, split communicators, NCCL's
 * connection lines).
 * Properties: 0 (every ring agrees) or 1 (one differs) with one output line per
 * checked channel, each starting "nccl ring: "; otherwise DPT_E_INPUT with a
 * message naming the log. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "dpt_ncclring.h"
#include "fuzz_common.h"

static const char plan_json[] =
    "{\"nodes\": [{\"host\": \"n1\", \"group\": \"leaf1\"}, {\"host\": \"n3\", \"group\": \"leaf1\"},"
    " {\"host\": \"n2\", \"group\": \"leaf2\"}, {\"host\": \"n4\", \"group\": \"leaf2\"}],"
    " \"ranks\": [{\"node\": 0}, {\"node\": 0}, {\"node\": 1}, {\"node\": 1},"
    " {\"node\": 2}, {\"node\": 2}, {\"node\": 3}, {\"node\": 3}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static json_t *plan;
  struct dpt_err err;
  char *out = NULL;
  size_t out_len = 0;
  FILE *log, *sink;
  int rc;

  if (!plan)
    FUZZ_CHECK((plan = json_loads(plan_json, 0, NULL)) != NULL);
  dpt_err_clear(&err);
  log = fmemopen((void *)(size ? data : (const uint8_t *)""), size ? size : 1, "r");
  sink = open_memstream(&out, &out_len);
  FUZZ_CHECK(log != NULL && sink != NULL);
  rc = dpt_ncclring_check(log, "job.log", plan, sink, &err);
  fclose(log);
  fclose(sink);
  if (rc < 0) {
    fuzz_check_error(rc, &err);
    FUZZ_CHECK(rc == DPT_E_INPUT);
    FUZZ_CHECK(strstr(err.msg, "job.log") != NULL);
  } else {
    FUZZ_CHECK(rc == 0 || rc == 1);
    FUZZ_CHECK(out_len > 0);
    for (char *line = out; line && *line;) { /* every line is the checker's */
      char *nl = strchr(line, '\n');
      FUZZ_CHECK(nl != NULL && !strncmp(line, "nccl ring: ", 11));
      line = nl + 1;
    }
  }
  free(out);
  return 0;
}
