/* test_engine_cache: the cuDNN engine-config cache file (trainer/cuda/dpt_engine_cache.h).
 *
 *  - round trip: entries stored and read back equal (engine, knobs, time, workspace), the
 *    file 0644, no temporary file left behind, sorted stable JSON;
 *  - location: option > $DPT_ENGINE_CACHE ("off") > $XDG_CACHE_HOME/dpt > $HOME/.cache/dpt,
 *    the file name carrying GPU, compute capability and cuDNN version;
 *  - key mismatch: another GPU / cuDNN version names another file (empty cache, no
 *    warning); a file made for another driver, or copied from another GPU, is ignored with
 *    one warning naming the file;
 *  - corrupt, truncated, empty, other-format, malformed-entry, unreadable (a directory)
 *    files: ignored with one warning naming the file and what to do, never an entry from
 *    them; the next store rewrites a valid file;
 *  - two (four) writers racing (fork): while they store, a reader never sees an unusable
 *    file, and at the end every writer's every entry is there (lock + merge + rename);
 *  - permissions: a directory that cannot be made (a path through a regular file, /proc)
 *    fails the store with the path and what to do, the entries stay in memory; a read-only
 *    directory and an unreadable file (as root: in a child that became nobody);
 *  - the same config: engine and knob settings compared as a set (any order), a knob's value,
 *    type or count differing makes another config, times and workspace ignored. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dpt_engine_cache.h"

#include "dpt_check.h"

static char root[256];

static struct dpt_engine_ident h100(void)
{
  struct dpt_engine_ident id;
  memset(&id, 0, sizeof id);
  snprintf(id.gpu, sizeof id.gpu, "NVIDIA H100 80GB HBM3");
  id.cc_major = 9;
  id.cc_minor = 0;
  id.driver = 13000;
  id.cudnn = 91900;
  return id;
}

static struct dpt_engine_choice choice(long long engine, int knobs, double ms, size_t ws)
{
  struct dpt_engine_choice c;
  memset(&c, 0, sizeof c);
  c.engine = engine;
  c.n_knobs = knobs;
  for (int k = 0; k < knobs && k < DPT_ENGINE_MAX_KNOBS; k++) c.knob_type[k] = 2 * k + 1, c.knob_value[k] = engine * 10 + k;
  c.time_ms = ms;
  c.workspace = ws;
  return c;
}

static int same(const struct dpt_engine_choice *a, const struct dpt_engine_choice *b)
{
  if (a->engine != b->engine || a->n_knobs != b->n_knobs || a->workspace != b->workspace ||
      a->time_ms != b->time_ms)
    return 0;
  for (int k = 0; k < a->n_knobs; k++)
    if (a->knob_type[k] != b->knob_type[k] || a->knob_value[k] != b->knob_value[k]) return 0;
  return 1;
}

static void write_file(const char *path, const char *text, size_t len)
{
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(text, 1, len, f) != len || fclose(f)) {
    perror(path);
    exit(1);
  }
}

static char *slurp(const char *path, size_t *len)
{
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *b = malloc(1 << 20);
  *len = b ? fread(b, 1, (1 << 20) - 1, f) : 0;
  fclose(f);
  if (b) b[*len] = '\0';
  return b;
}

static int count_tmp(const char *dir)
{
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) n += strstr(e->d_name, ".tmp.") != NULL;
  if (d) closedir(d);
  return n;
}

static void open_ok(struct dpt_engine_cache *c, const struct dpt_engine_ident *id, const char *dir)
{
  struct dpt_err err;
  int rc = dpt_engine_cache_open(c, id, dir, &err);
  CHECK(rc == 0, "open %s: %s", dir ? dir : "(default)", err.msg);
  if (rc) exit(1);
}

/* open_ok in root/sub (dir: its path, for the checks) */
static void open_sub(struct dpt_engine_cache *c, const struct dpt_engine_ident *id, const char *sub, char *dir, size_t n)
{
  snprintf(dir, n, "%s/%s", root, sub);
  open_ok(c, id, dir);
}

