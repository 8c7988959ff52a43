/* test_ckpt: round trip (with the mixed-precision loss scaler), version-1
 * files still read (no loss scaler), corruption refused with a clear message
 * (also a loss scale out of range under a valid checksum), fallback to the
 * previous good checkpoint, mismatches refused, no temp files left. */
#include <dirent.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "dpt_file.h"
#include "dpt_ckpt.h"

#include "dpt_check.h"

/* Rewrite file `from` as `to` with magic `magic`, the header cut to hdr bytes (version 1:
 * everything before loss_scale) or patched by `patch`, and a fresh CRC-32: what another
 * dpt-train version (or a bug) would have written, not a corruption the checksum catches. */
static void rewrite(const char *from, const char *to, const char *magic, size_t hdr,
                    void (*patch)(struct dpt_ckpt_meta *))
{
  char *file = NULL;
  size_t n = 0;
  struct dpt_err err = {0};
  if (dpt_file_read(from, "checkpoint", NULL, 0, &file, &n, &err) || n < 8 + sizeof(struct dpt_ckpt_meta) + 4) {
    CHECK(0, "%s: %s (%zu bytes)", from, err.msg, n);
    free(file);
    return;
  }
  unsigned char *b = (unsigned char *)file;
  struct dpt_ckpt_meta h;
  memcpy(&h, b + 8, sizeof h);
  if (patch) patch(&h);
  size_t body = (size_t)n - 8 - sizeof h - 4;
  unsigned char *o = malloc(8 + hdr + body + 4);
  memcpy(o, magic, 8);
  memcpy(o + 8, &h, hdr);
  memcpy(o + 8 + hdr, b + 8 + sizeof h, body);
  uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), o, (uInt)(8 + hdr + body));
  memcpy(o + 8 + hdr + body, &crc, 4);
  FILE *f = fopen(to, "wb");
  if (!f || fwrite(o, 1, 8 + hdr + body + 4, f) != 8 + hdr + body + 4) failures++;
  if (f) fclose(f);
  free(b);
  free(o);
}
static void nan_scale(struct dpt_ckpt_meta *h) { h->loss_scale = NAN; }

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
  m.loss_scale = 8192.0f; /* mixed precision: the scaler continues where it was */
  m.scale_good_steps = 1234;
  m.scale_skipped = 5;
  dpt_ckpt_path(dir, 10, p1, sizeof p1);
  CHECK(dpt_ckpt_save(p1, &m, p, s, v, q, &err) == 0, "%s", err.msg);
  CHECK(dpt_ckpt_load(p1, &m, &got, p_, s_, v_, q_, &err) == 0, "%s", err.msg);
  CHECK(!memcmp(p, p_, sizeof p) && !memcmp(s, s_, sizeof s) && !memcmp(v, v_, sizeof v) &&
            !memcmp(q, q_, sizeof q) && got.global_step == 10 && got.step_in_epoch == 3 && got.seed == 77,
        "round trip");
  CHECK(got.loss_scale == 8192.0f && got.scale_good_steps == 1234 && got.scale_skipped == 5,
        "loss scaler round trip: %g %d %lld", (double)got.loss_scale, (int)got.scale_good_steps,
        (long long)got.scale_skipped);
  /* a version-1 file (dpt-train before the loss scaler): read, scaler fields 0 */
  char pv1[320], pbad[320];
  snprintf(pv1, sizeof pv1, "%s/v1.dpt", dir);
  rewrite(p1, pv1, "DPTCKPT1", offsetof(struct dpt_ckpt_meta, loss_scale), NULL);
  memset(p_, 0, sizeof p_);
  CHECK(dpt_ckpt_load(pv1, &m, &got, p_, s_, v_, q_, &err) == 0 && !memcmp(p, p_, sizeof p) &&
            !memcmp(q, q_, sizeof q) && got.global_step == 10 && got.loss_scale == 0 && got.scale_skipped == 0,
        "version 1: %s", err.msg);
  /* a version-2 file (before the optimizer name): read as written by sgd */
  char pv2[320];
  snprintf(pv2, sizeof pv2, "%s/v2.dpt", dir);
  rewrite(p1, pv2, "DPTCKPT2", offsetof(struct dpt_ckpt_meta, optimizer), NULL);
  memset(v_, 0, sizeof v_);
  CHECK(dpt_ckpt_load(pv2, &m, &got, p_, s_, v_, q_, &err) == 0 && !memcmp(v, v_, sizeof v) &&
            got.loss_scale == 8192.0f && !strcmp(got.optimizer, "sgd"), "version 2: %s (optimizer '%s')", err.msg,
        got.optimizer);
  /* the optimizer must match: an sgd checkpoint is refused by a lars run and the other way round,
   * naming both (their momentum buffers mean different things) */
  struct dpt_ckpt_meta ml = m;
  snprintf(ml.optimizer, sizeof ml.optimizer, "lars");
  CHECK(dpt_ckpt_load(pv2, &ml, &got, p_, s_, v_, q_, &err) == DPT_E_INPUT && strstr(err.msg, "--optimizer sgd") &&
            strstr(err.msg, "--optimizer lars"), "sgd checkpoint, lars run: %s", err.msg);
  char pl[320];
  snprintf(pl, sizeof pl, "%s/lars.dpt", dir);
  CHECK(dpt_ckpt_save(pl, &ml, p, s, v, q, &err) == 0, "%s", err.msg);
  CHECK(dpt_ckpt_load(pl, &ml, &got, p_, s_, v_, q_, &err) == 0 && !strcmp(got.optimizer, "lars"), "lars round trip: %s",
        err.msg);
  CHECK(dpt_ckpt_load(pl, &m, &got, p_, s_, v_, q_, &err) == DPT_E_INPUT && strstr(err.msg, "written with --optimizer lars"),
        "lars checkpoint, sgd run: %s", err.msg);
  /* rmsprop-warmup: its optimizer state is the momentum and the second moment (2 n_params) */
  static float v2[2 * NP], v2_[2 * NP];
  for (int i = 0; i < 2 * NP; i++) v2[i] = i < NP ? -i : 0.001f * i;
  struct dpt_ckpt_meta mr = m;
  snprintf(mr.optimizer, sizeof mr.optimizer, "rmsprop-warmup");
  mr.n_opt_state = 2 * NP;
  char pr[320];
  snprintf(pr, sizeof pr, "%s/rmsw.dpt", dir);
  CHECK(dpt_ckpt_save(pr, &mr, p, s, v2, q, &err) == 0, "%s", err.msg);
  CHECK(dpt_ckpt_load(pr, &mr, &got, p_, s_, v2_, q_, &err) == 0 && !memcmp(v2, v2_, sizeof v2) &&
            got.n_opt_state == 2 * NP && !memcmp(q, q_, sizeof q), "rmsprop-warmup round trip: %s", err.msg);
  struct dpt_ckpt_meta mr1 = mr;
  mr1.n_opt_state = NP; /* a run expecting one buffer (corrupt header or another version) */
  CHECK(dpt_ckpt_load(pr, &mr1, &got, p_, s_, v2_, q_, &err) == DPT_E_INPUT && strstr(err.msg, "2000 optimizer-state"),
        "optimizer-state length mismatch: %s", err.msg);
  unlink(pr);
  unlink(pv2);
  unlink(pl);
  /* a loss scale that is not a number, under a valid checksum: refused, saying what */
  snprintf(pbad, sizeof pbad, "%s/badscale.dpt", dir);
  rewrite(p1, pbad, "DPTCKPT3", sizeof(struct dpt_ckpt_meta), nan_scale);
  CHECK(dpt_ckpt_load(pbad, &m, &got, p_, s_, v_, q_, &err) == DPT_E_INPUT && strstr(err.msg, "loss scaler") &&
            strstr(err.msg, pbad), "NaN loss scale: %s", err.msg);
  unlink(pv1);
  unlink(pbad);
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
