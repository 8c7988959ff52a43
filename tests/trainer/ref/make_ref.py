#!/usr/bin/python3
"""Export a PyTorch reference for dpt-train's CPU backend (tests/trainer/test_ref.c).

ResNet-50 v1.5 defined exactly as torchvision.models.resnet (Bottleneck with the
stride on the 3x3 conv, projection shortcuts, zero_init_residual=True), but
with torchvision's code re-typed here because Debian's python3-torch 1.13 ships
without torchvision.  Variant: small stem (3x3 stride 1, no max pool), width
1/16, 3x8x8 inputs, 10 classes, batch 4.

The fixture is well conditioned, so that every float32 implementation is held to
float32 rounding on any CPU: per ReLU input tensor of step 1's forward, sigma = rms of
PyTorch float32's error against float64 there, and every |z| >= RELU_MARGIN_MIN (50)
sigma, asserted here (the script fails otherwise) and stored ("relu_margin").  A ReLU
input within the forward error of 0 switches its mask between two correct
implementations and moves every gradient below it by the full upstream gradient
there: the former 3x32x32 fixture had 735,232 ReLU inputs and a margin of 1.5 sigma,
and oneDNN's AVX2 kernels (summing in another order than the AVX-512 ones) flipped
one (layer3.5.bn3's gradient 12% off, everything after step 1 with it).  At 8x8 there
are 45,952; seed 209 has the largest margin (60 sigma) of seeds 1..300 (next: 166
59.6, 45 44.4).  Step 2's gradient is not compared (the update of step 2 is checked
on the reference gradient), and the forward is continuous in the parameters, so step
1's margin is the one that matters.  One float32 run is one draw of its rounding: the
torch32 figures are the largest of PERM_RUNS (8) runs, the batch in 8 orders (every
sum over images reordered; the math is order-free).

The reference is computed in float64 (the float32 CPU backend is compared to
it); the float32 PyTorch result is exported too, so the test can show that
dpt's error is of the same order as PyTorch's own float32 error.

Two training steps: forward (train mode, batch statistics, running-stat
update with momentum 0.1), cross-entropy with label smoothing 0.1 (mean over
the batch), backward, torch.optim.SGD(lr=0.02, momentum=0.9,
weight_decay=5e-4 on conv/fc weights only).  Step 2 starts from step 1's
reference state (params1, velocity1, state1 as stored, float32) and its update uses the
reference gradient grads2, in the float64 and the float32 runs alike, as test_ref.c
does for dpt: each check measures one step's own error, not step 1's amplified by step
2's forward (this fixture's layer4 normalises 4 values per channel: 1e-5 in params1
moves logits2 by 1e-2).  Exported:
  params0, state0, x, labels, logits1, loss1, grads1, params1, velocity1, state1,
  logits2, loss2, grads2, params2, state2 (BN running mean/var after both steps),
  logits_eval (eval-mode forward with the final running statistics); the float32
  PyTorch error against float64 (same procedure) is recorded in ref.json for the
  tolerance argument.
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

SEED = 209
WIDTH = 1.0 / 16
IMAGE = 8
IN_CH = 3
CLASSES = 10
BATCH = 4
LR = 0.02
MOMENTUM = 0.9
WD = 5e-4
SMOOTH = 0.1
RELU_MARGIN_MIN = 50.0
PERM_RUNS = 8


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


def bn_buffers(model):
    out = []
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            out += [m.running_mean, m.running_var]
    return out


def assign(tensors, values):
    """Copy the flat vector values into tensors, rounded to float32 (what the blob stores)."""
    off = 0
    with torch.no_grad():
        for t in tensors:
            k = t.numel()
            t.copy_(values[off:off + k].float().reshape(t.shape).to(t.dtype))
            off += k


def run(dtype, model0, x, y, ref=None):
    """Two SGD steps in dtype.  Each step starts from the reference's state, so that each check
    of the test measures that step's own error (what test_ref.c does to dpt): step 2 starts
    from params1 / velocity1 / state1 and updates with grads2 of ref (the float64 run; its own
    values when ref is None), all rounded to float32 as the blob stores them."""
    model = ResNet50().to(dtype)
    model.load_state_dict(model0.state_dict())
    model.train()
    names = [n for n, _ in model.named_parameters()]
    params = list(model.parameters())
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
        out[f"grads{step}"] = flat([p.grad for p in params])
        src = ref or out
        if step == 2:  # the update of step 2 on the reference gradient
            assign([p.grad for p in params], src["grads2"])
        opt.step()
        out[f"params{step}"] = flat(params)
        if step == 1:
            out["velocity1"] = flat([opt.state[p]["momentum_buffer"] for p in params])
            out["state1"] = flat(bn_buffers(model))
            assign(params, src["params1"])
            assign([opt.state[p]["momentum_buffer"] for p in params], src["velocity1"])
            assign(bn_buffers(model), src["state1"])
    out["state2"] = flat(bn_buffers(model))
    model.eval()
    with torch.no_grad():
        out["logits_eval"] = model(xs)
    return out, names


def relu_inputs(model0, dtype, x):
    """The ReLU inputs of one training-mode forward from model0's state (float64 copies)."""
    model = ResNet50().to(dtype)
    model.load_state_dict(model0.state_dict())
    model.train()
    got = []
    hooks = [m.register_forward_pre_hook(lambda mod, inp: got.append(inp[0].detach().double().clone()))
             for m in model.modules() if isinstance(m, nn.ReLU)]
    with torch.no_grad():
        model(x.to(dtype))
    for h in hooks:
        h.remove()
    return got


