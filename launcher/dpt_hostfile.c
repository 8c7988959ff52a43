/* dpt_hostfile.c — dpt-launch's hostfile parser (see dpt_hostfile.h). */
#include "dpt_hostfile.h"
#include "dpt_file.h"
#include "dpt_strv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dpt_hostfile_free(char **hosts, int n)
{
  dpt_strv_free(hosts, n);
}

static int host_char_ok(unsigned char c)
{
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_';
}

int dpt_hostfile_parse(const char *buf, size_t len, const char *name, char ***hosts, int *n,
                       struct dpt_err *err)
{
  char **v = NULL;
  int nv = 0, cap = 0, rc = 0, lineno = 0;
  size_t pos = 0;
  *hosts = NULL;
  *n = 0;
  if (!name)
    name = "hostfile";
  while (pos < len) {
    const char *line = buf + pos, *nl = memchr(line, '\n', len - pos);
    size_t ll = nl ? (size_t)(nl - line) : len - pos, i = 0, hb, hl;
    pos += ll + (nl ? 1 : 0);
    lineno++;
    const char *hash = memchr(line, '#', ll);
    if (hash)
      ll = (size_t)(hash - line);
    while (i < ll && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
      i++;
    if (i == ll)
      continue;
    hb = i;
    while (i < ll && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') {
      if (!host_char_ok((unsigned char)line[i])) {
        rc = dpt_err_set(err, DPT_E_INPUT, "%s:%d: byte \\x%02x at column %zu is not allowed in a host "
                         "name (letters, digits, '.', '-', '_'): one host name per line, then "
                         "optional words such as slots=N", name, lineno, (unsigned char)line[i], i + 1);
        goto fail;
      }
      i++;
    }
    hl = i - hb;
    if (hl > DPT_HOSTFILE_NAME_MAX) {
      rc = dpt_err_set(err, DPT_E_INPUT, "%s:%d: host name \"%.20s...\" is %zu characters long, at most "
                       "%d are allowed", name, lineno, line + hb, hl, DPT_HOSTFILE_NAME_MAX);
      goto fail;
    }
    for (int k = 0; k < nv; k++)
      if (strlen(v[k]) == hl && !memcmp(v[k], line + hb, hl)) {
        rc = dpt_err_set(err, DPT_E_INPUT, "%s:%d: host %s is listed twice (use --gpus-per-node for "
                         "several ranks per host)", name, lineno, v[k]);
        goto fail;
      }
    if (nv == DPT_HOSTFILE_MAX_HOSTS) {
      rc = dpt_err_set(err, DPT_E_INPUT, "%s:%d: more than %d hosts", name, lineno,
                       DPT_HOSTFILE_MAX_HOSTS);
      goto fail;
    }
    if (nv == cap) {
      int nc = cap ? 2 * cap : 16;
      char **nvv = realloc(v, sizeof *nvv * (size_t)nc);
      if (!nvv)
        goto nomem;
      v = nvv;
      cap = nc;
    }
    if (!(v[nv] = strndup(line + hb, hl)))
      goto nomem;
    nv++;
  }
  if (!nv) {
    rc = dpt_err_set(err, DPT_E_INPUT, "hostfile %s lists no hosts: write one host name per line", name);
    goto fail;
  }
  *hosts = v;
  *n = nv;
  return 0;
nomem:
  rc = dpt_err_set(err, DPT_E_NOMEM, "%s: out of memory after %d hosts", name, nv);
fail:
  dpt_hostfile_free(v, nv);
  return rc;
}

int dpt_hostfile_load(const char *path, char ***hosts, int *n, struct dpt_err *err)
{
  char *buf;
  size_t len;
  int rc;
  *hosts = NULL;
  *n = 0;
  if ((rc = dpt_file_read(path, "hostfile", "give a file that lists one host a line", (size_t)64 << 20, &buf,
                          &len, err)))
    return rc;
  rc = dpt_hostfile_parse(buf, len, path, hosts, n, err);
  free(buf);
  return rc;
}
