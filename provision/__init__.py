"""Files that run elsewhere: the task-profile initializer, the TaskProlog and the guest scripts.

Not Python: a package only so that ``importlib.resources.files("pytest_slurmflox.provision")`` finds them both in
the checkout (top-level ``provision/``, mapped by pyproject's package-dir) and in an installed wheel.
"""
