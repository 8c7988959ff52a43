/* test_file.c — dpt_file_read(): contents byte for byte (NULs, sizes around the
 * growth steps, empty), the size limit at its edge, and the refusals (no path,
 * missing file, a directory, too large) with messages that name the file. */
#include "dpt_check.h"
#include "dpt_file.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[4096];

static void put(const char *path, const unsigned char *data, size_t n)
{
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(data, 1, n, f) == n && fclose(f) == 0, "cannot write %s", path);
}

/* Content of n bytes (NULs included), written, read back, compared. */
static void roundtrip(size_t n, size_t max_bytes)
{
  char path[4200];
  unsigned char *data = malloc(n ? n : 1);
  char *buf = (char *)1;
  size_t len = 12345;
  struct dpt_err err = {0};
  uint32_t x = 2463534242u ^ (uint32_t)n;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    data[i] = (unsigned char)(i % 7 == 0 ? 0 : x);
  }
  snprintf(path, sizeof path, "%s/f%zu", dir, n);
  put(path, data, n);
  int rc = dpt_file_read(path, "test file", NULL, max_bytes, &buf, &len, &err);
  CHECK(rc == 0, "%zu bytes (max %zu): rc %d: %s", n, max_bytes, rc, err.msg);
  if (rc == 0) {
    CHECK(len == n, "%zu bytes: read %zu", n, len);
    CHECK(buf && len == n && !memcmp(buf, data, n), "%zu bytes: contents differ", n);
    CHECK(buf && buf[len] == '\0', "%zu bytes: no NUL after the contents", n);
  }
  free(buf);
  free(data);
  unlink(path);
}

static void refused(const char *path, size_t max_bytes, const char *hint, int code, const char *n1,
                    const char *n2, const char *n3)
{
  char *buf = (char *)1;
  size_t len = 7;
  struct dpt_err err = {0};
  int rc = dpt_file_read(path, "test file", hint, max_bytes, &buf, &len, &err);
  CHECK(rc == code && err.code == code, "%s: rc %d, want %d (%s)", path ? path : "NULL", rc, code, err.msg);
  CHECK(buf == NULL && len == 0, "%s: output not cleared on error", path ? path : "NULL");
  CHECK(strstr(err.msg, n1), "%s: message lacks \"%s\": %s", path ? path : "NULL", n1, err.msg);
  CHECK(!n2 || strstr(err.msg, n2), "%s: message lacks \"%s\": %s", path ? path : "NULL", n2, err.msg);
  CHECK(!n3 || strstr(err.msg, n3), "%s: message lacks \"%s\": %s", path ? path : "NULL", n3, err.msg);
}

int main(void)
{
  const char *tmp = getenv("TMPDIR");
  char path[4200];
  snprintf(dir, sizeof dir, "%s/dpt-test-file-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }

  /* contents: empty, small, around the first buffer (64 KiB) and its doublings */
  size_t sizes[] = {0, 1, 100, 65535, 65536, 65537, 131072, 131073, 300001};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
    roundtrip(sizes[i], 0);
  /* the limit: a file of exactly max_bytes is read, at every growth step */
  roundtrip(1000, 1000);
  roundtrip(65536, 65536);
  roundtrip(200000, 200000);
  roundtrip(10, 1000);

  /* one byte more than the limit */
  {
    static unsigned char big[(1 << 20) + 1];
    snprintf(path, sizeof path, "%s/big", dir);
    put(path, big, 1001);
    refused(path, 1000, NULL, DPT_E_INPUT, path, "larger than 1000 bytes", "test file");
    put(path, big, sizeof big);
    refused(path, (size_t)1 << 20, NULL, DPT_E_INPUT, path, "larger than 1 MiB", "test file");
    unlink(path);
  }
  /* no path, a missing file (with and without a hint), a directory */
  refused(NULL, 0, NULL, DPT_E_INPUT, "no test file given", NULL, NULL);
  refused("", 0, "give one", DPT_E_INPUT, "no test file given: give one", NULL, NULL);
  snprintf(path, sizeof path, "%s/missing", dir);
  refused(path, 0, NULL, DPT_E_INPUT, path, "cannot open the test file", "No such file");
  refused(path, 0, "make one with X", DPT_E_INPUT, "cannot open the test file: No such file or directory "
          "(make one with X)", path, NULL);
  refused(dir, 0, NULL, DPT_E_INPUT, dir, "cannot read the test file", "Is a directory");
  /* err may be NULL: the code alone */
  {
    char *buf;
    size_t len;
    CHECK(dpt_file_read(path, "x", NULL, 0, &buf, &len, NULL) == DPT_E_INPUT, "NULL err: wrong code");
  }

  if (rmdir(dir))
    perror(dir);
  if (failures)
    fprintf(stderr, "test_file: %d check(s) failed\n", failures);
  else
    printf("test_file: ok\n");
  return failures != 0;
}
