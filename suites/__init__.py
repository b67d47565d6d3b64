"""The acceptance suites, one module per group. Run them from an installed wheel with
``pytest --pyargs pytest_slurmflox.suites --slurmflox-target=FILE``."""