static void round_trip(void)
{
  struct dpt_engine_ident id = h100();
  struct dpt_engine_cache c;
  struct dpt_err err;
  char dir[300];
  snprintf(dir, sizeof dir, "%s/rt/a/b", root); /* made on store, parents too */
  open_ok(&c, &id, dir);
  CHECK(c.n == 0 && !c.warning[0], "fresh cache: %d entries, warning '%s'", c.n, c.warning);
  struct dpt_engine_choice a = choice(17, 3, 0.412, 1 << 20), b = choice(0, 0, 1.5, 0), z = choice(4, 32, 0.01, 7);
  CHECK(!dpt_engine_cache_put(&c, "sbr_conv_stats n256 c64 h56 w56 k64 r3 fp16", &a, &err), "%s", err.msg);
  CHECK(!dpt_engine_cache_put(&c, "bn_finalize c64", &b, &err), "%s", err.msg);
  CHECK(!dpt_engine_cache_put(&c, "dgrad n8 c3 k8", &z, &err), "%s", err.msg);
  CHECK(!dpt_engine_cache_put(&c, "bn_finalize c64", &b, &err) && c.n == 3, "replace: %d entries", c.n);
  struct dpt_engine_choice bad = choice(1, DPT_ENGINE_MAX_KNOBS + 1, 1, 0);
  CHECK(dpt_engine_cache_put(&c, "x", &bad, &err) == DPT_E_INPUT, "too many knobs accepted");
  CHECK(dpt_engine_cache_put(&c, "", &a, &err) == DPT_E_INPUT, "empty key accepted");
  CHECK(!dpt_engine_cache_store(&c, &err), "store: %s", err.msg);
  char path[1024];
  snprintf(path, sizeof path, "%s", c.path);
  CHECK(strstr(path, "/engines-NVIDIA_H100_80GB_HBM3-sm90-cudnn91900.json") != NULL, "file name %s", path);
  dpt_engine_cache_close(&c);
  struct stat st;
  CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0644, "mode %o", (unsigned)(st.st_mode & 0777));
  CHECK(count_tmp(dir) == 0, "temporary files left in %s", dir);
  open_ok(&c, &id, dir);
  CHECK(c.n == 3 && !c.warning[0], "reloaded %d entries, warning '%s'", c.n, c.warning);
  const struct dpt_engine_choice *g = dpt_engine_cache_get(&c, "sbr_conv_stats n256 c64 h56 w56 k64 r3 fp16");
  CHECK(g && same(g, &a), "entry a differs");
  g = dpt_engine_cache_get(&c, "dgrad n8 c3 k8");
  CHECK(g && same(g, &z), "entry z (32 knobs) differs");
  CHECK(dpt_engine_cache_get(&c, "nope") == NULL, "unknown key found");
  /* the same entries give the same bytes (sorted keys) */
  size_t l1, l2;
  char *t1 = slurp(path, &l1);
  CHECK(!dpt_engine_cache_store(&c, &err), "store again: %s", err.msg);
  char *t2 = slurp(path, &l2);
  CHECK(t1 && t2 && l1 == l2 && !memcmp(t1, t2, l1), "a second store changed the bytes");
  free(t1), free(t2);
  dpt_engine_cache_close(&c);
}

/* keys with no engine (the second GPU visit: 72 searches for 26 such keys in one start, none
 * remembered, 64 s): put_none, not returned by get, stored under "no_engine", read back; an engine
 * found later replaces the negative entry, and a negative entry replaces an engine */
