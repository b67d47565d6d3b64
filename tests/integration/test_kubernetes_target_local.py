"""Integration (marker ``kubeapi`` too): the local cluster's Slurm behind a real API server that holds a healthy Slinky
v1.2.1 cluster, signed off as a customer's ``kubernetes`` target.

Needs the kubeconfig ``$SLURMFLOX_TEST_KUBECONFIG`` names (an admin's, as the kubeapi unit tests do); without it every
test skips before the local cluster is brought up (the ``api`` fixture comes first). With it:

- one private local deployment (two workers), brought up with a plain ``--slurmflox-up=local``, which writes
  ``<workdir>/site-example.yaml`` (the cluster as a customer describes it: login, admin, identity, declared runtime);
- in the API server: Slinky's CRDs and RuntimeClass ``flox`` (when absent), a namespace and one node per worker
  (labelled and tainted as both pools, ``slinkyapi.py``), the NodeSet the real chart renders and one pod per worker
  built as the operator builds it (``slinkyapi.deploy``): its ordinals and template hostname give the Slurm node
  names ``sinfo`` lists (the chart forces the hostname ``<key>-``; a NodeSet written without it may say ``worker``);
- the target: ``site-example.yaml`` with a ``kubernetes`` section naming that kubeconfig, namespace and NodeSet and
  the declared pool.

Then, with the reference design's values, the whole acceptance with ``--slurmflox-signoff`` (profile kubernetes):
no FAIL, no error, no traceback; SIGNED OFF, or every group that is not PASS is NOT RUN or NOT APPLICABLE and each
NOT RUN check says in one line what access is missing (no kubelet behind these nodes: a pod exec is refused). With
plain upstream values plus Flox's RuntimeClass and annotation: T4 and T10 PASS, and each reference addition that is
missing (the revision annotation, the profile init container) is named once, with where it comes from (T1's and
T11's FAILs: those are the reference's checks of its own additions).

Ran live (kube-apiserver v1.35.0, no kubelet; two workers): the reference values NOT SIGNED OFF (profile kubernetes;
not applicable: TF), every group PASS but T1, NOT RUN on two lines: ``the target file does not declare
kubernetes.node_debug_image`` and ``cannot create pods/exec on pod ...: the API server reached no kubelet on node
...``; 78 passed, 4 skipped (2 of them not applicable) in 91 s, twice. Plain values (``-m "T1 or T4 or T10 or
T11"``): T4 and T10 PASS; T1 FAILs naming the revision annotation and the profile init container once each, T11
the revision annotation once, each with where it comes from; T1's two NOT RUN lines as above.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re

import pytest
import yaml
from acceptance_helpers import cluster_of, deployed, group_verdicts, run_pytest
from slinkyapi import KUBECONFIG_ENV, NO_API, POOL_LABEL, POOL_TAINT, REFERENCE_POOL

pytestmark = [pytest.mark.integration, pytest.mark.kubeapi]
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|^E\s+\w+Error\b", re.M)
NOT_PASS_OK = ("NOT RUN", "NOT APPLICABLE")


@pytest.fixture(scope="module")
def api():
    """The real API server, Slinky's CRDs and RuntimeClass ``flox`` present; skips, before anything is brought up,
    without one."""
    conf = os.environ.get(KUBECONFIG_ENV)
    if not conf:
        pytest.skip(f"{NO_API}: the local cluster's Slurm is signed off behind a real API server")
    pytest.importorskip("helm_python", reason="helm-python-sdk is not installed: cannot render the Slinky chart")
    from slinkyapi import slinky_api

    with slinky_api(conf) as api_client:
        yield conf, api_client


@pytest.fixture(scope="module")
def deployment(api, tmp_path_factory):
    with deployed(tmp_path_factory, "kubetarget") as recorded:
        _, _, _, up = recorded
        assert up.rc == 0, up.output[-3000:]
        yield recorded


def _workers(workdir) -> list[str]:
    listing = cluster_of(workdir).node_runner("login").run("sinfo -N -h -o %N")
    assert listing.ok, listing.describe()
    return sorted(set(listing.stdout.split()))


@contextlib.contextmanager
def _behind_the_api(api, deployment, values_of, pool: tuple[str, str], name: str):
    """A namespace, nodes and the NodeSet with one operator pod per local worker; the customer's target naming
    them; yields (target path, home, namespace, nodeset name)."""
    from slinkyapi import deploy, namespace_and_nodes

    from pytest_slurmflox.model.target import load_target

    conf, api_client = api
    home, workdir, _, _ = deployment
    site = workdir / "site-example.yaml"
    spec = load_target(site)
    workers = _workers(workdir)
    ordinals = [int(re.fullmatch(r"worker(\d+)", w).group(1)) for w in workers]  # type: ignore[union-attr]
    with namespace_and_nodes(api_client, "slurmflox-kube2", len(workers)) as (ns, nodes):
        nodeset = deploy(api_client, ns, nodes, values_of(spec), ordinals=ordinals, hostname="worker")
        doc = yaml.safe_load(site.read_text())
        doc["name"] = name
        section = {"kubeconfig": conf, "namespace": ns, "nodeset": nodeset["metadata"]["name"]}
        doc["kubernetes"] = section | {"worker_label": pool[0], "worker_taint": pool[1]}
        path = home / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc))
        print(f"[kube] {ns}: NodeSet {nodeset['metadata']['name']}, pods for {workers} on {nodes}")
        yield path, home, ns, nodeset["metadata"]["name"]


def _reference_values(spec):
    from pytest_slurmflox.judges.expectations import expected_revision
    from pytest_slurmflox.substrates.qemu.render import values as rv

    expect = spec.expect
    settings = dataclasses.replace(expect.settings, worker_image=expect.image, test_identity=False)
    return rv.render_slurm_values(settings, revision=expected_revision(expect.settings, expect.image))


def _plain_values(spec):
    from slinkyapi import plain_values

    return plain_values(spec.expect.image, spec.expect.settings.worker_flox_ref)


def not_run_reasons(run) -> dict[str, str]:
    """Each check that was not run, with its one line: the skip's reason from ``not run:`` up to where JUnit's text
    repeats it after the check's ``path:line:``."""
    found = {}
    for case, (outcome, message) in run.cases.items():
        said = re.search(r"not run: .*?(?=(?:\.\./|/)\S*\.py:\d+: |\n|$)", message) if outcome == "skipped" else None
        if said:
            found[case] = said.group(0)
    return found


