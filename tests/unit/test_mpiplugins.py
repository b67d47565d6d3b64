"""What ``srun --mpi=list`` offers, read from Slurm's own output shapes (judges/mpiplugins.py)."""

from __future__ import annotations

from pytest_slurmflox.judges.mpiplugins import offered_plugins

# src/common/plugrack.c plugrack_print_mpi_plugins, as printed by trixie's 24.11.5 (Debian builds mpi/pmix)
TRIXIE = (
    "MPI plugin types are...\n\tnone\n\tcray_shasta\n\tpmi2\n\tpmix\nspecific pmix plugin versions available: pmix_v5\n"
)
# sid's 26.05.5-1: no mpi/pmix plugin in any package
SID = "MPI plugin types are...\n\tnone\n\tcray_shasta\n\tpmi2\n"


def test_the_plugins_slurm_lists_are_read_with_the_versioned_pmix_ones():
    assert offered_plugins(TRIXIE) == ["none", "cray_shasta", "pmi2", "pmix", "pmix_v5"]
    assert offered_plugins(SID) == ["none", "cray_shasta", "pmi2"]
    assert offered_plugins("specific pmix plugin versions available: pmix_v4,pmix_v5\n") == []


def test_slurm_up_to_21_08_logged_the_list_through_info_on_stderr():
    """src/common/plugrack.c of slurm-20-11-9-1: ``info("MPI types are...")`` then ``info("%s", name)``."""
    old = "srun: MPI types are...\nsrun: none\nsrun: pmi2\nsrun: pmix\nsrun: pmix_v3\n"
    assert offered_plugins(old) == ["none", "pmi2", "pmix", "pmix_v3"]


def test_a_sites_profile_printing_around_the_list_adds_no_plugin():
    noisy = "Welcome to the cluster\n\tpmix\n" + SID + "-- motd --\n\tpmix\n"
    assert "pmix" not in offered_plugins(noisy)
    assert offered_plugins("\tpmix\n") == []  # no header: nothing was listed
