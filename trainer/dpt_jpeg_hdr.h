/* dpt_jpeg_hdr.h — what a JPEG file is, from its markers alone, and which
 * decoder of the GPU loader gets it.
 *
 * dpt_jpeg_hdr_parse() walks the marker segments (and skips the entropy-coded
 * data between them, so it sees every scan and the end-of-image marker) of a
 * file in memory: coding process (SOF type), sample precision, size,
 * components and their sampling factors, the Adobe APP14 colour transform, the
 * EXIF orientation tag, the number of scans and whether the data reaches an
 * end-of-image marker.  Device-free and cheap (one pass, no allocation); the
 * GPU loader runs it on the worker thread that read the file.
 *
 * dpt_jpeg_hdr_route() decides on the host, before any GPU work:
 *   GPU_HW  baseline (SOF0), 8-bit, 1 or 3 components (YCbCr), 4:4:4 / 4:2:2 /
 *           4:2:0 / 4:4:0 / gray, one scan, complete: nvJPEG's hardware decoder
 *           (A100 / H100), or GPU when the GPU has none;
 *   GPU     other 8-bit Huffman files nvJPEG decodes (progressive, extended
 *           sequential, multi-scan, 4:1:1 / 4:1:0): nvJPEG's hybrid decoder;
 *   CPU     everything else, decoded by libturbojpeg on the worker exactly as the
 *           CPU loader does (same pixels, same errors): not a JPEG / no frame
 *           header (the CPU decoder's error names the file), truncated (no
 *           end-of-image marker: libjpeg's "premature end"), CMYK / YCCK (4
 *           components: the CPU path's Adobe inverted-CMYK conversion), RGB-coded
 *           (no JFIF marker and Adobe transform 0 or
 *           component ids R, G, B: libjpeg's rule), 12/16-bit samples, lossless / arithmetic /
 *           hierarchical coding, other component counts.
 * EXIF orientation is recorded but never applied, on either path (the rule of
 * torchvision's decode_jpeg default and of PIL's open: pixels in file order). */
#ifndef DPT_JPEG_HDR_H
#define DPT_JPEG_HDR_H

#include <stddef.h>

enum dpt_jpeg_css {
  DPT_JPEG_CSS_444, DPT_JPEG_CSS_422, DPT_JPEG_CSS_420, DPT_JPEG_CSS_440, DPT_JPEG_CSS_411,
  DPT_JPEG_CSS_410, DPT_JPEG_CSS_GRAY, DPT_JPEG_CSS_OTHER
};

struct dpt_jpeg_hdr {
  int soi;              /* 1: starts with the start-of-image marker (FF D8) */
  int sof;              /* frame marker: 0xc0 baseline, 0xc1 extended, 0xc2 progressive, 0xc3 lossless,
                           0xc5..0xcf hierarchical / arithmetic; 0 = none before the data ended */
  int precision;        /* bits per sample (8 for nearly every file) */
  int width, height;    /* frame size in pixels */
  int components;       /* 1 gray, 3 YCbCr / RGB, 4 CMYK / YCCK */
  int css;              /* enum dpt_jpeg_css (3 components; 1: GRAY) */
  int adobe_transform;  /* APP14 "Adobe" colour transform byte, -1 without that marker */
  int jfif;             /* an APP0 "JFIF" marker (libjpeg: 3 components are then YCbCr) */
  int rgb_ids;          /* 3 components with ids 'R', 'G', 'B' */
  int rgb;              /* 3 components that libjpeg reads as RGB, not YCbCr: no JFIF marker and
                           Adobe transform 0, or no Adobe marker and ids 'R', 'G', 'B' */
  int orientation;      /* EXIF orientation 1..8, 0 without the tag */
  int scans;            /* start-of-scan markers seen */
  int complete;         /* 1: an end-of-image marker follows the last scan */
};

/* 0 when buf starts with SOI and a frame header was found (h filled as far as the
 * data goes), -1 otherwise (h still says what was seen). */
int dpt_jpeg_hdr_parse(const unsigned char *buf, size_t len, struct dpt_jpeg_hdr *h);

enum dpt_jpeg_route { DPT_JPEG_ROUTE_GPU_HW, DPT_JPEG_ROUTE_GPU, DPT_JPEG_ROUTE_CPU };

/* Which decoder gets a file whose dpt_jpeg_hdr_parse() returned parse_rc into h
 * (rules above); have_hw: the GPU has nvJPEG's hardware decoder; max_pixels:
 * larger frames go to the CPU decoder, which refuses them with its message.
 * *why (optional) = a short reason for CPU and GPU routes ("progressive",
 * "CMYK", "truncated", ...), "" for GPU_HW. */
enum dpt_jpeg_route dpt_jpeg_hdr_route(const struct dpt_jpeg_hdr *h, int parse_rc, int have_hw, long max_pixels,
                                       const char **why);

/* "444", "420", ... for messages. */
const char *dpt_jpeg_hdr_css_name(int css);

#endif /* DPT_JPEG_HDR_H */
