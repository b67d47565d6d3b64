"""Sign-off profiles (issue 26): a healthy cluster of each kind can be SIGNED OFF, and nothing else is.

The verdict logic of pytest_slurmflox/reporting/signoff.py ``decide`` with each profile of
pytest_slurmflox/reporting/profiles.py,
over checks built here (pure code; the live proof is tests/integration/test_signoff_local.py).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_slurmflox.model.groups import DESTRUCTIVE_GROUPS, GROUPS
from pytest_slurmflox.model.target import parse_target
from pytest_slurmflox.reporting.profiles import NOT_APPLICABLE, PROFILES, UNKNOWN, profile_of, readme_table
from pytest_slurmflox.reporting.report import mark_not_applicable
from pytest_slurmflox.reporting.signoff import FAIL, NOT_RUN, NOT_RUN_PREFIX, PASS, SIGNED_OFF, SKIP, Check, decide

ROOT = Path(__file__).resolve().parents[2]
KUBE_SKIP = "missing capability kubernetes: target 'x' (local) has no Kubernetes API"
LOGIN = {"host": "h", "user": "u", "key": "/k"}
SERVICES = {
    "directory": {"uri": "ldap://ldap.example/", "base": "dc=example", "user": "u", "groups": ["hpc"]},
    "accounting": {"account": "hpc"},
    "rest": {"url": "https://rest.example:6820"},
}


def _check(group: str, verdict: str = PASS, name: str = "t", reason: str = "") -> Check:
    return Check(nodeid=f"suites/test_{group}.py::{name}", group=group, verdict=verdict, reason=reason)


def _healthy(profile, *extra: Check) -> list[Check]:
    """One PASS per group the profile requires, plus ``extra``."""
    return [_check(g) for g in profile.required()] + list(extra)


def _local():
    return PROFILES["local"]


# ------------------------------------------------------------------------------------------------ local
def test_healthy_local_run_signs_off_naming_what_did_not_apply():
    kube_checks = [_check("T1", SKIP, "shim", KUBE_SKIP), _check("T4", SKIP, "no_pod", KUBE_SKIP)]
    so = decide(_healthy(_local(), *kube_checks), requested=True, profile=_local())
    assert so.verdict == SIGNED_OFF and so.reasons == (), so.reasons
    assert so.headline == "SIGNED OFF (profile local; not applicable: T1, T4: 1 check)"
    groups = {g.group: g for g in so.groups}
    assert groups["T1"].verdict == NOT_APPLICABLE and not groups["T1"].required
    # T4's applicable check passed; its Kubernetes check is counted as not applicable, never as a pass
    assert groups["T4"].verdict == PASS and groups["T4"].counts[PASS] == 1 and groups["T4"].counts[NOT_APPLICABLE] == 1
    for check in kube_checks:
        assert check.verdict == NOT_APPLICABLE and check.reason.startswith("not applicable (profile local")


def test_local_group_the_profile_excludes_is_not_applicable_even_when_not_collected():
    so = decide(_healthy(_local()), requested=True, profile=_local())
    t1 = next(g for g in so.groups if g.group == "T1")
    assert so.signed and t1.verdict == NOT_APPLICABLE and "needs Kubernetes nodes" in t1.reasons[0]


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (_check("T8", FAIL, "cpu", "requirement not met: confined"), "required group T8 is FAIL"),
        (_check("T6", SKIP, "mpi", "missing capability mpi-probe: no mpicc"), "required group T6 is SKIP"),
        (_check("T8", NOT_RUN, "mem", NOT_RUN_PREFIX + "the target file does not declare x"), "T8 is NOT RUN"),
        (_check("T1", FAIL, "shim", "requirement not met: declared capability kubernetes answers"), "T1 FAILED"),
    ],
)
def test_local_any_fail_applicable_skip_or_not_run_keeps_it_not_signed_off(bad, why):
    checks = [c for c in _healthy(_local()) if c.group != bad.group] + [bad]
    so = decide(checks, requested=True, profile=_local())
    assert not so.signed and any(why in r for r in so.reasons), so.reasons
    assert so.headline.startswith("NOT SIGNED OFF (profile local; ")


def test_local_required_group_that_did_not_run_is_not_run_not_not_applicable():
    checks = [c for c in _healthy(_local()) if c.group != "T4"]
    so = decide(checks, requested=True, profile=_local())
    t4 = next(g for g in so.groups if g.group == "T4")
    assert not so.signed and t4.verdict == NOT_RUN and t4.required


def test_required_group_with_only_not_applicable_checks_blocks():
    """-k left only T4's Kubernetes check: the group showed nothing, and the profile did not excuse it."""
    checks = [c for c in _healthy(_local()) if c.group != "T4"] + [_check("T4", SKIP, "no_pod", KUBE_SKIP)]
    so = decide(checks, requested=True, profile=_local())
    assert not so.signed and any("required group T4 is NOT APPLICABLE" in r for r in so.reasons), so.reasons


