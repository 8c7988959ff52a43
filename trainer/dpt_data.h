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
 * padded with label -1 (ignored by the loss and the accuracy counts). */
#ifndef DPT_DATA_H
#define DPT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "dpt_err.h"

struct dpt_dataset {
  char name[32];          /* "synthetic", "fashion-mnist", "cifar10" */
  int n;                  /* images */
  int c, h, w;            /* image shape */
  int num_classes;
  unsigned char *pixels;  /* [n, c, h, w] uint8 */
  int *labels;            /* [n] in [0, num_classes) */
  float mean[3], std[3];  /* per-channel normalisation on [0, 1] pixels */
  int skipped;            /* records dropped as corrupt (skip_bad) */
};

struct dpt_data_opts {
  int skip_bad;           /* 1: drop records with bad labels and count them; 0: error */
  int synth_size;         /* synthetic: image side (0 = 32) */
  int synth_classes;      /* synthetic: classes (0 = 10) */
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
/* kind: "synthetic" | "fashion-mnist" | "cifar10"; dir NULL = the default
 * (/usr/share/datasets/fashion-mnist for fashion-mnist).  n_synth: synthetic size. */
int dpt_data_load(struct dpt_dataset *d, const char *kind, const char *dir, int train,
                  int n_synth, uint64_t seed, const struct dpt_data_opts *o, struct dpt_err *err);
void dpt_data_free(struct dpt_dataset *d);

/* Names the loader knows, for --help. */
#define DPT_DATASETS "synthetic, fashion-mnist, cifar10"
#define DPT_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

struct dpt_loader_opts {
  int batch;        /* per rank */
  int rank, size;   /* this rank, number of ranks */
  uint64_t seed;
  int train;        /* 1: shuffle + augment + drop remainder; 0: validation order */
  int crop_pad;     /* random crop with this zero padding (0 = none) */
  int flip;         /* random horizontal flip */
  int out_size;     /* output side (crop size); 0 = image size */
  int prefetch;     /* batches prepared ahead by the thread (0 = synchronous) */
};

struct dpt_loader;

int dpt_loader_create(struct dpt_loader **out, const struct dpt_dataset *d,
                      const struct dpt_loader_opts *o, struct dpt_err *err);
void dpt_loader_destroy(struct dpt_loader *L);
int dpt_loader_steps(const struct dpt_loader *L); /* batches per epoch for this rank */
/* Begin epoch e at step s (resume); the permutation depends only on (seed, e). */
void dpt_loader_start(struct dpt_loader *L, int epoch, int step);
/* Next batch: x [batch, c, out, out] normalised floats, labels [batch] (-1 =
 * padding).  Returns the number of real images, 0 at the end of the epoch.
 * *wait_s (optional) += seconds spent waiting for the prefetch thread. */
int dpt_loader_next(struct dpt_loader *L, const float **x, const int **labels, double *wait_s);

#endif /* DPT_DATA_H */
