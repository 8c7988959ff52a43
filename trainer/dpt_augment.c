/* dpt_augment.c — crop boxes, flips and bilinear sampling tables shared by the
 * CPU and GPU loaders (see dpt_augment.h). */
#include "dpt_augment.h"

#include <math.h>

void dpt_augment_default(struct dpt_augment *a, int train, int out, uint64_t seed)
{
  a->train = train;
  a->out = out;
  a->flip = train;
  a->scale_min = 0.08;
  a->scale_max = 1.0;
  a->ratio_min = 3.0 / 4.0;
  a->ratio_max = 4.0 / 3.0;
  a->resize = (out * 8 + 3) / 7; /* 224 -> 256 */
  a->seed = seed;
}

uint64_t dpt_augment_mix(uint64_t a, uint64_t b)
{
  uint64_t z = a * 0x9e3779b97f4a7c15ULL ^ (b + 0x632be59bd9b4e019ULL + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  return z ^ (z >> 31);
}

void dpt_augment_rng(struct dpt_rng *r, uint64_t seed, int epoch, long idx)
{
  dpt_rng_seed(r, dpt_augment_mix(dpt_augment_mix(seed, (uint64_t)epoch), (uint64_t)idx));
}

/* Validation: shorter side -> side (rounded as dpt_data_jpeg_resized), centred out x out. */
static void centre(const struct dpt_augment *a, int W, int H, struct dpt_crop *c)
{
  int side = a->resize > 0 ? a->resize : (a->out * 8 + 3) / 7, rh, rw;
  if (side < a->out) side = a->out;
  if (H <= W) {
    rh = side;
    rw = (int)(((long)W * side * 2 + H) / (2L * H));
  } else {
    rw = side;
    rh = (int)(((long)H * side * 2 + W) / (2L * W));
  }
  if (rw < a->out) rw = a->out; /* an extreme aspect ratio: the crop is the whole short axis */
  if (rh < a->out) rh = a->out;
  int oy = (rh - a->out) / 2, ox = (rw - a->out) / 2;
  c->y0 = (double)oy * H / rh;
  c->h = (double)a->out * H / rh;
  c->x0 = (double)ox * W / rw;
  c->w = (double)a->out * W / rw;
  c->flip = 0;
}

void dpt_augment_crop(const struct dpt_augment *a, int epoch, long idx, int W, int H, struct dpt_crop *c)
{
  if (W < 1) W = 1;
  if (H < 1) H = 1;
  if (!a->train) {
    centre(a, W, H, c);
    return;
  }
  struct dpt_rng r;
  dpt_augment_rng(&r, a->seed, epoch, idx);
  double area = (double)W * H, lr0 = log(a->ratio_min), lr1 = log(a->ratio_max);
  int w = 0, h = 0, i = 0, j = 0, found = 0;
  for (int t = 0; t < 10 && !found; t++) {
    double target = area * (a->scale_min + (a->scale_max - a->scale_min) * dpt_rng_uniform(&r));
    double ar = exp(lr0 + (lr1 - lr0) * dpt_rng_uniform(&r));
    w = (int)lround(sqrt(target * ar));
    h = (int)lround(sqrt(target / ar));
    if (w > 0 && w <= W && h > 0 && h <= H) {
      i = (int)dpt_rng_below(&r, (uint64_t)(H - h) + 1);
      j = (int)dpt_rng_below(&r, (uint64_t)(W - w) + 1);
      found = 1;
    }
  }
  if (!found) { /* torchvision's fallback: the centred box of the whole image within the ratio range */
    double in_ratio = (double)W / H;
    if (in_ratio < a->ratio_min) {
      w = W;
      h = (int)lround(w / a->ratio_min);
    } else if (in_ratio > a->ratio_max) {
      h = H;
      w = (int)lround(h * a->ratio_max);
    } else {
      w = W;
      h = H;
    }
    if (w < 1) w = 1;
    if (h < 1) h = 1;
    if (w > W) w = W;
    if (h > H) h = H;
    i = (H - h) / 2;
    j = (W - w) / 2;
  }
  c->x0 = j;
  c->y0 = i;
  c->w = w;
  c->h = h;
  c->flip = a->flip && (dpt_rng_next(&r) >> 63);
}

int dpt_augment_min_side(const struct dpt_crop *c, int out, int src_w, int src_h)
{
  double box = c->w < c->h ? c->w : c->h, shorter = src_w < src_h ? src_w : src_h;
  if (box <= 0) return 1;
  double s = ceil(out * shorter / box - 1e-9);
  return s < 1 ? 1 : s > 1e9 ? 1000000000 : (int)s;
}

static void axis(double b0, double len, int out, double scale, int n, int flip, int *ci, float *wt)
{
  for (int k = 0; k < out; k++) {
    int kk = flip ? out - 1 - k : k;
    double s = (b0 + (kk + 0.5) * len / out) * scale - 0.5;
    if (s < 0) s = 0;
    if (s > n - 1) s = n - 1;
    int i0 = (int)s;
    ci[2 * k] = i0;
    ci[2 * k + 1] = i0 + 1 < n ? i0 + 1 : i0;
    wt[k] = (float)(s - i0);
  }
}

void dpt_augment_tables(const struct dpt_crop *c, int out, int src_w, int src_h, int dec_w, int dec_h,
                        int *cx, float *wx, int *cy, float *wy)
{
  axis(c->x0, c->w, out, (double)dec_w / (src_w > 0 ? src_w : 1), dec_w, c->flip, cx, wx);
  axis(c->y0, c->h, out, (double)dec_h / (src_h > 0 ? src_h : 1), dec_h, 0, cy, wy);
}
