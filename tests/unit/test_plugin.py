"""The plugin as pytest sees it: options, ini keys, env vars, markers, header, selection and verbs."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_slurmflox.harness.history import History
from pytest_slurmflox.harness.options import OPTIONS
from pytest_slurmflox.harness.sitedeps import SiteDependencies
from pytest_slurmflox.model.groups import DESTRUCTIVE_GROUPS, GROUPS, MARKERS
from pytest_slurmflox.model.settings import KEYS


def test_help_lists_every_option_with_env_and_ini(pytester: pytest.Pytester):
    result = pytester.runpytest_subprocess("--help")
    out = result.stdout.str()
    assert "slurmflox: provision and sign off" in out
    flat = " ".join(out.split())
    for opt in OPTIONS:
        assert f"--{opt.name}" in out
        assert f"env {opt.env}, ini {opt.ini}" in flat, opt.name
    for spec in KEYS:
        assert spec.flag in out
        assert f"env {spec.env}, ini {spec.ini}" in flat, spec.key


def test_all_markers_registered_under_strict_markers(pytester: pytest.Pytester):
    names = [*MARKERS]
    assert {"acceptance", "destructive", "needs_kube", "needs_flox", "integration", "kvm"} <= set(names)
    assert {"T1", "T11", "TP", "TI", "TF", "T11R", "T11U", "T11C", "T11F"} <= set(GROUPS)
    body = "\n".join(f"@pytest.mark.{n}\ndef test_{i}(): pass" for i, n in enumerate(names))
    pytester.makepyfile("import pytest\n" + body)
    result = pytester.runpytest("--strict-markers", "-m", "not acceptance")
    result.assert_outcomes(passed=len(names) - 1, deselected=1)


def test_report_header_shows_target_and_revision(pytester: pytest.Pytester, tmp_path):
    pytester.makepyfile("def test_x(): pass")
    target = tmp_path / "target.yaml"
    key = tmp_path / "id"
    key.write_text("dummy")
    target.write_text(
        "version: 1\nname: site-a\nsubstrate: existing\n"
        f"login: {{host: 127.0.0.1, port: 2222, user: alice, key: {key}}}\n"
        "expect: {settings: {WORKER_FLOX_GENERATION: '17', WORKER_FLOX_ENV: myorg/hpc}}\n"
    )
    result = pytester.runpytest(f"--slurmflox-target={target}", "-m", "not acceptance")
    # a customer's target declaring only the environment: no revision is made up from the reference's defaults, and
    # the header names what each group misses (issue 17)
    result.stdout.fnmatch_lines(
        [
            f"slurmflox: target {target} (--slurmflox-target), substrate existing",
            "slurmflox: expected runtime revision: not declared by the target file",
            "slurmflox: target 'site-a' does not declare what these groups compare with*"
            "T8: slurm.partition, expect.settings.WORKER_CPUS, expect.settings.WORKER_MEM_MB;*",
        ]
    )
    revision = "sha256:" + "1" * 64
    declared = target.read_text().replace("expect: {settings:", f"expect: {{revision: '{revision}', settings:")
    target.write_text(declared)
    result = pytester.runpytest(f"--slurmflox-target={target}", "-m", "not acceptance")
    result.stdout.fnmatch_lines([f"slurmflox: expected runtime revision {revision} (myorg/hpc:17, *)"])


def test_header_without_target_shows_revision_of_current_settings(pytester: pytest.Pytester, monkeypatch):
    pytester.makepyfile("def test_x(): pass")
    monkeypatch.setenv("SLURMFLOX_WORKER_FLOX_GENERATION", "18")
    a = pytester.runpytest().stdout.str()
    monkeypatch.setenv("SLURMFLOX_WORKER_FLOX_GENERATION", "19")
    b = pytester.runpytest().stdout.str()
    line = [x for x in a.splitlines() if "runtime revision of current settings" in x]
    assert line and line[0] not in b


def test_option_precedence_cli_env_ini(pytester: pytest.Pytester, monkeypatch):
    pytester.makeini("[pytest]\nslurmflox_run_id = from-ini\n")
    pytester.makepyfile("def test_x(run_id):\n    print('RUN', run_id)\n")
    assert "RUN from-ini" in pytester.runpytest("-s").stdout.str()
    monkeypatch.setenv("SLURMFLOX_RUN_ID", "from-env")
    assert "RUN from-env" in pytester.runpytest("-s").stdout.str()
    assert "RUN from-cli" in pytester.runpytest("-s", "--slurmflox-run-id=from-cli").stdout.str()


def test_acceptance_checks_are_deselected_unless_asked_and_destructive_unless_named(pytester: pytest.Pytester):
    pytester.makepyfile(
        """
        import pytest
        pytestmark = pytest.mark.acceptance
        @pytest.mark.T3
        def test_t3(): pass
        @pytest.mark.T11U
        @pytest.mark.destructive
        def test_t11u(): pass
        """
    )
    r = pytester.runpytest()
    r.assert_outcomes(deselected=2)
    pytester.runpytest("-m", "not integration and not kvm").assert_outcomes(deselected=2)
    r.stdout.fnmatch_lines(["*2 acceptance check(s) deselected: acceptance not requested*"])
    pytester.runpytest("-m", "acceptance").assert_outcomes(passed=1, deselected=1)
    pytester.runpytest("-m", "T11U").assert_outcomes(passed=1, deselected=1)
    pytester.runpytest("-m", "acceptance", "--slurmflox-destructive").assert_outcomes(passed=2)
    pytester.runpytest("--slurmflox-groups=T3").assert_outcomes(passed=1, deselected=1)
    r = pytester.runpytest("--slurmflox-groups=T3,T99")
    assert r.ret == pytest.ExitCode.USAGE_ERROR and "unknown group(s) T99" in r.stderr.str()


def test_a_selection_option_in_the_checkout_runs_only_the_suites_unless_tests_are_named(pytester: pytest.Pytester):
    """The checkout's layout: testpaths = tests, suites. ``--slurmflox-groups=T3`` must not start the project's own
    tests (which bring up private clusters); naming ``tests`` explicitly still runs them."""
    pytester.makeini("[pytest]\ntestpaths = tests suites\n")
    pytester.mkdir("tests")
    pytester.mkdir("suites")
    pytester.makepyfile(**{"tests/test_own": "def test_project_thing(): pass\n"})
    pytester.makepyfile(
        **{
            "suites/test_t03": "import pytest\npytestmark = pytest.mark.acceptance\n"
            "@pytest.mark.T3\ndef test_t3(): pass\n@pytest.mark.T5\ndef test_t5(): pass\n"
        }
    )
    r = pytester.runpytest("-p", "no:randomly", "--slurmflox-groups=T3")
    r.assert_outcomes(passed=1, deselected=2)
    r.stdout.fnmatch_lines(["*1 test(s) deselected: not an acceptance check*", "*1 acceptance check(s) deselected*"])
    pytester.runpytest("-p", "no:randomly", "--slurmflox-groups=T3", "tests", "suites").assert_outcomes(
        passed=2, deselected=1
    )
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=1, deselected=2)


def test_invalid_setting_is_a_usage_error_and_writes_nothing(pytester: pytest.Pytester):
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest(
        "--slurmflox-up=local", "--slurmflox-worker-flox-skip-containers=logfile,slurmd", "--slurmflox-workdir=wd"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "WORKER_FLOX_SKIP_CONTAINERS='logfile,slurmd' is refused" in result.stderr.str()
    assert "nothing was changed" in result.stderr.str()
    assert not (pytester.path / "wd").exists()


def test_verbs_without_a_deployment_say_so(pytester: pytest.Pytester):
    result = pytester.runpytest("--slurmflox-status", "--slurmflox-workdir=wd")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*no deployment is recorded in*wd*"])
    result = pytester.runpytest("--slurmflox-down", "--slurmflox-workdir=wd")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_acceptance_without_target_is_one_clear_error(pytester: pytest.Pytester):
    pytester.makepyfile("import pytest\n@pytest.mark.acceptance\n@pytest.mark.T3\ndef test_a(target): pass\n")
    result = pytester.runpytest("-m", "acceptance", "--slurmflox-workdir=nowhere")
    assert result.ret != 0
    assert "no target" in result.stdout.str() + result.stderr.str()


def test_state_lives_in_the_stash_not_in_module_globals():
    """No top-level module keeps mutable state in a global: only UPPER_CASE tables (read-only by convention)."""
    import importlib
    import pkgutil

    import pytest_slurmflox

    mutable = []
    for info in pkgutil.walk_packages(pytest_slurmflox.__path__, "pytest_slurmflox."):
        if info.name.startswith(("pytest_slurmflox.substrates", "pytest_slurmflox.examples")):
            continue  # examples are test modules: their ``pytestmark`` list is pytest's own convention
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if name.startswith("__") or name.isupper() or not isinstance(value, list | dict | set):
                continue
            mutable.append(f"{info.name}.{name}")
    assert mutable == []


def test_without_xdist_the_plugin_loads_and_runs(pytester: pytest.Pytester):
    """``pytest_configure_node`` is an xdist hook: marked optional, so ``-p no:xdist`` neither errors nor warns."""
    pytester.makepyfile("def test_a():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:xdist", "-p", "no:randomly", "-W", "error")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=1)
    assert "slurmflox: run" in result.stdout.str()


def test_every_environment_knob_is_a_row_of_the_option_table():
    """The substrate knobs a user may set in the environment are plugin options (flag, env, ini, --help)."""
    envs = {option.env for option in OPTIONS}
    for knob in ("SLURMFLOX_QEMU_IMAGE", "SLURMFLOX_QEMU_ACCEL", "SLURMFLOX_QEMU_RESTRICT", "SLURMFLOX_LOCAL_CACHE"):
        assert knob in envs


def test_substrate_knobs_reach_the_substrate_from_the_environment(pytester: pytest.Pytester, monkeypatch):
    from pytest_slurmflox.harness.options import substrate_options

    monkeypatch.setenv("SLURMFLOX_QEMU_ACCEL", "tcg")
    monkeypatch.setenv("SLURMFLOX_QEMU_RESTRICT", "1")
    monkeypatch.setenv("SLURMFLOX_LOCAL_CACHE", "/srv/cache")
    config = pytester.parseconfigure("--slurmflox-qemu-image=/img/base.qcow2")
    options = substrate_options(config)
    assert options.qemu_image == Path("/img/base.qcow2") and options.qemu_accel == "tcg"
    assert options.qemu_restrict is True and options.local_cache == Path("/srv/cache")


def test_an_unrelated_run_in_the_same_venv_is_not_touched_by_bare_names(tmp_path: Path):
    """Issue 38: ``WORKDIR=/usr/lib NODES=all pytest --co -q`` in an empty directory with the plugin installed prints
    no slurmflox line and takes no longer than without the plugin (it once walked /usr/lib for 2.5 minutes looking
    for credential files, and printed "settings invalid" for NODES=all). Only SLURMFLOX_<KEY> is ours."""
    import os
    import subprocess
    import sys
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURMFLOX_")}
    env |= {"WORKDIR": "/usr/lib", "NODES": "all", "MEM": "lots", "LOGIN": "login01", "TEST_USER": "Root"}

    def co(*extra: str) -> tuple[float, str, int]:
        t0 = time.monotonic()
        argv = [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *extra]
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
        return time.monotonic() - t0, proc.stdout + proc.stderr, proc.returncode

    without, _, _ = co("-p", "no:slurmflox")
    seconds, output, rc = co()
    assert rc == pytest.ExitCode.NO_TESTS_COLLECTED, output
    assert "slurmflox" not in output.lower(), output
    # a bound that holds on a loaded host (two runs a moment apart differ by seconds there, never by half a minute)
    # and still catches the walk of /usr/lib (150 s)
    assert seconds < without + 30, f"{seconds:.1f}s with the plugin, {without:.1f}s without"
    verbose = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "slurmflox:" not in verbose.stdout, verbose.stdout  # not even the header of a run that is not ours


def test_the_help_names_every_destructive_group_and_what_a_signoff_refuses():
    """``--help`` and the README say the same: every opt-in group, and that a sign-off needs every required check."""
    helps = {option.name: option.help for option in OPTIONS}
    assert all(group in helps["slurmflox-destructive"] for group in DESTRUCTIVE_GROUPS)
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text().splitlines()
    rows = [line for line in readme if line.startswith("| ") and "destructive" in line]
    assert all(any(group in row.split("|")[1] for row in rows) for group in DESTRUCTIVE_GROUPS), rows
    for refused in ("FAIL", "SKIP", "NOT RUN", "deselected"):
        assert refused in helps["slurmflox-signoff"]


def test_the_outlier_ratios_come_from_flag_env_or_ini_and_a_ratio_out_of_range_is_refused(pytester, monkeypatch):
    """``--slurmflox-outlier-throughput`` is a share in (0, 1], ``--slurmflox-outlier-latency`` a multiple >= 1
    (group TB's cohort judge, judges/baselines.py); anything else stops the run in one line."""
    pytester.makeini("[pytest]\nslurmflox_outlier_latency = 2.5\n")
    pytester.makepyfile(
        "from pytest_slurmflox.harness.options import outlier_ratios\n"
        "def test_ratios(request):\n"
        "    print('RATIOS', outlier_ratios(request.config))\n"
    )
    monkeypatch.setenv("SLURMFLOX_OUTLIER_THROUGHPUT", "0.8")
    assert "RATIOS (0.8, 2.5)" in pytester.runpytest("-s", "-p", "no:randomly").stdout.str()
    refused = pytester.runpytest("--slurmflox-outlier-latency=0.5")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert "--slurmflox-outlier-latency: '0.5' is not a ratio in range (nothing was run)" in refused.stderr.str()


# Every object slurmflox registers as a plugin stays hashable. For a test file outside the folders whose conftests
# are loaded (a site's own checks in their own folder beside --pyargs pytest_slurmflox.suites), pytest asks pluggy for
# a hook caller without those conftests, which builds a set of plugins: an unhashable plugin (a dataclass with the
# default eq=True) ended the run in an INTERNALERROR at the site check, which never ran (found on a live cluster, #43).
class _Other:
    def pytest_runtest_setup(self, item):  # a plugin to leave out, as pytest leaves out a folder's conftest
        return None


@pytest.mark.parametrize(
    "plugin",
    [SiteDependencies(state=None), History(writer=None, earlier=None, save=None)],  # type: ignore[arg-type]
    ids=["site-dependencies", "history"],
)
def test_a_registered_plugin_can_be_left_out_of_a_hook_call(plugin):
    manager = pytest.PytestPluginManager()
    other = _Other()
    manager.register(plugin, "ours")
    manager.register(other, "other")
    caller = manager.subset_hook_caller("pytest_runtest_setup", remove_plugins=[other])
    assert caller is not None
    hash(plugin)
