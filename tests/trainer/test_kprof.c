/* test_kprof: the per-step kernel breakdown (trainer/cuda/dpt_kprof.h), no device.
 *
 *  test_kprof NAMES.tsv           the checks below (NAMES: tests/trainer/kprof/kernel-names.tsv)
 *  test_kprof --records R.tsv     print the breakdown JSON of a records file (for the Python
 *                                 cross-check in test_breakdown.py)
 *
 *  - the compiled-in bench/gpu/kernel-classes.tsv parses; every golden name gets its class
 *    (cuDNN / xmma / CUTLASS / cuBLAS / PyTorch / NCCL / dpt names, mangled and demangled);
 *  - synthetic records with known answers: two streams overlapping, a gap inside a step, a
 *    gap between steps (counted in the earlier step's span), a kernel outside the recorded
 *    steps, memcpy / memset (not kernels, not busy), steps out of order in the input, a
 *    step whose next step starts before its own last kernel ends; medians of an even
 *    number of steps;
 *  - bad tables refused naming file:line; bad records refused;
 *  - the records TSV and the JSON written and read back. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "dpt_kprof.h"

#include "dpt_check.h"

static int cls_index(const struct dpt_kclasses *k, const char *name)
{
  for (int c = 0; c < k->n_classes; c++)
    if (!strcmp(k->name[c], name)) return c;
  return -1;
}

static void golden(const struct dpt_kclasses *k, const char *path)
{
  FILE *f = fopen(path, "r");
  CHECK(f != NULL, "cannot open %s", path);
  if (!f) return;
  char line[8192];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    if (!line[0] || line[0] == '#') continue;
    char *tab = strchr(line, '\t');
    if (!tab) continue;
    *tab = '\0';
    int got = dpt_kclass_of(k, tab + 1);
    CHECK(cls_index(k, line) >= 0, "golden class '%s' is not in the table", line);
    CHECK(got >= 0 && !strcmp(k->name[got], line), "'%.80s...' is %s, expected %s", tab + 1, k->name[got], line);
    n++;
  }
  fclose(f);
  CHECK(n >= 40, "only %d golden names", n);
  printf("%d golden kernel names classified as expected\n", n);
}

#define NS(ms) ((unsigned long long)((ms) * 1000000.0 + 0.5))

static void synthetic(const struct dpt_kclasses *k)
{
  /* Times in ms.  Step 7: stream 1 conv [0, 4], stream 2 norm [3, 5] (overlap 1), gap, gemm
   * [6, 7], memcpy [7, 8]; step 8 starts at 10 (gap 7..10 belongs to step 7's span).
   * Step 8: elementwise [10, 11] and [10.5, 12] (same class, overlapping), comm [11.5, 14] on
   * stream 3, optimizer [14, 14.5]; step 9 starts at 14.2, before step 8's last end 14.5, so
   * step 8 spans to 14.5.  Step 9: loss [14.2, 15], memset [15, 15.1], unknown kernel
   * [15.5, 16].  A kernel with step -1 at [2, 3] is ignored. */
  struct dpt_krec r[] = {
      {"void at::native::batch_norm_collect_statistics_kernel<float>", DPT_KREC_KERNEL, 7, 2, NS(3), NS(5)},
      {"sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_kernel", DPT_KREC_KERNEL, 7, 1, NS(0), NS(4)},
      {"ampere_sgemm_128x64_nn", DPT_KREC_KERNEL, 7, 1, NS(6), NS(7)},
      {"Memcpy HtoD (Pinned -> Device)", DPT_KREC_MEMCPY, 7, 1, NS(7), NS(8)},
      {"_ZL5k_addI6__halfEvPKT_S3_PS1_im", DPT_KREC_KERNEL, 8, 1, NS(10), NS(11)},
      {"_ZL6k_reluI6__halfEvPKT_PS1_m", DPT_KREC_KERNEL, 8, 2, NS(10.5), NS(12)},
      {"ncclDevKernel_AllReduce_Sum_f32_RING_LL", DPT_KREC_KERNEL, 8, 3, NS(11.5), NS(14)},
      {"_Z16dpt_k_optim_stepILi1EEvPK14dpt_optim_segPK16dpt_optim_chunk18dpt_cuda_optim_args", DPT_KREC_KERNEL, 8, 1,
       NS(14), NS(14.5)},
      {"_ZL6k_xentPKfPKiiffPfS3_Pi", DPT_KREC_KERNEL, 9, 1, NS(14.2), NS(15)},
      {"Memset (Device)", DPT_KREC_MEMSET, 9, 1, NS(15), NS(15.1)},
      {"some_unknown_kernel", DPT_KREC_KERNEL, 9, 1, NS(15.5), NS(16)},
      {"sm80_xmma_wgrad_implicit_gemm_kernel", DPT_KREC_KERNEL, -1, 1, NS(2), NS(3)},
  };
  struct dpt_kbreakdown b;
  struct dpt_err err;
  int rc = dpt_kprof_breakdown(k, r, sizeof r / sizeof *r, &b, &err);
  CHECK(rc == 0, "breakdown: %s", err.msg);
  if (rc) return;
  CHECK(b.n_steps == 3 && b.step[0].step == 7 && b.step[1].step == 8 && b.step[2].step == 9, "steps");
  int conv = cls_index(k, "conv"), norm = cls_index(k, "norm"), gemm = cls_index(k, "gemm"),
      ew = cls_index(k, "elementwise"), comm = cls_index(k, "comm"), opt = cls_index(k, "optimizer"),
      loss = cls_index(k, "loss"), other = cls_index(k, "other");
  CHECK(conv >= 0 && norm >= 0 && gemm >= 0 && ew >= 0 && comm >= 0 && opt >= 0 && loss >= 0 && other == k->n_classes - 1,
        "classes missing");
  const struct dpt_kstep *s7 = &b.step[0], *s8 = &b.step[1], *s9 = &b.step[2];
