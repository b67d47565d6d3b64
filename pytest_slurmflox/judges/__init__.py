"""Pure judgements a check makes over what it read: the expected task and login environments, Slurm's own names and
scopes in a task, host lists, Kubernetes object checks, local accounts, where a cluster keeps its keys, time limits,
a customer's workload corpus. They may import ``model`` and ``base`` only.
"""
