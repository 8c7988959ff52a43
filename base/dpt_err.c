/* dpt_err.c — see dpt_err.h */
#include "dpt_err.h"

#include <stdio.h>
#include <string.h>

void dpt_err_clear(struct dpt_err *err)
{
  if (!err)
    return;
  err->code = 0;
  err->msg[0] = '\0';
}

int dpt_err_vset(struct dpt_err *err, int code, const char *fmt, va_list ap)
{
  if (!err)
    return code;
  err->code = code;
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  return code;
}

int dpt_err_set(struct dpt_err *err, int code, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  dpt_err_vset(err, code, fmt, ap);
  va_end(ap);
  return code;
}

int dpt_err_prefix(struct dpt_err *err, const char *fmt, ...)
{
  char old[DPT_ERR_MSG_MAX];
  va_list ap;
  int n;

  if (!err)
    return DPT_E_RUNTIME;
  memcpy(old, err->msg, sizeof old);
  va_start(ap, fmt);
  n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < sizeof err->msg) {
    size_t used = (size_t)n;
    size_t room = sizeof err->msg - used;
    size_t oldlen = strnlen(old, sizeof old);
    if (room > 2) {
      memcpy(err->msg + used, ": ", 2);
      used += 2;
      room -= 2;
      if (oldlen >= room)
        oldlen = room - 1;
      memcpy(err->msg + used, old, oldlen);
      err->msg[used + oldlen] = '\0';
    }
  }
  return err->code;
}

int dpt_err_exit_status(const struct dpt_err *err)
{
  if (!err || err->code == 0)
    return 0;
  return err->code == DPT_E_INPUT ? 2 : 1;
}

const char *dpt_err_code_name(int code)
{
  switch (code) {
  case DPT_OK: return "ok";
  case DPT_E_RUNTIME: return "runtime";
  case DPT_E_INPUT: return "input";
  case DPT_E_NOMEM: return "nomem";
  case DPT_E_UNSUPPORTED: return "unsupported";
  default: return "unknown";
  }
}