#define EQ(a, b) (fabs((double)(a) - (double)(b)) < 1e-3)
  /* step 7: span 0..10, busy [0,5] + [6,7] = 6, idle 4 (of which 2 between steps: the memcpy
   * ends at 8, step 8 starts at 10), 3 kernels, copy 1 ms */
  CHECK(s7->kernels == 3 && s7->copies == 1 && EQ(s7->span_ns, NS(10)) && EQ(s7->busy_ns, NS(6)) &&
            EQ(s7->idle_ns, NS(4)) && EQ(s7->gap_ns, NS(2)) && EQ(s7->copy_ns, NS(1)),
        "step 7: %g kernels %g copies span %g busy %g idle %g copy %g", s7->kernels, s7->copies, s7->span_ns,
        s7->busy_ns, s7->idle_ns, s7->copy_ns);
  CHECK(EQ(s7->class_ns[conv], NS(4)) && EQ(s7->class_ns[norm], NS(2)) && EQ(s7->class_ns[gemm], NS(1)) &&
            s7->class_n[conv] == 1 && s7->class_n[norm] == 1, "step 7 classes");
  /* step 8: span 10..14.5 (next step starts at 14.2, before 14.5), busy [10,14.5] = 4.5, idle 0 */
  CHECK(s8->kernels == 4 && EQ(s8->span_ns, NS(4.5)) && EQ(s8->busy_ns, NS(4.5)) && EQ(s8->idle_ns, 0) &&
            EQ(s8->gap_ns, 0),
        "step 8: %g kernels span %g busy %g idle %g", s8->kernels, s8->span_ns, s8->busy_ns, s8->idle_ns);
  CHECK(EQ(s8->class_ns[ew], NS(2.5)) && s8->class_n[ew] == 2 && EQ(s8->class_ns[comm], NS(2.5)) &&
            EQ(s8->class_ns[opt], NS(0.5)), "step 8 classes: ew %g comm %g opt %g", s8->class_ns[ew],
        s8->class_ns[comm], s8->class_ns[opt]);
  /* step 9 (last): span 14.2..16, busy 0.8 + 0.5, idle 0.5 (all inside the step: no gap), one memset */
  CHECK(s9->kernels == 2 && s9->copies == 1 && EQ(s9->span_ns, NS(1.8)) && EQ(s9->busy_ns, NS(1.3)) &&
            EQ(s9->idle_ns, NS(0.5)) && EQ(s9->gap_ns, 0) && EQ(s9->class_ns[other], NS(0.5)) && EQ(s9->class_ns[loss], NS(0.8)),
        "step 9: span %g busy %g idle %g", s9->span_ns, s9->busy_ns, s9->idle_ns);
  /* medians over 3 steps */
  CHECK(b.median.kernels == 3 && EQ(b.median.span_ns, NS(4.5)) && EQ(b.median.idle_ns, NS(0.5)) &&
            EQ(b.median.busy_ns, NS(4.5)), "median: kernels %g span %g idle %g busy %g", b.median.kernels,
        b.median.span_ns, b.median.idle_ns, b.median.busy_ns);
  /* JSON round trip */
  char *txt = NULL;
  size_t tl = 0;
  FILE *mf = open_memstream(&txt, &tl);
  CHECK(mf && !dpt_kprof_write_json(&b, "synthetic", mf, &err), "json: %s", err.msg);
  if (mf) fclose(mf);
  json_error_t je;
  json_t *root = txt ? json_loads(txt, 0, &je) : NULL;
  json_t *steps = json_object_get(root, "steps"), *med = json_object_get(root, "median");
  CHECK(root && json_array_size(steps) == 3 && EQ(json_real_value(json_object_get(med, "idle_ms")), 0.5) &&
            EQ(json_real_value(json_object_get(json_array_get(steps, 0), "idle_pct")), 40.0) &&
            EQ(json_real_value(json_object_get(json_array_get(steps, 0), "gap_ms")), 2.0) &&
            EQ(json_real_value(json_object_get(json_array_get(steps, 0), "gap_pct")), 20.0) &&
            EQ(json_real_value(json_object_get(med, "gap_ms")), 0.0) &&
            EQ(json_real_value(json_object_get(json_object_get(json_array_get(steps, 1), "class_ms"), "comm")), 2.5),
        "JSON read back: %s", txt ? txt : "(none)");
  json_decref(root);
  free(txt);
  /* an even number of steps: the median is the mean of the middle two */
  struct dpt_kbreakdown b2;
  rc = dpt_kprof_breakdown(k, r, 8, &b2, &err); /* steps 7 and 8 only */
  CHECK(rc == 0 && b2.n_steps == 2 && EQ(b2.median.kernels, 3.5) && EQ(b2.median.idle_ns, NS(2)),
        "even median: kernels %g idle %g", b2.median.kernels, b2.median.idle_ns);
  if (!rc) dpt_kprof_free(&b2);
  /* records TSV: names with tabs flattened */
  struct dpt_krec odd = {"a\tb\nc", DPT_KREC_KERNEL, 1, 4, 10, 20};
  txt = NULL;
  mf = open_memstream(&txt, &tl);
  if (mf) {
    dpt_kprof_write_records(&odd, 1, mf);
    fclose(mf);
  }
  CHECK(txt && !strcmp(txt, "1\tkernel\t4\t10\t20\ta b c\n"), "records line: '%s'", txt ? txt : "");
  free(txt);
  dpt_kprof_free(&b);
  /* bad records */
  struct dpt_krec bad[] = {{"x", DPT_KREC_KERNEL, 1, 0, 20, 10}, {NULL, DPT_KREC_KERNEL, 1, 0, 1, 2}};
  CHECK(dpt_kprof_breakdown(k, bad, 1, &b, &err) == DPT_E_INPUT && strstr(err.msg, "ends before"), "end < start: %s",
        err.msg);
  CHECK(dpt_kprof_breakdown(k, bad + 1, 1, &b, &err) == DPT_E_INPUT && strstr(err.msg, "no name"), "no name: %s",
        err.msg);
