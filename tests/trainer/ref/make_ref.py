#!/usr/bin/python3
"""Export a PyTorch reference for dpt-train's CPU backend (tests/trainer/test_ref.c).

ResNet-50 v1.5 defined exactly as torchvision.models.resnet (Bottleneck with the
stride on the 3x3 conv, projection shortcuts, zero_init_residual=True), but
with torchvision's code re-typed here because Debian's python3-torch 1.13 ships
without torchvision.  Variant: small stem (3x3 stride 1, no max pool), width
1/16, 3x32x32 inputs, 10 classes, batch 4.

The reference is computed in float64 (the float32 CPU backend is compared to
it); the float32 PyTorch result is exported too, so the test can show that
dpt's error is of the same order as PyTorch's own float32 error.

Two training steps: forward (train mode, batch statistics, running-stat
update with momentum 0.1), cross-entropy with label smoothing 0.1 (mean over
the batch), backward, torch.optim.SGD(lr=0.02, momentum=0.9,
weight_decay=5e-4 on conv/fc weights only).  Exported:
  params0, state0, x, labels, logits1, loss1, grads1, logits2, loss2, grads2,
  params2, state2 (BN running mean/var after both steps), logits_eval
  (eval-mode forward with the final running statistics); the float32 PyTorch
  error against float64 is recorded in ref.json for the tolerance argument.
Everything goes to ref.bin (little-endian float32, int32 labels) and
ref.json (schema dpt.trainer-ref/1: section offsets and shapes, parameter names).

Run:  /usr/bin/python3 tests/trainer/ref/make_ref.py tests/trainer/ref
"""
import json
import math
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 20240611
WIDTH = 1.0 / 16
IMAGE = 32
IN_CH = 3
CLASSES = 10
BATCH = 4
LR = 0.02
MOMENTUM = 0.9
WD = 5e-4
SMOOTH = 0.1


def scaled(c):
    return max(1, int(c * WIDTH + 0.5))


