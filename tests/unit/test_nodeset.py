"""The worker-pool contract is enforced, and a customer target reads its NodeSet without substrate code.

The method lists checked here are not taken from ``pool.py`` alone: they are what the consumers really call
(``self.pool.<name>`` in lifecycle.py, ``pool.<name>``/``target.pool.<name>`` in the suites and the report), read
from their source with ``ast``, so a consumer that starts calling a new method fails this test until the contract
and every pool have it.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_slurmflox
from pytest_slurmflox.cluster.nodeset import NodeSetView
from pytest_slurmflox.model.abilities import ABILITIES
from pytest_slurmflox.model.pool import POOL_METHODS, VIEW_METHODS, WorkerPool, WorkerView
from pytest_slurmflox.substrates.local.pool import LocalWorkerPool
from pytest_slurmflox.substrates.qemu.pool import NodeSetPool

PKG = Path(pytest_slurmflox.__file__).parent
ROOT = PKG.parent


def called_on(path: Path, *receivers: str) -> set[str]:
    """Attribute names called on ``receivers`` (dotted, e.g. ``self.pool``) in one source file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        if call and ast.unparse(node.func.value) in receivers:
            found.add(node.func.attr)
    return found


def test_the_reconciler_calls_only_methods_of_the_pool_contract():
    used = called_on(PKG / "cluster/lifecycle.py", "self.pool")
    assert used, "lifecycle.py no longer calls self.pool: this test reads the wrong thing"
    assert used <= POOL_METHODS, f"the Reconciler calls {sorted(used - POOL_METHODS)} outside the WorkerPool contract"


def test_read_only_consumers_call_only_methods_of_the_view():
    """A suite may call the view's methods; a pool's methods only where the module requires ``worker-owner``; an
    ability's methods (abilities.py: isolated workers, service restart, node admin, runtime record, directory
    changes) only where it requires that capability or asks ``why_missing`` for it first. Anything else would
    crash (not SKIP) on a customer's read-only NodeSet view."""
    used: set[str] = set()
    for path in [*sorted((ROOT / "suites").glob("*.py")), PKG / "reporting/report.py"]:
        calls = called_on(path, "target.pool", "self.pool", "pool")
        source = path.read_text()
        allowed = set(VIEW_METHODS)
        if 'require(target, "worker-owner")' in source:
            allowed |= POOL_METHODS
        for capability, (ability, _) in ABILITIES.items():
            if f'require(target, "{capability}")' in source or f'why_missing("{capability}")' in source:
                allowed |= set(ability.__abstractmethods__)
        assert calls <= allowed, f"{path.name} calls {sorted(calls - allowed)} that a customer's read-only view lacks"
        used |= calls
    assert used, "no suite reads the pool any more: this test reads the wrong thing"


def test_node_admin_is_a_capability_only_where_the_pool_reaches_the_nodes():
    """T1's node containerd check needs root on the Kubernetes nodes: our qemu pool has it; a customer's read-only
    view and the local pool (no Kubernetes nodes) do not, so their targets report node-admin missing, with why."""
    from pytest_slurmflox.harness.connection import _probe_pool

    assert callable(getattr(NodeSetPool, "containerd_config", None))
    assert not hasattr(NodeSetView, "containerd_config") and not hasattr(LocalWorkerPool, "containerd_config")
    for pool in (None, object.__new__(LocalWorkerPool)):
        caps: set[str] = set()
        missing: dict[str, str] = {}
        _probe_pool(pool, caps, missing)
        assert "node-admin" not in caps and missing["node-admin"], (pool, missing)
    caps, missing = set(), {}
    _probe_pool(object.__new__(NodeSetPool), caps, missing)
    assert "node-admin" in caps and "node-admin" not in missing


@pytest.mark.parametrize("cls", [NodeSetPool, LocalWorkerPool], ids=lambda c: c.__name__)
def test_every_pool_implements_the_full_contract(cls):
    assert issubclass(cls, WorkerPool)
    assert not inspect.isabstract(cls), f"{cls.__name__} leaves {sorted(cls.__abstractmethods__)} unimplemented"
    for name in POOL_METHODS:
        method = getattr(cls, name)
        assert not getattr(method, "__isabstractmethod__", False), f"{cls.__name__}.{name} is still abstract"
    assert {"apply", "revision_for", "restart", "profile_revision"} <= POOL_METHODS  # the four once missing


@pytest.mark.parametrize("missing", sorted(POOL_METHODS))
def test_a_pool_missing_any_method_fails_at_construction(missing):
    body = {name: (lambda self, *a: None) for name in POOL_METHODS if name != missing}
    incomplete = type("Incomplete", (WorkerPool,), body)
    with pytest.raises(TypeError, match=missing):
        incomplete()


def test_the_customer_view_is_read_only_and_not_a_pool():
    assert issubclass(NodeSetView, WorkerView) and not inspect.isabstract(NodeSetView)
    assert not issubclass(NodeSetView, WorkerPool)
    assert not any(hasattr(NodeSetView, m) for m in POOL_METHODS - VIEW_METHODS)