#undef EQ
}

static void bad_tables(void)
{
  static const struct {
    const char *text, *needle;
  } c[] = {
      {"conv\timplicit_gemm\nnorm bn_fw\n", "t.tsv:2"},
      {"# c\n\nconv\timplicit_gemm\nother\tx\n", "t.tsv:4: 'other'"},
      {"conv\t\n", "t.tsv:1"},
      {"\tpattern\n", "t.tsv:1"},
      {"a\tb\tc\n", "t.tsv:1"},
      {"averyveryverylongclassname\tx\n", "t.tsv:1"},
  };
  for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
    struct dpt_kclasses k;
    struct dpt_err err;
    int rc = dpt_kclasses_parse(&k, c[i].text, strlen(c[i].text), "t.tsv", &err);
    CHECK(rc == DPT_E_INPUT && strstr(err.msg, c[i].needle), "table %zu: rc %d %s", i, rc, rc ? err.msg : "accepted");
    if (!rc) dpt_kclasses_free(&k);
  }
  /* too many classes */
  char many[4096] = "";
  for (int i = 0; i < DPT_KCLASS_MAX; i++) snprintf(many + strlen(many), sizeof many - strlen(many), "c%d\tp%d\n", i, i);
  struct dpt_kclasses k;
  struct dpt_err err;
  CHECK(dpt_kclasses_parse(&k, many, strlen(many), "t.tsv", &err) == DPT_E_INPUT && strstr(err.msg, "more than"),
        "too many classes: %s", err.msg);
}

