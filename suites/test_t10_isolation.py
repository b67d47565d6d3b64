"""T10: worker safety and isolation, and native worker-pool placement.

Requirement: tasks run as the submitting user, never as root, and cannot read the worker's secrets (the Slurm or
Munge authentication key, slurmd's credential state, the pod's service-account token, FloxHub credentials) nor see
the pod's KUBERNETES_* service variables or any FloxHub token variable; on Kubernetes the worker pods land only on
the reserved, labelled and tainted nodes, which no ordinary pod can use, and the infrastructure node carries
neither label nor taint.

What every task trusts (the task profile, the TaskProlog, the realized runtime and every directory and symlink on
their way) belongs to root and no one else may write it: the expectation is the reference's contract and POSIX's
rule for who may replace a directory entry (pytest_slurmflox/judges/trustpaths.py).

Where the expectations come from: the submitting user's uid is read at the login endpoint (not on a worker); Slurm's
key locations from the cluster's own configuration (``scontrol show config`` at the login endpoint, munged's
arguments on the worker: pytest_slurmflox/judges/authkeys.py), the pod and FloxHub credential locations and forbidden
variable names fixed here (the places Kubernetes and Flox keep them); the placement rules from the target file's
declared worker label and taint (the reference's own on a target a substrate wrote).
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from pytest_slurmflox.base.run import command_line, quoted
from pytest_slurmflox.cluster.gates import require
from pytest_slurmflox.cluster.kubeobjects import worker_pods
from pytest_slurmflox.judges.authkeys import key_places, key_problems, parse_show_config, probe_script, uses_munge
from pytest_slurmflox.judges.kubechecks import (
    REFERENCE_PLACEMENT,
    Placement,
    cohort_problems,
    node_pool_problems,
    placement_problems,
)
from pytest_slurmflox.judges.slurmenv import SlurmFacts, consistency_problems, redirection_problems
from pytest_slurmflox.judges.trustpaths import probe_script as trust_probe
from pytest_slurmflox.judges.trustpaths import trust_problems
from pytest_slurmflox.model.declared import PLACEMENT

from ._capability import EveryWorker, declared, declared_nodeset, requirement
from ._cohort import across, task_identities
from ._marks import Mark, every_worker_step, per_node
from ._profile import profile_dir
from ._records import ENVIRON_PROBE, environs

pytestmark = [pytest.mark.acceptance, pytest.mark.T10]


def test_tasks_run_as_the_user_not_root(request, submit, workers, login):
    me = login.run("id -u").check().stdout.strip()
    res = task_identities(request, submit, workers)  # the step TI's identity check judges too
    seen = per_node(res)
    problems = ["the login user itself is root"] if me == "0" else []
    for node in workers:
        uids = [uid for line in seen.get(node, []) for uid in re.findall(r"^uid=(\d+)", line)]
        if uids != [me]:
            problems.append(f"{node}: a task there runs as uid {', '.join(uids)}" if uids else f"{node}: no answer")
    requirement(res.ok and not problems, f"every task runs as uid {me}, not root: " + "; ".join(problems), res)


@pytest.mark.per_worker
def test_tasks_cannot_read_node_secrets(submit, workers, target, login):
    """Out of a task's reach is what counts: EACCES on the key, or ENOENT because its directory cannot even be
    entered, is the desired result. The places are the cluster's own (``scontrol show config`` at the
    login endpoint, munged's arguments on each worker, ``%n``/``%h`` resolved per worker), probed on
    every worker in one step. That each worker holds a key is checked from the admin side when the target has one
    (root's task on each worker), never inferred from what the user's task can see."""
    shown = login.run("scontrol show config")
    config = parse_show_config(shown.stdout)
    requirement(shown.ok and bool(config.get("SlurmdSpoolDir")), "the login endpoint shows Slurm's config", shown)
    places, munge = key_places(config), uses_munge(config)
    step = across(submit, workers, probe_script(places, munge))
    problems = step.wrong(lambda node, lines: "; ".join(key_problems(node, lines, places, munge)) or None)
    requirement(
        not problems,
        "no node secret named by the configuration is readable by a task: " + "; ".join(problems),
        shown,
        step.result,
        workers=problems.workers,
    )
    if target.spec.admin is None:
        return  # the task side is the requirement; presence needs the admin side, which this target declares not
    require(target, "admin")  # declared but not working: FAIL naming it, never a silent early PASS
    auth = [p for p in places if p.auth]
    present = across(SimpleNamespace(srun=_admin_srun(target, submit)), workers, probe_script(auth, munge))

    def holds(node: str, lines: list[str]) -> str | None:
        return None if any(line.startswith("READABLE|") for line in lines) else "root sees no authentication key"

    missing = present.wrong(holds)
    requirement(
        not missing,
        "each worker holds an authentication key (seen by root): " + "; ".join(missing),
        present.result,
        workers=missing.workers,
    )


def test_what_every_task_trusts_belongs_to_root_on_every_worker(submit, workers, target):
    """On every worker, in one read-only step as the task's user: the task profile (the declared
    ``runtime.profile_dir``, else the reference's), the TaskProlog (the declared ``runtime.task_prolog``, else the
    one that worker's slurm.conf names) and the realized runtime (the declared ``runtime.realized_path``, else the
    one the worker's profile names), every directory and symlink on their way from ``/`` and the entries of each,
    are owned by root and writable by no one else (mode bits; ACL entries where ``getfacl`` is there). The
    expectation is the reference's contract and POSIX's rule for who may replace an entry
    (pytest_slurmflox/judges/trustpaths.py), never a worker's word: a FAIL names the worker, the path, its owner and
    its mode. A path the target declared must be there; an undeclared one that is absent is T3's and T2's to judge."""
    runtime = target.spec.runtime
    paths = {
        "task profile": profile_dir(target),
        "TaskProlog": runtime.task_prolog if runtime is not None else "",
        "realized runtime": runtime.realized_path if runtime is not None else "",
    }
    declared = frozenset(label for label, path in paths.items() if path and runtime is not None)
    step = across(submit, workers, trust_probe(paths, profile_dir(target)))
    problems = step.wrong(lambda _node, lines: trust_problems(lines, required=declared))
    requirement(
        not problems,
        f"on each of the {len(workers)} workers the task profile, the TaskProlog and the realized runtime, and every "
        "directory and symlink on their way, are root's and writable by no one else: " + "; ".join(problems),
        step.result,
    )


def _admin_srun(target, submit):
    """``srun`` as the admin (root) from the login endpoint, named like the run's other jobs."""

    def srun(args: str, command: str, *, timeout: float = 180.0):
        line = command_line("srun", ["-J", submit.name + "-admin", *submit.placement]) + f" {args} {command}"
        return target.admin.run(line, timeout=timeout)

    return srun


#: Credentials a worker pod may hold that must never reach a task: the Kubernetes service-account token and
#: FloxHub's credentials (flox keeps its token in flox.toml / the FLOX_FLOXHUB_TOKEN variable).
POD_SECRETS = (
    "/var/run/secrets/kubernetes.io/serviceaccount/token",
    "/run/secrets/kubernetes.io/serviceaccount/token",
    "/root/.config/flox/flox.toml",
    "/etc/flox/flox.toml",
)
#: Variable names that carry cluster or FloxHub credentials or the pod's service discovery.
FORBIDDEN_PREFIXES = ("KUBERNETES_", "FLOXHUB_", "FLOX_FLOXHUB_")
FORBIDDEN_WORDS = ("TOKEN",)


@pytest.mark.per_worker
def test_tasks_see_no_pod_or_floxhub_credentials(submit, workers):
    """One step on every worker, ``--export=NONE`` (whatever the task has, the worker side gave it): no credential
    file it can read, and no credential variable in its environment block."""
    mark = Mark.new()
    files = " ".join(POD_SECRETS)
    script = (  # absolute paths: under --export=NONE the task has no PATH
        f"for f in {files}; do if [ -e $f ] && /usr/bin/head -c1 $f >/dev/null 2>&1; then "
        f"{mark.echo('READABLE $SLURMD_NODENAME: $f')}; fi; done; {mark.echo('checked')}; {ENVIRON_PROBE}"
    )
    env = every_worker_step(submit, workers, "--export=NONE", "/bin/bash -c " + quoted("%s", script), mark)
    own = mark.lines(env.stdout)
    requirement(env.ok and own.count("checked") == len(workers), "the probe ran on every worker", env)
    readable = [line.removeprefix("READABLE ") for line in own if line.startswith("READABLE ")]
    requirement(not readable, f"no pod or FloxHub credential file is readable by a task: {readable}", env)
    found = environs(env.stdout)
    facts = SlurmFacts.read(submit.login)
    odd = consistency_problems(
        {node: found[node] for node in workers if node in found}, one_step=True, step_nodes=len(workers)
    )
    every = EveryWorker(f"no credential reaches a task, on each of the {len(workers)} workers")
    for node in workers:
        names = sorted(found.get(node, {}))
        if not every.holds(node, bool(names), f"{node}: a task showed its environment"):
            continue
        bad = [n for n in names if n.startswith(FORBIDDEN_PREFIXES) or any(w in n for w in FORBIDDEN_WORDS)]
        every.holds(node, not bad, f"{node}: no credential or KUBERNETES_* variable reaches a task (found {bad})")
        # the names Slurm sets are no blind spot: no redirection (SLURM_CONF, TMPDIR), the same on every worker
        foreign = redirection_problems(found[node], node, facts, submit_dir=None, tmpdir=None) + odd.get(node, [])
        every.holds(
            node, not foreign, f"{node}: every name Slurm sets in a task has Slurm's value ({'; '.join(foreign)})"
        )
    every.settle(env)


def test_worker_pods_only_on_reserved_nodes(target, expect):
    """Judged on the worker pods as the API holds them, after the operator built them and admission completed
    them (kubechecks.placement_problems: the operator's toleration and the RuntimeClass's node selector are on the
    pods only, never in the NodeSet's template); each pod that misses one is named with its node."""
    require(target, "kubernetes")
    declared(target, *PLACEMENT)  # a customer's pool has its own label and taint: NOT RUN until declared
    placement = _placement(target)
    declared_nodeset(target)  # declared but absent: FAIL naming it
    pods = worker_pods(target.kube.pods(), target.spec.kubernetes.nodeset)  # its running pods only
    requirement(bool(pods), f"the NodeSet {target.spec.kubernetes.nodeset} runs worker pods", "none is Running")
    problems = cohort_problems(pods, lambda pod: placement_problems(pod, placement))
    requirement(not problems, f"every worker pod selects {placement.label} and tolerates {placement.taint}", *problems)
    hosts = [p["spec"].get("nodeName") for p in pods]
    problems = node_pool_problems(target.kube.nodes(), [h for h in hosts if h], placement)
    requirement(
        not problems,
        f"worker pods only on nodes labelled {placement.label} and tainted {placement.taint}; control-plane nodes "
        "carry neither",
        *problems,
    )


def _placement(target) -> Placement:
    """The declared label and taint; a substrate's target that names none is the reference's own pool."""
    kube = target.spec.kubernetes
    if not (kube.worker_label and kube.worker_taint):
        return REFERENCE_PLACEMENT  # declared() let it through: a substrate's target (the reference's pool)
    try:
        return Placement.parse(kube.worker_label, kube.worker_taint)
    except ValueError as e:
        requirement(False, "the declared worker label and taint are well formed", str(e))
        raise