static void no_engine(void)
{
  struct dpt_engine_ident id = h100();
  struct dpt_engine_cache c;
  struct dpt_err err;
  char dir[300];
  open_sub(&c, &id, "none", dir, sizeof dir);
  CHECK(!c.dirty, "a fresh cache is dirty");
  struct dpt_engine_choice a = choice(5, 2, 0.3, 0);
  CHECK(!dpt_engine_cache_put(&c, "conv k1", &a, &err), "%s", err.msg);
  CHECK(!dpt_engine_cache_put_none(&c, "dbn_weight c64 fp32", "heuristics offered 0 configs", &err), "%s", err.msg);
  CHECK(!dpt_engine_cache_put_none(&c, "sbr_wgrad c8", NULL, &err), "%s", err.msg);
  CHECK(c.dirty && c.n == 3, "after puts: dirty %d, %d entries", c.dirty, c.n);
  CHECK(dpt_engine_cache_get(&c, "dbn_weight c64 fp32") == NULL, "a key without an engine has a choice");
  const char *why = dpt_engine_cache_none(&c, "dbn_weight c64 fp32");
  CHECK(why && !strcmp(why, "heuristics offered 0 configs"), "why: %s", why ? why : "(null)");
  CHECK(dpt_engine_cache_none(&c, "conv k1") == NULL && dpt_engine_cache_none(&c, "nope") == NULL,
        "an engine's key or an unknown key reads as failing");
  CHECK(!dpt_engine_cache_store(&c, &err) && !c.dirty, "store: %s (dirty %d)", err.msg, c.dirty);
  char path[1024];
  snprintf(path, sizeof path, "%s", c.path);
  dpt_engine_cache_close(&c);
  size_t len;
  char *text = slurp(path, &len);
  CHECK(text && strstr(text, "\"no_engine\"") && strstr(text, "sbr_wgrad c8"), "file: %s", text ? text : "(none)");
  free(text);
  open_ok(&c, &id, dir);
  CHECK(c.n == 3 && !c.warning[0] && !c.dirty, "reloaded %d entries, warning '%s'", c.n, c.warning);
  why = dpt_engine_cache_none(&c, "sbr_wgrad c8");
  CHECK(why && !strcmp(why, "no engine"), "reloaded why: %s", why ? why : "(null)");
  const struct dpt_engine_choice *g = dpt_engine_cache_get(&c, "conv k1");
  CHECK(g && same(g, &a), "the engine entry beside them differs");
  CHECK(!dpt_engine_cache_put(&c, "sbr_wgrad c8", &a, &err) && dpt_engine_cache_none(&c, "sbr_wgrad c8") == NULL &&
        dpt_engine_cache_get(&c, "sbr_wgrad c8"), "an engine found later does not replace the negative entry");
  CHECK(!dpt_engine_cache_put_none(&c, "conv k1", "gone", &err) && !dpt_engine_cache_get(&c, "conv k1"),
        "a negative entry does not replace an engine");
  CHECK(c.n == 3, "%d entries after replacing", c.n);
  dpt_engine_cache_close(&c);
}

static void location(void)
{
  struct dpt_engine_ident id = h100();
  struct dpt_err err;
  char p[1024], exp[1024];
  setenv("HOME", "/home/u", 1);
  unsetenv("XDG_CACHE_HOME");
  unsetenv("DPT_ENGINE_CACHE");
  CHECK(!dpt_engine_cache_path(&id, NULL, p, sizeof p, &err) &&
            !strcmp(p, "/home/u/.cache/dpt/engines-NVIDIA_H100_80GB_HBM3-sm90-cudnn91900.json"), "HOME: %s", p);
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  CHECK(!dpt_engine_cache_path(&id, NULL, p, sizeof p, &err) && !strncmp(p, "/xdg/dpt/engines-", 17), "XDG: %s", p);
  setenv("DPT_ENGINE_CACHE", "/shared/cache", 1);
  CHECK(!dpt_engine_cache_path(&id, NULL, p, sizeof p, &err) && !strncmp(p, "/shared/cache/engines-", 22), "env: %s", p);
  CHECK(!dpt_engine_cache_path(&id, "/opt/x", p, sizeof p, &err) && !strncmp(p, "/opt/x/engines-", 15), "option: %s", p);
  setenv("DPT_ENGINE_CACHE", "off", 1);
  CHECK(!dpt_engine_cache_path(&id, NULL, p, sizeof p, &err) && !p[0], "off: '%s'", p);
  struct dpt_engine_cache c;
  open_ok(&c, &id, NULL);
  struct dpt_engine_choice a = choice(3, 1, 0.5, 0);
  CHECK(!dpt_engine_cache_put(&c, "k", &a, &err) && dpt_engine_cache_get(&c, "k") && !dpt_engine_cache_store(&c, &err),
        "off: entries in memory, store a no-op");
  dpt_engine_cache_close(&c);
  unsetenv("DPT_ENGINE_CACHE");
  unsetenv("XDG_CACHE_HOME");
  unsetenv("HOME");
  CHECK(dpt_engine_cache_path(&id, NULL, p, sizeof p, &err) == DPT_E_INPUT && strstr(err.msg, "DPT_ENGINE_CACHE"),
        "no HOME: %s", err.msg);
  /* the name part carries the GPU, the compute capability and the cuDNN version */
  struct dpt_engine_ident a100 = id;
  snprintf(a100.gpu, sizeof a100.gpu, "NVIDIA A100-SXM4-80GB");
  a100.cc_major = 8;
  snprintf(exp, sizeof exp, "/c/engines-NVIDIA_A100-SXM4-80GB-sm80-cudnn91900.json");
  CHECK(!dpt_engine_cache_path(&a100, "/c", p, sizeof p, &err) && !strcmp(p, exp), "A100: %s", p);
  setenv("HOME", root, 1);
}

