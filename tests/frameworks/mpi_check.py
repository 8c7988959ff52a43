#!/usr/bin/env python3
"""An MPI program (mpi4py) as Horovod, ChainerMN or DeepSpeed's MPI discovery see ranks:
its rank is MPI_COMM_WORLD's.  Rank 0 writes OUT.json: per MPI rank its RANK (dpt's plan
rank), SLURM_PROCID and node, for mpi_verify() in frameworks_test.sh.

    mpi_check.py OUT.json
"""
import json
import os
import socket
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
rec = {
    "mpi_rank": comm.Get_rank(),
    "mpi_size": comm.Get_size(),
    "RANK": os.environ.get("RANK"),
    "SLURM_PROCID": os.environ.get("SLURM_PROCID"),
    "host": os.environ.get("SLURMD_NODENAME") or os.environ.get("DPT_NODE_NAME") or socket.gethostname(),
}
recs = comm.gather(rec, root=0)
if comm.Get_rank() == 0:
    with open(sys.argv[1], "w") as f:
        json.dump(recs, f)
