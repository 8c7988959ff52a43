#!/usr/bin/env python3
"""torchvision's loaders on the same JPEG folder as dpt-loader-bench (issue 16's peers).

  --mode cpu: torchvision.datasets.ImageFolder (PIL decode) + RandomResizedCrop(224) +
              RandomHorizontalFlip + ToTensor + Normalize in a torch DataLoader with
              --workers worker processes (the usual ImageNet recipe).
  --mode gpu: files read by --workers threads (torchvision.io.read_file),
              torchvision.io.decode_jpeg(list, device="cuda") batched, then per image on
              the GPU RandomResizedCrop(224) + RandomHorizontalFlip (transforms.v2 when
              present) and one batched normalisation; torch.cuda.synchronize() per batch.

Prints one JSON object: images/s over --steps batches after --warmup, the CPU time of the
process and its DataLoader workers over the wall time (cores used), versions.  Exit 77 with
{"skipped": why} when torch / torchvision / CUDA is missing.
"""
import argparse
import json
import os
import sys
import time


def skip(why):
    print(json.dumps({"skipped": why}))
    sys.exit(77)


try:
    import torch
    import torchvision
except ImportError as e:  # noqa: F841
    skip("no torch/torchvision for %s (%s)" % (sys.executable, e))

TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid):
    """utime + stime of a process, seconds (/proc/PID/stat fields 14 and 15)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def cpu_now(pids):
    return sum(proc_cpu(p) for p in pids)


def versions():
    return {"python": sys.version.split()[0], "torch": torch.__version__, "torchvision": torchvision.__version__}


def run_cpu(a):
    from torchvision import datasets, transforms
    tf = transforms.Compose([
        transforms.RandomResizedCrop(a.size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])
    ds = datasets.ImageFolder(os.path.join(a.data, "train"), tf)
    torch.set_num_threads(1)
    kw = {"prefetch_factor": 2, "persistent_workers": True} if a.workers else {}  # the same worker pids all along
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers, drop_last=True,
                                     **kw)
    it, done, t0, c0, images = iter(dl), 0, None, 0.0, 0
    pids = [os.getpid()]
    while done < a.warmup + a.steps:
        try:
            x, _ = next(it)
        except StopIteration:
            it = iter(dl)
            continue
        done += 1
        if done == a.warmup:  # the workers of this iterator, measured from here
            pids = [os.getpid()] + [w.pid for w in getattr(it, "_workers", [])]
            t0, c0 = time.monotonic(), cpu_now(pids)
        elif done > a.warmup:
            images += x.shape[0]
    wall = time.monotonic() - t0
    cpu = cpu_now(pids) - c0
    return {"peer": "torchvision DataLoader + PIL", "mode": "cpu", "workers": a.workers, "batch": a.batch,
            "images": images, "seconds": wall, "images_per_s": images / wall, "cpu_seconds": cpu,
            "cores_used": cpu / wall, "images_per_core_s": images / cpu if cpu > 0 else 0.0, **versions()}


def run_gpu(a):
    if not torch.cuda.is_available():
        skip("torch.cuda.is_available() is False")
    from concurrent.futures import ThreadPoolExecutor
    from torchvision.io import decode_jpeg, read_file
    try:
        from torchvision.transforms import v2 as T
        rrc = T.RandomResizedCrop(a.size, antialias=True)
        flip = T.RandomHorizontalFlip()
    except ImportError:
        from torchvision import transforms as T
        rrc = T.RandomResizedCrop(a.size)
        flip = T.RandomHorizontalFlip()
    files = []
    root = os.path.join(a.data, "train")
    for c in sorted(os.listdir(root)):
        files += [os.path.join(root, c, f) for f in sorted(os.listdir(os.path.join(root, c)))]
    g = torch.Generator().manual_seed(1)
    mean = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device="cuda").view(1, 3, 1, 1) * 255
    pool = ThreadPoolExecutor(max(1, a.workers))

    def batches():
        while True:
            perm = torch.randperm(len(files), generator=g).tolist()
            for k in range(0, len(perm) - a.batch + 1, a.batch):
                yield [files[i] for i in perm[k:k + a.batch]]

    src = batches()
    nxt = pool.map(read_file, next(src))  # reading of batch t+1 overlaps the decode of batch t
    t0, c0, images = None, 0.0, 0
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            torch.cuda.synchronize()
            t0, c0 = time.monotonic(), proc_cpu(os.getpid())
        data = list(nxt)
        nxt = pool.map(read_file, next(src))
        try:
            imgs = decode_jpeg(data, device="cuda")  # batched (torchvision >= 0.19)
        except (TypeError, RuntimeError):
            imgs = [decode_jpeg(d, device="cuda") for d in data]
        out = torch.stack([flip(rrc(im)) for im in imgs]).float()
        out = (out - mean) / std
        torch.cuda.synchronize()
        if step >= a.warmup:
            images += out.shape[0]
    wall = time.monotonic() - t0
    cpu = proc_cpu(os.getpid()) - c0
    return {"peer": "torchvision decode_jpeg(device='cuda') batched + GPU transforms", "mode": "gpu",
            "workers": a.workers, "batch": a.batch, "images": images, "seconds": wall, "images_per_s": images / wall,
            "cpu_seconds": cpu, "cores_used": cpu / wall, "images_per_core_s": images / cpu if cpu > 0 else 0.0,
            "gpu": torch.cuda.get_device_name(0), **versions()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--mode", choices=["cpu", "gpu"], required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--size", type=int, default=224)
    a = p.parse_args()
    if a.warmup < 1 or a.steps < 1:
        p.error("--warmup and --steps must be >= 1")
    if a.mode == "gpu" and not hasattr(torchvision.io, "decode_jpeg"):
        skip("torchvision %s has no io.decode_jpeg" % torchvision.__version__)
    r = run_cpu(a) if a.mode == "cpu" else run_gpu(a)
    print(json.dumps(r))


if __name__ == "__main__":
    main()
