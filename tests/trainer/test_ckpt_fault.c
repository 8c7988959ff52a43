/* test_ckpt_fault: checkpoint k+1 interrupted — at a file size limit
 * (RLIMIT_FSIZE, the stand-in for a full disk) at a sweep of byte offsets, by
 * SIGXFSZ, by SIGKILL of the writer at random points, or left truncated at
 * every byte — never costs checkpoint k: dpt_ckpt_find_latest() (what
 * --resume auto uses) returns k (or a later complete one) with k's data, and
 * the error says the disk/limit is the cause and what to do.
 * usage: test_ckpt_fault */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dpt_ckpt.h"

#include "dpt_check.h"

static void quiet(const char *m) { (void)m; }

/* arrays of a checkpoint for `step`: a pattern that names the step */
static void fill(float *p, float *s, float *v, size_t np, size_t ns, uint64_t step)
{
  for (size_t i = 0; i < np; i++) p[i] = (float)step + (float)(i % 1000) * 1e-3f, v[i] = -(float)step;
  for (size_t i = 0; i < ns; i++) s[i] = (float)step * 2.0f;
}

/* The newest checkpoint in dir verifies, is at least step `min`, and holds
 * that step's data; returns its step (0 when none). */
static uint64_t check_latest(const char *dir, struct dpt_ckpt_meta *m, uint64_t min, const char *what)
{
  char found[400];
  struct dpt_err err = {0};
  struct dpt_ckpt_meta got;
  size_t np = m->n_params, ns = m->n_state;
  float *p = malloc(np * 4), *s = malloc(ns * 4), *v = malloc(np * 4);
  float *pe = malloc(np * 4), *se = malloc(ns * 4), *ve = malloc(np * 4);
  uint64_t step = 0;
  if (!p || !s || !v || !pe || !se || !ve) {
    CHECK(0, "out of memory");
    goto out;
  }
  int r = dpt_ckpt_find_latest(dir, m, found, sizeof found, quiet, &err);
  CHECK(r == 1, "%s: no checkpoint found in %s", what, dir);
  if (r != 1) goto out;
  CHECK(dpt_ckpt_load(found, m, &got, p, s, v, NULL, &err) == 0, "%s: %s", what, err.msg);
  step = got.global_step;
  CHECK(step >= min, "%s: newest checkpoint is step %llu, want >= %llu", what, (unsigned long long)step,
        (unsigned long long)min);
  fill(pe, se, ve, np, ns, step);
  CHECK(!memcmp(p, pe, np * 4) && !memcmp(s, se, ns * 4) && !memcmp(v, ve, np * 4),
        "%s: step %llu does not hold that step's data", what, (unsigned long long)step);
out:
  free(p), free(s), free(v), free(pe), free(se), free(ve);
  return step;
}

static int count_tmp(const char *dir)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  if (!d) return -1;
  while ((e = readdir(d))) n += strstr(e->d_name, ".tmp.") != NULL;
  closedir(d);
  return n;
}

/* In a child: ignore SIGXFSZ (or not), cap the file size at `limit` bytes and
 * write checkpoint `step`.  Returns the child's wait status; msg gets its error. */
static int save_limited(const char *dir, struct dpt_ckpt_meta *m, uint64_t step, long long limit, int ignore,
                        char *msg, size_t len)
{
  int fds[2], status = 0;
  if (pipe(fds)) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (ignore) signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {(rlim_t)limit, (rlim_t)limit};
    if (setrlimit(RLIMIT_FSIZE, &rl)) _exit(90);
    size_t np = m->n_params, ns = m->n_state;
    float *p = malloc(np * 4), *s = malloc(ns * 4), *v = malloc(np * 4);
    if (!p || !s || !v) _exit(91);
    fill(p, s, v, np, ns, step);
    struct dpt_ckpt_meta mm = *m;
    mm.global_step = step;
    char path[400];
    struct dpt_err err = {0};
    dpt_ckpt_path(dir, step, path, sizeof path);
    int rc = dpt_ckpt_save(path, &mm, p, s, v, NULL, &err);
    if (rc) {
      ssize_t w = write(fds[1], err.msg, strlen(err.msg));
      (void)w;
    }
    free(p), free(s), free(v);
    _exit(rc ? 1 : 0);
  }
  close(fds[1]);
  size_t got = 0;
  ssize_t k;
  while (got + 1 < len && (k = read(fds[0], msg + got, len - 1 - got)) > 0) got += (size_t)k;
  msg[got] = 0;
  close(fds[0]);
  waitpid(pid, &status, 0);
  return status;
}

static int save_parent(const char *dir, struct dpt_ckpt_meta *m, uint64_t step)
{
  size_t np = m->n_params, ns = m->n_state;
  float *p = malloc(np * 4), *s = malloc(ns * 4), *v = malloc(np * 4);
  struct dpt_err err = {0};
  char path[400];
  int rc = -1;
  if (p && s && v) {
    fill(p, s, v, np, ns, step);
    m->global_step = step;
    dpt_ckpt_path(dir, step, path, sizeof path);
    rc = dpt_ckpt_save(path, m, p, s, v, NULL, &err);
    CHECK(rc == 0, "save step %llu: %s", (unsigned long long)step, err.msg);
  }
  free(p), free(s), free(v);
  return rc;
}

