/* jpeg_cases.h — the JPEG corner cases of issue 16, written at test time with
 * libturbojpeg (tjCompress2) and byte edits, shared by test_jpeg.c (CPU path,
 * routing) and gpu/test_gpu_jpeg.c (GPU path on a device).
 *
 * jpeg_cases_make(dir) writes DIR/train/c0/<name>.jpg for every case below and
 * DIR/train/c1/ two plain files (a second class), and returns the table.  The
 * decodable images are smooth colour fields (low-frequency sines, quality 95),
 * so that IDCT / chroma-upsampling differences between decoders stay small. */
#ifndef JPEG_CASES_H
#define JPEG_CASES_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>

#include "dpt_jpeg_hdr.h"

struct jpeg_case {
  const char *name;   /* file name without .jpg */
  int route_hw;       /* enum dpt_jpeg_route when the GPU has the hardware decoder */
  const char *why;    /* dpt_jpeg_hdr_route's reason ("" for GPU_HW) */
  int decodes;        /* 1: libjpeg (the CPU path) decodes it; 0: an error / skipped with --skip-bad */
  int orientation;    /* EXIF orientation in the file (0 none) */
};

#define JPEG_CASES_N 15
static const struct jpeg_case jpeg_cases[JPEG_CASES_N] = {
    {"base444", DPT_JPEG_ROUTE_GPU_HW, "", 1, 0},
    {"base422", DPT_JPEG_ROUTE_GPU_HW, "", 1, 0},
    {"base420", DPT_JPEG_ROUTE_GPU_HW, "", 1, 0},
    {"base440", DPT_JPEG_ROUTE_GPU_HW, "", 1, 0},
    {"gray", DPT_JPEG_ROUTE_GPU_HW, "", 1, 0},
    {"exif6", DPT_JPEG_ROUTE_GPU_HW, "", 1, 6},
    {"base411", DPT_JPEG_ROUTE_GPU, "4:1:x sampling", 1, 0},
    {"progressive", DPT_JPEG_ROUTE_GPU, "progressive", 1, 0},
    {"cmyk", DPT_JPEG_ROUTE_CPU, "CMYK", 1, 0},
    {"rgbcoded", DPT_JPEG_ROUTE_CPU, "RGB-coded", 1, 0},
    {"truncated", DPT_JPEG_ROUTE_CPU, "truncated", 0, 0},
    {"notjpeg", DPT_JPEG_ROUTE_CPU, "not a JPEG", 0, 0},
    {"empty", DPT_JPEG_ROUTE_CPU, "not a JPEG", 0, 0},
    {"bits12", DPT_JPEG_ROUTE_CPU, "not 8-bit", 0, 0},
    {"lossless", DPT_JPEG_ROUTE_CPU, "lossless/arithmetic/hierarchical", 0, 0},
};

static void jc_die(const char *what, const char *path)
{
  fprintf(stderr, "jpeg_cases: %s %s\n", what, path);
  exit(1);
}

static void jc_write(const char *path, const unsigned char *p, size_t n)
{
  FILE *f = fopen(path, "wb");
  if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f)) jc_die("cannot write", path);
}

/* Smooth RGB (or 4-channel CMYK) test field, w x h. */
static unsigned char *jc_field(int w, int h, int nc)
{
  unsigned char *px = malloc((size_t)w * h * nc);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      unsigned char *p = px + ((size_t)y * w + x) * nc;
      p[0] = (unsigned char)lrint(128 + 90 * sin(x / 11.0));
      p[1] = (unsigned char)lrint(128 + 90 * cos(y / 9.0));
      p[2] = (unsigned char)lrint(40 + 170.0 * (x + y) / (w + h));
      if (nc == 4) p[3] = 230;
    }
  return px;
}

/* The JPEG of a w x h field: *len bytes, free() it. */
static unsigned char *jc_jpeg(int w, int h, int pf, int subsamp, int flags, unsigned long *len)
{
  tjhandle t = tjInitCompress();
  unsigned char *px = jc_field(w, h, pf == TJPF_CMYK ? 4 : 3), *buf = NULL, *out;
  if (!t || tjCompress2(t, px, w, 0, h, pf, &buf, len, subsamp, 95, flags)) jc_die("tjCompress2:", tjGetErrorStr2(t));
  out = malloc(*len);
  memcpy(out, buf, *len);
  tjFree(buf);
  tjDestroy(t);
  free(px);
  return out;
}

/* A noisy image (so that a cut lands in the entropy-coded data). */
static unsigned char *jc_noisy(unsigned long *len)
{
  unsigned char px[96 * 72 * 3], *buf = NULL, *out;
  unsigned s = 12345;
  for (int i = 0; i < 96 * 72 * 3; i++) {
    s = s * 1103515245u + 12345u;
    px[i] = (unsigned char)(s >> 16);
  }
  tjhandle t = tjInitCompress();
  if (!t || tjCompress2(t, px, 96, 0, 72, TJPF_RGB, &buf, len, TJSAMP_420, 90, 0)) jc_die("tjCompress2", "noisy");
  out = malloc(*len);
  memcpy(out, buf, *len);
  tjFree(buf);
  tjDestroy(t);
  return out;
}