def relu_margin(model0, x):
    """min over step 1's ReLU inputs of |z| / sigma, sigma = rms of PyTorch float32's error
    against float64 in z's tensor; also the tensor's index, min |z| / rms there and the count."""
    best, n = (math.inf, -1, 0.0), 0
    for k, (a, b) in enumerate(zip(relu_inputs(model0, torch.float64, x), relu_inputs(model0, torch.float32, x))):
        n += a.numel()
        sigma = float((a - b).pow(2).mean().sqrt())
        m = float(a.abs().min()) / sigma if sigma > 0 else math.inf
        if m < best[0]:
            best = (m, k, float(a.abs().min() / a.pow(2).mean().sqrt()))
    return best + (n,)


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

    margin = relu_margin(model0, x)
    print("ReLU inputs (%d) >= %.1f sigma of fp32's error from 0 (tensor %d: %.2e of its rms)" %
          (margin[3], margin[0], margin[1], margin[2]))
    if margin[0] < RELU_MARGIN_MIN:
        sys.exit("a ReLU input lies %.1f sigma of fp32's forward error from 0 (tensor %d), below the %.0f "
                 "this fixture needs: choose another SEED" % (margin[0], margin[1], RELU_MARGIN_MIN))
    ref64, names = run(torch.float64, model0, x, y)
    runs32 = [run(torch.float32, model0, x, y, ref64)[0]]
    gen = torch.Generator().manual_seed(7)
    for _ in range(PERM_RUNS - 1):  # the same two steps with the batch in another order
        perm = torch.randperm(BATCH, generator=gen)
        r, _ = run(torch.float32, model0, x[perm], y[perm], ref64)
        inv = torch.argsort(perm)
        for k in ("logits1", "logits2", "logits_eval"):
            r[k] = r[k][inv]
        runs32.append(r)

    sections = [("params0", params0), ("state0", state0), ("x", x)]
    sections += [(k, ref64[k]) for k in ("logits1", "loss1", "grads1", "logits2",
                                          "loss2", "grads2", "params1", "params2", "state2",
                                          "logits_eval", "velocity1", "state1")]
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

    def rel1(a, b):
        return float((a - b).abs().max() / b.abs().max())
    def block_rel1(a, b):
        worst, off = 0.0, 0
        for p in model0.parameters():
            k = p.numel()
            worst = max(worst, rel1(a[off:off + k], b[off:off + k]))
            off += k
        return worst
    def rel(key, b):  # the largest of the float32 draws
        return max(rel1(r[key].double(), b) for r in runs32)
    def block_rel(key, b):
        return max(block_rel1(r[key].double(), b) for r in runs32)
    meta["torch32_vs_float64"] = {
        "grads1_block_max_rel": block_rel("grads1", ref64["grads1"]),
        "grads2_block_max_rel": block_rel("grads2", ref64["grads2"]),
        "logits2_max_rel": rel("logits2", ref64["logits2"]),
        "loss2_rel": rel("loss2", ref64["loss2"]),
        "logits_eval_max_rel": rel("logits_eval", ref64["logits_eval"]),
        "logits1_max_rel": rel("logits1", ref64["logits1"]),
        "grads1_max_rel": rel("grads1", ref64["grads1"]),
        "grads2_max_rel": rel("grads2", ref64["grads2"]),
        "state2_max_rel": rel("state2", ref64["state2"]),
        "params1_max_abs": max(float((r["params1"].double() - ref64["params1"]).abs().max()) for r in runs32),
        "params2_max_abs": max(float((r["params2"].double() - ref64["params2"]).abs().max()) for r in runs32),
        "runs": len(runs32)}
    meta["relu_margin"] = {"min_sigmas": margin[0], "tensor": margin[1], "min_abs_over_rms": margin[2],
                           "relu_inputs": margin[3], "required": RELU_MARGIN_MIN,
                           "sigma": "per ReLU input tensor of step 1, rms of PyTorch float32's error against float64"}
    with open(f"{outdir}/ref.bin", "wb") as f:
        f.write(blob)
    with open(f"{outdir}/ref.json", "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print("params", params0.numel(), "bytes", len(blob), "loss1", float(ref64["loss1"]),
          "torch32 vs f64:", meta["torch32_vs_float64"])


if __name__ == "__main__":
    main()
