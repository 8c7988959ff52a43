/* dpt_model.h — the network as plain data: ResNet-50 v1.5 (torchvision) and
 * its small variants, described as a DAG of layers over tensors.
 *
 * A model is backend-independent.  It says which layers exist, their shapes,
 * and where each layer's parameters live in ONE contiguous parameter slab
 * (gradients use the same offsets in ONE gradient slab, so the all-reduce
 * moves one buffer) and where batch-norm running statistics live in one state
 * slab.  Parameters are stored in PyTorch's layouts (conv weight
 * [C_out, C_in, kh, kw], FC weight [K, C]); a backend may keep private
 * blocked copies but the slabs are the source of truth.
 *
 * Tensor 0 is the network input [N, C_in, H, W]; the last layer's output is
 * the network output (logits [N, K] for ResNet-50). */
#ifndef DPT_MODEL_H
#define DPT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "dpt_err.h"

enum dpt_layer_type {
  DPT_LAYER_CONV,    /* 2-D convolution, square kernel, no bias (ResNet) */
  DPT_LAYER_BN,      /* batch normalisation (spatial), optional fused ReLU */
  DPT_LAYER_RELU,    /* stand-alone ReLU */
  DPT_LAYER_MAXPOOL, /* max pooling, square kernel */
  DPT_LAYER_GAP,     /* global average pooling: [N,C,H,W] -> [N,C,1,1] */
  DPT_LAYER_FC,      /* fully connected with bias, input flattened */
  DPT_LAYER_ADD,     /* residual add of two tensors, optional fused ReLU */
  DPT_LAYER_NTYPES
};

const char *dpt_layer_type_name(enum dpt_layer_type t);

/* One activation tensor (per-image shape; the batch N is chosen by the backend). */
struct dpt_tensor_desc {
  int c, h, w;        /* shape [N, c, h, w]; FC outputs have h = w = 1 */
  int producer;       /* layer index that writes it, -1 for the input */
  int n_consumers;    /* layers that read it (2 at a residual fork) */
};

struct dpt_layer_desc {
  enum dpt_layer_type type;
  char name[48];      /* torchvision parameter prefix, e.g. "layer1.0.conv1" */
  int in[2];          /* input tensor ids; in[1] only for ADD, else -1 */
  int out;            /* output tensor id */
  int relu;           /* BN / ADD: ReLU fused on the output */
  int last_bn;        /* BN: last BN of a residual branch (gamma 0 with zero_init_residual) */
  int kernel;         /* CONV / MAXPOOL: kernel size (square) */
  int stride;         /* CONV / MAXPOOL */
  int pad;            /* CONV / MAXPOOL: symmetric padding */
  int c_in, c_out;    /* channels in / out (features for FC) */
  size_t w_off;       /* parameter slab offset of: CONV weight [c_out, c_in, k, k];
                         BN gamma [c_out]; FC weight [c_out, c_in] */
  size_t w_len;       /* element count of that block (0 when no parameters) */
  size_t b_off;       /* BN beta [c_out]; FC bias [c_out] */
  size_t b_len;       /* 0 for CONV */
  size_t s_off;       /* BN only: state slab offset of running mean [c_out],
                         followed by running var [c_out] */
  double macs;        /* multiply-accumulates per image in the forward pass */
};

/* What to build. */
struct dpt_model_cfg {
  int in_channels;     /* 3 for ImageNet, 1 for Fashion-MNIST */
  int image_size;      /* square input, e.g. 224, 32, 28 */
  int num_classes;     /* 1000, 10 */
  int small_stem;      /* 1: 3x3 stride-1 conv stem without max pool (28/32 px) */
  double width;        /* width multiplier on every stage (1.0 = ResNet-50) */
  int zero_init_residual; /* 1: last BN gamma of each residual branch = 0 (Goyal et al.) */
  uint64_t seed;       /* initialisation seed */
};

/* Defaults: torchvision ResNet-50, 224x224x3, 1000 classes, zero_init_residual, seed 1. */
void dpt_model_cfg_default(struct dpt_model_cfg *cfg);

