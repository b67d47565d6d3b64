"""The MPI stack of a local node image: the library its workers compile with and the Slurm plugin that starts it.

A cluster runs MPI "in the normal Slurm model" when ``srun --mpi=<plugin>`` starts the ranks and the MPI library
wires them up through that plugin (Slurm's mpi_guide: "Slurm directly launches the tasks and performs initialization
of communications through the PMI-1, PMI-2 or PMIx APIs"). Which plugin and which library belong together is a fact
of the suite's packages, so it is decided here, once per suite, and the target file the substrate writes declares the
plugin (``slurm.mpi``): T6 and TB launch with what the target declares, never with what they find.

- bookworm (22.05) and trixie (24.11): Debian builds mpi/pmix (slurm-wlm-basic-plugins depends on libpmix) and Open
  MPI speaks PMIx: ``srun --mpi=pmix``.
- sid (26.05.5-1): Debian builds no mpi/pmix any more (``srun --mpi=list``: none, cray_shasta, pmi2; no package of the
  source's Package-List ships it, and the mirror serves no 26.05 source to build it from), and sid's Open MPI
  6.0.0~rc2 speaks only PMIx (measured: under ``--mpi=pmi2`` it started one singleton world per worker). MPICH
  5.0.2's built-in PMI client speaks the PMI-1 wire protocol over the ``PMI_FD`` that Slurm's mpi/pmi2 plugin hands
  each task (src/plugins/mpi/pmi2/ serves PMI-1 and PMI-2 commands on one socket; Slurm's mpi_guide, "MPICH": ``srun
  --mpi=pmi2``). Measured on sid's 26.05.5: one 2-rank world across two workers, an allreduce and T6's talking
  program's ring and pairs. So sid's image carries MPICH, not Open MPI (both would fight over the ``mpicc``
  alternative), and declares ``pmi2``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MpiStack:
    """An MPI library and the Slurm MPI plugin that starts it."""

    plugin: str  #: ``srun --mpi=<plugin>``; the target file's ``slurm.mpi``
    node_packages: tuple[str, ...]  #: what the node image installs (the workers compile T6's program with its mpicc)
    builder_packages: tuple[str, ...]  #: what the builder chroot compiles ``mpi-hello`` with
    label: str  #: shown in the image build's progress


OPENMPI_PMIX = MpiStack(
    "pmix", ("openmpi-bin", "libopenmpi-dev", "libpmix-dev"), ("libopenmpi-dev", "openmpi-bin"), "openmpi+pmix"
)
MPICH_PMI2 = MpiStack("pmi2", ("mpich", "libmpich-dev"), ("mpich", "libmpich-dev"), "mpich+pmi2")

#: The stack of each suite the local substrate builds (see the module docstring for why sid differs).
SUITE_MPI = {"bookworm": OPENMPI_PMIX, "trixie": OPENMPI_PMIX, "sid": MPICH_PMI2}


def mpi_stack(suite: str) -> MpiStack:
    """The MPI stack of ``suite``'s node image (Open MPI with PMIx unless SUITE_MPI says otherwise)."""
    return SUITE_MPI.get(suite, OPENMPI_PMIX)
