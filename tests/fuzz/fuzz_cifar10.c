/* fuzz_cifar10.c — CIFAR-10 binary batches through dpt_data_load_cifar10()
 * (trainer/dpt_data.c): the test set (test_batch.bin) or the five training
 * batches (data_batch_1..5.bin), each exactly 10,000 records of 1 label byte
 * (0..9) + 3,072 pixel bytes, read from a private temporary directory.
 *
 * Input: byte 0 = mode, the rest = body.
 *   bits 0-2  0-5 "raw": the body is the (first) batch file as is: a few
 *               records, so the record loop, bad labels and truncated records
 *               (most inputs: fast);
 *             6 "absent": no batch file;
 *             7 "tile": full batches of 30 MB: a valid batch made once and
 *               kept in the temporary directory, with the body laid over it
 *               (below): the success path, trailing bytes, bad labels deep in
 *               a batch, the five training files.  One seed of many, and kept
 *               rare among the executions (LLVMFuzzerCustomMutator below).
 *   bit 3     skip_bad.
 *   bit 4     tile: one byte more after the last record (train: data_batch_3.bin
 *             is missing instead).
 *   bits 5-7  7: train, the five training batches (raw: the body is
 *             data_batch_1.bin and the others are missing; tile: all five are
 *             the tiled batch); 1: no options (NULL: bad labels are errors).
 *             Otherwise the test set.
 * Tile body: 2 bytes big-endian record index (mod 10,000), then bytes laid over
 * the batch from that record on (cut at the batch's end).
 * Properties: the outcome is what the format's rules (expect_batch below, not
 * the reader's code) give for these files: either DPT_E_INPUT, nothing
 * allocated, and a message naming the file (and the record, for a bad label or
 * a truncated record); or success with 32x32x3 images, n = the kept records,
 * skipped = the bad labels (skip_bad only), and labels and pixels those of the
 * kept records, in order. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dpt_data.h"
#include "fuzz_common.h"

enum { REC = 3073, PER = 10000, FILES = 5 };
#define BATCH ((size_t)REC * PER)

/* ---- the tiled batch: tile_dir/test_batch.bin, data_batch_1..5.bin hard links to it */
static char tile_dir[600];
static uint8_t *tile;     /* the file, mapped shared: patched in place, then restored */
static uint8_t *pristine; /* what it holds between executions */
static int tile_fd = -1;

static void tile_path(char *p, size_t len, const char *name)
{
  snprintf(p, len, "%s/%s", tile_dir, name);
}

static void batch_name(char *name, size_t len, int train, int f)
{
  if (train)
    snprintf(name, len, "data_batch_%d.bin", f + 1);
  else
    snprintf(name, len, "test_batch.bin");
}

static void tile_cleanup(void) /* before fuzz_common's (atexit order), which removes only files */
{
  char p[700], name[32];
  for (int f = -1; f < FILES; f++) {
    batch_name(name, sizeof name, f >= 0, f);
    tile_path(p, sizeof p, name);
    unlink(p);
  }
  rmdir(tile_dir);
  munmap(tile, BATCH);
  close(tile_fd);
  free(pristine);
}

static void tile_init(void)
{
  char p[700], q[700], name[32];
  snprintf(tile_dir, sizeof tile_dir, "%s/tile", fuzz_tmpdir());
  FUZZ_CHECK(mkdir(tile_dir, 0700) == 0);
  atexit(tile_cleanup);
  tile_path(p, sizeof p, "test_batch.bin");
  tile_fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
  FUZZ_CHECK(tile_fd >= 0 && ftruncate(tile_fd, (off_t)BATCH) == 0);
  tile = mmap(NULL, BATCH, PROT_READ | PROT_WRITE, MAP_SHARED, tile_fd, 0);
  FUZZ_CHECK(tile != MAP_FAILED);
  pristine = malloc(BATCH); /* labels 0..9 in turn, pixels a pattern */
  FUZZ_CHECK(pristine != NULL);
  for (size_t r = 0; r < PER; r++) {
    pristine[r * REC] = (uint8_t)(r % 10);
    for (size_t j = 1; j < REC; j++)
      pristine[r * REC + j] = (uint8_t)(r * 31 + j * 7);
  }
  memcpy(tile, pristine, BATCH);
  for (int f = 0; f < FILES; f++) {
    batch_name(name, sizeof name, 1, f);
    tile_path(q, sizeof q, name);
    FUZZ_CHECK(link(p, q) == 0);
  }
}

/* ---- the format's rules for one batch (NULL: missing file) */
enum { OK, MISSING, TRUNCATED, BAD_LABEL, LONGER };

static int expect_batch(const uint8_t *f, size_t len, int skip_bad, int *record, int *bad)
{
  *record = -1;
  *bad = 0;
  if (!f)
    return MISSING;
  for (int r = 0; r < PER; r++) {
    if ((size_t)(r + 1) * REC > len) {
      *record = r;
      return TRUNCATED;
    }
    if (f[(size_t)r * REC] > 9) {
      if (!skip_bad) {
        *record = r;
        return BAD_LABEL;
      }
      (*bad)++;
    }
  }
  return len > BATCH ? LONGER : OK;
}