struct dpt_model {
  struct dpt_model_cfg cfg;
  int n_layers;
  struct dpt_layer_desc *layers;   /* [n_layers], topological order */
  int n_tensors;
  struct dpt_tensor_desc *tensors; /* [n_tensors]; tensor 0 = input */
  int cap_layers, cap_tensors;     /* allocation sizes */
  size_t n_params;                 /* parameter (and gradient) slab length */
  size_t n_state;                  /* state slab length (BN running mean/var) */
  double macs;                     /* forward MACs per image (conv + FC) */
  int n_conv, n_bn, n_fc;          /* layer counts by kind */
};

/* Generic builder (ResNet-50 uses it; tests build single-layer graphs with it).
 * Every add function returns the new output tensor id, or a negative DPT_E_*
 * code with err filled. */
int dpt_model_init(struct dpt_model *m, int in_c, int in_h, int in_w, struct dpt_err *err);
int dpt_model_add_conv(struct dpt_model *m, const char *name, int in, int c_out, int kernel,
                       int stride, int pad, struct dpt_err *err);
int dpt_model_add_bn(struct dpt_model *m, const char *name, int in, int relu, struct dpt_err *err);
int dpt_model_add_relu(struct dpt_model *m, const char *name, int in, struct dpt_err *err);
int dpt_model_add_maxpool(struct dpt_model *m, const char *name, int in, int kernel, int stride,
                          int pad, struct dpt_err *err);
int dpt_model_add_gap(struct dpt_model *m, const char *name, int in, struct dpt_err *err);
int dpt_model_add_fc(struct dpt_model *m, const char *name, int in, int c_out, struct dpt_err *err);
int dpt_model_add_add(struct dpt_model *m, const char *name, int a, int b, int relu,
                      struct dpt_err *err);

/* Build ResNet-50 v1.5 for cfg (torchvision layout and parameter order). */
int dpt_model_resnet50(struct dpt_model *m, const struct dpt_model_cfg *cfg, struct dpt_err *err);

void dpt_model_free(struct dpt_model *m);

/* Initialise parameters and state: Kaiming-normal (fan_out, ReLU gain) for
 * convolutions, PyTorch's nn.Linear default for FC, BN gamma 1 / beta 0 (0
 * gamma on the last BN of each residual branch when zero_init_residual),
 * running mean 0 / var 1.  Deterministic for a given seed. */
void dpt_model_init_params(const struct dpt_model *m, uint64_t seed,
                           float *params /* [n_params] */, float *state /* [n_state] */);

/* 1 when parameter element i belongs to a BN or bias block (weight decay may skip it). */
void dpt_model_decay_mask(const struct dpt_model *m, int skip_bn_bias,
                          unsigned char *mask /* [n_params]: 1 = apply weight decay */);

/* The parameter tensors in slab order (every layer's weight, then its BN beta or bias), skip = 1
 * for BN parameters and biases (what LARS leaves out), into seg[cap]; returns how many there
 * are (call with cap 0 to count). */
struct dpt_param_seg;
int dpt_model_param_segs(const struct dpt_model *m, struct dpt_param_seg *seg, int cap);

/* Output tensor of the network (last layer's output). */
static inline const struct dpt_tensor_desc *dpt_model_output(const struct dpt_model *m)
{
  return &m->tensors[m->layers[m->n_layers - 1].out];
}

/* Deterministic RNG shared by init, data and dropout-free training:
 * splitmix64 seeding + xoshiro256** stream. */
struct dpt_rng { uint64_t s[4]; };
void dpt_rng_seed(struct dpt_rng *r, uint64_t seed);
uint64_t dpt_rng_next(struct dpt_rng *r);
double dpt_rng_uniform(struct dpt_rng *r);   /* [0, 1) */
double dpt_rng_normal(struct dpt_rng *r);    /* N(0, 1), Box-Muller */
uint64_t dpt_rng_below(struct dpt_rng *r, uint64_t n); /* [0, n), unbiased */

#endif /* DPT_MODEL_H */
