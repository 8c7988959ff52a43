#!/usr/bin/env bash
# Regenerates the seed corpora in tests/fuzz/corpus/ from the real fixtures
# (shared/fixtures, tests/topology, etc/, tests/runtime, the Fashion-MNIST
# files of Debian's dataset-fashion-mnist) plus a few hand-written inputs that
# reach syntax the fixtures do not use.  The seeds are committed; run this only
# when a fixture or an input format changes, then review `git diff`.
#   bash tests/fuzz/make-corpus.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
shared=${DPT_SHARED_DIR:-$root/../shared}
fmnist=${DPT_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
exec python3 - "$here/corpus" "$root" "$shared" "$fmnist" <<'PY'
import gzip, os, shutil, struct, sys, zlib
out, root, shared, fmnist = sys.argv[1:5]
fx = os.path.join(shared, "fixtures")

def put(name, fname, data):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, fname), "wb") as f:
        f.write(data)

def read(p):
    with open(p, "rb") as f:
        return f.read()

for name in ("node_xml", "topology_conf", "addr_list", "ibnetdiscover", "spank_opts", "spank_plan",
             "hostfile", "idx", "cifar10", "ckpt", "report", "ncclring"):
    shutil.rmtree(os.path.join(out, name), ignore_errors=True)

# hwloc XML: the real servers up to ~45 KB (libFuzzer's -max_len follows the
# largest seed), our MN-1 style node, and the rejected documents of tests/topology.
for f in ("power8-4p100-nvlink.xml", "x86-2socket-k40-mlx5.xml", "nvidia-dgx2-16v100.xml"):
    put("node_xml", f, read(os.path.join(fx, "hwloc", f)))
put("node_xml", "mn1-8gpu-4hca.xml", read(os.path.join(root, "tests/topology/fixtures/mn1-8gpu-4hca.xml")))
# issue 18: a real hwloc 1.x export (3 Tesla M2070 beside an ATI ES1000 VGA), and the K40 dump
# without the complete_cpuset/complete_nodeset that hwloc 2.9 dereferences (dpt completes them)
put("node_xml", "sl390s-3m2070-es1000.xml", read(os.path.join(root, "tests/topology/fixtures/sl390s-3m2070-es1000.xml")))
import re
k40 = read(os.path.join(fx, "hwloc", "x86-2socket-k40-mlx5.xml")).decode()
k40 = re.sub(r'(<object type="PU"[^>]*?) complete_cpuset="[^"]*"', r"\1", k40)
put("node_xml", "hwloc-crash-no-complete-sets.xml",
    re.sub(r'(<object type="NUMANode"[^>]*?) complete_nodeset="[^"]*"', r"\1", k40))
bad = os.path.join(root, "tests/topology/fixtures/bad")
for f in sorted(os.listdir(bad)):
    put("node_xml", "bad-" + f, read(os.path.join(bad, f)))

# topology.conf
put("topology_conf", "mn1-topology.conf", read(os.path.join(root, "etc/mn1/topology.conf")))
put("topology_conf", "cluster.conf", read(os.path.join(root, "tests/topology/tree/data/cluster.conf")))
put("topology_conf", "syntax.conf",
    "# every piece of syntax once\n"
    "SwitchName=\"top\" Switches=\"s[1-2]\" LinkSpeed=100 # comment\n"
    "switchname=s1 nodes=n[01-03,07],m\\#1 linkspeed=56\n"
    "SwitchName=s2 \\\n  Nodes=x[1-2]\n")

# SLURM_TOPOLOGY_ADDR lists
put("addr_list", "cluster.addr", read(os.path.join(root, "tests/topology/tree/data/cluster.addr")))
put("addr_list", "labels-patterns.addr",
    "0: core.leaf1.n1 switch.switch.node\n1: core.leaf1.n2 switch.switch.node\n"
    "2: core..n3 switch.switch.node\n# comment\n\n3: core.leaf2.n4.dom switch.switch.node\n")
put("addr_list", "flat.addr", "a node\nb node\nb node\n")
put("addr_list", "ranges.addr", "s[1-2].n1\ns1.n2\n")

# ibnetdiscover -p: slices of the real avakas dump (two leaf switches with
# their hosts and uplinks; the first 80 port lines; DR lines and comments).
ib = read(os.path.join(fx, "ibnet/avakas/ibnetdiscover-p.txt")).decode().splitlines(True)
ports = [l for l in ib if not l.startswith("DR")]
leaves = []
for l in ports:
    if l.startswith("CA"):
        sw = l.split()[6] if False else l.split(" - ")[1].split()[3]
        if sw not in leaves:
            leaves.append(sw)
two = leaves[:2]
sel = [l for l in ports if any(g in l for g in two)]
put("ibnetdiscover", "avakas-2leaves.txt", "".join(sel))
put("ibnetdiscover", "avakas-head.txt", "".join(ports[:80]))
put("ibnetdiscover", "avakas-dr-mixed.txt", "# ibnetdiscover -p\n" + "".join(ib[:6]) + "\n" + "".join(sel[:12]))

