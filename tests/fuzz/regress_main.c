/* regress_main.c — runs a fuzz harness without libFuzzer, as a plain test:
 *   regress_<name> PATH...
 * Each PATH is a file or a directory whose regular files are fed, in name
 * order, to LLVMFuzzerTestOneInput() once each.  A crash or a violated
 * property aborts (test fails); at least one input must be found.  This is how
 * the committed seed corpus and every crash found by fuzzing (regress/<name>/)
 * run in every build, with gcc, under ASan+UBSan and under valgrind. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dpt_file.h"
#include "fuzz_common.h"

static int run_file(const char *path)
{
  char *buf;
  size_t len;
  struct dpt_err err = {0};
  if (dpt_file_read(path, "fuzz input", NULL, 0, &buf, &len, &err)) {
    fprintf(stderr, "regress: %s\n", err.msg);
    return -1;
  }
  /* An exact-size copy, so that ASan / valgrind see reads past the input. */
  unsigned char *exact = malloc(len ? len : 1);
  if (!exact) {
    free(buf);
    return -1;
  }
  memcpy(exact, buf, len);
  free(buf);
  LLVMFuzzerTestOneInput(exact, len);
  free(exact);
  return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
  return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv)
{
  int n = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st)) {
      fprintf(stderr, "regress: %s: no such file or directory\n", argv[i]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      if (run_file(argv[i]))
        return 1;
      n++;
      continue;
    }
    struct dirent **names;
    int k = scandir(argv[i], &names, NULL, by_name);
    if (k < 0) {
      fprintf(stderr, "regress: cannot list %s\n", argv[i]);
      return 1;
    }
    for (int j = 0; j < k; j++) {
      char p[4096];
      snprintf(p, sizeof p, "%s/%s", argv[i], names[j]->d_name);
      if (!stat(p, &st) && S_ISREG(st.st_mode) && names[j]->d_name[0] != '.') {
        if (run_file(p))
          return 1;
        n++;
      }
      free(names[j]);
    }
    free(names);
  }
  if (!n) {
    fprintf(stderr, "regress: no input found\n");
    return 1;
  }
  printf("regress: %d input%s ran without a crash\n", n, n == 1 ? "" : "s");
  return 0;
}
