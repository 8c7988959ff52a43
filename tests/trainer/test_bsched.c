/* test_bsched: the batch-size schedule's step accounting (dpt_bsched.h).
 *
 *  - Published shapes, counted by hand from the training loader's rule (floor(images / global
 *    batch) steps per epoch): ImageNet's 1,281,167 images, ChainerMN's 64 per GPU then 128 from
 *    epoch 30 on 128 GPUs: 156 steps per epoch (global 8,192), then 78 (16,384); epoch 30 begins
 *    at step 4,680, the 90 epochs end at 9,360; Akiba et al.'s 32 x 1,024 GPUs: 39 steps per epoch.
 *  - Properties over random schedules: every global step maps to one (epoch, step in epoch) and
 *    back; steps within an epoch are below its count; the fractional epoch rises with the step,
 *    lies in [epoch, epoch + 1) and equals step / spe when the batch is constant (the accounting
 *    of a run without a schedule is unchanged).
 *  - Bad input: empty, not starting at 0, epochs not increasing, a batch of 0 or above 65,536, a
 *    missing batch, a wrong separator, too many entries; a global batch larger than the data. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_bsched.h"

#include "dpt_check.h"

static void test_published(void)
{
  struct dpt_bsched b;
  struct dpt_err err = {0};
  int e, s;
  CHECK(dpt_bsched_parse("0:64,30:128", &b, &err) == 0, "%s", err.msg);
  CHECK(dpt_bsched_plan(&b, 1281167, 128, &err) == 0, "%s", err.msg);
  CHECK(b.n == 2 && b.spe[0] == 156 && b.spe[1] == 78, "chainermn: %d phases, spe %d %d", b.n, b.spe[0], b.spe[1]);
  CHECK(dpt_bsched_epoch_start(&b, 30) == 4680, "epoch 30 starts at %ld", dpt_bsched_epoch_start(&b, 30));
  CHECK(dpt_bsched_epoch_start(&b, 90) == 9360, "90 epochs: %ld steps", dpt_bsched_epoch_start(&b, 90));
  CHECK(dpt_bsched_batch(&b, 29) == 64 && dpt_bsched_batch(&b, 30) == 128 && dpt_bsched_batch(&b, 89) == 128,
        "batches %d %d %d", dpt_bsched_batch(&b, 29), dpt_bsched_batch(&b, 30), dpt_bsched_batch(&b, 89));
  dpt_bsched_locate(&b, 4679, &e, &s);
  CHECK(e == 29 && s == 155, "step 4679: epoch %d step %d", e, s);
  dpt_bsched_locate(&b, 4680, &e, &s);
  CHECK(e == 30 && s == 0, "step 4680: epoch %d step %d", e, s);
  dpt_bsched_locate(&b, 4680 + 78 + 39, &e, &s);
  CHECK(e == 31 && s == 39, "step 4797: epoch %d step %d", e, s);
  CHECK(dpt_bsched_epoch(&b, 4680 + 78 + 39) == 31.5, "fractional epoch %g", dpt_bsched_epoch(&b, 4797));
  char str[64];
  dpt_bsched_str(&b, str, sizeof str);
  CHECK(!strcmp(str, "0:64,30:128"), "str '%s'", str);

  dpt_bsched_const(&b, 32);
  CHECK(dpt_bsched_plan(&b, 1281167, 1024, &err) == 0 && b.spe[0] == 39, "akiba: spe %d", b.spe[0]);
  CHECK(dpt_bsched_epoch_start(&b, 90) == 3510, "akiba 90 epochs: %ld", dpt_bsched_epoch_start(&b, 90));
  dpt_bsched_str(&b, str, sizeof str);
  CHECK(!strcmp(str, "32"), "str '%s'", str);
}

static void test_properties(void)
{
  srand(7);
  for (int t = 0; t < 300; t++) {
    struct dpt_bsched b;
    struct dpt_err err = {0};
    char spec[256];
    int n = 1 + rand() % 5, o = 0, ep = 0;
    for (int i = 0; i < n; i++) {
      o += snprintf(spec + o, sizeof spec - o, "%s%d:%d", i ? "," : "", ep, 1 + rand() % 64);
      ep += 1 + rand() % 4;
    }
    long images = 50 + rand() % 5000;
    int vranks = 1 + rand() % 4;
    CHECK(dpt_bsched_parse(spec, &b, &err) == 0 && b.n == n, "'%s': %s", spec, err.msg);
    if (dpt_bsched_plan(&b, images, vranks, &err)) continue; /* a phase larger than the data: tested below */
    int epochs = ep + 3;
    long total = dpt_bsched_epoch_start(&b, epochs);
    double prev = -1;
    for (long st = 0; st < total; st++) {
      int e, s;
      dpt_bsched_locate(&b, st, &e, &s);
      double fe = dpt_bsched_epoch(&b, st);
      int spe = dpt_bsched_spe(&b, e);
      CHECK(e >= 0 && e < epochs && s >= 0 && s < spe, "'%s' step %ld: epoch %d step %d of %d", spec, st, e, s, spe);
      CHECK(dpt_bsched_epoch_start(&b, e) + s == st, "'%s' step %ld: epoch %d starts at %ld, + %d", spec, st, e,
            dpt_bsched_epoch_start(&b, e), s);
      CHECK(spe == (int)(images / ((long)dpt_bsched_batch(&b, e) * vranks)), "'%s' epoch %d: %d steps", spec, e, spe);
      CHECK(fe > prev && fe >= e && fe < e + 1, "'%s' step %ld: fractional epoch %.17g after %.17g (epoch %d)", spec,
            st, fe, prev, e);
      prev = fe;
    }
  }
  struct dpt_bsched c;
  struct dpt_err err = {0};
  dpt_bsched_const(&c, 48);
  CHECK(dpt_bsched_plan(&c, 60000, 2, &err) == 0 && c.spe[0] == 625, "constant: %d", c.spe[0]);
  for (long st = 0; st < 3 * 625; st += 7)
    CHECK(dpt_bsched_epoch(&c, st) == (double)st / 625, "constant batch, step %ld: %.17g", st, dpt_bsched_epoch(&c, st));
}

