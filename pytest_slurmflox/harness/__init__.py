"""The run, pytest's side: the session and its stateful hooks, fixtures, the option table, selection and order
(concurrency, early jobs, throwaway workers), the verbs and ``up`` (deploy, a failed up), the connection to the live
target and its reach, the sweep at session end, and the target doctor. It may import ``reporting``, ``cluster``,
``judges``, ``model``, ``base`` and, only inside functions, ``substrates``; nothing imports it but ``plugin`` and
the suites.
"""
