"""Examples of a site's own checks, shipped in the wheel and run with ``pytest --pyargs pytest_slurmflox.examples
--slurmflox-target=FILE`` (docs/site-checks.md); they may import nothing of the package: they use its fixtures."""