# ------------------------------------------------------------------------------------------------ qemu, unknown
@pytest.mark.parametrize("profile", [PROFILES["qemu"], UNKNOWN])
def test_qemu_and_unknown_targets_require_everything(profile):
    own = {"TF"} if profile.name == "qemu" else set()  # qemu: no throwaway worker (profiles.py)
    assert profile.required() == tuple(
        g for g in GROUPS if g not in DESTRUCTIVE_GROUPS and g not in {"TW", "TB", "site", *own}
    )
    so = decide(_healthy(profile, _check("T1", SKIP, "shim", KUBE_SKIP)), requested=True, profile=profile)
    assert not so.signed and any("required group T1 is SKIP" in r for r in so.reasons), so.reasons
    assert decide(_healthy(profile), requested=True, profile=profile).signed


def test_qemu_target_file_has_the_qemu_profile_with_its_undeclared_services():
    doc = {"substrate": "qemu", "login": LOGIN, "admin": {"user": "root"}}
    profile = profile_of(parse_target(doc))
    assert profile.name == "qemu" and set(profile.groups) == {"TF", "TD", "TA", "TR"} and "admin" not in profile.absent


# ------------------------------------------------------------------------------------------------ customers
def test_customer_kubernetes_target_excludes_tf_and_what_it_does_not_declare():
    doc = {"login": LOGIN, "kubernetes": {"namespace": "slurm", "nodeset": "compute"}, **SERVICES}
    profile = profile_of(parse_target(doc))
    assert profile.name == "kubernetes" and set(profile.groups) == {"TF"}
    assert set(profile.absent) == {"isolated-worker", "admin"}  # no admin login declared
    assert profile.capability(KUBE_SKIP) is None  # Kubernetes is declared: its SKIP stays a SKIP
    so = decide(_healthy(profile, _check("T4", SKIP, "no_pod", KUBE_SKIP)), requested=True, profile=profile)
    assert not so.signed
    admin_skip = _check("TA", SKIP, "unassociated", "missing capability admin: the target file names no admin login")
    so = decide(_healthy(profile, admin_skip), requested=True, profile=profile)
    assert so.signed and so.headline == "SIGNED OFF (profile kubernetes; not applicable: TF, TA: 1 check)"


def test_customer_slurm_target_without_kubernetes():
    doc = {"login": LOGIN, "admin": {"user": "root"}}
    profile = profile_of(parse_target(doc))
    assert profile.name == "existing"
    assert set(profile.groups) == {"T1", "TF", "TD", "TA", "TR"} and "admin" not in profile.absent
    assert profile.required() == ("T2", "T3", "T4", "T5", "T6", "T7", "T8", "T9", "T10", "T11", "TP", "TI")
    skip_pool = _check("T11", SKIP, "pool", "missing capability worker-pool: nothing on this target lists the workers")
    so = decide(_healthy(profile, skip_pool), requested=True, profile=profile)
    assert so.signed, so.reasons


# ------------------------------------------------------------------------------------------------ report, README
def test_a_skip_report_is_rewritten_as_not_applicable_for_junit_terminal_and_html():
    report = SimpleNamespace(skipped=True, longrepr=("suites/test_t04.py", 70, "Skipped: " + KUBE_SKIP))
    mark_not_applicable(report, _local())
    assert report.longrepr[2].startswith("Skipped: not applicable (profile local: kubernetes, ")
    assert report.longrepr[2].endswith(KUBE_SKIP)
    other = SimpleNamespace(skipped=True, longrepr=("x", 1, "Skipped: missing capability taskset: none"))
    mark_not_applicable(other, _local())
    assert other.longrepr[2] == "Skipped: missing capability taskset: none"


