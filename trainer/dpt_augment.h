/* dpt_augment.h — where each training / validation crop of a file-backed
 * (imagenet) record comes from, and whether it is mirrored.  ONE function,
 * dpt_augment_crop(), decides it for the CPU loader (dpt_data_jpeg_sample) and
 * for the GPU loader (trainer/cuda/dpt_jpeg_gpu: the boxes its kernel reads),
 * so the same (seed, epoch, record, file size) gives the same box and flip on
 * both paths.
 *
 * Training: torchvision's RandomResizedCrop(scale = (0.08, 1), ratio = (3/4,
 * 4/3)) parameters: up to 10 draws of an area fraction (uniform) and a log-
 * uniform aspect ratio w/h; the first box that fits the image is placed at a
 * uniform integer offset; after 10 misses the centred box of the image clamped
 * to the ratio range.  Then a horizontal flip with probability 1/2.
 * Validation: the shorter side resized to `resize` (default round(8/7 out),
 * 256 for 224) and the centred out x out square of it (torchvision's Resize +
 * CenterCrop), expressed as a box of the file's pixels.
 *
 * The box is in the file's full-size pixel frame: a decoder that scales (DCT
 * scaling, a hardware decoder's 1/2 .. 1/8) multiplies it by its scale.
 * Output pixel (y, x) of the out x out crop samples the source at
 *   sy = y0 + (y + 0.5) * h / out - 0.5,  sx = x0 + (x' + 0.5) * w / out - 0.5
 * (x' = out - 1 - x when flipped; half-pixel centres, clamped to the image),
 * bilinear, without antialiasing (torchvision's resize on tensors with
 * antialias=False; PIL's BILINEAR widens its filter when it shrinks). */
#ifndef DPT_AUGMENT_H
#define DPT_AUGMENT_H

#include <stdint.h>

#include "dpt_model.h" /* struct dpt_rng */

struct dpt_crop {
  double x0, y0;  /* top-left corner of the box, in source pixels */
  double w, h;    /* box size in source pixels (> 0, inside the image) */
  int flip;       /* 1: the output is mirrored left-right */
};

struct dpt_augment {
  int train;                   /* 1: random-resized crop (+ flip); 0: resize + centre crop */
  int out;                     /* output side (the crop is resized to out x out) */
  int flip;                    /* training: random horizontal flip with p = 1/2 */
  double scale_min, scale_max; /* training: area fraction of the image (0.08, 1) */
  double ratio_min, ratio_max; /* training: aspect ratio w / h (3/4, 4/3) */
  int resize;                  /* validation: shorter side before the centre crop (0: round(8/7 out)) */
  uint64_t seed;
};

/* ImageNet's recipe for out: scale (0.08, 1), ratio (3/4, 4/3), flip in training,
 * resize round(8/7 out) in validation. */
void dpt_augment_default(struct dpt_augment *a, int train, int out, uint64_t seed);

/* A 64-bit hash of (a, b) for seeds (the loader's per-epoch shuffle uses it too). */
uint64_t dpt_augment_mix(uint64_t a, uint64_t b);

/* The generator of record idx in epoch `epoch`: depends on nothing else (not on the
 * worker, the batch or the rank), so every path and every resumed run draws the same. */
void dpt_augment_rng(struct dpt_rng *r, uint64_t seed, int epoch, long idx);

/* The crop box and flip of record idx (in epoch `epoch`) of a src_w x src_h file. */
void dpt_augment_crop(const struct dpt_augment *a, int epoch, long idx, int src_w, int src_h,
                      struct dpt_crop *c);

/* The shorter side a decoder may scale the src_w x src_h image down to and still
 * give the box at least out source pixels per output pixel on both axes
 * (>= 1; the CPU path's DCT scaling bound). */
int dpt_augment_min_side(const struct dpt_crop *c, int out, int src_w, int src_h);

/* The bilinear sampling tables of crop c for a decoder output of dec_w x dec_h
 * pixels of the src_w x src_h file (the box scaled by dec / src per axis): output
 * column k reads decoded columns cx[2k] and cx[2k + 1] with weight wx[k] on the
 * second (the flip applied), output row k rows cy[2k], cy[2k + 1] with wy[k].
 * cx, cy: [2 * out], wx, wy: [out].  The CPU path samples with these tables and
 * the GPU path uploads the same tables to its kernel: the positions and weights
 * are bit-identical on both. */
void dpt_augment_tables(const struct dpt_crop *c, int out, int src_w, int src_h, int dec_w, int dec_h,
                        int *cx, float *wx, int *cy, float *wy);

#endif /* DPT_AUGMENT_H */
