/* dpt_data.h — datasets and the per-rank batch loader.
 *
 * Datasets are held in memory as uint8 pixels (Fashion-MNIST 47 MB, CIFAR-10
 * 180 MB); the loader turns them into normalised float batches:
 *   - a seeded global shuffle per epoch (same permutation on every rank),
 *     rank r of p takes positions [(s*p + r)*B, (s*p + r + 1)*B) at step s:
 *     disjoint shards, equal step counts (the remainder is dropped in training);
 *   - random crop (zero padding) and horizontal flip, with a per-image RNG
 *     derived from (seed, epoch, image index): results do not depend on thread
 *     timing, so a resumed run sees the same batches;
 *   - a prefetch thread fills a ring of batches ahead of the training step and
 *     the time the step waited is reported.
 * Validation: rank r takes images r, r+p, r+2p, ... in order, the last batch
 * padded with label -1 (ignored by the loss and the accuracy counts).
 *
 * ImageNet-style JPEG folders ("imagenet") are not held in memory: the dataset
 * is a list of files and labels, and the loader's worker threads read and
 * decode each record (libturbojpeg, DCT-scaled towards the target size),
 * resize its shorter side to round(8/7 x out) (256 for 224), crop out x out
 * (random in training, centred in validation), flip and normalise.  A record
 * that fails to decode stops the loader with an error naming the file and the
 * record, or (skip_bad) becomes a label -1 image and is counted. */
#ifndef DPT_DATA_H
#define DPT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "dpt_err.h"

/* File-backed records (imagenet): paths and state shared by the loaders. */
struct dpt_file_set {
  char *pool;             /* NUL-terminated paths, back to back */
  size_t *off;            /* [n] offset of record i's path in pool */
  int skip_bad;           /* a record that fails to decode: 1 = label -1 and count, 0 = error */
  unsigned char *bad;     /* [n] 1 once record i failed to decode (skip_bad) */
  int bad_count;          /* distinct records that failed (atomic) */
};

struct dpt_dataset {
  char name[32];          /* "synthetic", "fashion-mnist", "cifar10", "imagenet" */
  int n;                  /* images */
  int c, h, w;            /* image shape */
  int num_classes;
  unsigned char *pixels;  /* [n, c, h, w] uint8 */
  int *labels;            /* [n] in [0, num_classes) */
  float mean[3], std[3];  /* per-channel normalisation on [0, 1] pixels */
  int skipped;            /* records dropped as corrupt at load time (skip_bad) */
  struct dpt_file_set *files; /* imagenet: records are files decoded by the loader (pixels
                                 NULL; h = w = the default output side, 224) */
};

struct dpt_data_opts {
  int skip_bad;           /* 1: drop records with bad labels and count them; 0: error */
  int synth_size;         /* synthetic: image side (0 = 32) */
  int synth_classes;      /* synthetic: classes (0 = 10) */
  /* imagenet */
  const char *train_list; /* "path label" lines (paths relative to the list's folder) instead */
  const char *val_list;   /*   of DIR/train/<class>/ and DIR/val/<class>/ */
  int num_classes;        /* labels must be below this (0: list files: max + 1; folders: count) */
  int channels;           /* 3 = RGB (0 = 3), 1 = grayscale */
};

/* Fashion-MNIST IDX files (optionally .gz) from dir: train-images-idx3-ubyte,
 * train-labels-idx1-ubyte, t10k-... .  Validates magic numbers, dimensions,
 * counts, file lengths and labels; errors name the file and the record. */
int dpt_data_load_idx(struct dpt_dataset *d, const char *images_path, const char *labels_path,
                      const struct dpt_data_opts *o, struct dpt_err *err);
/* CIFAR-10 binary batches (data_batch_1..5.bin / test_batch.bin) from dir. */
int dpt_data_load_cifar10(struct dpt_dataset *d, const char *dir, int train,
                          const struct dpt_data_opts *o, struct dpt_err *err);
/* Random images with a learnable signal (class-dependent mean pattern). */
int dpt_data_synthetic(struct dpt_dataset *d, int n, int c, int hw, int num_classes, uint64_t seed,
                       struct dpt_err *err);
/* ImageNet-style JPEG records.  Folders (list NULL): classes are the sorted
 * (strcmp) sub-folder names of dir/train, label = index; the records are the
 * *.jpg / *.jpeg files (any case) of dir/train/<class>/ (train) or
 * dir/val/<class>/ (validation, class names looked up in dir/train), sorted.
 * List file: one "path label" record per line (label = the last field, path =
 * everything before it; relative paths from the list's folder; blank lines and
 * '#' comments ignored); a bad label names file:line (skip_bad: dropped and
 * counted in d->skipped).  Files are only opened by the loader. */
int dpt_data_load_imagenet(struct dpt_dataset *d, const char *dir, const char *list, int train,
                           const struct dpt_data_opts *o, struct dpt_err *err);