static void mismatch(void)
{
  struct dpt_engine_ident id = h100(), other = h100();
  struct dpt_engine_cache c;
  struct dpt_err err;
  char dir[300], cmd[2200];
  snprintf(dir, sizeof dir, "%s/mm", root);
  open_ok(&c, &id, dir);
  struct dpt_engine_choice a = choice(9, 2, 0.25, 64);
  dpt_engine_cache_put(&c, "conv_stats x", &a, &err);
  CHECK(!dpt_engine_cache_store(&c, &err), "%s", err.msg);
  char path[1024];
  snprintf(path, sizeof path, "%s", c.path);
  dpt_engine_cache_close(&c);
  /* another cuDNN: another file, nothing found, no warning */
  other.cudnn = 90800;
  open_ok(&c, &other, dir);
  CHECK(c.n == 0 && !c.warning[0] && strcmp(c.path, path), "cuDNN 9.8: %d entries, warning '%s'", c.n, c.warning);
  /* ... even when someone copied the 9.19 file to its name */
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, c.path);
  CHECK(system(cmd) == 0, "%s", cmd);
  dpt_engine_cache_close(&c);
  open_ok(&c, &other, dir);
  CHECK(c.n == 0 && strstr(c.warning, "made for") && strstr(c.warning, "cuDNN 91900") && strstr(c.warning, c.path),
        "copied file: %d entries, warning '%s'", c.n, c.warning);
  dpt_engine_cache_close(&c);
  /* another driver: same file name, ignored with a warning */
  other = h100();
  other.driver = 12080;
  open_ok(&c, &other, dir);
  CHECK(c.n == 0 && strstr(c.warning, "driver 13000") && strstr(c.warning, "driver 12080"), "driver: '%s'", c.warning);
  printf("warning (driver): %s\n", c.warning);
  /* and the ident it was made for still reads it */
  dpt_engine_cache_close(&c);
  other = h100();
  open_ok(&c, &other, dir);
  CHECK(c.n == 1 && !c.warning[0], "the right ident reads it: %d, '%s'", c.n, c.warning);
  dpt_engine_cache_close(&c);
}