static void bad(const char *spec, const char *want)
{
  struct dpt_bsched b;
  struct dpt_err err = {0};
  int rc = dpt_bsched_parse(spec, &b, &err);
  CHECK(rc == DPT_E_INPUT && strstr(err.msg, want), "'%s': rc %d, '%s' lacks '%s'", spec, rc, err.msg, want);
}

static void test_bad(void)
{
  bad("", "need EPOCH:BATCH");
  bad("5:64", "starting at 0");
  bad("0:64,30:32,20:128", "increasing");
  bad("0:64,30:128,30:256", "increasing");
  bad("0:0", "[1, 65536]");
  bad("0:70000", "[1, 65536]");
  bad("0:64,30", "need EPOCH:BATCH");
  bad("0:64;30:128", "[1, 65536]");
  bad("0:64,1.5:128", "need EPOCH:BATCH");
  bad("0:1,1:1,2:1,3:1,4:1,5:1,6:1,7:1,8:1,9:1,10:1,11:1,12:1,13:1,14:1,15:1,16:1", "more than 16");
  struct dpt_bsched b;
  struct dpt_err err = {0};
  CHECK(dpt_bsched_parse("0:64,2:4096", &b, &err) == 0, "%s", err.msg);
  int rc = dpt_bsched_plan(&b, 60000, 16, &err);
  CHECK(rc == DPT_E_INPUT && strstr(err.msg, "per-rank batch 4096 from epoch 2") && strstr(err.msg, "65536"),
        "plan: rc %d '%s'", rc, err.msg);
}

int main(void)
{
  test_published();
  test_properties();
  test_bad();
  if (!failures) printf("ok\n");
  return failures != 0;
}
