/* ref_f64.h — the float64 references of the GPU-vs-CPU fixtures (ref/gpu_ref.{json,bin} and
 * ref/gpu_ref_tight.{json,bin}, made by ref/make_gpu_ref.py) and the per-block check both
 * backends go through.
 *
 * Metric (as test_ref / test_gpu_vs_cpu): per gradient block (a layer's weight, then
 * its bias), e = max |g - ref| / max |ref|.
 *
 * Bound of a block at precision P, from what was measured on this fixture (make_gpu_ref.py):
 *   tol = max(R, S * sens[P]),   R = A * max(u, torch32 * u / u32) + B * cond * u
 * u: the unit roundoff the backend computes in (2^-24 fp32; 2^-11 tf32 / fp16
 * inputs; 2^-8 bf16), u32 = 2^-24.
 * torch32: PyTorch's own float32 error on this block against float64 — what the
 *   errors of the terms (every layer above and below) amount to in float32 on
 *   this fixture; scaled by u / u32 it is the same propagation at precision u.
 * cond: the block's cancellation number (max_c sum |terms| / max_c |sum terms|):
 *   what the final sum alone can lose, relative to the block's largest entry.
 * A = 8 and B = 4 are the slack for a different summation order and algorithm
 *   (oneDNN / cuDNN vs PyTorch).  R is the rounding bound of a well-conditioned block.
 * sens[P]: the block's measured sensitivity to P's forward error (largest error of 9
 *   float64 runs with P emulated and the ReLU inputs dithered: one rounding of P; fp32 1e-5 of
 *   their rms, 4x PyTorch fp32's measured error there, as oneDNN's logits error is 4.2x PyTorch's): ReLU
 *   inputs within the forward error of 0 switch masks between two correct
 *   implementations, and every block below moves by the upstream gradient there.
 *   S = 2: a backend's own mask flips are one more draw of the same kind.
 * Measured on this fixture (make_gpu_ref.py prints it): fp32 sens 5e-6 (fc.bias)
 * to 0.11 (layer4.2.conv3: the last add's ReLU has 3 inputs within fp32's error
 * band, layer4.1's 4); tf32 / fp16 emulation alone moves the whole gradient by
 * 74% in L2 (logits 4.5%), bf16 by 139%: at 16-bit precision this fixture's
 * gradients are not determined, and the bound says so instead of hiding it.
 *
 * gpu_ref_tight (width 1/32, 8x8 inputs, dpt_rng seed 80) is the fp32 fixture: every ReLU
 * input lies >= 50 sigma of fp32's forward error from 0 (make_gpu_ref.py asserts it; 86
 * measured), so no fp32 mask flips and sens[fp32] is PyTorch's own float32 error (the
 * largest of 8 draws: the batch in 8 orders): every block's fp32 bound is the rounding
 * bound R, and the tests require that (all blocks tight).  Its A is 16, not 8: oneDNN's
 * fp32 error there is measured at up to 8.3x PyTorch's largest draw (layer1.0.bn1.weight,
 * 1 thread; 6.8x with 2; 5 other blocks at 5-7x), so A = 16 keeps a 1.9x margin over it.  The logits and the whole-gradient L2 get the same two-sided form:
 *   max(S * sens, A * max(u, torch32 * u / u32)) with torch32 the fixture's PyTorch float32
 *   error there (torch32_vs_float64: logits_max_rel, grads_l2_rel; absent = 0). */
#ifndef REF_F64_H
#define REF_F64_H

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_file.h"
#include "dpt_model.h"

#define REF_U32 (1.0 / 16777216.0) /* 2^-24 */
#define REF_A 8.0
#define REF_A_TIGHT 16.0 /* gpu_ref_tight (see above) */
#define REF_B 4.0
#define REF_S 2.0
enum ref_prec { REF_FP32, REF_TF32, REF_FP16, REF_BF16, REF_NPREC };
static const char *const ref_prec_name[REF_NPREC] = {"fp32", "tf32", "fp16", "bf16"};
/* unit roundoff of what the backend rounds to at each precision */
static const double ref_prec_u[REF_NPREC] = {1.0 / 16777216.0, 1.0 / 2048.0, 1.0 / 2048.0, 1.0 / 256.0};

struct ref_block {
  const char *name;
  size_t off, count;
  double cond, torch32;
  double sens[REF_NPREC];
};

struct ref_f64 {
  json_t *meta;
  unsigned char *blob;
  size_t blob_len;
  struct ref_block *b;
  int n_blocks;
  double A;              /* REF_A, or REF_A_TIGHT for the well-conditioned fixture */
};