/* kind: "synthetic" | "fashion-mnist" | "cifar10" | "imagenet"; dir NULL = the default
 * (/usr/share/datasets/fashion-mnist for fashion-mnist).  n_synth: synthetic size. */
int dpt_data_load(struct dpt_dataset *d, const char *kind, const char *dir, int train,
                  int n_synth, uint64_t seed, const struct dpt_data_opts *o, struct dpt_err *err);
void dpt_data_free(struct dpt_dataset *d);
/* Records dropped so far: at load time plus (imagenet) those the loaders skipped. */
int dpt_data_skipped(const struct dpt_dataset *d);
/* Path of record i of a file-backed dataset. */
const char *dpt_data_path(const struct dpt_dataset *d, long i);

/* ---- JPEG records (libturbojpeg; DPT_E_UNSUPPORTED in a build without it) ---- */

/* A decoder and its reusable buffers, one per thread. */
struct dpt_jpeg {
  void *tj;               /* tjhandle */
  unsigned char *pix;     /* decoded image, interleaved [h, w, c] */
  size_t pix_cap;
  int w, h, c;            /* decoded (DCT-scaled) size and channels */
  int src_w, src_h;       /* size in the file */
  long max_pixels;        /* refuse files with more pixels (0 = 1 << 28) */
  unsigned char *file;    /* file bytes (dpt_data_jpeg_read) */
  size_t file_cap, file_len;
  int *tab;               /* resampling tables */
  float *wt;
  size_t tab_cap;
};
int dpt_data_jpeg_init(struct dpt_jpeg *j, struct dpt_err *err);
void dpt_data_jpeg_free(struct dpt_jpeg *j);
/* Reads a whole file into j->file / j->file_len.  Errors name path and record. */
int dpt_data_jpeg_read(struct dpt_jpeg *j, const char *path, long record, struct dpt_err *err);
/* Decodes len bytes to channels (3 RGB, 1 grayscale; CMYK/YCCK files converted),
 * DCT-scaled to the smallest libjpeg-turbo factor whose shorter side is still >=
 * min_side (0 = full size).  A truncated file ("premature end") is an error,
 * other libjpeg warnings (extraneous bytes) are not.  name/record: for messages. */
int dpt_data_jpeg_decode(struct dpt_jpeg *j, const unsigned char *buf, size_t len, int channels,
                         int min_side, const char *name, long record, struct dpt_err *err);
/* Size of the decoded image after resizing its shorter side to side. */
void dpt_data_jpeg_resized(const struct dpt_jpeg *j, int side, int *rh, int *rw);
/* Bilinear sample of the decoded image resized to (rh, rw) = dpt_data_jpeg_resized(side):
 * the out x out window at (oy, ox) of it (outside = pixel 0), mirrored if flip, as
 * (v / 255 - mean[c]) / std[c] into x [c, out, out]. */
int dpt_data_jpeg_sample(struct dpt_jpeg *j, int side, int oy, int ox, int out, int flip,
                         const float *mean, const float *std, float *x);

/* Names the loader knows, for --help. */
#define DPT_DATASETS "synthetic, fashion-mnist, cifar10, imagenet"
#define DPT_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

struct dpt_loader_opts {
  int batch;        /* per rank */
  int rank, size;   /* this rank, number of ranks */
  uint64_t seed;
  int train;        /* 1: shuffle + augment + drop remainder; 0: validation order */
  int crop_pad;     /* random crop with this zero padding (0 = none) */
  int flip;         /* random horizontal flip */
  int out_size;     /* output side (crop size); 0 = image size */
  int prefetch;     /* batches prepared ahead by the worker threads (0 = synchronous) */
  int workers;      /* worker threads filling batches when prefetch > 0 (0 = 1) */
};

struct dpt_loader;

int dpt_loader_create(struct dpt_loader **out, const struct dpt_dataset *d,
                      const struct dpt_loader_opts *o, struct dpt_err *err);
void dpt_loader_destroy(struct dpt_loader *L);
int dpt_loader_steps(const struct dpt_loader *L); /* batches per epoch for this rank */
/* Begin epoch e at step s (resume); the permutation depends only on (seed, e). */
void dpt_loader_start(struct dpt_loader *L, int epoch, int step);
/* Next batch: x [batch, c, out, out] normalised floats, labels [batch] (-1 =
 * padding or a skipped record).  Returns the number of real images (0 past the
 * end of the epoch, or when every record of the batch was skipped), -1 when a
 * record could not be read (dpt_loader_err says which).
 * *wait_s (optional) += seconds spent waiting for the worker threads. */
int dpt_loader_next(struct dpt_loader *L, const float **x, const int **labels, double *wait_s);
/* The error behind a -1 from dpt_loader_next. */
const struct dpt_err *dpt_loader_err(const struct dpt_loader *L);

#endif /* DPT_DATA_H */
