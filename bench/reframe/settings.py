"""ReFrame configuration of bench/reframe_bench.py: one system, one partition on Slurm's ``slurm`` scheduler.

ReFrame runs on the benchmark's host; ``sbatch``, ``sacct``, ``squeue``, ``scancel`` and ``scontrol`` on its PATH
are the benchmark's wrappers, which run the real commands on the cluster's login node over one multiplexed SSH
connection (bench/reframe_bench.py writes them). The partition comes from the target file (``SFX_RFM_PARTITION``).
The prefix (stage and output directories) is on the cluster's shared home, so the jobs see ReFrame's files.
"""

from __future__ import annotations

import os

PARTITION = os.environ.get("SFX_RFM_PARTITION", "all")

site_configuration = {
    "systems": [
        {
            "name": "slurmflox",
            "descr": "pytest-slurmflox local cluster, reached through the login node",
            "hostnames": [".*"],
            "partitions": [
                {
                    "name": "all",
                    "descr": f"Slurm partition {PARTITION}",
                    "scheduler": "slurm",
                    "launcher": "srun",
                    "access": [f"--partition={PARTITION}"],
                    "environs": ["builtin"],
                    # ReFrame's default (ReqNodeNotAvail) plus nothing: a job never satisfied is Slurm's to end
                    # (the afterok check submits with --kill-on-invalid-dep=yes)
                }
            ],
        }
    ],
    "environments": [{"name": "builtin", "cc": "mpicc", "cxx": "mpicxx", "ftn": ""}],
    "general": [{"check_search_recursive": False}],
}