def test_the_readme_profile_table_is_the_codes_table():
    readme = (ROOT / "README.md").read_text()
    assert readme_table() in readme, "README 'Sign-off profiles': paste profiles.readme_table()"


# ------------------------------------------------------------------------------------------------ reachability
#: Each capability gate of the suites: (group, the capabilities any one of which lets its checks run). A gate with
#: alternatives is a check with a fallback: the task-environment groups judge the workers against the runtime record
#: (the local provider's, or a declared ``runtime`` section: capability runtime-record) or else what the Flox shim
#: gave slurmd (kubernetes), suites/_records.py ``runtimes``; T2's store check against the local Nix store
#: (nix-store-record), a declared runtime's NAR hash or the Flox lock (runtime-record, kubernetes).
#: test_every_require_in_the_suites_is_a_gate_here keeps it equal to the suites' ``require(target, ...)`` calls.
GATES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("T1", ("kubernetes",)),
    ("T1", ("flox-shim",)),
    ("T1", ("node-admin", "kubernetes")),  # else the declared node debug pod (kubernetes.node_debug_image)
    ("T2", ("runtime-record", "kubernetes")),
    ("T2", ("nix-store-record", "runtime-record", "kubernetes")),
    ("T2", ("kubernetes",)),
    ("T2", ("worker-pool",)),
    ("T3", ("runtime-record", "kubernetes")),
    ("T4", ("kubernetes",)),
    ("T10", ("admin",)),
    ("T10", ("kubernetes",)),
    ("T11", ("worker-pool",)),
    ("TA", ("accounting",)),
    ("TA", ("admin",)),
    ("TD", ("directory",)),
    ("TD", ("admin",)),
    ("TF", ("isolated-worker",)),
    ("TP", ("runtime-record", "kubernetes")),
    ("TR", ("rest",)),
    ("TR", ("runtime-record", "kubernetes")),
)
RUNTIME = {
    "realized_path": "/nix/store/0000000000000000000000000000000a-hpc-17",
    "path": ["/nix/store/0000000000000000000000000000000a-hpc-17/bin"],
    "exports": {"HPC_HOME": "/nix/store/0000000000000000000000000000000a-hpc-17"},
    "profile_dir": "/run/flox-task-profile/current",
    "task_prolog": "/etc/slurm/flox-task-prolog/task-prolog.sh",
}


def _capabilities(spec, pool_class) -> set[str]:
    """What ``connection.connect`` finds on a healthy cluster of this kind: every probe that asks the cluster
    answers (Slurm, the declared admin login and services, Kubernetes with the Flox RuntimeClass when declared),
    and the pool's abilities and the declared runtime as connect derives them (its own helpers, on a bare pool)."""
    from pytest_slurmflox.harness.connection import _probe_pool, probe_runtime

    caps = {"slurm", *(s for s in ("directory", "accounting", "rest") if spec.declares(s))}
    caps |= {"admin"} if spec.admin is not None else set()
    caps |= {"kubernetes", "flox-shim"} if spec.kubernetes is not None else set()
    missing: dict[str, str] = {}
    _probe_pool(object.__new__(pool_class) if pool_class else None, caps, missing)
    probe_runtime(spec, caps, missing)
    return caps


def _healthy_run(spec, pool_class):
    """A healthy cluster's run: one PASS per required group, and a SKIP naming the first capability of every gate
    this kind cannot open (the reason the check gives). The verdict ``decide`` reaches over it."""
    profile = profile_of(spec)
    caps = _capabilities(spec, pool_class)
    skips = [
        _check(group, SKIP, f"gate{i}", f"missing capability {alts[0]}: this kind of target lacks it")
        for i, (group, alts) in enumerate(GATES)
        if not caps & set(alts) and group in profile.required()
    ]
    return decide(_healthy(profile, *skips), requested=True, profile=profile), skips


