"""Site access (pytest_slurmflox/model/siteaccess.py, issue 38): the target's account, QOS, reservation and extra
options
are validated where the target is parsed, written back by the one serializer, and carried by every job a check
places (submit.Jobs), as argv words that no shell reads as syntax."""

from __future__ import annotations

import shlex

import pytest
from pytest_slurmflox.suites._reservation import Reserved

from pytest_slurmflox.base.run import Result
from pytest_slurmflox.cluster.submit import Jobs
from pytest_slurmflox.model.siteaccess import SiteAccess, parse_site_access
from pytest_slurmflox.model.target import TargetError, parse_target, target_document

LOGIN = {"host": "login.example", "user": "alice", "key": "/k"}
SITE = {"partition": "batch", "account": "platform", "qos": "acceptance", "reservation": "handover"}


def test_declared_site_access_is_parsed_and_written_back():
    extra = ["--constraint=skylake&ib", "--comment=acceptance run; $(id)"]
    spec = parse_target({"login": LOGIN, "slurm": {**SITE, "extra_args": extra}})
    assert spec.site == SiteAccess("platform", "acceptance", "handover", tuple(extra))
    assert spec.site.options == (
        "--account=platform",
        "--qos=acceptance",
        "--reservation=handover",
        *extra,
    )
    assert spec.site.job_fields() == {"account": "platform", "qos": "acceptance", "reservation": "handover"}
    doc = target_document(spec)
    assert doc["slurm"] == {**SITE, "extra_args": extra}
    assert parse_target(doc).site == spec.site


def test_a_target_without_site_access_places_jobs_as_before():
    spec = parse_target({"login": LOGIN, "slurm": {"partition": "batch"}})
    assert spec.site == SiteAccess() and spec.site.options == () and spec.site.job_fields() == {}
    assert target_document(spec)["slurm"] == {"partition": "batch"}


@pytest.mark.parametrize(
    ("slurm", "named"),
    [
        ({"account": "-A x"}, "slurm.account"),
        ({"account": "a b"}, "slurm.account"),
        ({"qos": 7}, "slurm.qos"),
        ({"reservation": "r;rm -rf /"}, "slurm.reservation"),
        ({"extra_args": "--constraint=x"}, "slurm.extra_args"),
        ({"extra_args": ["constraint=x"]}, "slurm.extra_args"),
        ({"extra_args": ["--comment=a\nb"]}, "slurm.extra_args"),
        ({"extra_args": ["--account=other"]}, "declare slurm.account"),
        ({"extra_args": ["--acc=other"]}, "declare slurm.account"),  # getopt_long's unambiguous prefix
        ({"extra_args": ["-Jname"]}, "-J"),
        ({"extra_args": ["--output=/tmp/x"]}, "--output"),
        ({"extra_args": ["--export=ALL"]}, "--export"),
    ],
)
def test_bad_site_access_is_refused_in_one_line_naming_the_key(slurm, named):
    with pytest.raises(TargetError) as info:
        parse_target({"login": LOGIN, "slurm": {"partition": "batch", **slurm}})
    assert named in str(info.value) and "\n" not in str(info.value)


class _Login:
    """A login runner that records the command lines it is given and answers each with success."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def run(self, line: str, *args: object, **_kw: object) -> Result:
        self.lines.append(" ".join([line, *(shlex.quote(str(a)) for a in args)]))
        return Result(line, "login", "alice", 0, "/home/alice/slurmflox-runs/r1\n", "", 0.0)


class _Slurm:
    def __init__(self, login: _Login) -> None:
        self.user = login
        self.options: list[tuple[str, ...]] = []

    def sbatch(self, script: str, *options: str) -> str:
        self.options.append(options)
        return "42"


def test_every_job_a_check_places_carries_the_site_access_as_argv_words():
    login = _Login()
    slurm = _Slurm(login)
    site = parse_site_access({**SITE, "extra_args": ["--comment=acceptance run; $(id)"]})
    target = type("T", (), {"login": login, "slurm": slurm, "spec": parse_target({"login": LOGIN, "slurm": SITE})})()
    jobs = Jobs(login, slurm, "r1", "T4", partition="batch", site=site)  # type: ignore[arg-type]
    assert jobs.placement == ("--partition=batch", *site.options)
    assert Jobs.of(target, "r1", "T4").site == parse_site_access(SITE)
    jobs.sbatch("#!/bin/bash\ntrue\n", "-N1")
    assert slurm.options[-1][1 : 1 + len(jobs.placement)] == jobs.placement and slurm.options[-1][-1] == "-N1"
    jobs.srun("-N1 -n1", "true")
    words = shlex.split(login.lines[-1])
    assert words[:3] == ["srun", "-J", jobs.name] and words[3 : 3 + len(jobs.placement)] == list(jobs.placement)
    jobs.sbatch_chain([("a", "#!/bin/bash\ntrue\n", ("--hold",))])
    assert all(shlex.quote(word) in login.lines[-1] for word in jobs.placement)


@pytest.mark.parametrize(
    ("inside", "outside"),
    [("reserved", "idle"), ("mixed", "mixed"), ("allocated", "allocated"), ("idle$", "idle"), ("reserved*", "idle*")],
)
def test_a_node_of_our_own_reservation_reads_as_it_would_outside_it(inside, outside):
    assert Reserved.state(inside) == outside