static void bad_files(void)
{
  struct dpt_engine_ident id = h100();
  struct dpt_engine_cache c;
  struct dpt_err err;
  char dir[300];
  open_sub(&c, &id, "bad", dir, sizeof dir);
  struct dpt_engine_choice a = choice(5, 1, 0.5, 0), b = choice(6, 0, 0.7, 0);
  dpt_engine_cache_put(&c, "k1", &a, &err);
  dpt_engine_cache_put(&c, "k2", &b, &err);
  CHECK(!dpt_engine_cache_store(&c, &err), "%s", err.msg);
  char path[1024];
  snprintf(path, sizeof path, "%s", c.path);
  dpt_engine_cache_close(&c);
  size_t len;
  char *good = slurp(path, &len);
  if (!good) exit(1);
  char fmt2[4096];
  snprintf(fmt2, sizeof fmt2, "%s", good);
  char *f = strstr(fmt2, "engine-cache/1");
  if (f) f[strlen("engine-cache/")] = '2';
  char malformed[4096];
  snprintf(malformed, sizeof malformed, "%s", good);
  char *e = strstr(malformed, "\"engine\": 6");
  if (e) memcpy(e, "\"engine\": \"", 11); /* "engine": "... breaks the JSON or the type */
  struct {
    const char *what, *text;
    size_t len;
    const char *needle;
  } cases[] = {
      {"garbage", "\x7f" "ELF\x02\x01 not json at all", 0, "not valid JSON"},
      {"truncated", good, len / 2, "not valid JSON"},
      {"empty", "", 0, "not valid JSON"},
      {"other format", fmt2, strlen(fmt2), "format 'dpt.engine-cache/2'"},
      {"malformed entry", malformed, strlen(malformed), ""},
      {"a JSON array", "[1, 2, 3]\n", 10, "format '(none)'"},
      {"entry with a negative engine",
       "{\"format\": \"dpt.engine-cache/1\", \"gpu\": \"NVIDIA H100 80GB HBM3\", \"compute_capability\": \"9.0\", "
       "\"driver\": 13000, \"cudnn\": 91900, \"entries\": {\"k1\": {\"engine\": -1, \"knobs\": [], \"time_ms\": 1, "
       "\"workspace\": 0}}}", 0, "entry 'k1' is malformed"},
      {"knob that is not a pair",
       "{\"format\": \"dpt.engine-cache/1\", \"gpu\": \"NVIDIA H100 80GB HBM3\", \"compute_capability\": \"9.0\", "
       "\"driver\": 13000, \"cudnn\": 91900, \"entries\": {\"k1\": {\"engine\": 1, \"knobs\": [[1]], \"time_ms\": 1, "
       "\"workspace\": 0}}}", 0, "entry 'k1' is malformed"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    write_file(path, cases[i].text, cases[i].len ? cases[i].len : strlen(cases[i].text));
    open_ok(&c, &id, dir);
    CHECK(c.n == 0 && dpt_engine_cache_get(&c, "k1") == NULL, "%s: %d entries used", cases[i].what, c.n);
    CHECK(strstr(c.warning, path) && strstr(c.warning, "ignored") && strstr(c.warning, cases[i].needle) &&
              strstr(c.warning, "delete it"), "%s: warning '%s'", cases[i].what, c.warning);
    if (i < 2) printf("warning (%s): %s\n", cases[i].what, c.warning);
    /* tuning goes on and the next store writes a good file */
    dpt_engine_cache_put(&c, "k3", &a, &err);
    CHECK(!dpt_engine_cache_store(&c, &err), "%s: store: %s", cases[i].what, err.msg);
    dpt_engine_cache_close(&c);
    open_ok(&c, &id, dir);
    CHECK(c.n == 1 && !c.warning[0] && dpt_engine_cache_get(&c, "k3"), "%s: rewritten file: %d entries, '%s'",
          cases[i].what, c.n, c.warning);
    dpt_engine_cache_close(&c);
  }
  /* unreadable: the file's path is a directory */
  unlink(path);
  CHECK(mkdir(path, 0755) == 0, "mkdir %s", path);
  open_ok(&c, &id, dir);
  CHECK(c.n == 0 && strstr(c.warning, "cannot be read"), "a directory: '%s'", c.warning);
  struct dpt_engine_choice x = choice(1, 0, 1, 0);
  dpt_engine_cache_put(&c, "k", &x, &err);
  CHECK(dpt_engine_cache_store(&c, &err) == DPT_E_RUNTIME && strstr(err.msg, path), "store over a directory: %s",
        err.msg);
  CHECK(count_tmp(dir) == 0, "a failed store left its temporary file");
  dpt_engine_cache_close(&c);
  rmdir(path);
  free(good);
}

static void racing_writers(void)
{
  enum { WRITERS = 4, KEYS = 40 };
  struct dpt_engine_ident id = h100();
  char dir[300];
  snprintf(dir, sizeof dir, "%s/race", root);
  pid_t pid[WRITERS];
  for (int w = 0; w < WRITERS; w++) {
    fflush(stdout);
    pid[w] = fork();
    if (pid[w] == 0) {
      struct dpt_engine_cache c;
      struct dpt_err err;
      if (dpt_engine_cache_open(&c, &id, dir, &err)) _exit(2);
      for (int k = 0; k < KEYS; k++) {
        char key[64];
        snprintf(key, sizeof key, "writer%d key%02d", w, k);
        struct dpt_engine_choice ch = choice(w * 100 + k, k % 4, 0.1 * k, (size_t)k << 10);
        if (dpt_engine_cache_put(&c, key, &ch, &err) || dpt_engine_cache_store(&c, &err)) _exit(3);
      }
      dpt_engine_cache_close(&c);
      _exit(0);
    }
    CHECK(pid[w] > 0, "fork");
  }
  /* meanwhile: every read sees a usable file (or none yet) */
  int reads = 0, bad = 0, running = WRITERS;
  while (running) {
    struct dpt_engine_cache c;
    open_ok(&c, &id, dir);
    bad += c.warning[0] != 0;
    if (c.warning[0] && bad == 1) printf("reader saw: %s\n", c.warning);
    reads++;
    dpt_engine_cache_close(&c);
    running = 0;
    for (int w = 0; w < WRITERS; w++) {
      int st;
      if (pid[w] > 0 && waitpid(pid[w], &st, WNOHANG) == 0) running++;
      else if (pid[w] > 0) {
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "writer %d ended with %d", w, st);
        pid[w] = -1;
      }
    }
  }
  CHECK(bad == 0, "%d of %d reads during the race saw an unusable file", bad, reads);
  struct dpt_engine_cache c;
  open_ok(&c, &id, dir);
  CHECK(c.n == WRITERS * KEYS && !c.warning[0], "after the race: %d of %d entries, '%s'", c.n, WRITERS * KEYS,
        c.warning);
  for (int w = 0; w < WRITERS; w++)
    for (int k = 0; k < KEYS; k++) {
      char key[64];
      snprintf(key, sizeof key, "writer%d key%02d", w, k);
      struct dpt_engine_choice ch = choice(w * 100 + k, k % 4, 0.1 * k, (size_t)k << 10);
      const struct dpt_engine_choice *g = dpt_engine_cache_get(&c, key);
      CHECK(g && same(g, &ch), "%s lost or changed", key);
    }
  CHECK(count_tmp(dir) == 0, "temporary files left after the race");
  printf("race: %d writers x %d stores, %d reads meanwhile, %d entries at the end\n", WRITERS, KEYS, reads, c.n);
  dpt_engine_cache_close(&c);
}

