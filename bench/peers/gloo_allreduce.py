#!/usr/bin/env python3
"""PyTorch torch.distributed (gloo) all-reduce, timed like dpt-bench allreduce.

    torchrun --standalone --nproc_per_node P gloo_allreduce.py --sizes 67108864,102228128 \
        [--iters 5] [--warmup 1]

Per size: time = max over ranks of the mean of --iters all-reduces (sum, fp32, in
place) after --warmup untimed ones; algbw = bytes / time; busbw = algbw * 2(p-1)/p
(nccl-tests' definition, the same as dpt-bench); max_error = max |result - exact|
of one extra all-reduce of integer-valued data.  Rank 0 prints one JSON document
(schema dpt.bench.allreduce/1, the shape of `dpt-bench allreduce --json`), to --out
if given."""
import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--sizes", required=True, help="bytes, comma-separated (multiples of 4)")
ap.add_argument("--iters", type=int, default=5)
ap.add_argument("--warmup", type=int, default=1)
ap.add_argument("--out", help="rank 0 writes the JSON here (default: stdout)")
args = ap.parse_args()

dist.init_process_group("gloo")
rank, p = dist.get_rank(), dist.get_world_size()
results = []
for nbytes in (int(s) for s in args.sizes.split(",")):
    n = nbytes // 4
    idx = torch.arange(n, dtype=torch.int64)
    # the same integer pattern as dpt-bench's ival(): ((j*2654435761 + r*40503) % 17) - 8
    ival = lambda r: (((idx * 2654435761 + r * 40503) % 17) - 8).to(torch.float32)
    buf = ival(rank) * 0.125
    for _ in range(args.warmup):
        dist.all_reduce(buf)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(buf)
    dt = torch.tensor([(time.perf_counter() - t0) / args.iters], dtype=torch.float64)
    dist.all_reduce(dt, op=dist.ReduceOp.MAX)
    buf = ival(rank)
    dist.all_reduce(buf)
    want = sum(ival(q) for q in range(p))
    err = torch.tensor([float((buf - want).abs().max())], dtype=torch.float64)
    dist.all_reduce(err, op=dist.ReduceOp.MAX)
    t = float(dt[0])
    algbw = nbytes / t / 1e9
    results.append({"comm": "gloo", "bytes": nbytes, "count": n, "type": "float", "time_us": t * 1e6,
                    "algbw_gbs": algbw, "busbw_gbs": algbw * 2.0 * (p - 1) / p if p > 1 else 0.0,
                    "max_error": float(err[0])})
    del buf, idx, want
if rank == 0:
    f = open(args.out, "w") if args.out else sys.stdout
    print(json.dumps({"schema": "dpt.bench.allreduce/1", "host": socket.gethostname(), "ranks": p,
                      "wire": "fp32", "launcher": "torchrun", "iters": args.iters, "warmup": args.warmup,
                      "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "results": results}), file=f)
    f.flush()
dist.destroy_process_group()
