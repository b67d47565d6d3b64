"""In-repo runs only: the project's own tests use pytester to drive the plugin in a subprocess-free session.

The plugin itself is loaded through its ``pytest11`` entry point (``pip install -e .``), exactly as a user's
installation loads it, so the tests exercise the real registration path.
"""

pytest_plugins = ["pytester"]