class Bottleneck(nn.Module):  # torchvision.models.resnet.Bottleneck (v1.5)
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        width = planes
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet50(nn.Module):
    def __init__(self):
        super().__init__()
        self.inplanes = scaled(64)
        self.conv1 = nn.Conv2d(IN_CH, self.inplanes, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(scaled(64), 3)
        self.layer2 = self._make_layer(scaled(128), 4, stride=2)
        self.layer3 = self._make_layer(scaled(256), 6, stride=2)
        self.layer4 = self._make_layer(scaled(512), 3, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(scaled(512) * 4, CLASSES)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
        for m in self.modules():  # zero_init_residual=True
            if isinstance(m, Bottleneck):
                nn.init.constant_(m.bn3.weight, 0)

    def _make_layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * 4:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * 4, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * 4))
        layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * 4
        for _ in range(1, blocks):
            layers.append(Bottleneck(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def flat(tensors):
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def run(dtype, model0, x, y):
    model = ResNet50().to(dtype)
    model.load_state_dict(model0.state_dict())
    model.train()
    names = [n for n, _ in model.named_parameters()]
    decay = [p for n, p in model.named_parameters() if p.dim() > 1]
    no_decay = [p for n, p in model.named_parameters() if p.dim() <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": WD},
                           {"params": no_decay, "weight_decay": 0.0}],
                          lr=LR, momentum=MOMENTUM)
    xs = x.to(dtype)
    out = {}
    for step in (1, 2):
        opt.zero_grad()
        logits = model(xs)
        loss = F.cross_entropy(logits, y, label_smoothing=SMOOTH)
        loss.backward()
        out[f"logits{step}"] = logits.detach()
        out[f"loss{step}"] = loss.detach().reshape(1)
        out[f"grads{step}"] = flat([p.grad for p in model.parameters()])
        opt.step()
        out[f"params{step}"] = flat(model.parameters())
    state = []
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            state += [m.running_mean, m.running_var]
    out["state2"] = flat(state)
    model.eval()
    with torch.no_grad():
        out["logits_eval"] = model(xs)
    return out, names


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "."
    torch.manual_seed(SEED)
    model0 = ResNet50().double()
    # Make every gradient non-trivial: the zero-initialised bn3 gammas would
    # stop the gradient of every residual branch's conv1/conv2 at step 1.
    g = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for m in model0.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=g, dtype=torch.float64))
                m.bias.copy_(0.2 * (torch.rand(m.bias.shape, generator=g, dtype=torch.float64) - 0.5))
                m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=g, dtype=torch.float64))
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g, dtype=torch.float64))
        # Round the starting point to float32 so both precisions start identically.
        for p in model0.parameters():
            p.copy_(p.float().double())
        for b in model0.buffers():
            if b.dtype == torch.float64:
                b.copy_(b.float().double())
    x = torch.randn(BATCH, IN_CH, IMAGE, IMAGE, generator=g, dtype=torch.float64).float().double()
    y = torch.randint(0, CLASSES, (BATCH,), generator=g)
    params0 = flat(model0.parameters())
    state0 = []
    for m in model0.modules():
        if isinstance(m, nn.BatchNorm2d):
            state0 += [m.running_mean, m.running_var]
    state0 = flat(state0)

    ref64, names = run(torch.float64, model0, x, y)
    ref32, _ = run(torch.float32, model0, x, y)

    sections = [("params0", params0), ("state0", state0), ("x", x)]
    sections += [(k, ref64[k]) for k in ("logits1", "loss1", "grads1", "logits2",
                                          "loss2", "grads2", "params1", "params2", "state2",
                                          "logits_eval")]
    blob = bytearray()
    meta = {"schema": "dpt.trainer-ref/1",
            "generator": "tests/trainer/ref/make_ref.py (PyTorch %s)" % torch.__version__,
            "model": {"arch": "resnet50-v1.5", "width": WIDTH, "image_size": IMAGE,
                      "in_channels": IN_CH, "num_classes": CLASSES, "small_stem": True},
            "batch": BATCH, "lr": LR, "momentum": MOMENTUM, "weight_decay": WD,
            "weight_decay_on": "conv and fc weights only", "label_smoothing": SMOOTH,
            "bn_momentum": 0.1, "bn_eps": 1e-5, "reference_dtype": "float64",
            "n_params": int(params0.numel()), "n_state": int(state0.numel()),
            "param_names": names, "sections": {}}
    for name, t in sections:
        arr = t.detach().cpu().numpy().astype("<f4").reshape(-1)
        meta["sections"][name] = {"offset": len(blob), "count": int(arr.size), "dtype": "f32",
                                  "shape": list(t.shape)}
        blob += arr.tobytes()
    lab = y.numpy().astype("<i4")
    meta["sections"]["labels"] = {"offset": len(blob), "count": int(lab.size), "dtype": "i32",
                                  "shape": [BATCH]}
    blob += lab.tobytes()

    def rel(a, b):
        return float((a - b).abs().max() / b.abs().max())
    def block_rel(a, b):
        worst, off = 0.0, 0
        for p in model0.parameters():
            k = p.numel()
            worst = max(worst, rel(a[off:off + k], b[off:off + k]))
            off += k
        return worst
    meta["torch32_vs_float64"] = {
        "grads1_block_max_rel": block_rel(ref32["grads1"].double(), ref64["grads1"]),
        "logits2_max_rel": rel(ref32["logits2"].double(), ref64["logits2"]),
        "loss2_rel": rel(ref32["loss2"].double(), ref64["loss2"]),
        "logits_eval_max_rel": rel(ref32["logits_eval"].double(), ref64["logits_eval"]),
        "logits1_max_rel": rel(ref32["logits1"].double(), ref64["logits1"]),
        "grads1_max_rel": rel(ref32["grads1"].double(), ref64["grads1"]),
        "grads2_max_rel": rel(ref32["grads2"].double(), ref64["grads2"]),
        "params2_max_abs": float((ref32["params2"].double() - ref64["params2"]).abs().max())}
    with open(f"{outdir}/ref.bin", "wb") as f:
        f.write(blob)
    with open(f"{outdir}/ref.json", "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print("params", params0.numel(), "bytes", len(blob), "loss1", float(ref64["loss1"]),
          "torch32 vs f64:", meta["torch32_vs_float64"])


if __name__ == "__main__":
    main()
