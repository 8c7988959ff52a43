/* dpt_jpeg_hdr.c — JPEG marker walk and the GPU loader's routing rule (see
 * dpt_jpeg_hdr.h).  Markers: ITU-T T.81 Annex B; EXIF: CIPA DC-008 (TIFF IFD0
 * tag 0x0112); Adobe APP14: Adobe technical note 5116. */
#include "dpt_jpeg_hdr.h"

#include <string.h>

static unsigned be16(const unsigned char *p) { return (unsigned)p[0] << 8 | p[1]; }

static unsigned tiff16(const unsigned char *p, int le) { return le ? (unsigned)p[1] << 8 | p[0] : be16(p); }

static unsigned long tiff32(const unsigned char *p, int le)
{
  return le ? (unsigned long)p[3] << 24 | (unsigned long)p[2] << 16 | (unsigned long)p[1] << 8 | p[0]
            : (unsigned long)p[0] << 24 | (unsigned long)p[1] << 16 | (unsigned long)p[2] << 8 | p[3];
}

/* APP1 payload p[0..n): "Exif\0\0" + TIFF; orientation of IFD0, 0 if absent or malformed. */
static int exif_orientation(const unsigned char *p, size_t n)
{
  if (n < 14 || memcmp(p, "Exif\0\0", 6)) return 0;
  const unsigned char *t = p + 6;
  size_t tn = n - 6;
  int le;
  if (t[0] == 'I' && t[1] == 'I') le = 1;
  else if (t[0] == 'M' && t[1] == 'M') le = 0;
  else return 0;
  if (tiff16(t + 2, le) != 42) return 0;
  unsigned long ifd = tiff32(t + 4, le);
  if (ifd > tn || tn - ifd < 2) return 0;
  unsigned cnt = tiff16(t + ifd, le);
  for (unsigned i = 0; i < cnt; i++) {
    size_t e = ifd + 2 + (size_t)i * 12;
    if (e + 12 > tn) return 0;
    if (tiff16(t + e, le) == 0x0112 && tiff16(t + e + 2, le) == 3 /* SHORT */) {
      unsigned v = tiff16(t + e + 8, le);
      return v >= 1 && v <= 8 ? (int)v : 0;
    }
  }
  return 0;
}

static int css_of(const unsigned char *comp, int nc)
{
  if (nc == 1) return DPT_JPEG_CSS_GRAY;
  if (nc != 3) return DPT_JPEG_CSS_OTHER;
  int yh = comp[1] >> 4, yv = comp[1] & 15;
  for (int k = 1; k < 3; k++)
    if (comp[3 * k + 1] != 0x11) return DPT_JPEG_CSS_OTHER;
  if (yh == 1 && yv == 1) return DPT_JPEG_CSS_444;
  if (yh == 2 && yv == 1) return DPT_JPEG_CSS_422;
  if (yh == 2 && yv == 2) return DPT_JPEG_CSS_420;
  if (yh == 1 && yv == 2) return DPT_JPEG_CSS_440;
  if (yh == 4 && yv == 1) return DPT_JPEG_CSS_411;
  if (yh == 4 && yv == 2) return DPT_JPEG_CSS_410;
  return DPT_JPEG_CSS_OTHER;
}

/* Position after the entropy-coded data starting at pos: the next marker that is
 * neither a stuffed 0xFF00 nor a restart marker (len when the data runs out). */
static size_t skip_entropy(const unsigned char *b, size_t len, size_t pos)
{
  while (pos + 1 < len) {
    const unsigned char *f = memchr(b + pos, 0xFF, len - pos - 1);
    if (!f) return len;
    pos = (size_t)(f - b);
    unsigned m = b[pos + 1];
    if (m == 0x00 || (m >= 0xD0 && m <= 0xD7) || m == 0xFF) {
      pos += m == 0xFF ? 1 : 2;
      continue;
    }
    return pos;
  }
  return len;
}

