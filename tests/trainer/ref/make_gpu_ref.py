#!/usr/bin/python3
"""Float64 reference for the GPU-vs-CPU fixture (tests/trainer/gpu/test_gpu_vs_cpu.c,
tests/trainer/test_ref_f64.c).

The fixture is the one `trainer.gpu.vs_cpu` ran on the H100 when it reported
"fp32: gradients 0.0478 in layer3.4.bn3": ResNet-50 v1.5 width 1/8, small stem,
3x32x32, 10 classes, batch 8, dpt's own initialisation (seed 1,
zero_init_residual off), inputs N(0,1) from dpt_rng seed 11, labels from the
same stream with label 3 ignored (-1), label smoothing 0.1, loss summed over
the valid rows and scaled by 1/8 (dpt_softmax_xent's grad_scale).  dpt's RNG
(splitmix64 seeding, xoshiro256**, Box-Muller in double) is re-typed here so
the file needs no build; test_ref_f64 checks params0 against
dpt_model_init_params bit for bit.

Exported (ref/gpu_ref.bin, little-endian f32 / i32; ref/gpu_ref.json, schema
dpt.trainer-ref/1 plus a "blocks" table):
  params0, state0, x, labels, logits (float64 forward, training mode), loss,
  grads (float64), state1 (running statistics after the step).
Per gradient block (weight and bias of every layer), measured here in float64:
  cond      the block's cancellation number K = max_c S_c / max_c |g_c| where
            g_c = sum_i t_i is the block's gradient (t_i its per-sample terms:
            dz*xhat for a BN gamma, dz for a beta, x*dy for a conv / FC weight)
            and S_c = sum_i |t_i|; the error of a block computed in a precision
            with unit roundoff u, normalised like the tests (max |err| / max |g|),
            is of order K * u from the final sum alone (the terms' own errors
            come on top);
  torch32   PyTorch 1.13's own float32 error against float64 on this block
            (same metric), the measured float32 floor of this fixture;
  sens      per precision (fp32, tf32, fp16, bf16): the block's measured
            sensitivity to that precision's forward error, the largest error
            (same metric) of 9 float64 runs: the precision emulated (tf32 /
            fp16 / bf16: convolution and FC inputs, weights and output
            gradients rounded to the format; fp32: PyTorch's float32 run),
            then 8 runs that also add a random error (LOCAL_DELTA, relative to
            the input's rms) to every ReLU input.  This is what makes a
            block ill-conditioned here: ReLU inputs that lie within the
            forward error of 0 (layer4.1's add has 4 of 4,096 within fp32's
            error band) switch their mask between runs, and every gradient
            block below them moves by the full upstream gradient of those
            positions, whatever the precision of the backend's own sums.
Also per precision: logits_sens and grads_l2_sens (||g - ref|| / ||ref|| over the
whole slab), the same runs' largest errors.

A second fixture, gpu_ref_tight.{bin,json}, is chosen so that fp32 can be checked
tightly (trainer.test_ref_f64, trainer.gpu.vs_cpu): ResNet-50 v1.5 width 1/32
(2..64 channels), 8x8 inputs, batch 8, same init and label scheme, inputs from
dpt_rng seed 80.  Its ReLU inputs all lie far from 0 against fp32's forward
error: per ReLU input tensor, sigma = rms of PyTorch float32's error against
float64 there; every |z| >= RELU_MARGIN_MIN (50) sigma, asserted here (the
script fails otherwise) and stored ("relu_margin").  Seed 80 has the largest
margin (81 sigma) of data seeds 11..210 (next: 169 79, 135 76, 60 73; the
width-1/8 32-px fixture above has 0.1 to 4 sigma: 4 of layer4.1's add inputs
lie inside the band).  oneDNN's and cuDNN's fp32 forward errors are a few
times PyTorch's (4.2x on the logits of the fixture above), so no fp32
implementation flips a mask here and a block's fp32 error is rounding only:
its fp32 sensitivity is PyTorch's own float32 error (no dither runs at fp32),
and the tests hold every block to the rounding bound (ref_f64.h).  One float32
run is one draw of that error: torch32 here is the largest of PERM_RUNS (8)
draws, the same step with the batch in 8 orders (every sum over images
reordered; the math is order-free).  tf32 /
fp16 / bf16 keep the emulation + dither runs (their forward error is 2^13 to
2^16 times fp32's: masks do flip).
Run:  /usr/bin/python3 tests/trainer/ref/make_gpu_ref.py tests/trainer/ref [gpu_ref|gpu_ref_tight]
      (both when none is named)
"""
import json
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

