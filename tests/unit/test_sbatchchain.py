"""One command submits a chain of batch scripts (#29): quoting, order, priors, and only our own lines are read.

The command is run by a real bash; ``sbatch`` there is a shell function of this test that records what it was
given (its arguments, one per line, and the script on its stdin) and answers an id, or refuses where told to. What
Slurm does with the jobs is the acceptance runs' business (T7 judges the jobs submitted this way)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pytest_slurmflox.cluster.sbatchchain import ChainEntry, chain_command, chain_ids

#: Records each call in $LOG (args, then the script), answers 100, 101, ... (``id;cluster`` as a federation
#: would); refuses when an argument is --refuse.
SBATCH = r"""
sbatch() {  # called in $(...), a subshell: the count lives in the log
  n=$((100 + $(grep -c ^ARGS "$LOG")))
  for a in "$@"; do [ "$a" = --refuse ] && { echo "sbatch: error: refused" >&2; return 1; }; done
  { printf 'ARGS'; printf ' [%s]' "$@"; printf '\n'; cat; printf 'END\n'; } >> "$LOG"
  echo "$n;cluster"
}
echo "a login profile that prints 1 999"
"""


def _run(entries: list[ChainEntry], tmp_path: Path) -> tuple[list[str | None], str]:
    command, mark = chain_command(entries)
    log = tmp_path / "log"
    log.touch()
    res = subprocess.run(
        ["bash", "-c", SBATCH + command], capture_output=True, text=True, env={"LOG": str(log)}, check=True
    )
    return chain_ids(res.stdout, mark, len(entries)), log.read_text()


def test_values_arrive_as_given_and_a_later_entry_gets_the_earlier_id(tmp_path):
    hostile = "--comment=it's $(touch /tmp/sfx-owned) `x` ;|&"
    entries = [
        ChainEntry("#!/bin/bash\necho \"$HOME\" '$x'\n", ("--job-name=sfx-a", hostile)),
        ChainEntry("#!/bin/bash\nexit 0", ("--dependency=afterok:{prior:0}",)),
    ]
    ids, log = _run(entries, tmp_path)
    assert ids == ["100", "101"]  # the profile's "1 999" line is not ours: not read
    first, second = log.split("END\n")[:2]
    assert first == f"ARGS [--parsable] [--job-name=sfx-a] [{hostile}]\n#!/bin/bash\necho \"$HOME\" '$x'\n"
    assert second == "ARGS [--parsable] [--dependency=afterok:100]\n#!/bin/bash\nexit 0\n"
    assert not Path("/tmp/sfx-owned").exists()


def test_a_refused_entry_is_none_and_what_names_it_is_not_sent(tmp_path):
    entries = [
        ChainEntry("#!/bin/bash\n", ("--refuse",)),
        ChainEntry("#!/bin/bash\n", ("--dependency=afterok:{prior:0}",)),
        ChainEntry("#!/bin/bash\n", ("--time=1",)),
    ]
    ids, log = _run(entries, tmp_path)
    assert ids == [None, None, "100"]
    assert log.count("ARGS") == 1 and "[--time=1]" in log


def test_a_prior_must_come_before_and_a_script_cannot_end_the_here_document():
    with pytest.raises(ValueError, match="not before it"):
        chain_command([ChainEntry("#!/bin/bash\n", ("--dependency=afterok:{prior:0}",))])
    with pytest.raises(ValueError, match="delimiter"):
        chain_command([ChainEntry("#!/bin/bash\nSFX_EOF_m_0\n")], mark="m")


def test_a_missing_or_foreign_line_reads_as_not_submitted():
    assert chain_ids("m 0 12\nm 1\nother 2 13\nm 7 14\n", "m", 3) == ["12", None, None]
