#!/usr/bin/env python3
"""PyTorch side of bench/gpu (issue 14): torchvision's resnet50 (weights=None, 1000 classes)
training steps on one GPU, synthetic 224-px data resident on the device (one random batch),
cross-entropy, momentum SGD (lr 0.1, momentum 0.9, weight decay 5e-5), cudnn.benchmark on.

--mode:
  fp32          fp32 with TF32 off for convolutions and matmuls ("ieee"), NCHW
  tf32          TF32 on for both, NCHW (--channels-last: NHWC)
  fp16          torch.autocast float16 + GradScaler (dynamic loss scaling)
  bf16          torch.autocast bfloat16, no scaler
--compile: the model through torch.compile (default mode); the first --warmup steps compile
it (fwd and bwd) and are not measured.

Protocol (bench/train/bench.py's, which bench_gpu.py reuses): after every step
  STEP <i> <time.time()> <in-process step seconds> loss <loss>
(loss.item() waits for the step), and at the end one line
  RESULT {json}: peak memory (torch.cuda.max_memory_allocated over the whole run and over the
  timed steps only, max_memory_reserved), versions, the precision settings in force.
--profile-steps P --trace PATH (issue 15): after the timed steps (and after their peak memory is
taken), P more steps under torch.profiler (CPU + CUDA activities, one warm-up step, then P active
ones, a ProfilerStep#N range each) whose Kineto trace is written to PATH for bench/gpu/breakdown.py;
they print "PSTEP <i> ..." lines, not STEP lines, so the harness does not time them.
The peer's own installation (PyTorch 2.x + torchvision on the GPU machine): nothing is installed."""
import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F
import torchvision


def set_fp32_precision(tf32):
    """TF32 for convolutions and matmuls on or off, through the API this PyTorch has (2.9+:
    fp32_precision "tf32" / "ieee"; older: allow_tf32).  Only one of the two is ever used:
    PyTorch 2.9+ refuses to read a flag set through the other."""
    want = "tf32" if tf32 else "ieee"
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = want
        conv.fp32_precision = want
        return {"api": "fp32_precision", "matmul": torch.backends.cuda.matmul.fp32_precision,
                "conv": conv.fp32_precision}
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    return {"api": "allow_tf32", "matmul": torch.backends.cuda.matmul.allow_tf32,
            "conv": torch.backends.cudnn.allow_tf32}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("fp32", "tf32", "fp16", "bf16"), required=True)
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20, help="timed steps after the warm-up")
    ap.add_argument("--profile-steps", type=int, default=0, help="steps profiled after the timed ones")
    ap.add_argument("--trace", default=None, help="Kineto (Chrome) trace of the profiled steps")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_gpu.py: torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    prec = set_fp32_precision(a.mode == "tf32") if a.mode in ("fp32", "tf32") else {"api": "default"}
    torch.manual_seed(1)
    model = torchvision.models.resnet50(weights=None, num_classes=a.classes).to(dev)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
    step_fn = torch.compile(model) if a.compile else model
    amp = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.mode)
    scaler = torch.amp.GradScaler("cuda") if a.mode == "fp16" else None
    g = torch.Generator(device=dev).manual_seed(100)
    x = torch.randn(a.batch, 3, a.image_size, a.image_size, device=dev, generator=g).contiguous(memory_format=fmt)
    y = torch.randint(0, a.classes, (a.batch,), device=dev, generator=g)
    times = []
    total = a.warmup + a.steps
    peak_warmup = reserved_warmup = 0

    def one_step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
            loss = F.cross_entropy(step_fn(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss.item()  # waits for the step

    for step in range(total):
        if step == a.warmup:  # the timed steps' own peak, next to the whole run's
            peak_warmup = torch.cuda.max_memory_allocated()
            reserved_warmup = torch.cuda.max_memory_reserved()
            torch.cuda.reset_peak_memory_stats()
        t = time.perf_counter()
        lv = one_step()
        times.append(time.perf_counter() - t)
        print(f"STEP {step + 1} {time.time():.6f} {times[-1]:.6f} loss {lv:.4f}", flush=True)
    torch.cuda.synchronize()
    peak_timed = torch.cuda.max_memory_allocated()
    profiled = 0
    if a.profile_steps > 0 and a.trace:  # the kernel breakdown's steps, after the timed ones
        from torch.profiler import ProfilerActivity, profile, schedule
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                     schedule=schedule(wait=0, warmup=1, active=a.profile_steps),
                     on_trace_ready=lambda p: p.export_chrome_trace(a.trace)) as prof:
            for i in range(1 + a.profile_steps):
                lv = one_step()
                prof.step()
                print(f"PSTEP {i + 1} {time.time():.6f} loss {lv:.4f}", flush=True)
        torch.cuda.synchronize()
        profiled = a.profile_steps
    nccl = None
    try:
        v = torch.cuda.nccl.version()
        nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception as e:  # noqa: BLE001 - a build without NCCL
        nccl = f"unavailable ({e})"
    res = {"framework": "pytorch " + torch.__version__, "torchvision": torchvision.__version__,
           "python": sys.version.split()[0], "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version(), "nccl": nccl,
           "device": torch.cuda.get_device_name(dev), "parameters": n_params,
           "mode": a.mode, "channels_last": a.channels_last, "compile": a.compile, "precision": prec,
           "cudnn_benchmark": True, "batch": a.batch, "warmup": a.warmup, "steps": a.steps,
           "peak_allocated_bytes": max(peak_warmup, peak_timed), "peak_allocated_timed_bytes": peak_timed,
           "peak_reserved_bytes": max(reserved_warmup, torch.cuda.max_memory_reserved()), "step_s": times,
           "profiled_steps": profiled, "trace": a.trace if profiled else None}
    print("RESULT " + json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