M64 = (1 << 64) - 1
WIDTH = 1.0 / 8
IMAGE = 32
IN_CH = 3
CLASSES = 10
BATCH = 8
SMOOTH = 0.1
# The dither of the sensitivity runs (relative to each ReLU input's rms): tf32 /
# fp16 / bf16 one rounding of the format (unit roundoff) on top of the emulation;
# fp32 1e-5: 4x PyTorch fp32's measured median error at the ReLU inputs of this
# fixture (2.5e-6), because oneDNN's fp32 forward error here is 4.2x PyTorch's
# (logits 3.7e-5 vs 8.9e-6, trainer.ref_f64 prints it).
LOCAL_DELTA = {"fp32": 1e-5, "tf32": 2.0 ** -11, "fp16": 2.0 ** -11, "bf16": 2.0 ** -8}
TRIALS = 8
INIT_SEED = 1
DATA_SEED = 11
RELU_MARGIN_MIN = 50.0
PERM_RUNS = 8  # the tight fixture's float32 draws: the batch in 8 orders (identity + 7 seeded permutations)
# name: (width, image side, data seed, dither the fp32 runs, ReLU margin to assert)
FIXTURES = {"gpu_ref": (1.0 / 8, 32, 11, True, None),
            "gpu_ref_tight": (1.0 / 32, 8, 80, False, RELU_MARGIN_MIN)}


def use_fixture(name):
    global WIDTH, IMAGE, DATA_SEED
    WIDTH, IMAGE, DATA_SEED, dither32, margin = FIXTURES[name]
    return dither32, margin


def relu_margin(exact, got32):
    """Per ReLU input tensor: sigma = rms of the float32 run's error against float64 there;
    returns (min over all inputs of |z| / sigma, the tensor's index, min |z| / rms there)."""
    best = (math.inf, -1, 0.0)
    for k, (a, b) in enumerate(zip(exact, got32)):
        e = a - b.double()
        sigma = float(e.pow(2).mean().sqrt())
        m = float(a.abs().min()) / sigma if sigma > 0 else math.inf
        if m < best[0]:
            best = (m, k, float(a.abs().min() / a.pow(2).mean().sqrt()))
    return best


class Rng:  # trainer/dpt_model.c: splitmix64 seeding + xoshiro256**
    def __init__(self, seed):
        x = seed
        self.s = []
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & M64
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
            self.s.append(z ^ (z >> 31))

    @staticmethod
    def rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & M64

    def next(self):
        s = self.s
        result = (self.rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = self.rotl(s[3], 45)
        return result

    def uniform(self):
        return (self.next() >> 11) * 2.0 ** -53

    def normal(self):
        u1, u2 = self.uniform(), self.uniform()
        if u1 < 1e-300:
            u1 = 1e-300
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)

    def below(self, n):
        if n <= 1:
            return 0
        lim = M64 - M64 % n
        while True:
            x = self.next()
            if x < lim:
                return x % n


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def scaled(c):
    return max(1, int(c * WIDTH + 0.5))


class Bottleneck(nn.Module):  # torchvision v1.5; ReLUs not in place (gradients are kept)
    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.downsample = None
        if stride != 1 or inplanes != planes * 4:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(planes * 4))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        idt = self.downsample(x) if self.downsample is not None else x
        return F.relu(out + idt)


