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
 * decode each record, crop it (training: random-resized crop + flip;
 * validation: shorter side resized to round(8/7 x out), centre crop — boxes and
 * flips from dpt_augment_crop(), dpt_augment.h), resize the crop to out x out
 * (bilinear) and normalise.  On the CPU (device DPT_DATA_CPU) libturbojpeg
 * decodes, DCT-scaled towards the box's size; on the GPU (DPT_DATA_GPU, builds
 * with nvJPEG: trainer/cuda/dpt_jpeg_gpu.h) nvJPEG decodes the batch (its
 * hardware decoder where the GPU has one), the files whose header nvJPEG
 * should not get (dpt_jpeg_hdr_route) or that it refuses are decoded by
 * libturbojpeg on the worker, and one kernel crops, resizes, flips and
 * normalises the whole batch with the CPU path's sampling tables.  A record
 * that fails to decode stops the loader with an error naming the file and the
 * record, or (skip_bad) becomes a label -1 image and is counted. */
#ifndef DPT_DATA_H
#define DPT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "dpt_augment.h"
#include "dpt_err.h"

/* File-backed records (imagenet): paths and state shared by the loaders. */
struct dpt_file_set {
  char *pool;             /* NUL-terminated paths, back to back */
  size_t *off;            /* [n] offset of record i's path in pool */
  int skip_bad;           /* a record that fails to decode: 1 = label -1 and count, 0 = error */
  unsigned char *bad;     /* [n] 1 once record i failed to decode (skip_bad) */
  int bad_count;          /* distinct records that failed (atomic) */
  unsigned char *cpu_only; /* [n] 1 once nvJPEG refused record i: the GPU loader sends it to the CPU */
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
  int src_w, src_h;       /* size in the file (dpt_data_jpeg_header) */
  int cs;                 /* the file's libjpeg colour space (TJCS_*), -1 before a header */
  long max_pixels;        /* refuse files with more pixels (0 = 1 << 28) */
  int exact;              /* 1: libjpeg's accurate integer IDCT (default: TJFLAG_FASTDCT) */
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
/* The size in the file (j->src_w, j->src_h) and colour space from the header alone;
 * refuses empty files, non-JPEGs and more than max_pixels.  name/record: for messages. */
int dpt_data_jpeg_header(struct dpt_jpeg *j, const unsigned char *buf, size_t len, const char *name, long record,
                         struct dpt_err *err);
/* Decodes len bytes to channels (3 RGB, 1 grayscale; CMYK/YCCK files converted),
 * DCT-scaled to the smallest libjpeg-turbo factor whose shorter side is still >=
 * min_side (0 = full size).  A truncated file ("premature end") is an error,
 * other libjpeg warnings (extraneous bytes) are not.  No EXIF orientation is
 * applied (as torchvision's decode_jpeg and PIL's open: pixels in file order). */
int dpt_data_jpeg_decode(struct dpt_jpeg *j, const unsigned char *buf, size_t len, int channels,
                         int min_side, const char *name, long record, struct dpt_err *err);
/* Bilinear sample of the crop box (in the file's full-size pixels: src_w x src_h,
 * scaled to the decoded w x h) resized to out x out, mirrored if crop->flip, as
 * (v / 255 - mean[c]) / std[c] into x [c, out, out]; tables: dpt_augment_tables.
 * -1 without a decoded image or out of memory. */
int dpt_data_jpeg_sample(struct dpt_jpeg *j, const struct dpt_crop *crop, int out, const float *mean,
                         const float *std, float *x);

/* Names the loader knows, for --help. */
#define DPT_DATASETS "synthetic, fashion-mnist, cifar10, imagenet"
#define DPT_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Where the loader decodes file-backed (imagenet) records and what it delivers. */
enum dpt_data_device { DPT_DATA_CPU = 0, DPT_DATA_GPU = 1 };
enum dpt_data_layout { DPT_DATA_NCHW = 0, DPT_DATA_NHWC = 1 };
enum dpt_data_dtype { DPT_DATA_F32 = 0, DPT_DATA_F16 = 1, DPT_DATA_BF16 = 2 };

struct dpt_loader_opts {
  int batch;        /* per rank */
  int rank, size;   /* this rank, number of ranks */
  uint64_t seed;
  int train;        /* 1: shuffle + augment + drop remainder; 0: validation order */
  int crop_pad;     /* random crop with this zero padding (0 = none; in-memory sets only) */
  int flip;         /* random horizontal flip */
  int out_size;     /* output side (crop size); 0 = image size */
  int prefetch;     /* batches prepared ahead by the worker threads (0 = synchronous) */
  int workers;      /* worker threads filling batches when prefetch > 0 (0 = 1) */
  /* file-backed (imagenet) records */
  int exact_decode; /* 1: decode at full size with libjpeg's accurate IDCT (no DCT scaling):
                       the reference of the GPU parity test */
  int device;       /* DPT_DATA_CPU (libturbojpeg) | DPT_DATA_GPU (nvJPEG; builds with it) */
  int gpu;          /* DPT_DATA_GPU: CUDA device ordinal */
  int gpu_no_hw;    /* DPT_DATA_GPU: 1 = never nvJPEG's hardware decoder (its CUDA decoders only) */
  double gpu_hw_share; /* DPT_DATA_GPU: share of a batch's hardware-eligible files the hardware decoder
                          takes, the rest decoded by nvJPEG's CUDA decoder meanwhile (0: 0.65) */
  int device_out;   /* DPT_DATA_GPU: 1 = batches stay on the device (dpt_loader_next_device) in
                       layout / dtype / c_stored; 0 = copied back as host fp32 NCHW (dpt_loader_next) */
  int layout;       /* enum dpt_data_layout (device_out) */
  int dtype;        /* enum dpt_data_dtype (device_out) */
  int c_stored;     /* NHWC: channels stored per pixel, >= c, the rest 0 (0 = c) */
  /* host batches (dpt_loader_next's x): the slots' memory from host_alloc / host_free (host_ctx
     their first argument; NULL: malloc / free).  dpt-train gives the cuda backend's pinned memory,
     so the backend uploads a batch by DMA straight from its slot, no staging copy (PyTorch's
     DataLoader pin_memory).  host_alloc's NULL is out of memory. */
  void *(*host_alloc)(void *host_ctx, size_t bytes);
  void (*host_free)(void *host_ctx, void *p);
  void *host_ctx;
};

/* A batch as it lies in memory: what a device backend takes (ops->input_format,
 * dpt_backend.h) and what a loader delivers (dpt_loader_device_format).  The two must
 * be equal (dpt_input_format_equal) for the backend to read the loader's batch as it
 * is: the negotiation is dpt_loader_opts_for_format. */
struct dpt_input_format {
  int layout;       /* enum dpt_data_layout */
  int dtype;        /* enum dpt_data_dtype */
  int batch;        /* images */
  int c;            /* image channels (the dataset's, the model's input) */
  int c_stored;     /* NHWC: channels stored per pixel (>= c, the rest 0); NCHW: c */
  int h, w;         /* image side */
  int device;       /* CUDA ordinal of the memory; -1: host memory */
  void *stream;     /* the consumer's cudaStream_t (work that reads the batch is ordered on it),
                       NULL for a loader's own format; not compared */
};
/* Bytes of one batch in format f. */
size_t dpt_input_format_bytes(const struct dpt_input_format *f);
/* 1 when a and b describe the same bytes on the same device (every field but stream);
 * else 0 and why[] names the first field that differs with both values. */
int dpt_input_format_equal(const struct dpt_input_format *a, const struct dpt_input_format *b, char *why,
                           size_t why_len);
/* "NHWC fp16, 8 channels (3 + 5 zero)": the channels stored, and the padding. */
const char *dpt_input_format_describe(const struct dpt_input_format *f, char *buf, size_t len);

/* What a loader with options o delivers for dataset d (device-free, the function
 * dpt_loader_create sizes its batches with): host fp32 NCHW (device -1) on the CPU path
 * and on the GPU path without device_out, else o's layout / dtype / stored channels
 * (NCHW: c; NHWC: at least c) on device o->gpu; batch o->batch, side o->out_size
 * (0: the dataset's). */
void dpt_loader_device_format(const struct dpt_dataset *d, const struct dpt_loader_opts *o,
                              struct dpt_input_format *f);
/* The negotiation: sets o (device DPT_DATA_GPU on f->device, device_out, layout, dtype,
 * c_stored) so that the loader delivers exactly f, checked with dpt_loader_device_format.
 * DPT_E_INPUT (o unchanged) when it cannot: d is not file-backed (only JPEG records are
 * decoded on the GPU), f is host memory, d has other than 1 or 3 channels, or f's batch,
 * side or channels are not what o and d give (the message names the field and both
 * values). */
int dpt_loader_opts_for_format(struct dpt_loader_opts *o, const struct dpt_dataset *d,
                               const struct dpt_input_format *f, struct dpt_err *err);

/* What the loader's decoders did so far (summed over its workers). */
struct dpt_loader_stats {
  long images;      /* records decoded (file-backed) */
  long gpu_hw;      /* by nvJPEG's hardware decoder */
  long gpu_hybrid;  /* by nvJPEG's hybrid decoder */
  long cpu;         /* by libturbojpeg (every record on the CPU path; on the GPU path the
                       records routed to the CPU + those nvJPEG refused) */
  long gpu_refused; /* GPU path: nvJPEG refused them, decoded by libturbojpeg instead */
  long gpu_rgb;     /* GPU path, 3 channels: of gpu_hw + gpu_hybrid, those nvJPEG would not decode to
                       planes and made RGB itself (its chroma upsampling, not libjpeg's) */
  long failed;      /* failed on every decoder (skip_bad: skipped; else the loader stopped) */
  long host_copies; /* GPU path: batches copied back to host memory (device_out 0); 0 when the
                       batches stay on the device */
};

struct dpt_loader;

int dpt_loader_create(struct dpt_loader **out, const struct dpt_dataset *d,
                      const struct dpt_loader_opts *o, struct dpt_err *err);
void dpt_loader_destroy(struct dpt_loader *L);
int dpt_loader_steps(const struct dpt_loader *L); /* batches per epoch for this rank */
/* Begin epoch e at step s (resume); the permutation depends only on (seed, e).  dpt_loader_create
 * starts epoch 0 at step 0; a start where the loader already is, with nothing taken since, keeps
 * the batches prefetched for it. */
void dpt_loader_start(struct dpt_loader *L, int epoch, int step);
/* Next batch: x [batch, c, out, out] normalised floats, labels [batch] (-1 =
 * padding or a skipped record).  Returns the number of real images (0 past the
 * end of the epoch, or when every record of the batch was skipped), -1 when a
 * record could not be read (dpt_loader_err says which).
 * *wait_s (optional) += seconds spent waiting for the worker threads. */
int dpt_loader_next(struct dpt_loader *L, const float **x, const int **labels, double *wait_s);
/* DPT_DATA_GPU with device_out: the next batch in device memory, x: [batch, c, S, S]
 * (NCHW) or [batch, S, S, c_stored] (NHWC) of the dtype.  stream (a cudaStream_t,
 * NULL = the default stream) is the consumer's: the batch is complete when this
 * returns, and it stays valid for the work the consumer enqueues on stream until
 * its next call, which records an event on stream before the slot is refilled.
 * Returns as dpt_loader_next. */
int dpt_loader_next_device(struct dpt_loader *L, void **x, const int **labels, void *stream, double *wait_s);
/* What the GPU path decides for batch slot b of step `step` of the current epoch,
 * device-free (reads the file; have_hw: as if the GPU had nvJPEG's hardware decoder):
 * record (-1 = validation padding), route (enum dpt_jpeg_route; -1 padding) and why,
 * frame size and crop box (dpt_augment_crop: the CPU path's own).  Tests and reports. */
struct dpt_loader_plan {
  long record;
  int route;
  const char *why;
  int src_w, src_h;
  int css;  /* enum dpt_jpeg_css of the file's header (route >= 0) */
  struct dpt_crop crop;
};
int dpt_loader_plan(struct dpt_loader *L, int step, int b, int have_hw, struct dpt_loader_plan *p,
                    struct dpt_err *err);
/* The format of this loader's batches (dpt_loader_device_format of its options). */
void dpt_loader_format(const struct dpt_loader *L, struct dpt_input_format *f);
/* The error behind a -1 from dpt_loader_next. */
const struct dpt_err *dpt_loader_err(const struct dpt_loader *L);
void dpt_loader_stats(const struct dpt_loader *L, struct dpt_loader_stats *st);
/* "hardware + hybrid", "hybrid" (GPU path) or "libturbojpeg" (CPU path). */
const char *dpt_loader_decoder(const struct dpt_loader *L);

/* 1 when this build and machine can run the GPU path on CUDA device `gpu`; else 0
 * and why ("built without nvJPEG ...", "no CUDA device ...").  DPT_DATA_GPU_UNAVAILABLE:
 * what a build without nvJPEG says. */
int dpt_data_gpu_available(int gpu, char *why, size_t why_len);
#define DPT_DATA_GPU_UNAVAILABLE "this build has no GPU input path: nvJPEG was not found at build time " \
  "(pip install nvidia-nvjpeg, as .ci/install-deps does, and rebuild with the CUDA toolkit)"

#endif /* DPT_DATA_H */
