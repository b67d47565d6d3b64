"""``slurm.mpi``: the MPI plugin a target declares (model/mpiplugin.py), and the one each local suite declares."""

from __future__ import annotations

import pytest

from pytest_slurmflox.model.mpiplugin import DEFAULT_MPI_PLUGIN, MpiPluginError, parse_mpi_plugin
from pytest_slurmflox.model.target import parse_target, target_document
from pytest_slurmflox.substrates.local.mpistack import mpi_stack

LOGIN = {"host": "login.example", "user": "alice"}


def test_slurm_mpi_defaults_to_pmix_and_refuses_what_is_not_a_plugin_name():
    assert parse_mpi_plugin(None) == DEFAULT_MPI_PLUGIN == "pmix"
    assert parse_mpi_plugin("pmix_v5") == "pmix_v5"
    for bad in ("--mpi=pmix", "PMIx", "pmi2 ", 2, "a" * 33):
        with pytest.raises(MpiPluginError, match=r"slurm\.mpi"):
            parse_mpi_plugin(bad)


def test_each_local_suite_declares_the_plugin_its_mpi_starts_under():
    assert mpi_stack("trixie").plugin == mpi_stack("bookworm").plugin == "pmix"
    assert mpi_stack("sid").plugin == "pmi2" and "mpich" in mpi_stack("sid").node_packages
    assert not any("openmpi" in p for p in mpi_stack("sid").node_packages + mpi_stack("sid").builder_packages)


def test_a_declared_plugin_round_trips_and_the_default_is_not_written():
    assert parse_target({"login": LOGIN}).mpi == "pmix"
    spec = parse_target({"login": LOGIN, "slurm": {"mpi": "pmi2"}})
    assert spec.mpi == "pmi2" and target_document(spec)["slurm"]["mpi"] == "pmi2"
    assert "mpi" not in target_document(parse_target({"login": LOGIN}))["slurm"]
