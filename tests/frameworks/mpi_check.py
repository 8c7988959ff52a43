#!/usr/bin/env python3
"""An MPI program (mpi4py) as Horovod, ChainerMN or DeepSpeed's MPI discovery see ranks:
its rank is MPI_COMM_WORLD's.  Rank 0 writes OUT.json: per MPI rank its RANK (dpt's plan
rank), SLURM_PROCID and node, for mpi_verify() in frameworks_test.sh.

    mpi_check.py OUT.json

No rank sends before every rank has returned from MPI_Init: each one creates
OUT.json.<PMIx namespace>.up-<rank> beside OUT.json (the ranks share its directory) and waits
for all of them.  Open MPI 4.1.4 (Debian 12's) under `srun --mpi=pmix` on this cluster can let
ranks out of MPI_Init while another one still waits in its modex fence, before its PML has
registered its receive handlers; the first message that reaches it kills it (SIGSEGV, a call
through a NULL handler in btl_tcp's receive path).  Seen here in this program's gather, with
and without dpt's SPANK plugin; a core: rank 0 inside MPI_Init's first fence, the fragment an
ob1 MATCH from rank 5 with a gather's tag.  Both layouts of frameworks_test.sh, interleaved
in one run: 8 of 400 steps failed so (tasks 0 or 4, the gather's receivers), 0 of 400 with
this wait.  dpt's own programs wait so over PMIx (runtime/dpt_comm_init.c; docs/slurm.md,
Limits).
"""
import json
import os
import socket
import sys
import time

from mpi4py import MPI

UP_WAIT_S = 120  # every rank's MPI_Init returns within seconds; longer means a rank is gone

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
out = sys.argv[1]
prefix = "%s.%s.up-" % (os.path.basename(out), os.environ.get("PMIX_NAMESPACE", "job"))
where = os.path.dirname(os.path.abspath(out))
open(os.path.join(where, prefix + str(rank)), "w").close()
t0 = time.monotonic()
while True:
    up = [f for f in os.listdir(where) if f.startswith(prefix)]
    if len(up) >= size:
        break
    if time.monotonic() - t0 > UP_WAIT_S:
        sys.stderr.write("mpi_check: rank %d: after %d s only %d of %d ranks are out of MPI_Init "
                         "(%s/%s*): is a rank gone, or is %s not shared by all ranks?\n"
                         % (rank, UP_WAIT_S, len(up), size, where, prefix, where))
        comm.Abort(3)
    time.sleep(0.01)

rec = {
    "mpi_rank": rank,
    "mpi_size": size,
    "RANK": os.environ.get("RANK"),
    "SLURM_PROCID": os.environ.get("SLURM_PROCID"),
    "host": os.environ.get("SLURMD_NODENAME") or os.environ.get("DPT_NODE_NAME") or socket.gethostname(),
}
recs = comm.gather(rec, root=0)
if rank == 0:  # every rank has sent: all are past their wait, the markers can go
    for f in os.listdir(where):
        if f.startswith(prefix):
            os.unlink(os.path.join(where, f))
    with open(out, "w") as f:
        json.dump(recs, f)
