/* dpt_env.c — see dpt_env.h */
#include "dpt_env.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

const char *dpt_env_str(const char *name)
{
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

int dpt_env_int_parse(const char *name, const char *value, int lo, int hi, const char *hint, int *out,
                      struct dpt_err *err)
{
  char *end;
  long x;

  if (!value || !*value)
    return 0;
  errno = 0;
  x = strtol(value, &end, 10);
  if (!errno && end != value && !*end && x >= lo && x <= hi) {
    *out = (int)x;
    return 1;
  }
  if (!hint)
    hint = "fix or unset it";
  if (hi == INT_MAX)
    return dpt_err_set(err, DPT_E_INPUT, "%s=\"%.64s\" is not an integer >= %d: %s", name, value, lo, hint);
  return dpt_err_set(err, DPT_E_INPUT, "%s=\"%.64s\" is not an integer in %d..%d: %s", name, value, lo, hi, hint);
}

int dpt_env_int(const char *name, int lo, int hi, const char *hint, int *out, struct dpt_err *err)
{
  return dpt_env_int_parse(name, getenv(name), lo, hi, hint, out, err);
}
