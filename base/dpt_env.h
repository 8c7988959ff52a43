/* dpt_env.h — environment variables read one way everywhere.
 *
 * An empty variable counts as unset.  A set variable that is not what it must be
 * is an error that names the variable, its value, the range and what to do: a
 * launcher's broken environment stops a rank with a clear message instead of a
 * silent default. */
#ifndef DPT_ENV_H
#define DPT_ENV_H

#include "dpt_err.h"

/* getenv(name), or NULL when the variable is unset or empty. */
const char *dpt_env_str(const char *name);

/* Parses value, the value of variable name (NULL or "" = unset), as a whole
 * decimal integer in lo..hi.  Returns 1 and sets *out when it is one, 0 when the
 * variable is unset (*out untouched), DPT_E_INPUT otherwise:
 *   NAME="VALUE" is not an integer in LO..HI: HINT
 * (">= LO" when hi is INT_MAX; HINT defaults to "fix or unset it").
 * For callers that read another process's environment (dpt_ctx_load's getenv). */
int dpt_env_int_parse(const char *name, const char *value, int lo, int hi, const char *hint, int *out,
                      struct dpt_err *err);

/* dpt_env_int_parse(name, getenv(name), ...). */
int dpt_env_int(const char *name, int lo, int hi, const char *hint, int *out, struct dpt_err *err);

#endif /* DPT_ENV_H */