# --dpt / plugstack arguments: byte 0 even = plugstack argument, odd = --dpt.
opts = ["comm=ring,fp16", "comm=nccl,ranks-per-gpu=2,threads=4,verbose=2",
        "topology=/etc/dpt/node.xml", "report=/tmp/r.json,tree=flat,bind=strict", "fp16=off,verbose",
        "tree=/etc/slurm/topology.conf", "", "comm=hierarchical,bind=none,fp16=yes,threads=0"]
for i, s in enumerate(opts):
    put("spank_opts", "opt%d" % i, bytes([1]) + s.encode())
put("spank_opts", "plugstack", bytes([0]) + b"comm=nccl")
put("spank_opts", "plugstack2", bytes([0]) + b"topology=/etc/dpt/mn1-node.xml")

# DPT_SPANK_PLAN: the encodings of tests/slurm (two nodes sharing a profile;
# three nodes with two profiles, one without GPU), with coordinates that fit.
p1 = b"dpt1;52ecc49dcf2be115;4;n1/0/0,n2/2/0;mlx5_0,mlx5_1/0+0000:1a:00.0+0+2+0-1,16-17/1+0000:1b:00.0+0+2+2-3"
p2 = b"dpt1;0123456789abcdef;3;a/0/0,b/1/1,c/2/0;/-1++-1+1+|mlx5_0/3+0000:3b:00.0+1+8+8-15"
put("spank_plan", "two-nodes-n0", bytes([0x08, 0x20, 1]) + p1)
put("spank_plan", "two-nodes-n1", bytes([0x01, 0x21, 2]) + p1)
put("spank_plan", "three-nodes-n2", bytes([0x0a, 0x10, 1]) + p2)
put("spank_plan", "three-nodes-n1", bytes([0x01, 0x10, 2]) + p2)

# hostfiles
put("hostfile", "hosts.local", read(os.path.join(root, "tests/runtime/hosts.local")))
put("hostfile", "mn1.hosts", "".join("mn1-%03d slots=8\n" % i for i in range(1, 17)))
put("hostfile", "mixed.hosts", "# comment\r\n  node-a\tslots=4 max_slots=8\r\n\nnode_b.example.org # c\nnode-c")

