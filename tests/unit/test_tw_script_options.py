"""TW submits a customer's script unchanged: the check adds only options the script's own #SBATCH lines lack."""

from __future__ import annotations

import pytest
from pytest_slurmflox.suites.test_tw_workloads import script_sets


@pytest.mark.parametrize(
    ("script", "sets"),
    [
        ("#!/bin/bash\n#SBATCH --ntasks=1\necho hi\n", set()),
        (
            "#!/bin/bash\n#SBATCH -J mine\n#SBATCH --partition=gpu\n#SBATCH -o out-%j.txt\n",
            {"job-name", "partition", "output"},
        ),
        ("#!/bin/bash\n#SBATCH --job-name=x --output=y\n", {"job-name", "output"}),
        ("#!/bin/bash\n#SBATCH -Jname\n", {"job-name"}),
        ("#!/bin/bash\n# a comment\n#SBATCH -p debug\n", {"partition"}),
        # directives end at the first command: a later #SBATCH line is not read by sbatch either
        ("#!/bin/bash\necho start\n#SBATCH --partition=late\n", set()),
        ("#!/bin/bash\n#SBATCH --open-mode=append\n#SBATCH --output-format=x\n", set()),
    ],
)
def test_script_sets(script, sets):
    assert script_sets(script) == sets
