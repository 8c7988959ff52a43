/* test_cudnn_errata: known-bad cuDNN engine configs in cudnn-frontend's errata format
 * (trainer/cuda/dpt_cudnn_errata.h).
 *
 *  - the frontend's own sample rules (its legacy conv sample) parse, and block what the
 *    frontend blocks: ConvBwdFilter engine 20 whatever the knobs, ConvBwdData engine 1 only
 *    with k2=4 and k3=0; not engine 12, not another operation, not a prefix clash
 *    (ConvBwdData_eng1 vs ConvBwdData_eng10), not k12=4 for k2=4;
 *  - cuDNN version windows: start inclusive, end exclusive, -1 open;
 *  - shape filters: NHWC and NCHW input shapes with -1 wildcards, filter shapes; unknown
 *    shapes (NULL) never match a shape rule;
 *  - plan tags as the frontend writes them;
 *  - malformed files refused naming the rule: no operation, engine not an integer, knob not
 *    strings, input_shape without shape_format, 3-entry shape, not JSON, no rules;
 *  - the repository's trainer/cuda/cudnn-errata.json loads (argv[1]), and the lookup order
 *    ($CUDNN_ERRATA_JSON_FILE, the cache directory, the repository default). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpt_cudnn_errata.h"

#include "dpt_check.h"

static const char *sample =
    "{ \"version\" : 1,\n"
    "  \"rules\"   : [\n"
    "    { \"rule_id\" : \"ConvBwdData_eng1_k2=2_k3=0\", \"operation\" : \"ConvBwdData\", \"engine\" : 1,\n"
    "      \"knob\" : [\"k2=4\", \"k3=0\"], \"cudnn_version_start\" : 8000, \"cudnn_version_end\" : -1 },\n"
    "    { \"rule_id\" : \"ConvBwdFilter_eng20\", \"operation\" : \"ConvBwdFilter\", \"engine\" : 20,\n"
    "      \"cudnn_version_start\" : 8000, \"cudnn_version_end\" : -1 },\n"
    "    { \"rule_id\" : \"window\", \"operation\" : \"ConvFwd_Add_Add\", \"engine\" : 15,\n"
    "      \"cudnn_version_start\" : 90000, \"cudnn_version_end\" : 91000 },\n"
    "    { \"rule_id\" : \"nhwc 64-channel 3x3\", \"operation\" : \"ConvFwd\", \"engine\" : 7, \"shape_format\" : \"NHWC\",\n"
    "      \"input_shape\" : [-1, 56, 56, 64], \"filter_shape\" : [-1, 64, 3, 3] },\n"
    "    { \"rule_id\" : \"nchw batch 1\", \"operation\" : \"ConvBwdData\", \"engine\" : 3, \"shape_format\" : \"NCHW\",\n"
    "      \"input_shape\" : [1, -1, -1, -1] }\n"
    "  ] }\n";

static const char *blocked(const struct dpt_cudnn_errata *e, const char *tag, long ver, const long long *x,
                           const long long *w)
{
  const struct dpt_errata_rule *r = dpt_cudnn_errata_blocked(e, tag, ver, x, w);
  return r ? r->rule_id : NULL;
}

static void sample_rules(void)
{
  struct dpt_cudnn_errata e;
  struct dpt_err err;
  int rc = dpt_cudnn_errata_parse(&e, sample, strlen(sample), "sample", &err);
  CHECK(rc == 0 && e.n == 5, "sample: rc %d n %d %s", rc, e.n, rc ? err.msg : "");
  if (rc) return;
  char tag[256];
  long long kt[3] = {2, 3, 5}, kv[3] = {4, 0, 1};
  dpt_cudnn_errata_tag(tag, sizeof tag, "ConvBwdData", 1, kt, kv, 3);
  CHECK(!strcmp(tag, "ConvBwdData_eng1_k2=4_k3=0_k5=1"), "tag %s", tag);
  const char *id = blocked(&e, tag, 91900, NULL, NULL);
  CHECK(id && !strcmp(id, "ConvBwdData_eng1_k2=2_k3=0"), "engine 1 k2=4 k3=0 not blocked (%s)", id ? id : "-");
  CHECK(!blocked(&e, "ConvBwdData_eng1_k2=3_k3=0", 91900, NULL, NULL), "k2=3 blocked");
  CHECK(!blocked(&e, "ConvBwdData_eng1_k12=4_k3=0", 91900, NULL, NULL), "k12=4 taken for k2=4");
  CHECK(!blocked(&e, "ConvBwdData_eng1_k2=40_k3=0", 91900, NULL, NULL), "k2=40 taken for k2=4");
  CHECK(!blocked(&e, "ConvBwdData_eng10_k2=4_k3=0", 91900, NULL, NULL), "engine 10 taken for engine 1");
  CHECK(!blocked(&e, "ConvBwdData_eng1_k2=4_k3=0", 7600, NULL, NULL), "blocked before cudnn_version_start");
  id = blocked(&e, "ConvBwdFilter_eng20", 91900, NULL, NULL);
  CHECK(id && !strcmp(id, "ConvBwdFilter_eng20"), "ConvBwdFilter engine 20 without knobs not blocked");
  CHECK(blocked(&e, "ConvBwdFilter_eng20_k1=0_k6=2", 91900, NULL, NULL) != NULL, "engine 20 with knobs not blocked");
  CHECK(!blocked(&e, "ConvBwdFilter_eng12_k1=0", 91900, NULL, NULL), "engine 12 blocked");
  CHECK(!blocked(&e, "ConvFwd_eng20", 91900, NULL, NULL), "another operation blocked");
  /* window [90000, 91000) */
  CHECK(blocked(&e, "ConvFwd_Add_Add_eng15_k5=1", 90000, NULL, NULL) != NULL, "window start not blocked");
  CHECK(blocked(&e, "ConvFwd_Add_Add_eng15_k5=1", 90800, NULL, NULL) != NULL, "inside window not blocked");
  CHECK(!blocked(&e, "ConvFwd_Add_Add_eng15_k5=1", 91000, NULL, NULL), "window end blocked");
  CHECK(!blocked(&e, "ConvFwd_Add_eng15_k5=1", 90800, NULL, NULL), "ConvFwd_Add taken for ConvFwd_Add_Add");
  /* shapes: NHWC [-1, 56, 56, 64] = any batch, 64 channels at 56x56; filter [-1, 64, 3, 3] */
  long long x[4] = {256, 64, 56, 56}, w[4] = {64, 64, 3, 3}, w1[4] = {64, 64, 1, 1}, x2[4] = {256, 128, 56, 56};
  CHECK(blocked(&e, "ConvFwd_eng7_k2=1", 91900, x, w) != NULL, "NHWC shape rule does not match");
  CHECK(!blocked(&e, "ConvFwd_eng7_k2=1", 91900, x, w1), "1x1 filter matched a 3x3 rule");
  CHECK(!blocked(&e, "ConvFwd_eng7_k2=1", 91900, x2, w), "128 channels matched a 64-channel rule");
  CHECK(!blocked(&e, "ConvFwd_eng7_k2=1", 91900, NULL, w), "unknown input shape matched a shape rule");
  long long b1[4] = {1, 8, 7, 7}, b2[4] = {2, 8, 7, 7};
  CHECK(blocked(&e, "ConvBwdData_eng3", 91900, b1, NULL) != NULL, "NCHW batch-1 rule does not match");
  CHECK(!blocked(&e, "ConvBwdData_eng3", 91900, b2, NULL), "batch 2 matched the batch-1 rule");
  dpt_cudnn_errata_free(&e);
}

