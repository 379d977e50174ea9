"""The sandbox child's source files: read as text, never imported (scalerl.rewards.sandbox).

`scalerl.rewards.sandbox` joins them into the one `python -I -S -c` program the child runs, in
this order: `pytest_shim.py` (as the string `_PYTEST_SHIM`), `program_tests.py` (the
program-test runner), `harness.py` (confinement, the fork server, the run). A file may use a
name that an earlier file of the program defines, so pyflakes' undefined-name check (F821) is
off for this folder only (pyproject.toml, `[tool.ruff.lint.per-file-ignores]`); the child has
the standard library only, so none of them imports `scalerl`.

This folder is a package only so that installs carry the files; importing its modules would
run nothing useful.
"""