class ResNet50(nn.Module):
    def __init__(self):
        super().__init__()
        inplanes = scaled(64)
        self.conv1 = nn.Conv2d(IN_CH, inplanes, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(inplanes)
        for s, (planes, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3))):
            layer = []
            for b in range(blocks):
                layer.append(Bottleneck(inplanes, scaled(planes), 2 if b == 0 and s > 0 else 1))
                inplanes = scaled(planes) * 4
            setattr(self, "layer%d" % (s + 1), nn.Sequential(*layer))
        self.fc = nn.Linear(inplanes, CLASSES)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def dpt_init(model):
    """dpt_model_init_params: layer order = parameter order; conv Kaiming normal
    (fan_out, gain sqrt 2), FC U(+-1/sqrt(fan_in)) weight then bias, BN 1/0."""
    rng = Rng(INIT_SEED)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                std = math.sqrt(2.0 / (m.out_channels * m.kernel_size[0] * m.kernel_size[1]))
                v = [f32(std * rng.normal()) for _ in range(m.weight.numel())]
                m.weight.copy_(torch.tensor(v, dtype=torch.float64).reshape(m.weight.shape))
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.fill_(1.0)
                m.bias.fill_(0.0)
                m.running_mean.fill_(0.0)
                m.running_var.fill_(1.0)
            elif isinstance(m, nn.Linear):
                bound = 1.0 / math.sqrt(m.in_features)
                for p in (m.weight, m.bias):
                    v = [f32((2.0 * rng.uniform() - 1.0) * bound) for _ in range(p.numel())]
                    p.copy_(torch.tensor(v, dtype=torch.float64).reshape(p.shape))


def flat(ts):
    return torch.cat([t.detach().reshape(-1) for t in ts])


