/* test_model: ResNet-50 v1.5 structure, size, cost and initialisation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_model.h"

#include "dpt_check.h"

static const struct dpt_layer_desc *find(const struct dpt_model *m, const char *name)
{
  for (int i = 0; i < m->n_layers; i++)
    if (!strcmp(m->layers[i].name, name)) return &m->layers[i];
  return NULL;
}

int main(void)
{
  struct dpt_err err = {0};
  struct dpt_model m;
  struct dpt_model_cfg cfg;
  dpt_model_cfg_default(&cfg);

  /* torchvision.models.resnet50(): 25,557,032 parameters, 4.09 GMAC (conv + fc) */
  CHECK(dpt_model_resnet50(&m, &cfg, &err) == 0, "build: %s", err.msg);
  CHECK(m.n_params == 25557032, "ResNet-50 has %zu parameters, torchvision 25557032", m.n_params);
  CHECK(m.n_conv == 53 && m.n_bn == 53 && m.n_fc == 1, "%d conv %d bn %d fc", m.n_conv, m.n_bn, m.n_fc);
  CHECK(fabs(m.macs / 1e9 - 4.09) < 0.01, "ResNet-50 forward %.4f GMAC, expected ~4.09", m.macs / 1e9);
  /* running mean+var per BN channel: torchvision has 26,560 BN channels */
  CHECK(m.n_state == 53120, "BN state %zu, expected 53120 (26,560 channels x mean+var)", m.n_state);
  const struct dpt_tensor_desc *o = dpt_model_output(&m);
  CHECK(o->c == 1000 && o->h == 1 && o->w == 1, "output %dx%dx%d", o->c, o->h, o->w);
  /* v1.5: stride on the 3x3 conv of the first block of stages 2-4 */
  const struct dpt_layer_desc *l = find(&m, "layer2.0.conv2");
  CHECK(l && l->stride == 2 && l->kernel == 3, "layer2.0.conv2 stride %d", l ? l->stride : -1);
  l = find(&m, "layer2.0.conv1");
  CHECK(l && l->stride == 1, "layer2.0.conv1 must have stride 1 (v1.5)");
  l = find(&m, "layer4.2.conv3");
  CHECK(l && m.tensors[l->out].h == 7 && m.tensors[l->out].c == 2048, "layer4 output not 2048x7x7");
  l = find(&m, "layer1.0.downsample.0");
  CHECK(l && l->c_in == 64 && l->c_out == 256 && l->stride == 1, "layer1 projection shortcut");
  CHECK(find(&m, "layer1.1.downsample.0") == NULL, "identity shortcut expected in layer1.1");
  /* torchvision parameter order: conv1, bn1, layer1.0.conv1 ... fc */
  CHECK(m.layers[0].w_off == 0 && !strcmp(m.layers[0].name, "conv1"), "conv1 first");
  l = find(&m, "fc");
  CHECK(l && l->b_off + l->b_len == m.n_params, "fc.bias last in the slab");
  l = find(&m, "layer1.0.downsample.0");
  const struct dpt_layer_desc *b3 = find(&m, "layer1.0.bn3");
  CHECK(l && b3 && l->w_off == b3->b_off + b3->b_len, "downsample params follow bn3 (torchvision order)");

  /* initialisation */
  float *p = malloc(m.n_params * sizeof *p), *s = malloc(m.n_state * sizeof *s);
  float *p2 = malloc(m.n_params * sizeof *p2), *s2 = malloc(m.n_state * sizeof *s2);
  dpt_model_init_params(&m, 7, p, s);
  dpt_model_init_params(&m, 7, p2, s2);
  CHECK(!memcmp(p, p2, m.n_params * sizeof *p), "init not deterministic for a seed");
  dpt_model_init_params(&m, 8, p2, s2);
  CHECK(memcmp(p, p2, m.n_params * sizeof *p), "init ignores the seed");
  l = find(&m, "layer3.0.conv2"); /* 256x256x3x3: fan_out 2304 */
  double sum = 0, sq = 0;
  for (size_t i = 0; i < l->w_len; i++) {
    sum += p[l->w_off + i];
    sq += (double)p[l->w_off + i] * p[l->w_off + i];
  }
  double mean = sum / l->w_len, std = sqrt(sq / l->w_len - mean * mean);
  CHECK(fabs(mean) < 1e-3 && fabs(std - sqrt(2.0 / 2304)) < 0.01 * sqrt(2.0 / 2304),
        "kaiming fan_out: mean %g std %g expected %g", mean, std, sqrt(2.0 / 2304));
  l = find(&m, "layer2.3.bn3");
  CHECK(l && p[l->w_off] == 0.0f && p[l->w_off + l->w_len - 1] == 0.0f, "last BN gamma of a branch must be 0");
  l = find(&m, "layer2.3.bn2");
  CHECK(l && p[l->w_off] == 1.0f && p[l->b_off] == 0.0f, "BN gamma 1 beta 0");
  CHECK(s[l->s_off] == 0.0f && s[l->s_off + l->c_out] == 1.0f, "running mean 0 var 1");
  l = find(&m, "fc");
  float mx = 0;
  for (size_t i = 0; i < l->w_len + l->b_len; i++) mx = fmaxf(mx, fabsf(p[l->w_off + i]));
  CHECK(mx <= 1.0f / sqrtf(2048.f) && mx > 0.9f / sqrtf(2048.f), "fc init bound %g", mx);
  unsigned char *mask = malloc(m.n_params);
  dpt_model_decay_mask(&m, 1, mask);
  size_t nd = 0;
  for (size_t i = 0; i < m.n_params; i++) nd += mask[i];
  /* conv weights 23,454,912 + fc weight 2,048,000 decayed; BN + fc bias not */
  CHECK(nd == 25557032 - 53120 - 1000, "decayed parameters %zu", nd);
  free(mask);
  free(p), free(s), free(p2), free(s2);
  dpt_model_free(&m);

  /* small-stem Fashion-MNIST variant */
  cfg.in_channels = 1;
  cfg.image_size = 28;
  cfg.num_classes = 10;
  cfg.small_stem = 1;
  cfg.width = 0.25;
  CHECK(dpt_model_resnet50(&m, &cfg, &err) == 0, "small: %s", err.msg);
  CHECK(m.n_conv == 53 && m.n_bn == 53 && find(&m, "maxpool") == NULL, "small stem: no max pool");
  l = find(&m, "conv1");
  CHECK(l && l->kernel == 3 && l->stride == 1 && l->c_out == 16 && l->c_in == 1, "small stem conv");
  l = find(&m, "layer4.2.conv3");
  CHECK(l && m.tensors[l->out].h == 4 && m.tensors[l->out].c == 512, "28 -> 4x4x512 at width 1/4");
  CHECK(dpt_model_output(&m)->c == 10, "10 classes");
  dpt_model_free(&m);

  /* errors name the problem */
  cfg.image_size = 0;
  CHECK(dpt_model_resnet50(&m, &cfg, &err) == DPT_E_INPUT && strstr(err.msg, "input shape"), "%s", err.msg);
  cfg.image_size = 28;
  cfg.width = -1;
  CHECK(dpt_model_resnet50(&m, &cfg, &err) == DPT_E_INPUT && strstr(err.msg, "width"), "%s", err.msg);

  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else printf("ok: ResNet-50 25,557,032 parameters, 4.09 GMAC, v1.5 strides, init\n");
  return failures ? 1 : 0;
}