static void permissions(void)
{
  struct dpt_engine_ident id = h100();
  struct dpt_engine_cache c;
  struct dpt_err err;
  char dir[400], file[300];
  struct dpt_engine_choice a = choice(2, 0, 0.3, 0);
  /* a path through a regular file: the directory cannot be made (root too) */
  snprintf(file, sizeof file, "%s/plainfile", root);
  write_file(file, "x", 1);
  snprintf(dir, sizeof dir, "%s/sub/dir", file);
  open_ok(&c, &id, dir);
  dpt_engine_cache_put(&c, "k", &a, &err);
  int rc = dpt_engine_cache_store(&c, &err);
  CHECK(rc == DPT_E_RUNTIME && strstr(err.msg, "cannot make the directory") && strstr(err.msg, file) &&
            strstr(err.msg, "DPT_ENGINE_CACHE"), "through a file: %d %s", rc, err.msg);
  printf("store refused: %s\n", err.msg);
  CHECK(dpt_engine_cache_get(&c, "k") != NULL, "entry lost after a failed store");
  dpt_engine_cache_close(&c);
  /* /proc: not even root may make directories there */
  open_ok(&c, &id, "/proc/dpt-engine-cache-test");
  dpt_engine_cache_put(&c, "k", &a, &err);
  CHECK(dpt_engine_cache_store(&c, &err) == DPT_E_RUNTIME && strstr(err.msg, "/proc/dpt-engine-cache-test"), "/proc: %s",
        err.msg);
  dpt_engine_cache_close(&c);
  /* mode bits: root ignores them, so as root the rest runs in a child that became nobody */
  int forked = geteuid() == 0;
  if (forked) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid != 0) {
      int st = -1;
      CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "the unprivileged part failed (status %d)", st);
      return;
    }
  }
  if (forked && (setgid(65534) || setuid(65534))) {
    printf("permissions: cannot become nobody (%s): the mode-bit cases are not tried\n", strerror(errno));
    _exit(0);
  }
  char own[64];
  snprintf(own, sizeof own, "/tmp/dpt-engine-cache-ro-XXXXXX");
  if (!mkdtemp(own)) {
    perror("mkdtemp as nobody");
    _exit(1);
  }
  snprintf(dir, sizeof dir, "%s/ro", own);
  open_ok(&c, &id, dir);
  dpt_engine_cache_put(&c, "k", &a, &err);
  CHECK(!dpt_engine_cache_store(&c, &err), "%s", err.msg);
  char path[1024];
  snprintf(path, sizeof path, "%s", c.path);
  chmod(path, 0);
  dpt_engine_cache_close(&c);
  open_ok(&c, &id, dir);
  CHECK(c.n == 0 && strstr(c.warning, "cannot be read") && strstr(c.warning, "Permission denied"),
        "unreadable file: '%s'", c.warning);
  printf("warning (uid %d, mode 000): %s\n", (int)geteuid(), c.warning);
  dpt_engine_cache_close(&c);
  chmod(path, 0644);
  chmod(dir, 0555);
  open_ok(&c, &id, dir);
  CHECK(c.n == 1 && !c.warning[0], "read-only directory, readable file: %d entries '%s'", c.n, c.warning);
  dpt_engine_cache_put(&c, "k2", &a, &err);
  rc = dpt_engine_cache_store(&c, &err);
  CHECK(rc == DPT_E_RUNTIME && strstr(err.msg, "Permission denied") && strstr(err.msg, "DPT_ENGINE_CACHE"),
        "read-only directory: %d %s", rc, err.msg);
  printf("store refused (uid %d, read-only directory): %s\n", (int)geteuid(), err.msg);
  dpt_engine_cache_close(&c);
  chmod(dir, 0755);
  snprintf(file, sizeof file, "rm -rf '%s'", own);
  if (system(file)) fprintf(stderr, "could not remove %s\n", own);
  fflush(stdout);
  if (forked) _exit(failures != 0);
}

