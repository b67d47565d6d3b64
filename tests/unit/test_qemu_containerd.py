"""The Flox runtime registration against a real containerd 1.7: Debian trixie's package, run here.

Flox's imageless Kubernetes needs containerd 1.7 or later (floxdocs ``docs/k8s/install/self-managed.md``, first
note), and the Flox shim installer leaves its runtime as a table appended to ``/etc/containerd/config.toml``
(the same table floxdocs gives for the manual method, ``self-managed.md`` "Manual installation" step 3). This test
installs containerd from Debian trixie (1.7) into a directory of its own, starting from exactly the configuration
``k8s-node-prep.sh`` writes (``containerd config default`` with the runc runtime switched to the systemd cgroup
driver), applies the registration the installer leaves, and reads containerd's own ``config dump`` (no daemon is
needed: ``-c`` names the file). Expectations are upstream's literal values, asserted on the parsed TOML here, and
then the project's verification step (:func:`check_flox_runtime`, which replaced the grep) must accept that and
reject each broken variant the old drop-in had.

The .deb comes from the Debian mirror the host's apt sources name (never a hard-coded host), fetched with apt-get
into a private state directory and cached under /var/cache/slurmflox/containerd, so a rerun is offline.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import tomllib
from filelock import FileLock

from pytest_slurmflox.base.run import Result
from pytest_slurmflox.substrates.qemu.containerd import (
    FLOX_RUNTIME_HANDLER,
    FLOX_SHIM_PATH,
    check_flox_runtime,
    go_path_match,
    node_problems,
)
from pytest_slurmflox.substrates.qemu.testimage import host_debian_mirror

CACHE = Path(os.environ.get("SLURMFLOX_CONTAINERD_CACHE", "/var/cache/slurmflox/containerd"))
SUITE = "trixie"
SHIM = "/usr/local/bin/containerd-shim-flox-v2"  #: floxdocs' literal, not our constant
V2 = ("plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes")

#: What the Flox shim installer appends for a version-2 config (floxdocs docs/k8s/install/self-managed.md,
#: "Manual installation" step 3, "version = 2"; the same lines troubleshooting.md tells operators to look for).
INSTALLER_TABLE = f"""
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.flox]
    runtime_path = "{SHIM}"
    runtime_type = "io.containerd.runc.v2"
    pod_annotations = [ "flox.dev/*" ]
    container_annotations = [ "flox.dev/*" ]
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.flox.options]
    SystemdCgroup = true
