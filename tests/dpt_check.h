/* dpt_check.h — the tests' CHECK(cond, fmt, ...): on failure count it in `failures` and say
 * where and why ("FAIL file:line: cond: message"), then go on, so one run reports every broken
 * property; main returns `failures != 0`.  Every C test uses this one CHECK.
 *
 * Variants, chosen by defining before the #include:
 *   DPT_CHECK_SHARED    the count is one `int failures` shared by the files of a test library
 *                       (declared extern here; exactly one file of the library defines it);
 *   DPT_CHECK_RANK x    multi-rank tests: the message starts "FAIL rank <x> ..." (x: an int
 *                       expression, read when a check fails, e.g. the rank's MPI rank);
 *   DPT_CHECK_SHOW_MAX n print only the first n failures (all are counted): a broken
 *                       collective fails at every element of every rank. */
#ifndef DPT_CHECK_H
#define DPT_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#ifdef DPT_CHECK_SHARED
extern int failures;
#else
static int failures __attribute__((unused));
#endif

#ifdef DPT_CHECK_RANK
#define DPT_CHECK_WHERE_(f) fprintf(f, "FAIL rank %d %s:%d: ", (int)(DPT_CHECK_RANK), __FILE__, __LINE__)
#else
#define DPT_CHECK_WHERE_(f) fprintf(f, "FAIL %s:%d: ", __FILE__, __LINE__)
#endif
#ifndef DPT_CHECK_SHOW_MAX
#define DPT_CHECK_SHOW_MAX 1000000000
#endif

/* The line is put together in memory and written with one fprintf, so that the lines of
 * several ranks on one terminal do not interleave. */
#define CHECK(cond, ...)                                                                          \
  do {                                                                                            \
    if (!(cond) && ++failures <= (DPT_CHECK_SHOW_MAX)) {                                          \
      char *dpt_check_s_ = NULL;                                                                  \
      size_t dpt_check_z_ = 0;                                                                    \
      FILE *dpt_check_f_ = open_memstream(&dpt_check_s_, &dpt_check_z_);                          \
      FILE *dpt_check_o_ = dpt_check_f_ ? dpt_check_f_ : stderr;                                  \
      DPT_CHECK_WHERE_(dpt_check_o_);                                                             \
      fprintf(dpt_check_o_, "%s: ", #cond);                                                       \
      fprintf(dpt_check_o_, __VA_ARGS__);                                                         \
      if (dpt_check_f_ && fclose(dpt_check_f_) == 0)                                              \
        fprintf(stderr, "%s\n", dpt_check_s_);                                                    \
      else                                                                                        \
        fputc('\n', stderr);                                                                      \
      free(dpt_check_s_);                                                                         \
    }                                                                                             \
  } while (0)

#endif /* DPT_CHECK_H */
