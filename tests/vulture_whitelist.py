"""Names vulture cannot see being used (read by tests/unit/test_dead_code.py; never imported). Each says who uses it.

Hooks (``pytest_*``) and fixtures (``@pytest.fixture``) are excluded by the test's options, not listed here.
"""
# ruff: noqa: F821, B018

_.postfix  # report.ReportWriter.pytest_html_results_summary: a hook parameter, pluggy passes it by name
_.tx  # concurrency.apply_default_workers sets config.option.tx: pytest-xdist reads it
_.self_contained_html  # report.register_report_writer sets it: pytest-html reads it
_.__test__  # render/values.test_identity_files.__test__ = False: pytest reads it (not a test)
_.activation  # expectations.Runtime field: filled from the runtime record (dataclass constructor by keyword)
_.expected_slurm  # settings.Settings field: a setting key (EXPECTED_SLURM), read through the key table
_.flox_env  # revision.RuntimeSpec fields: hashed by asdict() into the runtime revision
_.flox_generation  # revision.RuntimeSpec (as above)
_.task_profile_schema  # revision.RuntimeSpec (as above)
_.path_precedence  # revision.RuntimeSpec (as above)
_.store_verification  # local/pool.LocalWorkerPool: suites/_nixstore.py finds it with getattr (issue 28: an ABC)
# lifecycle.Reconciler's steps: run() calls getattr(self, "_" + step) for each name in STEPS
_._partition_down
_._drain
_._wait_running
_._apply
_._verify_workers
_._verify_profiles
_._repair_stale
_._wait_registered
_._resume
_._verify_usable
_._reopen
# harness/sitehosts.py: testinfra's backend API, called by testinfra (BaseBackend.NAME, get_encoding), and the
# site-check API a site's own test module calls (Workers.gather; pytest_slurmflox/examples uses it)
_.NAME
_.get_encoding
_.gather
