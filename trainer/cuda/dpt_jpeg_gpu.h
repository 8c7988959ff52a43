/* dpt_jpeg_gpu.h — the GPU stage of the imagenet loader (builds with nvJPEG:
 * DPT_HAVE_NVJPEG).  One context per loader worker thread: nvJPEG handles and
 * batched-decode states (the hardware decoder, NVJPEG_BACKEND_HARDWARE, where
 * the GPU has one, NVJPEG_BACKEND_GPU_HYBRID and the default backend for the
 * rest: see dpt_jpeg_gpu.c), CUDA streams,
 * a device arena for the decoded images, pinned staging for host-decoded ones
 * and for the sampling tables.
 *
 * A worker fills one batch (dpt_data_loader.c, fill_gpu) in three calls:
 *   1. dpt_jpeg_gpu_decode(items): files routed GPU_HW / GPU (dpt_jpeg_hdr_route)
 *      go to nvjpegDecodeBatched, one call per decoder (the hardware one on its own
 *      stream, working while the CUDA decoder runs), into the arena at full size:
 *      with 3 channels as planes (NVJPEG_OUTPUT_YUV: Y, Cb, Cr before upsampling,
 *      so that the kernel upsamples and converts them as libjpeg does,
 *      dpt_jpeg_ycc.h), with 1 channel as Y.  A group that nvJPEG refuses is
 *      retried image by image, an image it refuses as planes once more as
 *      interleaved RGB (nvJPEG's own upsampling and conversion); the images it
 *      still refuses come back with refused = 1.
 *   2. dpt_jpeg_gpu_put(item, pixels): the worker decoded a CPU-routed (or
 *      refused) file with libturbojpeg: the pixels are staged (pinned) and copied
 *      into the arena.
 *   3. dpt_jpeg_gpu_finish(items, out): the host computes every image's sampling
 *      tables with dpt_augment_tables() (the CPU path's own function, so the GPU
 *      reads the same positions with the same weights), uploads them, waits for
 *      the consumer's release of out (an event), and one kernel
 *      (dpt_jpeg_kernels.cu) crops, resizes (bilinear), flips and normalises the
 *      batch into out: device [n, c, S, S] (NCHW) or [n, S, S, c_stored] (NHWC),
 *      fp32 / fp16 / bf16; skipped records (route NONE) become zeros.  Optionally
 *      the batch is copied back to host fp32 NCHW.  Returns when the stream is done.
 * The worker threads run ahead of the training step by the loader's prefetch
 * depth, each on its own stream, so the decode of batch t+1 overlaps step t. */
#ifndef DPT_JPEG_GPU_H
#define DPT_JPEG_GPU_H

#include <stddef.h>

#include "dpt_augment.h"
#include "dpt_err.h"

/* Item routes: dpt_jpeg_hdr_route's GPU_HW / GPU / CPU, and NONE = a skipped record (zeros). */
#define DPT_JPEG_GPU_ROUTE_NONE (-1)

struct dpt_jpeg_gpu_item {
  int route;                  /* in: enum dpt_jpeg_route or DPT_JPEG_GPU_ROUTE_NONE */
  const unsigned char *data;  /* in: the file (GPU routes), host, valid until decode returns */
  size_t len;
  int src_w, src_h;           /* in: frame size from the header (the crop box's frame) */
  int css;                    /* in: enum dpt_jpeg_css of the header (GPU routes) */
  struct dpt_crop crop;       /* in: dpt_augment_crop of the record */
  int refused;                /* out (decode): nvJPEG failed on this file: decode it on the host and put() it */
  /* private: where the decoded image lies in the arena */
  size_t off;                 /* the interleaved image, or the Y plane */
  size_t cb, cr;              /* planar: the chroma planes */
  int planar;                 /* 0 interleaved [h, w, channels]; 1 Y, Cb, Cr planes; 2 a gray image's Y plane */
  int cw, ch, hx, vy;         /* planar: chroma plane size and expansion (dpt_jpeg_ycc) */
  int dec_w, dec_h;           /* decoded size (full size for nvJPEG, the host decoder's for put()) */
  int placed;                 /* 1 once pixels are (being) written at off */
};

struct dpt_jpeg_gpu_opts {
  int device;       /* CUDA ordinal */
  int channels;     /* 3 RGB, 1 gray (the dataset's) */
  int out;          /* output side S */
  int batch;        /* images per batch (the most items per call) */
  int layout;       /* DPT_DATA_NCHW | DPT_DATA_NHWC (dpt_data.h) */
  int dtype;        /* DPT_DATA_F32 | DPT_DATA_F16 | DPT_DATA_BF16 */
  int c_stored;     /* NHWC: channels per pixel (>= channels, the rest 0) */
  int use_hw;       /* -1: the hardware decoder when nvJPEG has one for this GPU; 0: never */
  double hw_share;  /* fraction of the hardware-eligible files of a batch it decodes, the rest going to
                       nvJPEG's CUDA decoder at the same time (0: 0.65, DALI's hw_decoder_load) */
  float mean[3], std[3];
};

struct dpt_jpeg_gpu;

/* 1 when device `device` works and nvJPEG can create a handle on it; else 0 and why. */
int dpt_jpeg_gpu_probe(int device, char *why, size_t why_len);
int dpt_jpeg_gpu_create(struct dpt_jpeg_gpu **g, const struct dpt_jpeg_gpu_opts *o, struct dpt_err *err);
void dpt_jpeg_gpu_destroy(struct dpt_jpeg_gpu *g);
/* 1 when this context decodes GPU_HW items with the hardware decoder. */
int dpt_jpeg_gpu_has_hw(const struct dpt_jpeg_gpu *g);
/* "hardware (N engines) + hybrid" / "hybrid": for the log line. */
const char *dpt_jpeg_gpu_describe(const struct dpt_jpeg_gpu *g);

/* Step 1 (see above).  n <= opts.batch.  Counts of items nvJPEG decoded: hw, hybrid, and of
 * those the ones it decoded to interleaved RGB with 3 channels (not to planes): rgb. */
int dpt_jpeg_gpu_decode(struct dpt_jpeg_gpu *g, struct dpt_jpeg_gpu_item *it, int n, int *n_hw, int *n_hybrid,
                        int *n_rgb, struct dpt_err *err);
/* Step 2: pix = interleaved [h, w, channels] host pixels of it (decoded on the host). */
int dpt_jpeg_gpu_put(struct dpt_jpeg_gpu *g, struct dpt_jpeg_gpu_item *it, const unsigned char *pix, int w, int h,
                     struct dpt_err *err);
/* Step 3: out = device buffer of n images (layout / dtype of the options); release:
 * a cudaEvent_t the stream waits for before writing out (NULL: none); host: NULL or
 * [n, channels, S, S] fp32 (needs NCHW fp32) filled from out. */
int dpt_jpeg_gpu_finish(struct dpt_jpeg_gpu *g, struct dpt_jpeg_gpu_item *it, int n, void *out, void *release,
                        float *host, struct dpt_err *err);

/* Device memory and events for the loader's slots (dpt_data_loader.c is plain C). */
int dpt_jpeg_gpu_alloc(int device, size_t bytes, void **p, struct dpt_err *err);
void dpt_jpeg_gpu_free(void *p);
int dpt_jpeg_gpu_event_create(int device, void **ev, struct dpt_err *err);
void dpt_jpeg_gpu_event_destroy(void *ev);
/* Records ev on stream (a cudaStream_t; NULL = the legacy default stream). */
int dpt_jpeg_gpu_event_record(void *ev, void *stream, struct dpt_err *err);

#endif /* DPT_JPEG_GPU_H */