def test_a_customer_target_gets_the_view_and_imports_no_substrate_code(tmp_path):
    """Run in a fresh interpreter, so modules other tests imported cannot hide an import of substrate code."""
    code = """
import sys, types
from pytest_slurmflox.harness.fixtures import _pool_factory
from pytest_slurmflox.model.abilities import ABILITIES
from pytest_slurmflox.cluster.nodeset import NodeSetView
spec = types.SimpleNamespace(substrate="kubernetes", workdir=None, kubernetes=types.SimpleNamespace(nodeset="ns1"))
kube = types.SimpleNamespace(namespace="slurm")
pool = _pool_factory(None)(spec, kube)
assert type(pool) is NodeSetView, type(pool)
assert pool.kube is kube and pool.nodeset_name == "ns1"
loaded = sorted(m for m in sys.modules if m.startswith("pytest_slurmflox.substrates"))
assert not loaded, loaded
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr


def test_the_view_reads_workers_and_profiles_from_kubernetes_json():
    rev = "sha256:" + "ab" * 32

    class Kube:
        namespace = "slurm"

        def nodeset(self, name):
            meta = {"annotations": {"slinky.local/runtime-revision": rev}}
            return {"spec": {"replicas": 1, "template": {"metadata": meta}}}

        def pods(self):
            return [
                {
                    "metadata": {"name": "w-0", "ownerReferences": [{"kind": "NodeSet", "name": "ns1"}]},
                    "spec": {"hostname": "compute-0", "containers": [{"name": "slurmd", "image": "i"}]},
                },
                {"metadata": {"name": "other", "ownerReferences": [{"kind": "NodeSet", "name": "ns2"}]}, "spec": {}},
            ]

        def exec(self, pod, container, command, timeout=120.0):
            from pytest_slurmflox.base.run import Result

            assert (pod, container) == ("w-0", "slurmd")
            return Result(command, pod, "root", 0, rev + "\n", "", 0.0)

    view = NodeSetView(Kube(), "ns1")  # type: ignore[arg-type]
    assert view.desired_count() == 1 and view.desired_revision() == rev
    assert [w.name for w in view.workers()] == ["compute-0"]
    assert view.profile_revision("compute-0") == rev
    with pytest.raises(LookupError):
        view.profile_revision("compute-9")


def test_the_slurm_node_name_comes_from_the_operators_pod_hostname_label():
    """A NodeSet pod as the operator creates it: the pod is ``<nodeset>-<ordinal>``, the Slurm node is the
    ``nodeset.slinky.slurm.net/pod-hostname`` label (slurm-operator v1.2.1 api/v1beta1/well_known.go,
    internal/controller/nodeset/utils/utils.go). T1 keys the runtime provider's realization by that name."""
    from pytest_slurmflox.cluster.nodeset import LABEL_POD_HOSTNAME, worker_name

    pod = {  # the labels spelled as the operator writes them, not through our constant
        "metadata": {
            "name": "slurm-worker-compute-0",
            "labels": {"nodeset.slinky.slurm.net/pod-hostname": "compute-0", "nodeset.slinky.slurm.net/pod-index": "0"},
        },
        "spec": {},
    }
    assert worker_name(pod) == "compute-0"
    assert worker_name({"metadata": {"name": "p"}, "spec": {"hostname": "compute-1"}}) == "compute-1"
    suite = (Path(pytest_slurmflox.__file__).parents[1] / "suites" / "test_t01_flox_shim.py").read_text()
    assert f'.get("{LABEL_POD_HOSTNAME}", name)' in suite
    assert "slinky.slurm.net/node-name" not in suite


def test_a_daemonset_nodeset_desires_what_its_status_says_not_spec_replicas():
    """NodeSet CRD v1.2.1: ``spec.replicas`` "When ScalingMode is daemonset, this field is ignored" (the CRD
    defaults it to 1), ``status.desired`` counts the matching nodes; StatefulSet mode keeps ``spec.replicas``."""

    class Kube:
        namespace = "slurm"

        def __init__(self, doc):
            self.doc = doc

        def nodeset(self, name):
            return self.doc

    daemon = {"spec": {"scalingMode": "DaemonSet", "replicas": 1}, "status": {"desired": 3, "replicas": 2}}
    assert NodeSetView(Kube(daemon), "ns").desired_count() == 3  # type: ignore[arg-type]
    fresh = {"spec": {"scalingMode": "DaemonSet", "replicas": 1}}
    with pytest.raises(LookupError, match=r"DaemonSet.*status\.desired"):
        NodeSetView(Kube(fresh), "ns").desired_count()  # type: ignore[arg-type]
    stateful = {"spec": {"replicas": 4}, "status": {"desired": 2}}
    assert NodeSetView(Kube(stateful), "ns").desired_count() == 4  # type: ignore[arg-type]
