/* fuzz_common.c — temporary files for the harnesses of path-based readers. */
#define _GNU_SOURCE
#include "fuzz_common.h"

#include <dirent.h>
#include <unistd.h>

static char tmpdir[512];

static void remove_tmpdir(void)
{
  DIR *d = opendir(tmpdir);
  struct dirent *e;
  char p[1024];
  if (!d)
    return;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
      unlink(p);
    }
  closedir(d);
  rmdir(tmpdir);
}

const char *fuzz_tmpdir(void)
{
  if (!tmpdir[0]) {
    /* /dev/shm when there is one: these files are rewritten on every execution. */
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/dpt-fuzz-XXXXXX", base && *base ? base : "/tmp");
    FUZZ_CHECK(mkdtemp(tmpdir) != NULL);
    atexit(remove_tmpdir);
  }
  return tmpdir;
}

void fuzz_write_file(const char *name, const void *data, size_t size, char *path, size_t len)
{
  snprintf(path, len, "%s/%s", fuzz_tmpdir(), name);
  FILE *f = fopen(path, "wb");
  FUZZ_CHECK(f != NULL);
  FUZZ_CHECK(size == 0 || fwrite(data, 1, size, f) == size);
  FUZZ_CHECK(fclose(f) == 0);
}