static inline void ref_die(const char *msg, const char *what)
{
  fprintf(stderr, "%s: %s\n", msg, what);
  exit(1);
}

/* name: "gpu_ref" or "gpu_ref_tight" (dir/name.json and dir/name.bin). */
static inline void ref_load_named(struct ref_f64 *r, const char *dir, const char *name)
{
  char path[4096];
  json_error_t je;
  snprintf(path, sizeof path, "%s/%s.json", dir, name);
  if (!(r->meta = json_load_file(path, 0, &je))) ref_die(path, je.text);
  snprintf(path, sizeof path, "%s/%s.bin", dir, name);
  struct dpt_err err;
  char *bytes;
  if (dpt_file_read(path, "reference blob", NULL, 0, &bytes, &r->blob_len, &err)) ref_die(path, err.msg);
  r->blob = (unsigned char *)bytes;
  r->A = json_object_get(r->meta, "relu_margin") ? REF_A_TIGHT : REF_A;
  json_t *bl = json_object_get(r->meta, "blocks");
  r->n_blocks = (int)json_array_size(bl);
  r->b = calloc((size_t)r->n_blocks, sizeof *r->b);
  for (int i = 0; i < r->n_blocks; i++) {
    json_t *o = json_array_get(bl, (size_t)i);
    r->b[i].name = json_string_value(json_object_get(o, "name"));
    r->b[i].off = (size_t)json_integer_value(json_object_get(o, "offset"));
    r->b[i].count = (size_t)json_integer_value(json_object_get(o, "count"));
    r->b[i].cond = json_number_value(json_object_get(o, "cond"));
    r->b[i].torch32 = json_number_value(json_object_get(o, "torch32"));
    for (int p = 0; p < REF_NPREC; p++)
      r->b[i].sens[p] = json_number_value(json_object_get(json_object_get(o, "sens"), ref_prec_name[p]));
  }
}

static inline void ref_load(struct ref_f64 *r, const char *dir)
{
  ref_load_named(r, dir, "gpu_ref");
}

/* A seed of the fixture (init_seed, data_seed); the first fixture has none: dflt. */
static inline unsigned long long ref_seed(const struct ref_f64 *r, const char *key, unsigned long long dflt)
{
  json_t *v = json_object_get(r->meta, key);
  return v ? (unsigned long long)json_integer_value(v) : dflt;
}

static inline void ref_free(struct ref_f64 *r)
{
  json_decref(r->meta);
  free(r->blob);
  free(r->b);
}

static inline const void *ref_section(const struct ref_f64 *r, const char *name, size_t want)
{
  json_t *s = json_object_get(json_object_get(r->meta, "sections"), name);
  if (!s) ref_die("gpu_ref.json has no section", name);
  size_t off = (size_t)json_integer_value(json_object_get(s, "offset"));
  size_t cnt = (size_t)json_integer_value(json_object_get(s, "count"));
  if (cnt != want || off + cnt * 4 > r->blob_len) ref_die("gpu_ref.bin: wrong size of section", name);
  return r->blob + off;
}

/* The fixture's model (ResNet-50 v1.5, small stem; gpu_ref: width 1/8, 3x32x32; gpu_ref_tight:
 * width 1/32, 3x8x8; 10 classes). */
static inline void ref_model_cfg(const struct ref_f64 *r, struct dpt_model_cfg *cfg)
{
  json_t *jm = json_object_get(r->meta, "model");
  dpt_model_cfg_default(cfg);
  cfg->width = json_number_value(json_object_get(jm, "width"));
  cfg->image_size = (int)json_integer_value(json_object_get(jm, "image_size"));
  cfg->in_channels = (int)json_integer_value(json_object_get(jm, "in_channels"));
  cfg->num_classes = (int)json_integer_value(json_object_get(jm, "num_classes"));
  cfg->small_stem = json_is_true(json_object_get(jm, "small_stem"));
  cfg->zero_init_residual = json_is_true(json_object_get(jm, "zero_init_residual"));
}

static inline double ref_nerr(const float *a, const float *b, size_t n)
{
  double e = 0, mb = 0;
  for (size_t i = 0; i < n; i++) {
    e = fmax(e, fabs((double)a[i] - b[i]));
    mb = fmax(mb, fabs((double)b[i]));
  }
  return mb > 0 ? e / mb : e;
}

