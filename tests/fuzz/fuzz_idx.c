/* fuzz_idx.c — Fashion-MNIST / MNIST IDX files through dpt_data_load_idx()
 * (trainer/dpt_data.c), which takes paths: the input is written to an image
 * file and a label file in a private temporary directory.
 * Input: byte 0: bit 0 = gzip both files (the .gz path the real data set
 * takes), bit 1 = skip_bad.  The rest is split where the image file's own
 * header says it ends (16 + n*h*w bytes, or everything when that is longer):
 * the image file first, the label file after it, so that valid seeds stay valid
 * (when the header claims more than the input holds: at the label magic 00 00 08 01).
 * Properties: 0, DPT_E_INPUT (or DPT_E_NOMEM) with a message; on success the
 * dimensions agree with the header, labels are 0..9, n + skipped = count. */
#include <zlib.h>

#include "dpt_data.h"
#include "fuzz_common.h"

static uint32_t be32(const uint8_t *p)
{
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void write_part(const char *name, const uint8_t *p, size_t n, int gz, char *path, size_t len)
{
  if (!gz) {
    fuzz_write_file(name, p, n, path, len);
    return;
  }
  snprintf(path, len, "%s/%s", fuzz_tmpdir(), name);
  gzFile g = gzopen(path, "wb1");
  FUZZ_CHECK(g != NULL);
  FUZZ_CHECK(n == 0 || gzwrite(g, p, (unsigned)n) == (int)n);
  FUZZ_CHECK(gzclose(g) == Z_OK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1 || size > (1u << 24))
    return 0;
  int gz = data[0] & 1;
  struct dpt_data_opts o = {.skip_bad = (data[0] >> 1) & 1};
  const uint8_t *p = data + 1;
  size_t rest = size - 1, split = rest;
  if (rest >= 16) {
    uint64_t want = 16 + (uint64_t)be32(p + 4) * be32(p + 8) * (uint64_t)be32(p + 12);
    if (be32(p + 4) <= (1u << 24) && be32(p + 8) <= 65536 && be32(p + 12) <= 65536 && want < rest)
      split = (size_t)want;
    else /* a header that claims more than there is: split at the label file's magic */
      for (size_t i = 16; i + 4 <= rest; i++)
        if (be32(p + i) == 0x00000801) {
          split = i;
          break;
        }
  }
  char ip[600], lp[600];
  write_part("images-idx3-ubyte", p, split, gz, ip, sizeof ip);
  write_part("labels-idx1-ubyte", p + split, rest - split, gz, lp, sizeof lp);
  struct dpt_dataset d;
  struct dpt_err err = {0};
  int rc = dpt_data_load_idx(&d, ip, lp, &o, &err);
  if (rc) {
    fuzz_check_error(rc, &err);
    FUZZ_CHECK(d.pixels == NULL && d.labels == NULL);
    return 0;
  }
  FUZZ_CHECK(split >= 16 && d.c == 1 && d.h == (int)be32(p + 8) && d.w == (int)be32(p + 12));
  FUZZ_CHECK(d.n >= 0 && (uint32_t)(d.n + d.skipped) == be32(p + 4));
  FUZZ_CHECK(o.skip_bad || d.skipped == 0);
  for (int i = 0; i < d.n; i++)
    FUZZ_CHECK(d.labels[i] >= 0 && d.labels[i] < d.num_classes);
  /* The pixels of the first and last kept image are readable. */
  volatile unsigned sum = 0;
  size_t img = (size_t)d.h * d.w;
  if (d.n > 0)
    sum += d.pixels[0] + d.pixels[(size_t)d.n * img - 1];
  (void)sum;
  dpt_data_free(&d);
  return 0;
}