/* Writes buf with seg (n bytes) inserted right after SOI. */
static void jc_write_with_segment(const char *path, const unsigned char *buf, size_t len, const unsigned char *seg,
                                  size_t n)
{
  unsigned char *o = malloc(len + n);
  memcpy(o, buf, 2);
  memcpy(o + 2, seg, n);
  memcpy(o + 2 + n, buf + 2, len - 2);
  jc_write(path, o, len + n);
  free(o);
}

/* Offset of the first FF C0 (baseline frame header) of buf. */
static size_t jc_sof0(const unsigned char *b, size_t len)
{
  for (size_t i = 2; i + 1 < len; i++)
    if (b[i] == 0xFF && b[i + 1] == 0xC0) return i;
  jc_die("no SOF0 in", "a test JPEG");
  return 0;
}

static const struct jpeg_case *jpeg_cases_make(const char *dir)
{
  char p[1024];
  const int W = 96, H = 72;
  unsigned long n;
  snprintf(p, sizeof p, "%s", dir);
  mkdir(p, 0777);
  snprintf(p, sizeof p, "%s/train", dir);
  mkdir(p, 0777);
  snprintf(p, sizeof p, "%s/train/c0", dir);
  mkdir(p, 0777);
  snprintf(p, sizeof p, "%s/train/c1", dir);
  mkdir(p, 0777);
  static const struct { const char *name; int pf, samp, flags; } plain[] = {
      {"base444", TJPF_RGB, TJSAMP_444, 0}, {"base422", TJPF_RGB, TJSAMP_422, 0},
      {"base420", TJPF_RGB, TJSAMP_420, 0}, {"base440", TJPF_RGB, TJSAMP_440, 0},
      {"gray", TJPF_RGB, TJSAMP_GRAY, 0},   {"base411", TJPF_RGB, TJSAMP_411, 0},
      {"progressive", TJPF_RGB, TJSAMP_420, TJFLAG_PROGRESSIVE}, {"cmyk", TJPF_CMYK, TJSAMP_444, 0}};
  for (size_t i = 0; i < sizeof plain / sizeof *plain; i++) {
    unsigned char *b = jc_jpeg(W, H, plain[i].pf, plain[i].samp, plain[i].flags, &n);
    snprintf(p, sizeof p, "%s/train/c0/%s.jpg", dir, plain[i].name);
    jc_write(p, b, n);
    free(b);
  }
  for (int k = 0; k < 2; k++) { /* the second class */
    unsigned char *b = jc_jpeg(W + 8 * k, H, TJPF_RGB, TJSAMP_420, 0, &n);
    snprintf(p, sizeof p, "%s/train/c1/plain%d.jpg", dir, k);
    jc_write(p, b, n);
    free(b);
  }
  unsigned char *b = jc_jpeg(W, H, TJPF_RGB, TJSAMP_420, 0, &n);
  /* EXIF orientation 6 (rotate 90 CW to display), little-endian TIFF, one IFD0 entry */
  static const unsigned char exif[] = {0xFF, 0xE1, 0x00, 34,  'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 42, 0, 8, 0, 0, 0,
                                       1,    0,    0x12, 0x01, 3,   0,   1,   0,   0, 0, 6,   0,   0,  0, 0, 0, 0, 0};
  snprintf(p, sizeof p, "%s/train/c0/exif6.jpg", dir);
  jc_write_with_segment(p, b, n, exif, sizeof exif);
  /* Adobe APP14 with transform 0 and no JFIF marker: libjpeg reads the three components as RGB */
  static const unsigned char adobe[] = {0xFF, 0xEE, 0, 14, 'A', 'd', 'o', 'b', 'e', 0, 100, 0, 0, 0, 0, 0};
  if (b[2] != 0xFF || b[3] != 0xE0) jc_die("no JFIF APP0 after SOI in", "a test JPEG");
  size_t app0 = 2 + ((size_t)b[4] << 8 | b[5]);
  unsigned char *nojfif = malloc(n);
  memcpy(nojfif, b, 2);
  memcpy(nojfif + 2, b + 2 + app0, n - 2 - app0);
  snprintf(p, sizeof p, "%s/train/c0/rgbcoded.jpg", dir);
  jc_write_with_segment(p, nojfif, n - app0, adobe, sizeof adobe);
  free(nojfif);
  /* 12-bit and lossless frame headers on baseline data (libjpeg-turbo 2.1 refuses both) */
  size_t s0 = jc_sof0(b, n);
  b[s0 + 4] = 12;
  snprintf(p, sizeof p, "%s/train/c0/bits12.jpg", dir);
  jc_write(p, b, n);
  b[s0 + 4] = 8;
  b[s0 + 1] = 0xC3;
  snprintf(p, sizeof p, "%s/train/c0/lossless.jpg", dir);
  jc_write(p, b, n);
  free(b);
  b = jc_noisy(&n);
  snprintf(p, sizeof p, "%s/train/c0/truncated.jpg", dir);
  jc_write(p, b, n * 6 / 10);
  b[0] = 0x89, b[1] = 'P', b[2] = 'N', b[3] = 'G';
  snprintf(p, sizeof p, "%s/train/c0/notjpeg.jpg", dir);
  jc_write(p, b, n);
  free(b);
  snprintf(p, sizeof p, "%s/train/c0/empty.jpg", dir);
  jc_write(p, (const unsigned char *)"", 0);
  return jpeg_cases;
}

#endif /* JPEG_CASES_H */
