/* dpt_file.c — see dpt_file.h */
#include "dpt_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dpt_file_read(const char *path, const char *what, const char *hint, size_t max_bytes, char **buf,
                  size_t *len, struct dpt_err *err)
{
  FILE *f = NULL;
  char *b = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;

  *buf = NULL;
  *len = 0;
  if (!path || !*path)
    return dpt_err_set(err, DPT_E_INPUT, "no %s given%s%s", what, hint ? ": " : "", hint ? hint : "");
  if (!(f = fopen(path, "rb")))
    return dpt_err_set(err, DPT_E_INPUT, "%s: cannot open the %s: %s%s%s%s", path, what, strerror(errno),
                       hint ? " (" : "", hint ? hint : "", hint ? ")" : "");
  for (;;) {
    size_t got;
    if (n == cap) {
      char *p;
      if (max_bytes && cap >= max_bytes) {
        if (fgetc(f) == EOF)
          break; /* exactly max_bytes, or a read error (below) */
        if (max_bytes % ((size_t)1 << 20) == 0)
          rc = dpt_err_set(err, DPT_E_INPUT, "%s: larger than %zu MiB, too large for a %s", path,
                           max_bytes >> 20, what);
        else
          rc = dpt_err_set(err, DPT_E_INPUT, "%s: larger than %zu bytes, too large for a %s", path, max_bytes,
                           what);
        goto fail;
      }
      cap = cap ? 2 * cap : 65536;
      if (max_bytes && cap > max_bytes)
        cap = max_bytes;
      if (!(p = realloc(b, cap + 1))) { /* + 1: the NUL */
        rc = dpt_err_set(err, DPT_E_NOMEM, "%s: out of memory reading the %s (%zu bytes)", path, what, cap + 1);
        goto fail;
      }
      b = p;
    }
    got = fread(b + n, 1, cap - n, f);
    n += got;
    if (got == 0)
      break;
  }
  if (ferror(f)) {
    int e = errno;
    rc = dpt_err_set(err, DPT_E_INPUT, "%s: cannot read the %s: %s", path, what, strerror(e ? e : EIO));
    goto fail;
  }
  fclose(f);
  b[n] = '\0'; /* b is set: the first round allocates before it reads */
  *buf = b;
  *len = n;
  return 0;
fail:
  free(b);
  fclose(f);
  return rc;
}