/* --records FILE: the JSON of a records TSV (the Python cross-check). */
static int records_mode(const char *path)
{
  struct dpt_kclasses k;
  struct dpt_err err;
  if (dpt_kclasses_builtin(&k, &err)) return fprintf(stderr, "%s\n", err.msg), 2;
  FILE *f = fopen(path, "r");
  if (!f) return perror(path), 2;
  size_t n = 0, cap = 0;
  struct dpt_krec *r = NULL;
  char line[16384];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    char kind[16];
    int step, off = 0;
    unsigned stream;
    unsigned long long a, b;
    if (sscanf(line, "%d\t%15[a-z]\t%u\t%llu\t%llu\t%n", &step, kind, &stream, &a, &b, &off) < 5 || !off) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 256;
      r = realloc(r, cap * sizeof *r);
      if (!r) return 2;
    }
    r[n++] = (struct dpt_krec){strdup(line + off), !strcmp(kind, "kernel") ? DPT_KREC_KERNEL
                                                    : !strcmp(kind, "memcpy") ? DPT_KREC_MEMCPY : DPT_KREC_MEMSET,
                               step, stream, a, b};
  }
  fclose(f);
  struct dpt_kbreakdown b;
  int rc = dpt_kprof_breakdown(&k, r, n, &b, &err);
  if (!rc) rc = dpt_kprof_write_json(&b, "records", stdout, &err);
  if (rc) fprintf(stderr, "%s\n", err.msg);
  for (size_t i = 0; i < n; i++) free((char *)r[i].name);
  free(r);
  if (!rc) dpt_kprof_free(&b);
  dpt_kclasses_free(&k);
  return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
  if (argc == 3 && !strcmp(argv[1], "--records")) return records_mode(argv[2]);
  struct dpt_kclasses k;
  struct dpt_err err;
  int rc = dpt_kclasses_builtin(&k, &err);
  CHECK(rc == 0, "builtin table: %s", err.msg);
  if (rc) return 1;
  printf("kernel classes (compiled in):");
  for (int c = 0; c < k.n_classes; c++) printf(" %s", k.name[c]);
  printf(", %d rules\n", k.n_rules);
  if (argc > 1) golden(&k, argv[1]);
  else CHECK(0, "usage: test_kprof tests/trainer/kprof/kernel-names.tsv");
  synthetic(&k);
  bad_tables();
  dpt_kclasses_free(&k);
  if (!failures) printf("test_kprof: all checks passed\n");
  return failures != 0;
}