static void malformed(void)
{
  static const struct {
    const char *what, *text, *needle;
  } cases[] = {
      {"no operation", "{\"rules\": [{\"rule_id\": \"r0\", \"engine\": 1}]}", "rule 0 ('r0'): no \"operation\""},
      {"engine a string", "{\"rules\": [{\"operation\": \"ConvFwd\", \"engine\": 1}, {\"rule_id\": \"r1\", "
                          "\"operation\": \"ConvFwd\", \"engine\": \"7\"}]}", "rule 1 ('r1'): no \"engine\""},
      {"knob not strings", "{\"rules\": [{\"operation\": \"ConvFwd\", \"engine\": 1, \"knob\": [2]}]}", "\"knob\" entry"},
      {"shape without format", "{\"rules\": [{\"operation\": \"ConvFwd\", \"engine\": 1, \"input_shape\": [1,2,3,4]}]}",
       "needs \"shape_format\""},
      {"3-entry shape", "{\"rules\": [{\"operation\": \"ConvFwd\", \"engine\": 1, \"filter_shape\": [1,2,3]}]}",
       "\"filter_shape\" is not 4 integers"},
      {"version a string", "{\"rules\": [{\"operation\": \"ConvFwd\", \"engine\": 1, \"cudnn_version_end\": \"9\"}]}",
       "cudnn_version_end"},
      {"not JSON", "{\"rules\": [", "not valid JSON"},
      {"no rules", "{\"version\": 1}", "no \"rules\" array"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    struct dpt_cudnn_errata e;
    struct dpt_err err;
    int rc = dpt_cudnn_errata_parse(&e, cases[i].text, strlen(cases[i].text), "t.json", &err);
    CHECK(rc == DPT_E_INPUT && strstr(err.msg, "t.json") && strstr(err.msg, cases[i].needle), "%s: rc %d: %s",
          cases[i].what, rc, rc ? err.msg : "accepted");
    if (!rc) dpt_cudnn_errata_free(&e);
  }
}

static void repository_file(const char *path)
{
  struct dpt_cudnn_errata e;
  struct dpt_err err;
  int rc = dpt_cudnn_errata_load(&e, path, &err);
  CHECK(rc == 0, "%s: %s", path, err.msg);
  if (!rc) {
    CHECK(!strcmp(e.path, path), "path %s", e.path);
    printf("%s: %d rules\n", path, e.n);
    dpt_cudnn_errata_free(&e);
  }
  rc = dpt_cudnn_errata_load(&e, "/nonexistent/errata.json", &err);
  CHECK(rc == DPT_E_INPUT && strstr(err.msg, "CUDNN_ERRATA_JSON_FILE"), "missing file: %s", err.msg);
  /* lookup order */
  char out[1024], dir[] = "/tmp/dpt-errata-XXXXXX", f[1100];
  if (!mkdtemp(dir)) return;
  unsetenv("CUDNN_ERRATA_JSON_FILE");
  dpt_cudnn_errata_find(out, sizeof out, dir, path);
  CHECK(!strcmp(out, path), "no cache-dir file: %s", out);
  snprintf(f, sizeof f, "%s/cudnn-errata.json", dir);
  FILE *fp = fopen(f, "w");
  if (fp) fputs("{\"rules\": []}\n", fp), fclose(fp);
  dpt_cudnn_errata_find(out, sizeof out, dir, path);
  CHECK(!strcmp(out, f), "cache-dir file not preferred: %s", out);
  setenv("CUDNN_ERRATA_JSON_FILE", "/x/mine.json", 1);
  dpt_cudnn_errata_find(out, sizeof out, dir, path);
  CHECK(!strcmp(out, "/x/mine.json"), "CUDNN_ERRATA_JSON_FILE not first: %s", out);
  unsetenv("CUDNN_ERRATA_JSON_FILE");
  dpt_cudnn_errata_find(out, sizeof out, NULL, NULL);
  CHECK(!out[0], "nothing given: '%s'", out);
  unlink(f);
  rmdir(dir);
}

int main(int argc, char **argv)
{
  sample_rules();
  malformed();
  if (argc > 1) repository_file(argv[1]);
  else CHECK(0, "usage: test_cudnn_errata <trainer/cuda/cudnn-errata.json>");
  if (!failures) printf("test_cudnn_errata: all checks passed\n");
  return failures != 0;
}
