"""T10: worker safety and isolation, and native worker-pool placement.

Requirement: tasks run as the submitting user, never as root, and cannot read the worker's secrets (the Slurm or
Munge authentication key, slurmd's credential state); on Kubernetes the worker pods land only on the reserved,
labelled and tainted nodes, which no ordinary pod can use, and the infrastructure node carries neither label nor
taint.
"""

from __future__ import annotations

import pytest

from pytest_slurmflox.checks import node_pool_problems, placement_problems

from ._support import on_each, require, requirement

pytestmark = [pytest.mark.acceptance, pytest.mark.T10]


def test_tasks_run_as_the_user_not_root(submit, workers, login):
    me = login.run("id -u").check().stdout.strip()
    res = on_each(submit, workers, "id -u")
    uids = {line.split("|")[1] for line in res.stdout.splitlines() if "|" in line}
    requirement(res.ok and uids == {me} and me != "0", f"every task runs as uid {me}", res)


#: Where Slurm's authentication keys live: Munge's key, or auth/slurm's key and JWKS (Slurm 23.11+).
AUTH_KEYS = ("/etc/munge/munge.key", "/etc/slurm/slurm.key", "/etc/slurm/slurm.jwks")


def test_tasks_cannot_read_node_secrets(submit, workers):
    keys = " ".join(AUTH_KEYS)
    script = (
        f"for f in {keys}; do if [ -e $f ]; then if head -c1 $f >/dev/null 2>&1; then echo READABLE:$f; "
        "else echo denied:$f; fi; fi; done; "
        "spool=$(scontrol show config | sed -n 's/^SlurmdSpoolDir *= *//p'); "
        "for f in $spool/cred_state*; do if [ -f $f ] && head -c1 $f >/dev/null 2>&1; then echo READABLE:$f; fi; "
        "done; echo checked"
    )
    res = on_each(submit, workers, script)
    requirement(res.ok and res.stdout.count("checked") == len(workers), "the probe ran on every worker", res)
    requirement(
        res.stdout.count("denied:") >= len(workers), "each worker holds an authentication key, denied to tasks", res
    )
    requirement("READABLE" not in res.stdout, "no node secret is readable by a task", res)


def test_worker_pods_only_on_reserved_nodes(target, expect):
    require(target, "kubernetes")
    nodeset = target.kube.nodeset(target.spec.kubernetes.nodeset)
    problems = placement_problems(nodeset["spec"]["template"])
    requirement(not problems, "the NodeSet selects and tolerates the reserved pool", *problems)
    pods = [p for p in target.kube.pods() if any(c.get("name") == "slurmd" for c in p["spec"]["containers"])]
    hosts = [p["spec"].get("nodeName") for p in pods]
    problems = node_pool_problems(target.kube.nodes(), [h for h in hosts if h])
    requirement(
        bool(pods) and not problems, "worker pods only on labelled, tainted nodes; node1 has neither", *problems
    )