"""


def _apt_download(dest: Path, suite: str = SUITE) -> Path:
    """Download ``suite``'s containerd .deb with apt-get, configured only by files in ``dest``."""
    mirror, _ = host_debian_mirror()
    (dest / "etc").mkdir(parents=True, exist_ok=True)
    (dest / "state" / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (dest / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    (dest / "state" / "status").touch()
    (dest / "etc" / f"{suite}.sources").write_text(
        f"Types: deb\nURIs: {mirror}\nSuites: {suite}\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )
    opts = [
        "-o",
        "Dir::Etc::sourcelist=/dev/null",
        "-o",
        f"Dir::Etc::sourceparts={dest / 'etc'}",
        "-o",
        f"Dir::State={dest / 'state'}",
        "-o",
        f"Dir::State::status={dest / 'state' / 'status'}",
        "-o",
        f"Dir::Cache={dest / 'cache'}",
        "-o",
        "APT::Sandbox::User=root",
        "-o",
        "APT::Architecture=amd64",
        "-q",
    ]
    subprocess.run(["apt-get", *opts, "update"], check=True, capture_output=True, timeout=600)
    subprocess.run(["apt-get", *opts, "download", "containerd"], check=True, capture_output=True, cwd=dest, timeout=600)
    debs = sorted(dest.glob("containerd_*.deb"))
    assert debs, f"apt-get download left no containerd .deb in {dest}"
    return debs[-1]


@pytest.fixture(scope="module")
def containerd(tmp_path_factory) -> Path:
    """The containerd binary of Debian trixie's package, extracted into a directory of this test."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE / ".lock")):
        debs = sorted(CACHE.glob("containerd_*.deb"))
        deb = debs[-1] if debs else _apt_download(CACHE)
    root = tmp_path_factory.mktemp("containerd-root")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, timeout=300)
    binary = root / "usr" / "bin" / "containerd"
    assert binary.is_file(), f"{deb.name} has no usr/bin/containerd"
    return binary


def containerd_version(binary: Path) -> tuple[int, int]:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"\s(\d+)\.(\d+)\.\d+", out)
    assert match, out
    return int(match.group(1)), int(match.group(2))


def node_prep_config(binary: Path) -> str:
    """What k8s-node-prep.sh writes: ``containerd config default`` with SystemdCgroup switched on."""
    default = subprocess.run([str(binary), "config", "default"], capture_output=True, text=True, check=True).stdout
    assert "SystemdCgroup = false" in default
    return default.replace("SystemdCgroup = false", "SystemdCgroup = true")


def dump(binary: Path, config: Path) -> str:
    proc = subprocess.run(
        [str(binary), "-c", str(config), "config", "dump"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def runtime_table(text: str, handler: str = "flox") -> dict | None:
    table = tomllib.loads(text)
    for key in V2:
        table = table.get(key, {})
    return table.get(handler)


# ------------------------------------------------------------------------------------------ the real thing
def test_trixie_containerd_is_at_least_the_1_7_flox_needs(containerd):
    assert containerd_version(containerd) >= (1, 7)


def test_the_installer_registration_resolves_flox_to_the_shim_in_the_effective_config(containerd, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(node_prep_config(containerd) + INSTALLER_TABLE)
    text = dump(containerd, config)

    flox = runtime_table(text)
    assert flox is not None, "containerd's effective config has no runtime 'flox'"
    assert flox["runtime_path"] == SHIM
    assert flox["runtime_type"] == "io.containerd.runc.v2"
    assert "flox.dev/*" in flox["pod_annotations"] and "flox.dev/*" in flox["container_annotations"]
    assert flox["options"]["SystemdCgroup"] is True
    # the runc runtime kubelet uses for every other pod keeps the systemd driver too
    assert runtime_table(text, "runc")["options"]["SystemdCgroup"] is True

    verdict = check_flox_runtime(text, "flox", SHIM)
    assert verdict.ok, verdict.problems
    assert verdict.version == 2


def test_a_drop_in_that_is_really_imported_is_accepted_too(containerd, tmp_path):
    """The check reads the merged configuration, so where the table lives does not matter, only that it counts."""
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "flox.toml").write_text("version = 2\n" + INSTALLER_TABLE)
    base = node_prep_config(containerd).replace("imports = []", f'imports = ["{tmp_path}/conf.d/*.toml"]', 1)
    config = tmp_path / "config.toml"
    config.write_text(base)
    verdict = check_flox_runtime(dump(containerd, config), "flox", SHIM)
    assert verdict.ok, verdict.problems


def test_the_old_grep_missed_the_correct_configuration(containerd, tmp_path):
    """Why the grep was replaced: containerd 1.7 sorts the keys, runtime_path is not within three lines."""
    config = tmp_path / "config.toml"
    config.write_text(node_prep_config(containerd) + INSTALLER_TABLE)
    text = dump(containerd, config)
    old = subprocess.run(
        ["bash", "-c", f'grep -A3 "runtimes.flox\\]" | grep -q "runtime_path = \\"{SHIM}\\""'],
        input=text,
        text=True,
        check=False,
    )
    assert old.returncode != 0, "the old grep would have found it: the premise of the replacement is wrong"
    assert check_flox_runtime(text, "flox", SHIM).ok


def _dumped(binary: Path, config: Path, host: str = "node2") -> Result:
    proc = subprocess.run([str(binary), "-c", str(config), "config", "dump"], capture_output=True, text=True)
    return Result("containerd config dump", host, "root", proc.returncode, proc.stdout, proc.stderr, 0.0)


def test_t1s_node_check_accepts_the_installer_registration_and_names_the_node_otherwise(containerd, tmp_path):
    """T1 (suites/test_t01_flox_shim.py) judges each node's dump with :func:`node_problems`: our handler and shim
    constants are upstream's literals, a correct node passes, a wrong runtime_type and a failed dump name the node."""
    assert (FLOX_RUNTIME_HANDLER, FLOX_SHIM_PATH) == ("flox", SHIM)
    good = tmp_path / "good.toml"
    good.write_text(node_prep_config(containerd) + INSTALLER_TABLE)
    assert node_problems("node2", _dumped(containerd, good)) == []
    bad = tmp_path / "bad.toml"
    bad.write_text(node_prep_config(containerd) + INSTALLER_TABLE.replace(SHIM, "/usr/bin/containerd-shim-runc-v2"))
    problems = node_problems("node3", _dumped(containerd, bad, "node3"))
    assert problems and all(p.startswith("node3: ") for p in problems) and "runtime_path" in problems[0], problems
    missing = _dumped(containerd, tmp_path / "absent.toml", "node4")
    assert not missing.ok and node_problems("node4", missing)[0] == "node4: containerd config dump failed"


# ------------------------------------------------------------------------------------------ broken variants
def _drop_in_never_imported(base: str, tmp: Path) -> str:
    """The old flox-runtime.sh: a conf.d drop-in, and ``imports`` left alone because ``containerd config default``
    already wrote ``imports = []`` (its ``grep -q '^imports'`` matched)."""
    (tmp / "conf.d").mkdir()
    (tmp / "conf.d" / "flox.toml").write_text(
        f'[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.flox]\n'
        f'  runtime_type = "io.containerd.flox.v2"\n  runtime_path = "{SHIM}"\n'
    )
    assert re.search(r"^imports = \[\]$", base, flags=re.M)
    return base


BROKEN = {
    # runtime_type derived from the shim's file name, as the old script did
    "runtime-type-flox-v2": (
        lambda base, tmp: base + INSTALLER_TABLE.replace('"io.containerd.runc.v2"', '"io.containerd.flox.v2"'),
        "runtime_type",
    ),
    "no-pod-annotations": (
        lambda base, tmp: base + INSTALLER_TABLE.replace('    pod_annotations = [ "flox.dev/*" ]\n', ""),
        "pod_annotations",
    ),
    "no-container-annotations": (
        lambda base, tmp: base + INSTALLER_TABLE.replace('    container_annotations = [ "flox.dev/*" ]\n', ""),
        "container_annotations",
    ),
    "annotation-pattern-too-narrow": (
        lambda base, tmp: base + INSTALLER_TABLE.replace('[ "flox.dev/*" ]', '[ "flox.dev/activate-mode" ]'),
        "does not pass flox.dev/environment",
    ),
    "no-systemd-cgroup": (
        lambda base, tmp: base + INSTALLER_TABLE.replace("    SystemdCgroup = true\n", ""),
        "SystemdCgroup",
    ),
    "wrong-shim-path": (
        lambda base, tmp: base + INSTALLER_TABLE.replace(SHIM, "/usr/bin/containerd-shim-runc-v2"),
        "runtime_path",
    ),
    "drop-in-never-imported": (_drop_in_never_imported, "no runtime table"),
}


@pytest.mark.parametrize("variant", sorted(BROKEN))
def test_the_verification_rejects_each_broken_registration(containerd, tmp_path, variant):
    make, expected = BROKEN[variant]
    config = tmp_path / "config.toml"
    config.write_text(make(node_prep_config(containerd), tmp_path))
    text = dump(containerd, config)  # containerd itself accepts every variant: only our check can catch them
    verdict = check_flox_runtime(text, "flox", SHIM)
    assert not verdict.ok, f"{variant} was accepted"
    assert any(expected in p for p in verdict.problems), verdict.problems


# ------------------------------------------------------------------------------------------ pattern semantics
@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        ("flox.dev/*", "flox.dev/environment", True),
        ("flox.dev/*", "flox.dev/a/b", False),  # Go path.Match: * does not cross /
        ("*", "flox.dev/environment", False),
        ("flox.dev/env?ronment", "flox.dev/environment", True),
        ("flox.dev/[e]nvironment", "flox.dev/environment", True),
        ("flox.dev", "flox.dev/environment", False),
    ],
)
def test_annotation_patterns_follow_go_path_match(pattern, name, matches):
    assert go_path_match(pattern, name) is matches


# ------------------------------------------------------------------------------------------ containerd floor, runc
#: Debian sid's containerd is 2.x (config version 3): the real thing for the version-3 runc table and a version
#: below the 2.2 floor. Cached apart from trixie's, so neither fixture picks up the other's .deb.
SID = "sid"
NODE_PREP = Path(__file__).resolve().parents[2] / "provision" / "guest" / "k8s-node-prep.sh"


@pytest.fixture(scope="module")
def containerd_2x(tmp_path_factory) -> Path:
    cache = CACHE / SID
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache / ".lock")):
        debs = sorted(cache.glob("containerd_*.deb"))
        deb = debs[-1] if debs else _apt_download(cache, SID)
    root = tmp_path_factory.mktemp("containerd-2x-root")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, timeout=300)
    binary = root / "usr" / "bin" / "containerd"
    assert containerd_version(binary) >= (2, 0), f"{deb.name} is not containerd 2.x"
    return binary