# IDX: the first records of the real Fashion-MNIST test set.  Byte 0: bit 0
# gzip, bit 1 skip_bad; then the image file, then the label file.
def idx(n, gz=0, skip=0, badlabel=False):
    im = gzip.decompress(read(os.path.join(fmnist, "t10k-images-idx3-ubyte.gz")))
    lb = gzip.decompress(read(os.path.join(fmnist, "t10k-labels-idx1-ubyte.gz")))
    images = struct.pack(">IIII", 0x803, n, 28, 28) + im[16:16 + n * 784]
    labels = bytearray(struct.pack(">II", 0x801, n) + lb[8:8 + n])
    if badlabel:
        labels[8 + n // 2] = 10
    return bytes([gz | skip << 1]) + images + bytes(labels)
if os.path.isdir(fmnist):
    put("idx", "fmnist-t10k-3", idx(3))
    put("idx", "fmnist-t10k-2-gz", idx(2, gz=1))
    put("idx", "fmnist-t10k-4-badlabel-skip", idx(4, skip=1, badlabel=True))
    put("idx", "fmnist-t10k-1-badlabel", idx(1, badlabel=True))

# CIFAR-10 batches (tests/fuzz/fuzz_cifar10.c): byte 0 bits 0-2 = 0-5 raw (the body is the
# batch file: a few records), 6 no file, 7 tile (2-byte record index, then bytes laid over a
# valid 10,000-record batch: 30 MB, so one seed only); bit 3 skip_bad, bits 5-7 = 7 train, 1 no options.
# No CIFAR-10 is installed here: records are made of Fashion-MNIST images
# (label byte, then 3 planes of 32x32: the 28x28 image centred, R=G=B).
def cifar_rec(label, img):
    plane = bytearray(1024)
    for y in range(28):
        plane[(y + 2) * 32 + 2:(y + 2) * 32 + 30] = img[y * 28:(y + 1) * 28]
    return bytes([label]) + bytes(plane) * 3
if os.path.isdir(fmnist):
    im = gzip.decompress(read(os.path.join(fmnist, "t10k-images-idx3-ubyte.gz")))
    lb = gzip.decompress(read(os.path.join(fmnist, "t10k-labels-idx1-ubyte.gz")))
    recs = [cifar_rec(lb[8 + i], im[16 + i * 784:16 + (i + 1) * 784]) for i in range(2)]
    put("cifar10", "raw-2records", bytes([0]) + recs[0] + recs[1])
    put("cifar10", "raw-1.5records", bytes([1]) + recs[0] + recs[1][:1536])
    put("cifar10", "raw-empty", bytes([2]))
    put("cifar10", "raw-badlabel", bytes([0]) + recs[0] + bytes([10]) + recs[1][1:])
    put("cifar10", "raw-badlabel-skipbad", bytes([8]) + bytes([255]) + recs[0][1:] + recs[1])
    put("cifar10", "raw-badlabel-no-opts", bytes([0x20 | 8]) + recs[0] + bytes([10]) + recs[1][1:])
    put("cifar10", "absent", bytes([6]))
    put("cifar10", "train-raw-1record", bytes([0xe0]) + recs[0])
    put("cifar10", "tile-2records", bytes([7, 0, 0]) + recs[0] + recs[1])

# Checkpoints (trainer/dpt_ckpt.h layout) for the harness's expectation:
# model "fuzz-model", 4 params, 2 state, 2 ranks x batch 8.  Byte 0: bit 0 =
# recompute the CRC, bit 1 = double buffering (4 pending values).
# Version 2 adds the loss scaler (float scale, int32 good steps, int64 skipped) to the header,
# version 3 the optimizer's name (char[16]; the harness's run expects sgd) and the length of the
# optimizer-state array (uint64; 0 = n_params).
def ckpt(pending=0, model=b"fuzz-model", step=100, crc_ok=True, v=3, scale=1024.0, optimizer=b"sgd"):
    meta = struct.pack("<QiiQiiQQQ96s", step, 1, 5, 1234, 2, 8, 4, 2, pending, model)
    if v >= 2:
        meta += struct.pack("<fiq", scale, 7, 3)
    if v >= 3:
        meta += struct.pack("<16sQ", optimizer, 0)
    body = b"DPTCKPT%d" % v + meta + struct.pack("<4f", 0.5, -1.0, 2.0, 3.25) + struct.pack("<2f", 1.0, 0.0)
    body += struct.pack("<4f", 0.1, 0.2, 0.3, 0.4) + (struct.pack("<4f", 9, 8, 7, 6) if pending else b"")
    crc = zlib.crc32(body) & 0xffffffff
    return body + struct.pack("<I", crc if crc_ok else crc ^ 1)
put("ckpt", "valid", bytes([0]) + ckpt())
put("ckpt", "valid-double-buffering", bytes([2]) + ckpt(pending=4))
put("ckpt", "other-model", bytes([0]) + ckpt(model=b"resnet50"))
put("ckpt", "bad-crc", bytes([0]) + ckpt(crc_ok=False))
put("ckpt", "truncated", bytes([1]) + ckpt()[:100])
put("ckpt", "valid-v1", bytes([0]) + ckpt(v=1))
put("ckpt", "valid-v2", bytes([0]) + ckpt(v=2))
put("ckpt", "other-optimizer", bytes([0]) + ckpt(optimizer=b"lars"))
put("ckpt", "optimizer-not-terminated", bytes([1]) + ckpt(optimizer=b"sgdsgdsgdsgdsgds"))
put("ckpt", "negative-loss-scale", bytes([1]) + ckpt(scale=-2.0))

# Job reports (dpt.report/1): the reports of real runs kept for the golden tests,
# one with a scaling section, and a compact one (no indentation) of the same run.
import json
rd = os.path.join(root, "tests/report/data")
for f in ("train-np1.json", "train-np2.json", "train-np2-fp16.json", "bench-np2.json"):
    put("report", f, read(os.path.join(rd, f)))
doc = json.loads(read(os.path.join(rd, "train-np2.json")))
doc["scaling"] = {"baseline": "train-np1.json", "baseline_ranks": 1, "baseline_images_per_s": 100.5,
                  "ranks": 2, "images_per_s": 180.0, "speedup": 1.79, "efficiency": 0.895,
                  "definition": "e = t / (t0 * n / n0)"}
put("report", "train-np2-scaling.json", json.dumps(doc, indent=1) + "\n")
put("report", "train-np1-compact.json", json.dumps(json.loads(read(os.path.join(rd, "train-np1.json"))),
                                                   separators=(",", ":")))

# NCCL_DEBUG=INFO output (dpt-report --nccl-log): rank 0's ring lines as NCCL's dumpLine prints
# them (" %3d" per rank) for fuzz_ncclring's 8-rank plan -- agreeing, reversed behind
# srun --label, in Slurm's node order, a split communicator beside a connection line, and a
# rank past int (strtol saturates; once read as rank -1: libFuzzer's crash in CI).
def ring(ch, ranks, prefix="n1:4711:4711 [0] "):
    return prefix + "NCCL INFO Channel %s :" % ch + "".join(" %3d" % r for r in ranks) + "\n"
put("ncclring", "agree.log", ring("00/02", range(8)) + ring("01/02", [1, 0, 3, 2, 5, 4, 7, 6]))
put("ncclring", "reversed-label.log", ring("00/02", [0, 7, 6, 5, 4, 3, 2, 1], "3: n2:4800:4800 [1] "))
put("ncclring", "differ.log", ring("00/01", [0, 1, 4, 5, 2, 3, 6, 7]))
put("ncclring", "split.log", "n1:4711:4790 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n" +
    ring("00/02", range(4)) + ring("00/02", range(8)))
put("ncclring", "rank-past-int.log", ring("00/01", [0, 1, 2, 3, 4, 5, 6]).rstrip("\n") + " 99999999999999999999\n")
PY