int dpt_jpeg_hdr_parse(const unsigned char *b, size_t len, struct dpt_jpeg_hdr *h)
{
  memset(h, 0, sizeof *h);
  h->adobe_transform = -1;
  h->css = DPT_JPEG_CSS_OTHER;
  if (!b || len < 4 || b[0] != 0xFF || b[1] != 0xD8) return -1;
  h->soi = 1;
  size_t pos = 2;
  while (pos + 1 < len) {
    if (b[pos] != 0xFF) { /* garbage between segments (libjpeg warns "extraneous bytes"): find a marker */
      pos = skip_entropy(b, len, pos);
      continue;
    }
    unsigned m = b[pos + 1];
    if (m == 0xFF) { /* fill byte */
      pos++;
      continue;
    }
    if (m == 0xD9) {
      h->complete = h->scans > 0;
      break;
    }
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD8)) { /* standalone markers */
      pos += 2;
      continue;
    }
    if (pos + 4 > len) break;
    size_t seg = be16(b + pos + 2), body = pos + 4;
    if (seg < 2 || pos + 2 + seg > len) break; /* cut inside a segment */
    const unsigned char *p = b + body;
    size_t n = seg - 2;
    if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
      if (!h->sof && n >= 6) {
        h->sof = (int)m;
        h->precision = p[0];
        h->height = (int)be16(p + 1);
        h->width = (int)be16(p + 3);
        h->components = p[5];
        if (n >= 6 + 3 * (size_t)h->components) {
          h->css = css_of(p + 6, h->components);
          h->rgb_ids = h->components == 3 && p[6] == 'R' && p[9] == 'G' && p[12] == 'B';
        }
      }
    } else if (m == 0xE0 && n >= 5 && !memcmp(p, "JFIF", 5)) {
      h->jfif = 1;
    } else if (m == 0xE1 && !h->orientation) {
      h->orientation = exif_orientation(p, n);
    } else if (m == 0xEE && n >= 12 && !memcmp(p, "Adobe", 5)) {
      h->adobe_transform = p[11];
    } else if (m == 0xDA) {
      h->scans++;
      pos = skip_entropy(b, len, pos + 2 + seg);
      continue;
    }
    pos += 2 + seg;
  }
  h->rgb = h->components == 3 && !h->jfif &&
           (h->adobe_transform == 0 || (h->adobe_transform < 0 && h->rgb_ids));
  return h->sof ? 0 : -1;
}

enum dpt_jpeg_route dpt_jpeg_hdr_route(const struct dpt_jpeg_hdr *h, int parse_rc, int have_hw, long max_pixels,
                                       const char **why)
{
  const char *w = "";
  enum dpt_jpeg_route r = DPT_JPEG_ROUTE_CPU;
  if (max_pixels <= 0) max_pixels = 1L << 28;
  if (parse_rc || !h->soi) w = h->soi ? "no frame header" : "not a JPEG";
  else if (!h->complete) w = "truncated";
  else if (h->width < 1 || h->height < 1 || (long)h->width * h->height > max_pixels) w = "frame size";
  else if (h->precision != 8) w = "not 8-bit";
  else if (h->sof != 0xC0 && h->sof != 0xC1 && h->sof != 0xC2) w = "lossless/arithmetic/hierarchical";
  else if (h->components == 4) w = "CMYK";
  else if (h->components != 1 && h->components != 3) w = "component count";
  else if (h->rgb) w = "RGB-coded";
  else if (h->components == 3 && h->css == DPT_JPEG_CSS_OTHER) w = "sampling factors";
  else {
    r = DPT_JPEG_ROUTE_GPU;
    if (h->sof == 0xC2) w = "progressive";
    else if (h->sof == 0xC1) w = "extended sequential";
    else if (h->scans != 1) w = "multi-scan";
    else if (h->css == DPT_JPEG_CSS_411 || h->css == DPT_JPEG_CSS_410) w = "4:1:x sampling";
    else if (!have_hw) w = "no hardware decoder";
    else r = DPT_JPEG_ROUTE_GPU_HW;
  }
  if (why) *why = w;
  return r;
}

const char *dpt_jpeg_hdr_css_name(int css)
{
  static const char *n[] = {"444", "422", "420", "440", "411", "410", "gray", "other"};
  return css >= 0 && css <= DPT_JPEG_CSS_OTHER ? n[css] : "other";
}
