"""Declared expectations only (issue 17): a customer target's undeclared expectation makes its checks NOT RUN.

The table group -> keys (pytest_slurmflox/model/declared.py) is the one source: the start message is made from it, the
table in docs/customer.md must equal it, and the ``declared(...)`` calls in suites/ must ask for exactly its keys,
group by group (so a check that starts comparing with a new setting cannot forget to declare it, nor the page lag).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pytest_slurmflox.model import declared as table
from pytest_slurmflox.model.declared import (
    COMMON_KEYS,
    GROUP_KEYS,
    KUBERNETES_GROUP_KEYS,
    KUBERNETES_KEYS,
    PLACEMENT,
    readme_table,
    required,
    undeclared,
    undeclared_message,
)
from pytest_slurmflox.model.groups import GROUPS
from pytest_slurmflox.model.target import parse_target
from pytest_slurmflox.reporting.signoff import FAIL, NOT_RUN, NOT_RUN_PREFIX, PASS, SKIP, Check, group_verdict

ROOT = Path(__file__).resolve().parents[2]
LOGIN = {"host": "127.0.0.1", "port": 22, "user": "u", "key": "/dev/null"}
FULL = {
    "login": LOGIN,
    "slurm": {"partition": "batch"},
    "identity": {"user": "u", "uid": 1234, "gid": 1234, "supp_group": "hpc", "supp_gid": 2000},
    "expect": {
        "revision": "sha256:" + "0" * 64,
        "image": "repo/slurmd:1@sha256:" + "a" * 64,
        "replicas": 2,
        "settings": {
            "WORKER_FLOX_ENV": "org/hpc",
            "WORKER_FLOX_GENERATION": "3",
            "WORKER_FLOX_ACTIVATE_MODE": "run",
            "WORKER_FLOX_SKIP_CONTAINERS": "logfile",
            "WORKER_ENV_EXPORTS": "",
            "WORKER_PATH_PRECEDENCE": "prepend",
            "WORKER_CPUS": "4",
            "WORKER_MEM_MB": "4096",
            "WORKER_HOME_PATH": "/home",
        },
    },
}


def _without(path: str) -> dict:
    """FULL with the key at the dotted ``path`` left out."""
    import copy

    doc = copy.deepcopy(FULL)
    *parents, last = path.split(".")
    node = doc
    for part in parents:
        node = node[part]
    del node[last]
    return doc


def test_a_customer_target_declares_only_what_its_file_names():
    spec = parse_target({"login": LOGIN, "expect": {"settings": {"WORKER_MEM_MB": "4096"}}})
    assert spec.substrate == "existing"
    assert spec.declared == frozenset({"expect.settings.WORKER_MEM_MB"})


def test_image_replicas_and_revision_are_declared_however_the_file_spells_them():
    spec = parse_target(
        {"login": LOGIN, "expect": {"settings": {"WORKER_IMAGE": FULL["expect"]["image"], "COMPUTE_REPLICAS": "3"}}}
    )
    assert {"expect.image", "expect.replicas"} <= spec.declared
    assert "expect.revision" not in spec.declared  # a computed revision is not a declared one
    assert {"expect.image", "expect.replicas", "expect.revision"} <= parse_target(FULL).declared


def test_a_substrate_written_target_declares_everything():
    spec = parse_target({"substrate": "local", "login": LOGIN})
    assert spec.declared is None
    assert undeclared(spec) == {} and undeclared_message(spec) == ""


def test_a_fully_declared_customer_target_misses_nothing():
    assert undeclared(parse_target(FULL)) == {}


@pytest.mark.parametrize(
    "key",
    sorted(
        ({k for keys in GROUP_KEYS.values() for k in keys} | set(COMMON_KEYS))
        - {"expect.image", "identity.user", "identity.uid", "identity.gid"}
    ),
)
def test_each_key_left_out_names_exactly_the_groups_that_need_it(key):
    """Leaving one key out of a full target makes exactly the groups whose row names it miss it, and nothing else
    (expect.image is declared by either of two spellings; identity's user, uid and gid come together)."""
    spec = parse_target(_without(key))
    want = {group for group in GROUPS if key in required(group, kubernetes=False)}
    assert {group for group, keys in undeclared(spec).items() if keys == [key]} == want
    assert set(undeclared(spec)) == want
    for group in want:
        assert f"{group}: {key}" in undeclared_message(spec)


def test_a_target_without_identity_misses_all_of_it_for_ti_only():
    spec = parse_target(_without("identity"))
    assert undeclared(spec) == {
        "TI": ["identity.user", "identity.uid", "identity.gid", "identity.supp_group", "identity.supp_gid"]
    }


def test_the_image_is_undeclared_only_when_neither_spelling_is_given():
    spec = parse_target(_without("expect.image"))
    assert "expect.image" not in spec.declared
    assert set(undeclared(spec)) == {g for g, keys in GROUP_KEYS.items() if "expect.image" in keys}
    doc = _without("expect.image")
    doc["expect"]["settings"]["WORKER_IMAGE"] = FULL["expect"]["image"]
    assert undeclared(parse_target(doc)) == {}


def test_a_kubernetes_section_needs_its_namespace_and_nodeset_for_every_group():
    doc = {**FULL, "kubernetes": {"kubeconfig": "/dev/null"}}
    found = undeclared(parse_target(doc))
    assert set(found) == set(GROUPS)
    assert all(keys == list(KUBERNETES_KEYS) + list(KUBERNETES_GROUP_KEYS.get(g, ())) for g, keys in found.items())
    doc["kubernetes"] = {"kubeconfig": "/dev/null", "namespace": "slurm", "nodeset": "compute"}
    # T10's placement check (the pool's own label and taint) and T1's node access (a node debug pod's image)
    assert undeclared(parse_target(doc)) == {"T1": ["kubernetes.node_debug_image"], "T10": list(PLACEMENT)}
    doc["kubernetes"] |= {"worker_label": "site.example/hpc=yes", "worker_taint": "site.example/hpc:NoExecute"}
    doc["kubernetes"] |= {"node_debug_image": "registry.example/debug:1"}
    assert undeclared(parse_target(doc)) == {}
    assert "T10" not in undeclared(parse_target({**FULL}))  # no kubernetes section: no placement to declare


def test_the_start_message_lists_the_missing_keys_per_group():
    spec = parse_target({"login": LOGIN, "expect": {"settings": {"WORKER_MEM_MB": "4096", "WORKER_HOME_PATH": "/h"}}})
    found = undeclared(spec)
    assert found["T8"] == ["slurm.partition", "expect.settings.WORKER_CPUS"]
    assert "expect.settings.WORKER_HOME_PATH" not in found["T9"] and found["T9"] == ["slurm.partition"]
    message = undeclared_message(spec)
    assert message.count("T8:") == 1 and "T8: slurm.partition, expect.settings.WORKER_CPUS;" in message
    assert "NOT RUN" in message


def test_not_run_outranks_skip_and_pass_but_not_fail():
    not_run = Check("t8::a", "T8", NOT_RUN, reason=NOT_RUN_PREFIX + "expect.settings.WORKER_CPUS")
    assert group_verdict([Check("t8::b", "T8", PASS), not_run, Check("t8::c", "T8", SKIP)]) == NOT_RUN
    assert group_verdict([not_run, Check("t8::d", "T8", FAIL)]) == FAIL


def test_the_declared_helper_is_not_run_naming_the_key_and_silent_when_declared():
    import sys
    from types import SimpleNamespace

    sys.path.insert(0, str(ROOT))
    try:
        from suites._capability import declared
    finally:
        sys.path.remove(str(ROOT))
    customer = SimpleNamespace(spec=parse_target(_without("expect.settings.WORKER_CPUS")))
    with pytest.raises(pytest.skip.Exception) as skipped:
        declared(customer, "expect.settings.WORKER_CPUS", "expect.settings.WORKER_MEM_MB")
    reason = str(skipped.value)
    assert reason.startswith(NOT_RUN_PREFIX) and "expect.settings.WORKER_CPUS" in reason and "MEM_MB" not in reason
    declared(customer, "expect.settings.WORKER_MEM_MB")  # declared: no outcome at all
    declared(SimpleNamespace(spec=parse_target({"substrate": "local", "login": LOGIN})), "anything")


# --------------------------------------------------------------------- the table, the suites and the docs page
def _keys(node: ast.expr) -> set[str]:
    """The keys one argument of ``declared(target, ...)`` can name: constants of declared.py, both branches of a
    conditional, a starred tuple."""
    if isinstance(node, ast.IfExp):
        return _keys(node.body) | _keys(node.orelse)
    if isinstance(node, ast.Starred):
        node = node.value
    value = eval(compile(ast.Expression(node), "<suite>", "eval"), vars(table))  # names of declared.py only
    return {value} if isinstance(value, str) else set(value)


def _suite_groups(tree: ast.Module) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in GROUPS and ast.unparse(node).startswith("pytest.mark."):
            found.add(node.attr)
    return found


def declared_by_suites() -> dict[str, set[str]]:
    """Group -> every key the ``declared(...)`` calls of its suite modules ask for."""
    out: dict[str, set[str]] = {}
    for path in sorted((ROOT / "suites").glob("test_*.py")):
        tree = ast.parse(path.read_text())
        keys: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "declared":
                for arg in node.args[1:]:
                    keys |= _keys(arg)
        for group in _suite_groups(tree):
            out.setdefault(group, set()).update(keys)
    return out


def test_the_suites_ask_for_exactly_the_tables_keys():
    by_suites = {group: keys for group, keys in declared_by_suites().items() if keys}
    table_keys = {group: set(keys) for group, keys in GROUP_KEYS.items()}
    for group, keys in KUBERNETES_GROUP_KEYS.items():
        table_keys.setdefault(group, set()).update(keys)
    assert by_suites == table_keys


def test_the_cohort_preflight_asks_for_the_common_keys():
    source = (ROOT / "suites" / "conftest.py").read_text()
    assert "declared(target, *COMMON_KEYS)" in source and "declared(target, *KUBERNETES_KEYS)" in source


def test_the_readme_table_is_the_codes_table():
    page = (ROOT / "docs" / "customer.md").read_text()
    assert readme_table() in page, "docs/customer.md 'What each group needs': paste declared.readme_table()"


def test_the_reports_environment_table_shows_an_undeclared_expectation_as_such():
    from pytest_slurmflox.reporting.envfacts import target_metadata

    bare = target_metadata("r", "existing", Path("/t.yaml"), parse_target({"login": LOGIN}))
    for row in ("Partition", "Worker image", "Environment reference", "Runtime revision (expected)"):
        assert bare[row] == "not declared", (row, bare[row])
    full = target_metadata("r", "existing", Path("/t.yaml"), parse_target(FULL))
    assert full["Partition"] == "batch" and full["Environment reference"] == "org/hpc"
    assert full["Runtime revision (expected)"] == FULL["expect"]["revision"]
    local = target_metadata("r", "local", Path("/t.yaml"), parse_target({"substrate": "local", "login": LOGIN}))
    assert "not declared" not in local.values()
