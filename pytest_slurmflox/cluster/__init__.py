"""Talking to a live cluster: the Slurm and Kubernetes clients, a check's jobs (submit, batch chains), the read-only
NodeSet view and the objects a check may judge, reconciling a pool's runtime (lifecycle), and the one capability
gate. It may import ``model`` and ``base``; never ``reporting``, ``judges``, ``harness`` or a substrate.
"""
