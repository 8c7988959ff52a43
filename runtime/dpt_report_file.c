/* dpt_report_file.c — where a job report goes and how it gets there: the path
 * (--report / DPT_REPORT with %j %s %p, else dpt-report-<job>[.<step>].json),
 * the atomic write (a temporary file renamed over the path, fsync'd), and the
 * announcement of the written path to a launcher (DPT_REPORT_ANNOUNCE). */
#define _GNU_SOURCE
#include "dpt_report_int.h"
#include "dpt_env.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- path ----------------------------------------------------------------- */

static int append(char *buf, size_t len, size_t *at, const char *s, struct dpt_err *err)
{
  size_t n = strlen(s);
  if (*at + n + 1 > len)
    return dpt_err_set(err, DPT_E_INPUT, "report path longer than %zu bytes: shorten --report / DPT_REPORT",
                       len - 1);
  memcpy(buf + *at, s, n + 1);
  *at += n;
  return 0;
}

int dpt_report_path(const struct dpt_report *r, const char *explicit_path, char *buf, size_t len,
                    struct dpt_err *err)
{
  const char *job = dpt_env_str("SLURM_JOB_ID"), *step = dpt_env_str("SLURM_STEP_ID");
  const char *pat = explicit_path && *explicit_path ? explicit_path : dpt_env_str("DPT_REPORT");
  char tmp[64];
  size_t at = 0;
  int rc;

  if (!len)
    return dpt_err_set(err, DPT_E_INPUT, "report path: no buffer");
  buf[0] = '\0';
  if (!pat) {
    /* rank 0's pid: the launchers start ranks at the same time; the pid that
     * matters is the writer's, i.e. this process's when rank 0. */
    if (job && step)
      snprintf(tmp, sizeof tmp, "%s.%s", job, step);
    else if (job)
      snprintf(tmp, sizeof tmp, "%s", job);
    if (job)
      rc = append(buf, len, &at, "dpt-report-", err) || append(buf, len, &at, tmp, err) ||
           append(buf, len, &at, ".json", err);
    else {
      char p[32];
      snprintf(p, sizeof p, "-%ld.json", r->pid);
      rc = append(buf, len, &at, "dpt-report-", err) || append(buf, len, &at, r->program, err) ||
           append(buf, len, &at, p, err);
    }
    return rc ? err->code : (int)at;
  }
  for (const char *c = pat; *c; c++) {
    char one[2] = {*c, 0};
    const char *add = one;
    if (*c == '%' && c[1]) {
      c++;
      if (*c == 'j')
        add = job ? job : "nojob";
      else if (*c == 's')
        add = step ? step : "0";
      else if (*c == 'p') {
        snprintf(tmp, sizeof tmp, "%ld", r->pid);
        add = tmp;
      } else if (*c == '%')
        add = "%";
      else
        return dpt_err_set(err, DPT_E_INPUT, "report path '%s': unknown %%%c (use %%j job, %%s step, %%p pid, %%%%)",
                           pat, *c);
    }
    if (append(buf, len, &at, add, err))
      return err->code;
  }
  return (int)at;
}

/* ---- atomic write ----------------------------------------------------------- */

/* text to path through path.tmp.<pid> and rename; durable: fsync of the file
 * before the rename and of the directory after it. */
static int write_renamed(const char *path, const char *text, size_t len, int durable, struct dpt_err *err)
{
  char tmp[PATH_MAX + 32], dir[PATH_MAX];
  int fd = -1, rc = 0;
  size_t done = 0;

  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
    return dpt_err_set(err, DPT_E_INPUT, "path '%s' too long", path);
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return dpt_err_set(err, errno == ENOENT || errno == EACCES || errno == ENOTDIR ? DPT_E_INPUT : DPT_E_RUNTIME,
                       "cannot create %s: %s (the directory of %s must exist and be writable)", tmp,
                       strerror(errno), path);
  while (done < len) {
    ssize_t w = write(fd, text + done, len - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      rc = dpt_err_set(err, DPT_E_RUNTIME, "writing %s failed: %s", tmp, strerror(errno));
      goto fail;
    }
    done += (size_t)w;
  }
  if (durable && fsync(fd)) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "fsync of %s failed: %s", tmp, strerror(errno));
    goto fail;
  }
  if (close(fd)) {
    fd = -1;
    rc = dpt_err_set(err, DPT_E_RUNTIME, "closing %s failed: %s", tmp, strerror(errno));
    goto fail;
  }
  fd = -1;
  if (rename(tmp, path)) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    goto fail;
  }
  if (!durable)
    return 0;
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash == dir)
    dir[1] = '\0';
  else if (slash)
    *slash = '\0';
  else
    snprintf(dir, sizeof dir, ".");
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd); /* best effort: some file systems refuse fsync on directories */
    close(dfd);
  }
  return 0;
fail:
  if (fd >= 0)
    close(fd);
  unlink(tmp);
  return rc;
}

int dpt_report_write_atomic(const char *path, const char *text, size_t len, struct dpt_err *err)
{
  return write_renamed(path, text, len, 1, err);
}

int dpt_report_write_handoff(const char *path, const char *text, size_t len, struct dpt_err *err)
{
  return write_renamed(path, text, len, 0, err);
}

/* ---- the announcement ------------------------------------------------------- */

int dpt_report_announce(const char *path, struct dpt_err *err)
{
  const char *to = dpt_env_str("DPT_REPORT_ANNOUNCE");
  char abs[PATH_MAX + 2], cwd[PATH_MAX];
  int n;

  if (!to)
    return 0;
  if (!path)
    n = snprintf(abs, sizeof abs, "none\n");
  else if (path[0] == '/' || !getcwd(cwd, sizeof cwd))
    n = snprintf(abs, sizeof abs, "%s\n", path);
  else
    n = snprintf(abs, sizeof abs, "%s/%s\n", cwd, path);
  if (n < 0 || (size_t)n >= sizeof abs)
    return dpt_err_set(err, DPT_E_INPUT, "report path '%s' too long to announce", path);
  return dpt_report_write_atomic(to, abs, (size_t)n, err);
}
