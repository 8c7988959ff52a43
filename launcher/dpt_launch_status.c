/* dpt_launch_status.c — dpt-launch's status directory: what the rank supervisors
 * recorded (rank.<r>: how a failing rank ended; rank.<r>.phase: the phase its
 * watchdog mirrored) read into the one line that names the first failing rank. */
#define _GNU_SOURCE
#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpt_launch_int.h"

/* How one rank ended, from its supervisor's record ($dir/rank.<r>) and the
 * phase it mirrored there (rank.<r>.phase, runtime/dpt_watchdog.c). */
struct rank_end {
  int recorded; /* rank.<r> was written: the rank exited non-zero or was killed */
  unsigned long long t;
  int code, fwd; /* fwd: its supervisor had forwarded a signal (a teardown, not a cause) */
  char node[256], how[256], phase[160];
};

/* the phase lines dpt_watchdog.c writes for a rank whose watchdog fired (a
 * survivor: "stopped by its watchdog; suspect rank R on NODE") and for one that
 * failed and is on its way out ("failed in PHASE @NODE") */
#define WATCHDOG_FIRED "stopped by its watchdog"
#define FAILED_IN "failed in "

static int starts(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

static void read_phase(const char *path, char *buf, size_t len)
{
  FILE *f = fopen(path, "r");
  buf[0] = '\0';
  if (!f)
    return;
  if (!fgets(buf, (int)len, f))
    buf[0] = '\0';
  fclose(f);
  for (size_t n = strlen(buf); n > 0 && (buf[n - 1] == ' ' || buf[n - 1] == '\n'); n--)
    buf[n - 1] = '\0';
}

/* Reads the status directory; returns the exit status for
 * dpt-launch (0: no failure recorded) and in msg which rank caused it:
 *  - after a forwarded SIGTERM/SIGUSR1/SIGUSR2, when every recorded rank
 *    exited 3 (dpt-train: preempted, checkpoint written): 3;
 *  - else the earliest rank that died on its own (not stopped by a forwarded
 *    signal, not a survivor whose watchdog fired);
 *  - else a rank that announced it failed (an error, e.g. out of memory);
 *  - else the rank the survivors' watchdogs named most (a hung rank);
 *  - else the earliest record, preferring those not stopped by a signal. */
int dpt_launch_first_failure(const char *dir, int n_ranks, int forwarded, char *msg, size_t len)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  struct rank_end *re = n_ranks > 0 ? calloc((size_t)n_ranks, sizeof *re) : NULL;
  int *votes = n_ranks > 0 ? calloc((size_t)n_ranks, sizeof *votes) : NULL;
  unsigned long long best = ~0ull;
  int code = 0, fb = -1, pick = -1, n_rec = 0, n_three = 0, r;
  char voters[256] = "";

  if (!d)
    goto out;
  while ((e = readdir(d))) {
    char path[PATH_MAX], tail[8] = "";
    int n = -1;
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    else
      continue;
    if (sscanf(e->d_name, "rank.%d%n.%7s", &r, &n, tail) >= 1 && re && r >= 0 && r < n_ranks) {
      if (!strcmp(tail, "phase")) {
        read_phase(path, re[r].phase, sizeof re[r].phase);
      } else if (n > 0 && !e->d_name[n]) {
        FILE *f = fopen(path, "r");
        char rk[32];
        if (f && fscanf(f, "%llu %31s %d %d %255s\n", &re[r].t, rk, &re[r].code, &re[r].fwd,
                        re[r].node) == 5 && fgets(re[r].how, sizeof re[r].how, f)) {
          re[r].how[strcspn(re[r].how, "\n")] = '\0';
          re[r].recorded = 1;
        }
        if (f)
          fclose(f);
      }
    }
  }
  closedir(d);
  if (!re || !votes)
    goto out;

  for (r = 0; r < n_ranks; r++) {
    struct rank_end *x = &re[r];
    if (!x->recorded)
      continue;
    n_rec++;
    n_three += x->code == 3;
    /* fallback: the earliest, not stopped by a forwarded signal if there is one */
    if (fb < 0 || x->fwd < re[fb].fwd || (x->fwd == re[fb].fwd && x->t < re[fb].t))
      fb = r;
    if (!x->fwd && x->code && !starts(x->phase, WATCHDOG_FIRED) && x->t < best) {
      best = x->t;
      pick = r;
    }
  }
  if (!n_rec) {
    code = 0;
    goto out;
  }
  if (forwarded && n_three == n_rec) {
    snprintf(msg, len, "the ranks stopped after the forwarded %s: %d of %d exited with status 3 "
             "(dpt-train: preempted, checkpoint written; run it again with --resume auto)",
             forwarded == SIGTERM ? "SIGTERM" : forwarded == SIGUSR1 ? "SIGUSR1" : "SIGUSR2", n_rec, n_ranks);
    code = 3;
    goto out;
  }
  if (pick >= 0) { /* died on its own */
    snprintf(msg, len, "rank %d on %s %s (first failing rank; the others were stopped)", pick,
             re[pick].node, re[pick].how);
    code = re[pick].code;
    goto out;
  }
  for (r = 0; r < n_ranks && pick < 0; r++)
    if (starts(re[r].phase, FAILED_IN))
      pick = r;
  if (pick >= 0) { /* "failed in PHASE @NODE": an error, e.g. out of memory */
    char *ph = re[pick].phase + strlen(FAILED_IN), *at = strrchr(ph, '@');
    const char *node = re[pick].recorded ? re[pick].node : at ? at + 1 : "?";
    if (at)
      *(at > ph && at[-1] == ' ' ? at - 1 : at) = '\0';
    snprintf(msg, len, "rank %d on %s failed with an error in phase %s (%s) (first failing rank; the "
             "others were stopped)", pick, node, ph, re[pick].recorded ? re[pick].how : "its exit was not recorded");
    code = re[pick].recorded && re[pick].code ? re[pick].code : re[fb].code;
    goto out;
  }
  /* a hung rank: the survivors' watchdogs name it ("...; suspect rank R on NODE") */
  for (r = 0; r < n_ranks; r++) {
    const char *s = strstr(re[r].phase, "; suspect rank ");
    int v;
    if (starts(re[r].phase, WATCHDOG_FIRED) && s && sscanf(s, "; suspect rank %d", &v) == 1 && v >= 0 &&
        v < n_ranks && v != r)
      votes[v]++;
  }
  for (r = 0; r < n_ranks; r++)
    if (votes[r] && (pick < 0 || votes[r] > votes[pick]))
      pick = r;
  if (pick >= 0) {
    char node[256] = "?";
    size_t at = 0;
    for (r = 0; r < n_ranks; r++) {
      const char *s = strstr(re[r].phase, "; suspect rank ");
      int v;
      if (!starts(re[r].phase, WATCHDOG_FIRED) || !s || sscanf(s, "; suspect rank %d on %255s", &v, node) < 1 ||
          v != pick)
        continue;
      if (at < sizeof voters)
        at += (size_t)snprintf(voters + at, sizeof voters - at, "%s%d", at ? ", " : "", r);
    }
    if (re[pick].recorded)
      snprintf(node, sizeof node, "%s", re[pick].node);
    snprintf(msg, len, "rank %d on %s made no progress%s%s: named by the watchdogs of rank%s %s (first "
             "failing rank; the others were stopped)", pick, node,
             re[pick].phase[0] && !starts(re[pick].phase, WATCHDOG_FIRED) ? " in phase " : "",
             starts(re[pick].phase, WATCHDOG_FIRED) ? "" : re[pick].phase, strchr(voters, ',') ? "s" : "",
             voters);
    code = re[fb].code;
    goto out;
  }
  snprintf(msg, len, "rank %d on %s %s (first failing rank; the others were stopped)", fb, re[fb].node,
           re[fb].how);
  code = re[fb].code;
out:
  free(re);
  free(votes);
  return code;
}


void dpt_launch_status_remove(const char *dir)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  if (!d)
    return;
  while ((e = readdir(d))) { /* rank.<r>, rank.<r>.phase, rank.<r>.json, forwarded, rankfile, report */
    char path[PATH_MAX];
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}