def _pools():
    from pytest_slurmflox.cluster.nodeset import NodeSetView
    from pytest_slurmflox.substrates.local.pool import LocalWorkerPool
    from pytest_slurmflox.substrates.qemu.pool import NodeSetPool

    return {"local": LocalWorkerPool, "qemu": NodeSetPool, "kubernetes": NodeSetView, "existing": None}


@pytest.mark.parametrize(
    ("kind", "doc"),
    [
        ("local", {"substrate": "local", "login": LOGIN, "admin": {"user": "root"}, **SERVICES}),
        (
            "qemu",
            {
                "substrate": "qemu",
                "login": LOGIN,
                "admin": {"user": "root"},
                "kubernetes": {"nodeset": "c"},
                **SERVICES,
            },
        ),
        (
            "kubernetes",
            {"login": LOGIN, "kubernetes": {"namespace": "slurm", "nodeset": "compute", "node_debug_image": "r:1"}},
        ),
        ("kubernetes", {"login": LOGIN, "admin": {"user": "root"}, "kubernetes": {"nodeset": "c"}, **SERVICES}),
        ("existing", {"login": LOGIN, "admin": {"user": "root"}, "runtime": RUNTIME, **SERVICES}),
        ("existing", {"login": LOGIN, "runtime": RUNTIME}),
    ],
)
def test_a_healthy_cluster_of_every_kind_can_be_signed_off(kind, doc):
    """Reasoned from the capabilities each kind declares: every gate it cannot open is not applicable there."""
    spec = parse_target(doc)
    assert profile_of(spec).name == kind
    so, skips = _healthy_run(spec, _pools()[kind])
    assert so.signed, (so.reasons, [c.reason for c in skips])
    assert all(c.verdict == NOT_APPLICABLE for c in skips), [(c.group, c.reason) for c in skips]


def test_an_existing_cluster_without_a_declared_runtime_cannot_be_signed_off_naming_it():
    """Without a ``runtime`` section nothing shows what the workers realized: T2, T3, TP and TR stay SKIP."""
    spec = parse_target({"login": LOGIN, "admin": {"user": "root"}, **SERVICES})
    so, _ = _healthy_run(spec, None)
    assert not so.signed
    blocked = {r.split(" is ")[0].removeprefix("required group ") for r in so.reasons}
    assert blocked == {"T2", "T3", "TP", "TR"}, so.reasons
    assert all("SKIP" in r for r in so.reasons), so.reasons


def test_every_require_in_the_suites_is_a_gate_here():
    """Each ``require(target, "<capability>")`` of a suite module is one of :data:`GATES` for the module's group
    (a destructive group's gates aside: they never weigh in a sign-off)."""
    import ast

    from pytest_slurmflox.model.groups import GROUPS

    gated = {(group, cap) for group, alts in GATES for cap in alts}
    for path in sorted((ROOT / "suites").glob("test_*.py")):
        tree = ast.parse(path.read_text())
        groups = (
            {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr in GROUPS}
            - set(DESTRUCTIVE_GROUPS)
            - {"site"}
        )  # the site's group: a word suites use for other things too
        for call in ast.walk(tree):
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "require" and len(call.args) == 2:
                cap = call.args[1].value if isinstance(call.args[1], ast.Constant) else None
                for group in groups:
                    assert (group, cap) in gated, f"{path.name}: require(target, {cap!r}) is no gate of {group}"


def test_tb_is_required_only_where_the_target_declares_expect_performance():
    """Undeclared, TB is not required (a run without it signs off) but its FAIL still blocks; declared, a run
    without TB does not sign off."""
    doc = {"login": LOGIN, "admin": {"user": "root"}}
    plain = profile_of(parse_target(doc))
    assert "TB" not in plain.required()
    assert decide(_healthy(plain), requested=True, profile=plain).signed
    assert not decide(_healthy(plain, _check("TB", FAIL, "triad")), requested=True, profile=plain).signed
    performance = {"memory_triad": {"reference": 5000, "unit": "MB/s", "lower": "20%"}}
    declared = profile_of(parse_target({**doc, "expect": {"performance": performance}}))
    assert "TB" in declared.required()
    so = decide([c for c in _healthy(declared) if c.group != "TB"], requested=True, profile=declared)
    assert not so.signed and any("required group TB" in r for r in so.reasons), so.reasons
    assert decide(_healthy(declared), requested=True, profile=declared).signed