static void same_config(void)
{
  struct dpt_engine_choice a = {.engine = 7, .n_knobs = 3, .knob_type = {1, 3, 6}, .knob_value = {2, 0, 8},
                                .time_ms = 1.5, .workspace = 4096};
  struct dpt_engine_choice b = a;
  CHECK(dpt_engine_choice_same(&a, &b), "a config is the same as itself");
  b.time_ms = 9, b.workspace = 0;
  CHECK(dpt_engine_choice_same(&a, &b), "time and workspace are not the config");
  struct dpt_engine_choice r = {.engine = 7, .n_knobs = 3, .knob_type = {6, 1, 3}, .knob_value = {8, 2, 0}};
  CHECK(dpt_engine_choice_same(&a, &r) && dpt_engine_choice_same(&r, &a), "knobs in another order: the same config");
  b = a, b.engine = 8;
  CHECK(!dpt_engine_choice_same(&a, &b), "another engine");
  b = a, b.knob_value[1] = 1;
  CHECK(!dpt_engine_choice_same(&a, &b) && !dpt_engine_choice_same(&b, &a), "another knob value");
  b = a, b.knob_type[2] = 5;
  CHECK(!dpt_engine_choice_same(&a, &b) && !dpt_engine_choice_same(&b, &a), "another knob type");
  b = a, b.n_knobs = 2;
  CHECK(!dpt_engine_choice_same(&a, &b) && !dpt_engine_choice_same(&b, &a), "a knob fewer");
  /* a repeated knob type is not a set: {1:2, 1:2, 3:0} vs {1:2, 3:0, 6:8} differ both ways */
  b = a, b.knob_type[2] = 1, b.knob_value[2] = 2;
  CHECK(!dpt_engine_choice_same(&a, &b) && !dpt_engine_choice_same(&b, &a), "a repeated knob instead of another");
  struct dpt_engine_choice z = {.engine = 0}, z2 = {.engine = 0};
  CHECK(dpt_engine_choice_same(&z, &z2), "two knob-less configs of engine 0");
}

int main(void)
{
  snprintf(root, sizeof root, "/tmp/dpt-engine-cache-XXXXXX");
  if (!mkdtemp(root)) {
    perror("mkdtemp");
    return 1;
  }
  setenv("HOME", root, 1);
  unsetenv("DPT_ENGINE_CACHE");
  same_config();
  round_trip();
  no_engine();
  location();
  mismatch();
  bad_files();
  racing_writers();
  permissions();
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", root);
  if (!failures) printf("test_engine_cache: all checks passed\n");
  return failures != 0;
}
