"""The Slurm MPI plugin the cluster's MPI programs start under: the target key ``slurm.mpi``.

An MPI program runs "in the normal Slurm model" when ``srun --mpi=<plugin>`` starts its ranks and the MPI library
wires them up through that plugin's PMI (PMIx, PMI-2 or PMI-1). Which plugin a site's MPI needs is the site's
declaration, not something a check may read off the cluster (``MpiDefault`` or ``srun --mpi=list`` say what the
cluster offers, which is what T6 judges): T6 and TB launch with the declared plugin and T6 FAILs when the cluster does
not offer it. Slinky's slurmd images and Debian's Slurm up to 25.x build mpi/pmix, so a target that does not say is
judged with ``pmix``; the local substrate's sid image declares ``pmi2`` (substrates/local/mpistack.py says why).
"""

from __future__ import annotations

import re

DEFAULT_MPI_PLUGIN = "pmix"
#: A Slurm MPI plugin name as ``srun --mpi`` takes it (pmix, pmix_v5, pmi2, cray_shasta, none): never an option.
PLUGIN_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,31}")


class MpiPluginError(ValueError):
    """``slurm.mpi`` is unusable; the message names it."""


def parse_mpi_plugin(value: object) -> str:
    """``slurm.mpi`` from the target file: the plugin name, DEFAULT_MPI_PLUGIN when absent."""
    if value is None:
        return DEFAULT_MPI_PLUGIN
    if not isinstance(value, str) or not PLUGIN_PATTERN.fullmatch(value):
        raise MpiPluginError(
            f"slurm.mpi {value!r} is refused: a Slurm MPI plugin name as srun --mpi takes it (e.g. pmix, pmi2): "
            "1-32 of a-z 0-9 _, starting with a letter"
        )
    return value
