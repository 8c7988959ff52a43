/* test_ckpt: round trip, corruption refused with a clear message, fallback
 * to the previous good checkpoint, mismatches refused, no temp files left. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpt_ckpt.h"

#include "dpt_check.h"

static int warnings;
static void warn(const char *m)
{
  warnings++;
  fprintf(stderr, "  (warning) %s\n", m);
}

int main(void)
{
  struct dpt_err err = {0};
  char dir[128], p1[300], p2[300], found[400];
  snprintf(dir, sizeof dir, "/tmp/dpt-test-ckpt-%d", (int)getpid());
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
  if (system(cmd)) return 1;
  enum { NP = 1000, NS = 40 };
  float p[NP], s[NS], v[NP], q[NP], p_[NP], s_[NS], v_[NP], q_[NP];
  for (int i = 0; i < NP; i++) p[i] = i * 0.5f, v[i] = -i, q[i] = i * 2.0f;
  for (int i = 0; i < NS; i++) s[i] = i + 0.25f;
  struct dpt_ckpt_meta m = {0}, got;
  m.global_step = 10;
  m.epoch = 1;
  m.step_in_epoch = 3;
  m.seed = 77;
  m.world_size = 2;
  m.batch = 32;
  m.n_params = NP;
  m.n_state = NS;
  m.n_pending = NP;
  snprintf(m.model, sizeof m.model, "resnet50 test");
  dpt_ckpt_path(dir, 10, p1, sizeof p1);
  CHECK(dpt_ckpt_save(p1, &m, p, s, v, q, &err) == 0, "%s", err.msg);
  CHECK(dpt_ckpt_load(p1, &m, &got, p_, s_, v_, q_, &err) == 0, "%s", err.msg);
  CHECK(!memcmp(p, p_, sizeof p) && !memcmp(s, s_, sizeof s) && !memcmp(v, v_, sizeof v) &&
            !memcmp(q, q_, sizeof q) && got.global_step == 10 && got.step_in_epoch == 3 && got.seed == 77,
        "round trip");
  m.global_step = 20;
  p[5] = 99;
  dpt_ckpt_path(dir, 20, p2, sizeof p2);
  CHECK(dpt_ckpt_save(p2, &m, p, s, v, q, &err) == 0, "%s", err.msg);
  CHECK(dpt_ckpt_find_latest(dir, &m, found, sizeof found, warn, &err) == 1 && !strcmp(found, p2), "latest %s", found);
  /* no temporary file left behind */
  DIR *d = opendir(dir);
  struct dirent *e;
  int files = 0;
  while ((e = readdir(d))) files += e->d_name[0] != '.';
  closedir(d);
  CHECK(files == 2, "%d files in the checkpoint dir (temp files left?)", files);

  /* flip one byte in the newest: refused by checksum, the older one is used */
  FILE *f = fopen(p2, "r+b");
  fseek(f, 500, SEEK_SET);
  int c = fgetc(f);
  fseek(f, 500, SEEK_SET);
  fputc(c ^ 0x40, f);
  fclose(f);
  CHECK(dpt_ckpt_load(p2, &m, &got, p_, s_, v_, q_, &err) == DPT_E_INPUT && strstr(err.msg, p2) &&
            strstr(err.msg, "checksum mismatch"), "corrupt: %s", err.msg);
  warnings = 0;
  CHECK(dpt_ckpt_find_latest(dir, &m, found, sizeof found, warn, &err) == 1 && !strcmp(found, p1) && warnings == 1,
        "fallback to the previous good checkpoint: %s", found);
  CHECK(access(p2, F_OK) == 0, "the corrupt file must be left for inspection");
  /* truncated */
  if (truncate(p2, 700)) failures++;
  CHECK(dpt_ckpt_load(p2, &m, &got, p_, s_, v_, q_, &err) == DPT_E_INPUT && strstr(err.msg, "truncated or corrupt"),
        "truncated: %s", err.msg);
  /* other model / other ranks */
  struct dpt_ckpt_meta other = m;
  snprintf(other.model, sizeof other.model, "resnet50 other");
  CHECK(dpt_ckpt_load(p1, &other, &got, p_, s_, v_, q_, &err) == DPT_E_INPUT && strstr(err.msg, "same model"),
        "model mismatch: %s", err.msg);
  other = m;
  other.world_size = 4;
  CHECK(dpt_ckpt_load(p1, &other, &got, p_, s_, v_, q_, &err) == DPT_E_INPUT && strstr(err.msg, "2 ranks"),
        "ranks mismatch: %s", err.msg);
  CHECK(dpt_ckpt_save("/nonexistent-dir/x.dpt", &m, p, s, v, q, &err) == DPT_E_RUNTIME &&
            strstr(err.msg, "/nonexistent-dir/x.dpt"), "unwritable: %s", err.msg);
  dpt_ckpt_prune(dir, 1);
  CHECK(access(p1, F_OK) != 0 && access(p2, F_OK) == 0, "prune keeps the newest");
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) failures++;
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else printf("ok: checkpoints\n");
  return failures ? 1 : 0;
}