/* The rounding bound R of a block, and its bound max(R, S * sens). */
static inline double ref_block_r(const struct ref_f64 *r, const struct ref_block *b, enum ref_prec p)
{
  double u = ref_prec_u[p];
  return r->A * fmax(u, b->torch32 * u / REF_U32) + REF_B * b->cond * u;
}

static inline double ref_block_tol(const struct ref_f64 *r, const struct ref_block *b, enum ref_prec p)
{
  return fmax(ref_block_r(r, b, p), REF_S * b->sens[p]);
}

/* A measured per-precision number of the whole fixture (logits_sens, grads_l2_sens). */
static inline double ref_meta_prec(const struct ref_f64 *r, const char *key, enum ref_prec p)
{
  return json_number_value(json_object_get(json_object_get(r->meta, key), ref_prec_name[p]));
}

/* Bound of a whole-fixture error at precision p: max(S * sens_key[p], A * max(u, torch32 * u / u32))
 * with torch32 = torch32_vs_float64[t32_key] (0 when the fixture has none). */
static inline double ref_whole_tol(const struct ref_f64 *r, const char *sens_key, const char *t32_key,
                                   enum ref_prec p)
{
  double u = ref_prec_u[p];
  double t32 = json_number_value(json_object_get(json_object_get(r->meta, "torch32_vs_float64"), t32_key));
  return fmax(REF_S * ref_meta_prec(r, sens_key, p), r->A * fmax(u, t32 * u / REF_U32));
}

static inline double ref_logits_tol(const struct ref_f64 *r, enum ref_prec p)
{
  return ref_whole_tol(r, "logits_sens", "logits_max_rel", p);
}

/* ||g - ref|| / ||ref|| over n values */
static inline double ref_l2err(const float *g, const float *ref, size_t n)
{
  double e = 0, s = 0;
  for (size_t i = 0; i < n; i++) {
    e += ((double)g[i] - ref[i]) * ((double)g[i] - ref[i]);
    s += (double)ref[i] * ref[i];
  }
  return s > 0 ? sqrt(e / s) : sqrt(e);
}

/* Check every gradient block of g against the reference at precision p, and the
 * whole slab's L2 error (ref_whole_tol).  Prints the named blocks and
 * the worst e / tol; returns the number of checks over their bound (blocks + L2);
 * *tight: blocks whose bound is the rounding bound R (well-conditioned here). */
static inline int ref_check_grads(const struct ref_f64 *r, const char *who, const float *g, enum ref_prec p,
                                  const char *const *show, int *tight)
{
  double u = ref_prec_u[p];
  const float *ref = ref_section(r, "grads", (size_t)json_integer_value(json_object_get(r->meta, "n_params")));
  int bad = 0, wi = 0, nt = 0;
  double wr = 0, emax = 0;
  for (int i = 0; i < r->n_blocks; i++) {
    const struct ref_block *b = &r->b[i];
    double e = ref_nerr(g + b->off, ref + b->off, b->count), tol = ref_block_tol(r, b, p);
    nt += tol <= ref_block_r(r, b, p);
    int named = 0;
    for (int k = 0; show && show[k]; k++) named |= !strcmp(show[k], b->name);
    if (e > tol) {
      bad++;
      fprintf(stderr, "FAIL %s: gradient block %s: error %.3g > bound %.3g (cond %.1f, PyTorch fp32 %.2e, "
              "u %.2e)\n", who, b->name, e, tol, b->cond, b->torch32, u);
    } else if (named) {
      printf("%s: %-28s error %.2e bound %.2e (cond %.1f, PyTorch fp32 %.2e)\n", who, b->name, e, tol, b->cond,
             b->torch32);
    }
    if (e / tol > wr) wr = e / tol, wi = i;
    emax = fmax(emax, e);
  }
  size_t np = (size_t)json_integer_value(json_object_get(r->meta, "n_params"));
  double l2 = ref_l2err(g, ref, np), l2tol = ref_whole_tol(r, "grads_l2_sens", "grads_l2_rel", p);
  printf("%s: gradients vs float64: max block error %.2e; worst e/bound %.2f in %s; %d of %d blocks held "
         "to the rounding bound; L2 %.2e (bound %.2e)\n", who, emax, wr, r->b[wi].name, nt, r->n_blocks, l2, l2tol);
  if (l2 > l2tol) {
    bad++;
    fprintf(stderr, "FAIL %s: whole-gradient L2 error %.3g > bound %.3g\n", who, l2, l2tol);
  }
  if (tight) *tight = nt;
  return bad;
}

#endif /* REF_F64_H */
