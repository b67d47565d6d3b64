"""What a run reports: the report writer (HTML, JUnit, evidence.json), its run directory and fragments, schema
checks, the timeline, environment facts, the sign-off verdict and the profiles it requires, the run's outcome
records and the session state the writer is handed. It may import ``model`` and ``base`` only.
"""
