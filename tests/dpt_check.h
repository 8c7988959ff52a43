/* dpt_check.h — the tests' CHECK(cond, fmt, ...): on failure count it and say where and
 * why, then go on, so one run reports every broken property; main returns `failures != 0`. */
#ifndef DPT_CHECK_H
#define DPT_CHECK_H

#include <stdio.h>

static int failures;
#define CHECK(cond, ...)                                                                          \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      failures++;                                                                                 \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                        \
      fprintf(stderr, __VA_ARGS__);                                                               \
      fputc('\n', stderr);                                                                        \
    }                                                                                             \
  } while (0)

#endif /* DPT_CHECK_H */
