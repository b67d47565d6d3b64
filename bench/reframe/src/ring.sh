#!/bin/bash
# One task per worker (suites/test_t09_storage_login.py's ring): task i writes a file in the job's (shared) working
# directory, then reads the file of task i-1, written on another worker, waiting up to 30 s for it.
me=$SLURM_PROCID
prev=$(( (me + SLURM_NTASKS - 1) % SLURM_NTASKS ))
echo "written-on-$SLURMD_NODENAME-$SLURM_JOB_ID" > "shared-$me.txt" && echo "wrote $me"
f="shared-$prev.txt"
for _ in $(seq 120); do [ -s "$f" ] && break; sleep 0.25; done
echo "read $me $SLURMD_NODENAME $(cat "$f") $(stat -c %u:%g "$f") $(id -u):$(id -g)"