def version_text(binary: Path) -> str:
    return subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True).stdout


def node_prep_systemd_cgroup(config: Path) -> None:
    """Run k8s-node-prep.sh's own ``systemd_cgroup`` function (the script's text, not a copy) on ``config``."""
    text = NODE_PREP.read_text()
    function = text[text.index("systemd_cgroup() {") : text.index("\n}\n", text.index("systemd_cgroup() {")) + 3]
    subprocess.run(["bash", "-c", f'set -euo pipefail\n{function}\nsystemd_cgroup "$1"', "-", str(config)], check=True)


def test_the_version_is_read_from_real_containerd_output(containerd, containerd_2x):
    from pytest_slurmflox.substrates.qemu.containerd import containerd_version as parsed

    for binary in (containerd, containerd_2x):
        got = parsed(version_text(binary))
        assert got is not None and got[:2] == containerd_version(binary), version_text(binary)


def test_containerd_below_2_2_is_refused_by_name(containerd, containerd_2x):
    from pytest_slurmflox.substrates.qemu.containerd import containerd_problems

    for binary in (containerd, containerd_2x):
        config = binary.parent / "prep.toml"
        config.write_text(node_prep_config(binary))
        problems = containerd_problems(version_text(binary), dump(binary, config))
        assert len(problems) == 1 and "is older than 2.2 (containerd RELEASES.md)" in problems[0], problems
    # the same real 2.x text with only the version raised: the floor is the only objection
    config = containerd_2x.parent / "prep.toml"
    text = version_text(containerd_2x)
    raised = re.sub(r"\b2\.\d+\.\d+", "2.2.0", text, count=1)
    assert containerd_problems(raised, dump(containerd_2x, config)) == []