def rounder(prec):
    """Round a float64 tensor to prec (forward and, for gradients, backward)."""
    def tf32(t):
        i = t.float().view(torch.int32)
        return ((i + 0x1000) & ~0x1FFF).view(torch.float32).double()
    f = {"tf32": tf32, "fp16": lambda t: t.half().double(),
         "bf16": lambda t: t.to(torch.bfloat16).double()}[prec]

    class Round(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return f(t)

        @staticmethod
        def backward(ctx, g):
            return f(g)
    return Round.apply


class Emulate:
    """Context: float64 model, precision prec emulated at every conv / FC
    (inputs, weights, output gradients rounded), optional dither delta * rms
    * N(0,1) added to every ReLU input."""
    def __init__(self, model, prec, delta=0.0, seed=0):
        self.model, self.prec, self.delta = model, prec, delta
        self.gen = torch.Generator().manual_seed(seed)
        self.relu_err = []

    def __enter__(self):
        self.orig = F.relu
        self.hooks = []
        if self.prec:
            rnd = rounder(self.prec)
            for m in self.model.modules():
                if isinstance(m, (nn.Conv2d, nn.Linear)):
                    fw = m.forward

                    def wrapped(inp, m=m, rnd=rnd):
                        w = rnd(m.weight)
                        if isinstance(m, nn.Conv2d):
                            out = F.conv2d(rnd(inp), w, None, m.stride, m.padding)
                        else:
                            out = F.linear(rnd(inp), w, m.bias)
                        return rnd(out)
                    m.forward = wrapped
                    self.hooks.append((m, fw))
        delta, gen, orig = self.delta, self.gen, self.orig

        def relu(z, inplace=False):
            if delta:
                rms = z.detach().pow(2).mean().sqrt()
                z = z + delta * rms * torch.randn(z.shape, generator=gen, dtype=z.dtype)
            return orig(z)
        F.relu = relu
        return self

    def __exit__(self, *a):
        F.relu = self.orig
        for m, fw in self.hooks:
            m.forward = fw


def relu_inputs(model, x):
    """The ReLU inputs of one training-mode forward (float64 copies)."""
    got = []
    orig = F.relu

    def relu(z, inplace=False):
        got.append(z.detach().double())
        return orig(z)
    F.relu = relu
    try:
        with torch.no_grad():
            model.train()
            model(x)
    finally:
        F.relu = orig
    return got


def step(model, x, y):
    """One training step's forward and backward; returns logits, loss, grads and
    the per-block cancellation numbers (float64 only)."""
    model.train()
    model.zero_grad()
    saved = {}
    hooks = []
    for name, m in model.named_modules():
        if isinstance(m, (nn.Conv2d, nn.BatchNorm2d, nn.Linear)):
            def fwd(mod, inp, out, name=name):
                out.retain_grad()
                saved[name] = (inp[0].detach(), out)
            hooks.append(m.register_forward_hook(fwd))
    logits = model(x)
    valid = y >= 0
    loss = F.cross_entropy(logits[valid], y[valid], label_smoothing=SMOOTH, reduction="sum") / BATCH
    loss.backward()
    for h in hooks:
        h.remove()
    cond = {}
    with torch.no_grad():
        for name, m in model.named_modules():
            if name not in saved:
                continue
            xin, out = saved[name]
            dy = out.grad
            if isinstance(m, nn.BatchNorm2d):
                mu = xin.mean(dim=(0, 2, 3), keepdim=True)
                var = xin.var(dim=(0, 2, 3), unbiased=False, keepdim=True)
                xhat = (xin - mu) / torch.sqrt(var + m.eps)
                g = (dy * xhat).sum(dim=(0, 2, 3))
                s = (dy * xhat).abs().sum(dim=(0, 2, 3))
                cond[name + ".weight"] = float(s.max() / g.abs().max())
                gb = dy.sum(dim=(0, 2, 3))
                sb = dy.abs().sum(dim=(0, 2, 3))
                cond[name + ".bias"] = float(sb.max() / gb.abs().max())
            elif isinstance(m, nn.Conv2d):
                g = torch.nn.grad.conv2d_weight(xin, m.weight.shape, dy, stride=m.stride, padding=m.padding)
                s = torch.nn.grad.conv2d_weight(xin.abs(), m.weight.shape, dy.abs(), stride=m.stride,
                                                padding=m.padding)
                cond[name + ".weight"] = float(s.max() / g.abs().max())
            else:
                g = dy.t() @ xin
                s = dy.abs().t() @ xin.abs()
                cond[name + ".weight"] = float(s.max() / g.abs().max())
                cond[name + ".bias"] = float(dy.abs().sum(0).max() / dy.sum(0).abs().max())
    return logits.detach(), loss.detach().reshape(1), flat(p.grad for p in model.parameters()), cond


def m64_fresh(model0):
    m = ResNet50().double()
    m.load_state_dict(model0.state_dict())
    return m


def bn_state(model):
    st = []
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            st += [m.running_mean, m.running_var]
    return flat(st)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "."
    names = sys.argv[2:] or list(FIXTURES)
    torch.set_num_threads(1)
    for fixture in names:
        make(outdir, fixture)


def make(outdir, fixture):
    dither32, margin_min = use_fixture(fixture)
    model0 = ResNet50().double()
    dpt_init(model0)
    rng = Rng(DATA_SEED)
    x = torch.tensor([f32(rng.normal()) for _ in range(BATCH * IN_CH * IMAGE * IMAGE)],
                     dtype=torch.float64).reshape(BATCH, IN_CH, IMAGE, IMAGE)
    y = torch.tensor([rng.below(CLASSES) for _ in range(BATCH)], dtype=torch.long)
    y[3] = -1
    params0 = flat(model0.parameters())
    state0 = bn_state(model0)

    m64 = ResNet50().double()
    m64.load_state_dict(model0.state_dict())
    logits, loss, grads, cond = step(m64, x, y)
    state1 = bn_state(m64)
    m32 = ResNet50().float()
    m32.load_state_dict(model0.state_dict())
    logits32, loss32, grads32, _ = step(m32, x.float(), y)
    runs32 = [(logits32.double(), grads32.double())]
    if not dither32:  # more float32 draws: the same step with the batch in other orders (sums reordered)
        gen = torch.Generator().manual_seed(7)
        for _ in range(PERM_RUNS - 1):
            perm = torch.randperm(BATCH, generator=gen)
            mp = ResNet50().float()
            mp.load_state_dict(model0.state_dict())
            lg, _, gr, _ = step(mp, x[perm].float(), y[perm])
            runs32.append((lg.double()[torch.argsort(perm)], gr.double()))

    # Sensitivity of every block to each precision's forward error (see the docstring).
    exact_in = relu_inputs(m64_fresh(model0), x)
    offsets, o = [], 0
    for p in model0.parameters():
        offsets.append((o, p.numel()))
        o += p.numel()
    sens, logit_sens, deltas, l2_sens = {}, {}, {}, {}
    margin = None
    for prec in ("fp32", "tf32", "fp16", "bf16"):
        if prec == "fp32":
            mp = ResNet50().float()
            mp.load_state_dict(model0.state_dict())
            got = relu_inputs(mp, x.float())
            runs = list(runs32)
            if margin_min is not None:
                margin = relu_margin(exact_in, got)
                print("%s: ReLU inputs >= %.1f sigma of fp32's error from 0 (tensor %d: %.2e of its rms)" %
                      (fixture, margin[0], margin[1], margin[2]))
                if margin[0] < margin_min:
                    sys.exit("%s: a ReLU input lies %.1f sigma of fp32's forward error from 0 (tensor %d), "
                             "below the %.0f this fixture needs: choose another data seed" %
                             (fixture, margin[0], margin[1], margin_min))
        else:
            mp = m64_fresh(model0)
            with Emulate(mp, prec):
                got = relu_inputs(mp, x)
            mp = m64_fresh(model0)
            with Emulate(mp, prec):
                lg, _, gr, _ = step(mp, x, y)
            runs = [(lg, gr)]
        rel = [float((a - b).pow(2).mean().sqrt() / a.pow(2).mean().sqrt()) for a, b in zip(exact_in, got)]
        delta = LOCAL_DELTA[prec]
        deltas[prec] = {"relu_input_error_median": sorted(rel)[len(rel) // 2], "relu_input_error_max": max(rel),
                        "emulated_logits": float((runs[0][0] - logits).abs().max() / logits.abs().max()),
                        "emulated_grads_block_max": max(float((runs[0][1][o:o + n] - grads[o:o + n]).abs().max() /
                                                              grads[o:o + n].abs().max()) for o, n in offsets),
                        "dither": delta}
        for trial in range(TRIALS if dither32 or prec != "fp32" else 0):
            mp = m64_fresh(model0)
            with Emulate(mp, None if prec == "fp32" else prec, delta, seed=100 + trial):
                lg, _, gr, _ = step(mp, x, y)
            runs.append((lg, gr))
        logit_sens[prec] = max(float((lg - logits).abs().max() / logits.abs().max()) for lg, _ in runs)
        l2_sens[prec] = max(float((gr - grads).norm() / grads.norm()) for _, gr in runs)
        sens[prec] = runs

    names = [n for n, _ in model0.named_parameters()]
    blocks = []
    off = 0
    for (n, p) in model0.named_parameters():
        k = p.numel()
        g = grads[off:off + k]
        e32 = max(float((g32[off:off + k] - g).abs().max() / g.abs().max()) for _, g32 in runs32)
        sb = {}
        for prec, runs in sens.items():
            sb[prec] = max(float((gr[off:off + k] - g).abs().max() / g.abs().max()) for _, gr in runs)
        blocks.append({"name": n, "offset": off, "count": k, "cond": cond[n], "torch32": e32,
                       "max_abs": float(g.abs().max()), "sens": sb})
        off += k

    sections = [("params0", params0), ("state0", state0), ("x", x), ("logits", logits), ("loss", loss),
                ("grads", grads), ("state1", state1)]
    blob = bytearray()
    meta = {"schema": "dpt.trainer-ref/1",
            "generator": "tests/trainer/ref/make_gpu_ref.py (PyTorch %s)" % torch.__version__,
            "fixture": "trainer.gpu.vs_cpu: dpt init seed %d (zero_init_residual off), x ~ N(0,1) from "
                       "dpt_rng seed %d, labels from the same stream, label 3 ignored" % (INIT_SEED, DATA_SEED),
            "model": {"arch": "resnet50-v1.5", "width": WIDTH, "image_size": IMAGE, "in_channels": IN_CH,
                      "num_classes": CLASSES, "small_stem": True, "zero_init_residual": False},
            "batch": BATCH, "label_smoothing": SMOOTH, "grad_scale": 1.0 / BATCH,
            "bn_momentum": 0.1, "bn_eps": 1e-5, "reference_dtype": "float64",
            "n_params": int(params0.numel()), "n_state": int(state0.numel()),
            "param_names": names, "sections": {}, "blocks": blocks,
            "forward_error_delta": deltas, "logits_sens": logit_sens, "grads_l2_sens": l2_sens,
            "torch32_vs_float64": {
                "logits_max_rel": max(float((lg - logits).abs().max() / logits.abs().max()) for lg, _ in runs32),
                "loss_rel": float(abs(float(loss32) - float(loss)) / abs(float(loss)))}}
    if margin_min is not None:  # the well-conditioned fixture: what makes it so, and its seeds
        meta["fixture"] = ("tight fp32 checks: dpt init seed %d (zero_init_residual off), x ~ N(0,1) from dpt_rng "
                           "seed %d, labels from the same stream, label 3 ignored" % (INIT_SEED, DATA_SEED))
        meta["init_seed"], meta["data_seed"] = INIT_SEED, DATA_SEED
        meta["relu_margin"] = {"min_sigmas": margin[0], "tensor": margin[1], "min_abs_over_rms": margin[2],
                               "required": margin_min,
                               "sigma": "per ReLU input tensor, rms of PyTorch float32's error against float64"}
        meta["torch32_vs_float64"]["grads_l2_rel"] = max(float((gr - grads).norm() / grads.norm()) for _, gr in runs32)
        meta["torch32_vs_float64"]["runs"] = len(runs32)
    for name, t in sections:
        arr = [float(v) for v in t.detach().reshape(-1)]
        meta["sections"][name] = {"offset": len(blob), "count": len(arr), "dtype": "f32", "shape": list(t.shape)}
        blob += struct.pack("<%df" % len(arr), *arr)
    meta["sections"]["labels"] = {"offset": len(blob), "count": BATCH, "dtype": "i32", "shape": [BATCH]}
    blob += struct.pack("<%di" % BATCH, *[int(v) for v in y])
    with open(f"{outdir}/{fixture}.bin", "wb") as f:
        f.write(blob)
    with open(f"{outdir}/{fixture}.json", "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    worst = sorted(blocks, key=lambda b: -b["torch32"])[:8]
    print("params", params0.numel(), "loss", float(loss), "labels", y.tolist())
    print("logits sensitivity", logit_sens, "gradient L2 sensitivity", l2_sens)
    for b in worst:
        print("%-28s cond %10.1f torch32 %.2e sens %s" % (b["name"], b["cond"], b["torch32"],
                                                         " ".join("%s %.1e" % kv for kv in b["sens"].items())))


if __name__ == "__main__":
    main()
