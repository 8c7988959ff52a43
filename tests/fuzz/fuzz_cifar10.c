/* fuzz_cifar10.c — CIFAR-10 binary batches through dpt_data_load_cifar10()
 * (trainer/dpt_data.c), test set (test_batch.bin, 10,000 records of 1 label
 * byte + 3,072 pixel bytes), written to a private temporary directory.
 * Input: byte 0: bits 0-3 = 0001: "tile": the rest is repeated to make exactly
 * 10,000 records (the success path, 30 MB: kept to one input in 16 so that the
 * fuzzer stays fast; bit 4 then adds one trailing byte), bit 5 = skip_bad;
 * otherwise the rest is the file as is.
 * Properties: 0 or DPT_E_INPUT with a message; on success 32x32x3 images, labels
 * 0..9 and n + skipped = 10,000. */
#include "dpt_data.h"
#include "fuzz_common.h"

enum { REC = 3073, PER = 10000 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1)
    return 0;
  int tile = (data[0] & 15) == 1, extra = (data[0] >> 4) & 1;
  struct dpt_data_opts o = {.skip_bad = (data[0] >> 5) & 1};
  const uint8_t *p = data + 1;
  size_t rest = size - 1;
  char path[600];
  if (tile) {
    size_t n = (size_t)REC * PER + (size_t)extra;
    uint8_t *f = calloc(n, 1);
    FUZZ_CHECK(f != NULL);
    for (size_t i = 0; rest && i < n; i += rest)
      memcpy(f + i, p, n - i < rest ? n - i : rest);
    fuzz_write_file("test_batch.bin", f, n, path, sizeof path);
    free(f);
  } else {
    fuzz_write_file("test_batch.bin", p, rest, path, sizeof path);
  }
  struct dpt_dataset d;
  struct dpt_err err = {0};
  int rc = dpt_data_load_cifar10(&d, fuzz_tmpdir(), 0, &o, &err);
  if (rc) {
    fuzz_check_error(rc, &err);
    FUZZ_CHECK(d.pixels == NULL && d.labels == NULL);
    return 0;
  }
  FUZZ_CHECK(tile && !extra);
  FUZZ_CHECK(d.c == 3 && d.h == 32 && d.w == 32 && d.n + d.skipped == PER);
  FUZZ_CHECK(o.skip_bad || d.skipped == 0);
  for (int i = 0; i < d.n; i++)
    FUZZ_CHECK(d.labels[i] >= 0 && d.labels[i] < 10);
  dpt_data_free(&d);
  return 0;
}
