/* dpt_bucket.h — gradient buckets: the all-reduce during backward.
 *
 * ChainerMN all-reduced the gradients after the whole backward pass.  dpt
 * splits the gradient slab into buckets and starts a bucket's all-reduce as
 * soon as backward has produced its gradients, so communication overlaps the
 * rest of backward (PyTorch DDP's idea; its default bucket is 25 MiB).
 *
 * Parameters are taken in REVERSE layer order (the order backward produces
 * their gradients); a bucket closes when it reaches target_bytes (fp32), so its
 * size is in [target, target + largest layer) except the last one.  Because
 * each layer's parameters are contiguous in the slab and layers are laid out
 * in order (dpt_model.c), a bucket is one contiguous range of the gradient
 * slab: no packing is needed to all-reduce it.  Bucket 0 holds the last
 * layers (the FC layer): it is ready first.
 *
 * The backend side (dpt_backend_set_buckets, dpt_backend.h) calls a hook when
 * a bucket's gradients are complete (or, on a device, enqueued with an event
 * that completes with them). */
#ifndef DPT_BUCKET_H
#define DPT_BUCKET_H

#include <stddef.h>

#include "dpt_err.h"
#include "dpt_model.h"

struct dpt_bucket {
  size_t off, len;     /* gradient slab range [off, off + len) in elements */
  int first_layer;     /* lowest layer index in the bucket: the bucket is
                          ready when first_layer's backward has run */
  int last_layer;      /* highest; backward reaches it first */
};

/* Plan the buckets of model m for target_bytes (>= 4).  *out: [*n_out],
 * malloc'd, in backward order.  Errors (DPT_E_INPUT): target below one float,
 * a parameter layout that is not contiguous in layer order (names the layer). */
int dpt_bucket_plan(const struct dpt_model *m, size_t target_bytes, struct dpt_bucket **out,
                    int *n_out, struct dpt_err *err);

#endif /* DPT_BUCKET_H */
