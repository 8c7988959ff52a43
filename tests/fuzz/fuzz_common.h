/* fuzz_common.h — helpers shared by the libFuzzer harnesses in tests/fuzz.
 *
 * Each harness defines LLVMFuzzerTestOneInput(); it is linked either with
 * libFuzzer (clang, -fsanitize=fuzzer, DPT_FUZZ=ON) or with regress_main.c (any
 * compiler: feeds the committed corpus and regression inputs, in every build).
 * Properties are checked with FUZZ_CHECK, which aborts: a sanitizer report or
 * an abort is a crash for libFuzzer and a failed test for ctest. */
#ifndef DPT_FUZZ_COMMON_H
#define DPT_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      fprintf(stderr, "%s:%d: property violated: %s\n", __FILE__, __LINE__, #cond);       \
      abort();                                                                            \
    }                                                                                     \
  } while (0)

/* A rejected input: the code is the one returned, a known DPT_E_* code, and
 * the message is non-empty and NUL-terminated inside the buffer. */
static inline void fuzz_check_error(int rc, const struct dpt_err *err)
{
  FUZZ_CHECK(rc == DPT_E_INPUT || rc == DPT_E_NOMEM);
  FUZZ_CHECK(err->code == rc);
  FUZZ_CHECK(memchr(err->msg, '\0', sizeof err->msg) != NULL);
  FUZZ_CHECK(err->msg[0] != '\0');
}

/* The same, and every byte of the message is printable ASCII: for parsers that
 * promise not to echo raw input (it may reach a terminal or a root's log). */
static inline void fuzz_check_error_printable(int rc, const struct dpt_err *err)
{
  fuzz_check_error(rc, err);
  for (const char *p = err->msg; *p; p++)
    FUZZ_CHECK((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f);
}

/* 1 when s is NUL-terminated within cap bytes and all printable ASCII. */
static inline int fuzz_printable(const char *s, size_t cap)
{
  size_t n = strnlen(s, cap);
  if (n == cap)
    return 0;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f)
      return 0;
  return 1;
}

/* A NUL-terminated copy of the input (caller frees). */
static inline char *fuzz_strndup(const uint8_t *data, size_t size)
{
  char *s = malloc(size + 1);
  FUZZ_CHECK(s != NULL);
  memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

/* For readers that only take paths: a private directory (created once per
 * process, removed at exit) and a file in it holding the given bytes. */
const char *fuzz_tmpdir(void);
/* Writes data to fuzz_tmpdir()/name and returns the path (static buffer per call site
 * is not needed: the result is written into path, capacity len). */
void fuzz_write_file(const char *name, const void *data, size_t size, char *path, size_t len);

#endif /* DPT_FUZZ_COMMON_H */
