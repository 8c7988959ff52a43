/* fuzz_ckpt.c — checkpoint files through dpt_ckpt_load() (trainer/dpt_ckpt.c),
 * which verifies magic, header, sizes and CRC-32 before anything is used.
 * Input: byte 0: bit 0 = recompute the trailing CRC-32 over the file first (a
 * random mutation almost never keeps the checksum valid; this takes the fuzzer
 * past it, to the header checks an attacker with a crafted file reaches), bit
 * 1 = the run expects double buffering (n_pending = 4).  The rest is the file.
 * The run expects model "fuzz-model", 4 parameters, 2 state values, 2 ranks x
 * batch 8, written by --optimizer sgd (the seeds in corpus/ckpt are written for that).
 * Properties: 0 or DPT_E_INPUT with a message; on success the header agrees
 * with the expectation (the optimizer too: a terminated "sgd") and the arrays were filled. */
#include <zlib.h>

#include "dpt_ckpt.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1)
    return 0;
  size_t n = size - 1;
  uint8_t *f = malloc(n ? n : 1);
  FUZZ_CHECK(f != NULL);
  memcpy(f, data + 1, n);
  if ((data[0] & 1) && n >= 4) {
    uint32_t c = (uint32_t)crc32(crc32(0L, Z_NULL, 0), f, (uInt)(n - 4));
    memcpy(f + n - 4, &c, 4); /* the file stores it in host (little-endian) order */
  }
  char path[600];
  fuzz_write_file("ckpt-0000000001.dpt", f, n, path, sizeof path);
  free(f);

  struct dpt_ckpt_meta expect = {.world_size = 2, .batch = 8, .n_params = 4, .n_state = 2,
                                 .n_pending = (data[0] & 2) ? 4 : 0};
  snprintf(expect.model, sizeof expect.model, "fuzz-model");
  struct dpt_ckpt_meta got;
  memset(&got, 0xa5, sizeof got);
  float params[4], state[2], velocity[4], pending[4];
  struct dpt_err err = {0};
  int rc = dpt_ckpt_load(path, &expect, &got, params, state, velocity, pending, &err);
  if (rc) {
    fuzz_check_error(rc, &err);
    FUZZ_CHECK(rc == DPT_E_INPUT);
    return 0;
  }
  FUZZ_CHECK(got.n_params == 4 && got.n_state == 2 && got.n_pending == expect.n_pending);
  FUZZ_CHECK(got.world_size == 2 && got.batch == 8 && !strncmp(got.model, "fuzz-model", sizeof got.model));
  FUZZ_CHECK(!strcmp(got.optimizer, "sgd"));
  volatile float sum = params[3] + state[1] + velocity[3] + (expect.n_pending ? pending[3] : 0.0f);
  (void)sum;
  return 0;
}