int main(void)
{
  char dir[128], cmd[300], path[400], msg[1200];
  snprintf(dir, sizeof dir, "/tmp/dpt-test-ckpt-fault-%d", (int)getpid());
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
  if (system(cmd)) return 1;
  struct dpt_ckpt_meta m = {0};
  m.world_size = 2;
  m.batch = 8;
  m.n_params = 20000;
  m.n_state = 64;
  snprintf(m.model, sizeof m.model, "fault test");

  /* 1. checkpoint k = 10, then k+1 = 20 under a file size limit at byte offsets */
  save_parent(dir, &m, 10);
  dpt_ckpt_path(dir, 10, path, sizeof path);
  struct stat st;
  stat(path, &st);
  long long size = (long long)st.st_size;
  long long limits[] = {0, 1, 8, 100, 4096, size / 2, size - 4, size - 1};
  for (size_t i = 0; i < sizeof limits / sizeof *limits; i++) {
    int ws = save_limited(dir, &m, 20, limits[i], 1, msg, sizeof msg);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 1, "limit %lld: writer ended with status 0x%x, want exit 1",
          limits[i], ws);
    CHECK(strstr(msg, "ckpt-0000000020.dpt") && strstr(msg, "file size limit") &&
              strstr(msg, "previous checkpoints in that directory are kept") && strstr(msg, "free space"),
          "limit %lld: message '%s'", limits[i], msg);
    if (i == 5) printf("limit %lld bytes: %s\n", limits[i], msg);
    CHECK(count_tmp(dir) == 0, "limit %lld: the partial temporary file is left behind", limits[i]);
    CHECK(check_latest(dir, &m, 10, "after a size-limited write") == 10, "limit %lld: k is not the newest",
          limits[i]);
  }
  /* at the exact size it fits */
  int ws = save_limited(dir, &m, 20, size, 1, msg, sizeof msg);
  CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "limit = size: status 0x%x: %s", ws, msg);
  CHECK(check_latest(dir, &m, 20, "limit = size") == 20, "limit = size: 20 is not the newest");
  dpt_ckpt_path(dir, 20, path, sizeof path);
  unlink(path);

  /* 2. SIGXFSZ not ignored: the writer dies mid-write, its temp file stays, k is used */
  ws = save_limited(dir, &m, 20, size / 3, 0, msg, sizeof msg);
  CHECK(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGXFSZ, "default SIGXFSZ: status 0x%x", ws);
  CHECK(count_tmp(dir) == 1, "default SIGXFSZ: %d temp files, want the killed writer's 1", count_tmp(dir));
  CHECK(check_latest(dir, &m, 10, "writer killed by SIGXFSZ") == 10, "SIGXFSZ: k is not the newest");

  /* 3. a complete checkpoint k+1 truncated at every byte (a file system that
   *    lost the tail): refused, k used */
  {
    struct dpt_ckpt_meta small = m;
    small.n_params = 100;
    small.n_state = 8;
    char sdir[200], p30[400], p40[400];
    snprintf(sdir, sizeof sdir, "%s/small", dir);
    mkdir(sdir, 0777);
    save_parent(sdir, &small, 30);
    save_parent(sdir, &small, 40);
    dpt_ckpt_path(sdir, 30, p30, sizeof p30);
    dpt_ckpt_path(sdir, 40, p40, sizeof p40);
    FILE *f = fopen(p40, "rb");
    stat(p40, &st);
    size_t n40 = (size_t)st.st_size;
    unsigned char *b = malloc(n40);
    if (!f || !b || fread(b, 1, n40, f) != n40) return 1;
    fclose(f);
    int bad = 0;
    for (size_t cut = 0; cut < n40; cut++) {
      f = fopen(p40, "wb");
      if (!f || fwrite(b, 1, cut, f) != cut || fclose(f)) return 1;
      char found[400];
      struct dpt_err err = {0};
      if (dpt_ckpt_find_latest(sdir, &small, found, sizeof found, quiet, &err) != 1 || strcmp(found, p30)) bad++;
    }
    CHECK(bad == 0, "truncated at %d of %zu byte offsets: checkpoint k not chosen", bad, n40);
    printf("truncation sweep: %zu offsets, k chosen at all of them\n", n40);
    free(b);
  }

  /* 4. kill -9 of a writer that writes k+1, k+2, ... at random points */
  {
    struct dpt_ckpt_meta big = m;
    big.n_params = 1 << 20; /* 8 MiB + per checkpoint: the kill lands inside writes */
    char bdir[200];
    snprintf(bdir, sizeof bdir, "%s/big", dir);
    mkdir(bdir, 0777);
    save_parent(bdir, &big, 10);
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    uint64_t last = 10;
    int leftovers = 0;
    for (int round = 0; round < 8; round++) {
      pid_t pid = fork();
      if (pid == 0) {
        for (uint64_t step = last + 1;; step++) {
          struct dpt_ckpt_meta mm = big;
          if (save_parent(bdir, &mm, step)) _exit(1);
          dpt_ckpt_prune(bdir, 2);
        }
      }
      struct timespec ts = {0, (long)(rand() % 150 + 1) * 1000000L};
      nanosleep(&ts, NULL);
      kill(pid, SIGKILL);
      waitpid(pid, &ws, 0);
      CHECK(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL, "round %d: writer status 0x%x", round, ws);
      leftovers += count_tmp(bdir) > 0;
      uint64_t s = check_latest(bdir, &big, last, "writer killed by SIGKILL");
      if (s) last = s;
    }
    printf("SIGKILL of the writer: 8 rounds, newest complete checkpoint after them: step %llu; "
           "%d round(s) left a temp file\n", (unsigned long long)last, leftovers);
    /* the next successful save's prune removes a killed writer's temp file */
    save_parent(bdir, &big, last + 1000);
    dpt_ckpt_prune(bdir, 2);
    CHECK(count_tmp(bdir) == 0, "prune left %d stale temp files", count_tmp(bdir));
  }

  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) failures++;
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else printf("ok: checkpoint faults (size limits, SIGXFSZ, truncation at every byte, SIGKILL of the writer)\n");
  return failures ? 1 : 0;
}