def first_telling(message: str) -> str:
    """A failure's requirement told once, whole: JUnit's text, after its message (which may be cut short, ``[+1
    more line; full report in element text]``)."""
    return message.rsplit("requirement not met: ", 1)[-1]


#: What a run against this API server cannot reach, each a NOT RUN naming it: pod exec (no kubelet behind its
#: nodes) and the node debug image the target leaves undeclared (no node access).
MISSING_ACCESS = (
    re.compile(
        r"^not run: cannot create pods/exec on pod \S+ in namespace \S+: the API server reached no kubelet on "
        r"node \S+ \(HTTP 500\) \(the target does not declare this access\)$"
    ),
    re.compile(r"^not run: the target file does not declare kubernetes\.node_debug_image \(target '[^']+'\)$"),
)


def test_the_reference_cluster_behind_a_real_api_is_signed_off_or_names_the_missing_access(api, deployment):
    with _behind_the_api(api, deployment, _reference_values, REFERENCE_POOL, "kube-reference") as (target, home, _, _):
        run = run_pytest(home, "-m", "acceptance", f"--slurmflox-target={target}", "--slurmflox-signoff")
        print(run.output[-8000:])
        verdicts = group_verdicts(run.output)
        line = re.search(r"^verdict for run \S+: (.*)$", run.output, re.M)
        assert verdicts and line, run.output[-4000:]
        print(f"[kube] {line.group(1)}\n[kube] groups: {verdicts}")
        for outcome in ("failure", "error"):
            for case in run.outcomes(outcome):
                print(f"[kube] {outcome.upper()} {case}: {run.cases[case][1][:1500]}")
        reasons = not_run_reasons(run)
        for case, said in sorted(reasons.items()):
            print(f"[kube] NOT RUN {case}: {said}")
        assert "profile kubernetes" in line.group(1), line.group(1)
        assert run.outcomes("failure") == [] and run.outcomes("error") == [], run.output[-6000:]
        assert not TRACEBACK.search(run.output), TRACEBACK.search(run.output)
        assert all(v == "PASS" or v in NOT_PASS_OK for v in verdicts.values()), verdicts
        assert reasons and all(any(r.match(said) for r in MISSING_ACCESS) for said in reasons.values()), reasons
        if all(v == "PASS" or v == "NOT APPLICABLE" for v in verdicts.values()):
            assert line.group(1).startswith("SIGNED OFF (profile kubernetes"), line.group(1)


def test_plain_upstream_values_pass_t4_and_t10_and_name_each_missing_addition_once(api, deployment):
    plain = (POOL_LABEL, POOL_TAINT)
    with _behind_the_api(api, deployment, _plain_values, plain, "kube-plain") as (target, home, _, _):
        run = run_pytest(home, "-m", "T1 or T4 or T10 or T11", f"--slurmflox-target={target}")
        print(run.output[-8000:])
        verdicts = group_verdicts(run.output)
        print(f"[kube] groups: {verdicts}")
        assert verdicts.get("T4") == "PASS" and verdicts.get("T10") == "PASS", verdicts
        assert not TRACEBACK.search(run.output), TRACEBACK.search(run.output)
        messages = run.messages()
        for missing in ("annotation slinky.local/runtime-revision is missing", "flox-task-profile-init is missing"):
            for case, (outcome, message) in run.cases.items():
                if outcome == "failure" and missing in message:
                    told = first_telling(message)
                    assert told.count(missing) == 1 and "docs/reference-stack.md" in told, (case, message)
            assert missing in messages, (missing, messages[-3000:])
