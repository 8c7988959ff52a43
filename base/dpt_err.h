/* dpt_err.h — one error type for every dpt library.
 *
 * Library functions return 0 on success or a negative DPT_E* code and fill a
 * struct dpt_err whose message names what failed, on which input, and what to
 * do.  Libraries never exit(); tools map the code to an exit status with
 * dpt_err_exit_status(): 2 for bad input or usage, 1 for a runtime failure. */
#ifndef DPT_ERR_H
#define DPT_ERR_H

#include <stdarg.h>
#include <stddef.h>

enum dpt_errc {
  DPT_OK = 0,
  DPT_E_RUNTIME = -1, /* the system or a peer failed: exit 1 */
  DPT_E_INPUT = -2,   /* bad usage, unreadable or invalid input: exit 2 */
  DPT_E_NOMEM = -3,   /* out of memory: exit 1 */
  DPT_E_UNSUPPORTED = -4, /* not available here (no GPU, built without X): exit 1 */
};

#define DPT_ERR_MSG_MAX 1024

struct dpt_err {
  int code;                   /* enum dpt_errc, 0 when no error */
  char msg[DPT_ERR_MSG_MAX];  /* human-readable, no trailing newline */
};

/* Clear an error (code 0, empty message). NULL is allowed. */
void dpt_err_clear(struct dpt_err *err);

/* Set code and message; returns code so callers can `return dpt_err_set(...)`.
 * err may be NULL (then only the code is returned). */
int dpt_err_set(struct dpt_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int dpt_err_vset(struct dpt_err *err, int code, const char *fmt, va_list ap);

/* Put context in front of an existing message: "<context>: <old message>".
 * Returns the existing code. */
int dpt_err_prefix(struct dpt_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Exit status a tool should use for this error: 0, 1 or 2. */
int dpt_err_exit_status(const struct dpt_err *err);

/* Short name of a code ("input", "runtime", ...). */
const char *dpt_err_code_name(int code);

#endif /* DPT_ERR_H */
