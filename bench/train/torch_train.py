#!/usr/bin/python3
"""PyTorch 1.13 side of bench/train: ResNet-50 v1.5 (torchvision's definition; small stem
3x3/1 without max pool at <= 64 px, as dpt-train) training steps on one fixed random batch:
forward, cross-entropy, backward, momentum SGD (lr 0.01, momentum 0.9, weight decay 5e-5).
More than one rank: torch.distributed gloo + DistributedDataParallel, started by the
harness (bench.py) as WORLD_SIZE processes with RANK / MASTER_ADDR / MASTER_PORT in the
environment (what torchrun sets; started directly so that each rank runs under its own
/usr/bin/time).

Protocol shared with chainer_train.py (bench.py reads it): after every step rank 0 prints
  STEP <i> <time.time()> <in-process step seconds>
(flushed), and each rank writes --out.<rank> (JSON: in-process step times, parameters,
versions) at the end."""
import argparse
import json
import os
import sys
import time

T_IMPORT = time.time()
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Bottleneck(nn.Module):  # torchvision.models.resnet.Bottleneck (v1.5: stride on the 3x3)
    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + idt)


class ResNet50(nn.Module):
    def __init__(self, classes, small_stem):
        super().__init__()
        self.inplanes = 64
        if small_stem:
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(True))
        else:
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(True),
                                      nn.MaxPool2d(3, 2, 1))
        layers = []
        for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            ds = None
            if stride != 1 or self.inplanes != planes * 4:
                ds = nn.Sequential(nn.Conv2d(self.inplanes, planes * 4, 1, stride, bias=False),
                                   nn.BatchNorm2d(planes * 4))
            layers.append(Bottleneck(self.inplanes, planes, stride, ds))
            self.inplanes = planes * 4
            layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5, help="steps in all, the first one included")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1)
    model = ResNet50(a.classes, a.image_size <= 64)
    n_params = sum(p.numel() for p in model.parameters())
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-5)
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(a.batch, 3, a.image_size, a.image_size, generator=g)
    y = torch.randint(0, a.classes, (a.batch,), generator=g)
    times = []
    for step in range(a.steps):
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()  # DDP: gradients all-reduced (gloo) during backward
        opt.step()
        times.append(time.perf_counter() - t)
        if rank == 0:
            print(f"STEP {step + 1} {time.time():.6f} {times[-1]:.6f} loss {loss.item():.4f}", flush=True)
    with open(f"{a.out}.{rank}", "w") as f:
        json.dump({"framework": "pytorch " + torch.__version__, "python": sys.version.split()[0],
                   "rank": rank, "world": world, "threads": a.threads, "parameters": n_params,
                   "comm": "gloo DistributedDataParallel" if world > 1 else None,
                   "import_done": T_IMPORT, "step_s": times}, f)
    if world > 1:
        import torch.distributed as dist
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