@pytest.mark.parametrize("which", ["1.7", "2.x"])
def test_runc_systemd_cgroup_is_judged_on_the_parsed_dump(containerd, containerd_2x, tmp_path, which):
    from pytest_slurmflox.substrates.qemu.containerd import runc_problems

    binary = containerd if which == "1.7" else containerd_2x
    default = subprocess.run([str(binary), "config", "default"], capture_output=True, text=True, check=True).stdout
    config = tmp_path / "config.toml"
    config.write_text(default)
    problems = runc_problems(dump(binary, config))
    assert problems and "runtimes.runc.options.SystemdCgroup is False" in problems[0], problems
    node_prep_systemd_cgroup(config)
    assert runc_problems(dump(binary, config)) == []


def test_a_default_config_without_the_key_gets_it_under_runcs_options(containerd_2x, tmp_path):
    """containerd 2.0.0 and 2.1.0 print no SystemdCgroup at all (internal/cri/config/config_unix.go at those
    tags), where the old sed silently did nothing: the key is added under runc's options table instead."""
    from pytest_slurmflox.substrates.qemu.containerd import runc_problems

    default = subprocess.run(
        [str(containerd_2x), "config", "default"], capture_output=True, text=True, check=True
    ).stdout
    config = tmp_path / "config.toml"
    config.write_text(re.sub(r"(?m)^\s*SystemdCgroup = false\n", "", default))
    assert "SystemdCgroup" not in config.read_text()
    old = tmp_path / "old.toml"
    old.write_text(config.read_text())
    subprocess.run(["sed", "-i", "s/SystemdCgroup = false/SystemdCgroup = true/", str(old)], check=True)
    assert runc_problems(dump(containerd_2x, old)), "the old sed alone would have left runc on cgroupfs"
    node_prep_systemd_cgroup(config)
    assert runc_problems(dump(containerd_2x, config)) == []
