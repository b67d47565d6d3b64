"""``slurm.parse_kv_line``: one ``scontrol -o show`` line into fields, by its continuation rule.

The real lines in ``data/scontrol-o-show-node-job-<version>-local.txt`` were printed by the local substrate's
Slurm (Debian trixie's 24.11.5, bookworm's 22.05.8) for a drained node and a running job whose name, comment and
script name hold spaces and ``key=value`` text (the capture: a job submitted as ``sbatch -J 'cap job a=b'
--comment='note x=1 y' './my job.sh'``, the node drained with reason ``Kill task failed [root@...] x=1``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_slurmflox.cluster.slurm import parse_kv_line

DATA = Path(__file__).resolve().parents[1] / "data"


def _captured(version: str) -> tuple[dict[str, str], dict[str, str]]:
    node, job = (DATA / f"scontrol-o-show-node-job-{version}-local.txt").read_text().splitlines()
    return parse_kv_line(node), parse_kv_line(job)


# ----------------------------------------------------------------------------------------- the rule itself
def test_text_up_to_the_next_field_continues_the_value():
    assert parse_kv_line("JobId=7 JobName=two words Partition=all") == {
        "JobId": "7",
        "JobName": "two words",
        "Partition": "all",
    }


def test_the_double_space_where_scontrol_joined_its_lines_is_no_part_of_a_value():
    kv = parse_kv_line("NodeName=w1 CoresPerSocket=1  CPUAlloc=0 Partitions=all  BootTime=None ")
    assert kv == {"NodeName": "w1", "CoresPerSocket": "1", "CPUAlloc": "0", "Partitions": "all", "BootTime": "None"}


def test_lower_case_key_value_text_inside_a_value_stays_in_it():
    kv = parse_kv_line("Comment=note x=1 y  StdErr=/dev/null")
    assert kv == {"Comment": "note x=1 y", "StdErr": "/dev/null"}


def test_values_holding_equals_signs_and_empty_values():
    kv = parse_kv_line("CfgTRES=cpu=2,mem=1G,billing=2 AllocTRES= CurrentWatts=0")
    assert kv == {"CfgTRES": "cpu=2,mem=1G,billing=2", "AllocTRES": "", "CurrentWatts": "0"}


def test_keys_spelled_with_colons_and_slashes():
    kv = parse_kv_line("AllocNode:Sid=login:140 CPUs/Task=1 ReqB:S:C:T=0:0:*:* Socks/Node=*")
    assert kv == {"AllocNode:Sid": "login:140", "CPUs/Task": "1", "ReqB:S:C:T": "0:0:*:*", "Socks/Node": "*"}


def test_a_field_after_a_value_ending_in_a_backslash_is_text():
    kv = parse_kv_line(r"Command=/opt/a\ Mode=x WorkDir=/w")
    assert kv == {"Command": r"/opt/a\ Mode=x", "WorkDir": "/w"}


def test_text_before_the_first_field_and_an_empty_line():
    assert parse_kv_line("  noise NodeName=w1") == {"NodeName": "w1"}
    assert parse_kv_line("") == {}


# ----------------------------------------------------------------------------------------- real lines
@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_a_drained_nodes_line(version: str):
    node, _ = _captured(version)
    assert node["NodeName"] == "worker1" and node["State"] == "MIXED+DRAIN+DYNAMIC_NORM"
    assert node["Reason"].startswith("Kill task failed [root@2026-12-02T15:00:00] x=1 [root@")
    assert node["OS"] == "Linux 6.18.44-fc-v1045 #1 SMP PREEMPT_DYNAMIC @0"
    assert (node["CPUTot"], node["RealMemory"], node["Partitions"]) == ("2", "1024", "all")
    assert node["CfgTRES"] == "cpu=2,mem=1G,billing=2" and node["CoresPerSocket"] == "1"
    assert "x" not in node


@pytest.mark.parametrize(("version", "command"), [("22.05", "./my job.sh arg1 two words"), ("24.11", "./my job.sh")])
def test_a_running_jobs_line(version: str, command: str):
    """22.05 prints the script's arguments after it (and ends on an empty ``Power=``); 24.11 the script alone."""
    _, job = _captured(version)
    assert (job["JobId"], job["JobState"], job["NodeList"]) == ("1", "RUNNING", "worker1")
    assert job["JobName"] == "cap job a=b" and job["Comment"] == "note x=1 y"
    assert job["Command"] == command and job["WorkDir"] == "/home/slurmtest/cap"
    assert job["StdOut"] == "/dev/null" and job["UserId"] == "slurmtest(4001)"
    assert not {"a", "x"} & set(job)