/* libFuzzer's own mutations, except that a tile input (50-80 ms under ASan: a
 * 30 MB batch read, copied and compared, five of them for train; a few-record
 * raw input is ~0.1 ms when the reader does not allocate the 30 MB up front)
 * stays a tile input in 1 mutant of 128 (1 of 1,024 for train) and the others
 * are made raw: the tile seed and the tile inputs the fuzzer keeps are mutated
 * like any other, and most executions still go to small inputs.  (Not used by
 * regress_main.c: LLVMFuzzerMutate is libFuzzer's.) */
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size) __attribute__((weak));
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
  size = LLVMFuzzerMutate(data, size, max_size);
  if (size && (data[0] & 7) == 7 && seed % ((data[0] >> 5) == 7 ? 1024u : 128u))
    data[0] &= (uint8_t)~7u;
  return size;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1)
    return 0;
  int mode = data[0] & 7, extra = (data[0] >> 4) & 1, no_opts = (data[0] >> 5) == 1;
  int skip_bad = !no_opts && ((data[0] >> 3) & 1), train = (data[0] >> 5) == 7, nfiles = train ? FILES : 1;
  const uint8_t *body = data + 1;
  size_t rest = size - 1;
  const uint8_t *files[FILES] = {0}; /* what each batch file holds */
  size_t lens[FILES] = {0};
  char name[32], path[700];
  const char *dir = fuzz_tmpdir();
  size_t patch_at = 0, patch_len = 0;

  if (mode < 7) { /* raw / absent: the first batch file, in the temporary directory */
    batch_name(name, sizeof name, train, 0);
    if (mode == 6) {
      snprintf(path, sizeof path, "%s/%s", dir, name);
      FUZZ_CHECK(unlink(path) == 0 || errno == ENOENT);
    } else {
      fuzz_write_file(name, body, rest, path, sizeof path);
      files[0] = body;
      lens[0] = rest;
    }
  } else { /* tile */
    if (!tile)
      tile_init();
    dir = tile_dir;
    if (rest >= 2) {
      patch_at = (size_t)((body[0] << 8 | body[1]) % PER) * REC;
      patch_len = rest - 2 < BATCH - patch_at ? rest - 2 : BATCH - patch_at;
      memcpy(tile + patch_at, body + 2, patch_len);
    }
    for (int f = 0; f < nfiles; f++) {
      files[f] = tile;
      lens[f] = BATCH;
    }
    if (extra && train) {
      tile_path(path, sizeof path, "data_batch_3.bin");
      FUZZ_CHECK(unlink(path) == 0);
      files[2] = NULL;
    } else if (extra) {
      FUZZ_CHECK(ftruncate(tile_fd, (off_t)BATCH + 1) == 0);
      lens[0] = BATCH + 1;
    }
  }

  /* what the reader must answer */
  int want = OK, fail_file = -1, fail_record = -1, bad = 0;
  for (int f = 0; f < nfiles && want == OK; f++) {
    want = expect_batch(files[f], lens[f], skip_bad, &fail_record, &bad);
    if (want != OK)
      fail_file = f;
  }

  struct dpt_data_opts o = {.skip_bad = skip_bad};
  struct dpt_dataset d;
  struct dpt_err err = {0};
  int rc = dpt_data_load_cifar10(&d, dir, train, no_opts ? NULL : &o, &err);
  if (want != OK) {
    FUZZ_CHECK(rc != 0);
    fuzz_check_error(rc, &err);
    FUZZ_CHECK(rc == DPT_E_INPUT);
    FUZZ_CHECK(d.pixels == NULL && d.labels == NULL);
    batch_name(name, sizeof name, train, fail_file);
    FUZZ_CHECK(strstr(err.msg, name) != NULL);
    if (fail_record >= 0) {
      char rec[32];
      snprintf(rec, sizeof rec, "record %d", fail_record);
      FUZZ_CHECK(strstr(err.msg, rec) != NULL);
    }
  } else {
    FUZZ_CHECK(rc == 0);
    FUZZ_CHECK(d.c == 3 && d.h == 32 && d.w == 32 && d.num_classes == 10);
    FUZZ_CHECK(d.n == nfiles * (PER - bad) && d.skipped == nfiles * bad);
    FUZZ_CHECK(skip_bad || d.skipped == 0);
    int k = 0;
    for (int f = 0; f < nfiles; f++)
      for (int r = 0; r < PER; r++) {
        const uint8_t *rec = files[f] + (size_t)r * REC;
        if (rec[0] > 9)
          continue;
        FUZZ_CHECK(d.labels[k] == rec[0]);
        FUZZ_CHECK(memcmp(d.pixels + (size_t)k * 3072, rec + 1, 3072) == 0);
        k++;
      }
    FUZZ_CHECK(k == d.n);
    dpt_data_free(&d);
  }

  if (mode == 7) { /* the tiled batch back as it was */
    memcpy(tile + patch_at, pristine + patch_at, patch_len);
    if (extra && train) {
      char p[700];
      tile_path(p, sizeof p, "test_batch.bin");
      FUZZ_CHECK(link(p, path) == 0);
    } else if (extra) {
      FUZZ_CHECK(ftruncate(tile_fd, (off_t)BATCH) == 0);
    }
  }
  return 0;
}
