"""Files the workflow writes before the jobs: per-job YAML, run.yaml and provenance.json.

`write_yaml` writes a job's config (model.yaml, data.yaml), `write_run_yaml` a RunConfig as
YAML; `provenance_record` is what was run and with what: the run config (its recipe whole, as
the sweep merged it), the config hash that `scalerl train` and
`scalerl eval` store in their outputs (`scalerl.config.config_hash` of the RunConfig, so files
can be matched to this record), the sweep config's hash, package version, git commit, Python
and every installed distribution. Both are written atomically (`scalerl.utils.io`).

Deliberately left out: hardware inventory (the trainer's steps.parquet records devices).
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from scalerl.config import config_hash
from scalerl.rl.run_config import RunConfig
from scalerl.utils.io import write_json_atomic, write_text_atomic

__all__ = ["installed_packages", "provenance_record", "write_provenance", "write_run_yaml",
           "write_yaml"]


def write_yaml(path: str | Path, data: Any) -> None:
    """`data` as YAML at `path`, keys in their given order, written atomically."""
    write_text_atomic(path, yaml.safe_dump(data, sort_keys=False, default_flow_style=None))


def write_run_yaml(path: str | Path, run_cfg: RunConfig) -> None:
    """`run_cfg` as YAML at `path` (every field, in declaration order)."""
    write_yaml(path, run_cfg.to_dict())


def git_commit(repo: str | Path) -> str:
    """HEAD of the repository at `repo`, or "unknown"."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def installed_packages() -> dict[str, str]:
    """name -> version of every installed distribution (a `pip freeze` without pip)."""
    dists = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            dists[name] = dist.version
    return dict(sorted(dists.items(), key=lambda kv: kv[0].lower()))


def _scalerl_version() -> str:
    try:
        return importlib.metadata.version("scalerl")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def provenance_record(run_cfg: RunConfig, sweep_data: dict[str, Any],
                      repo: str | Path) -> dict[str, Any]:
    """The provenance record of one run (see the module docstring)."""
    return {
        "run": run_cfg.run,
        "config_hash": config_hash(run_cfg),
        "run_config": run_cfg.to_dict(),
        "sweep_config_hash": config_hash(dict(sweep_data)),
        "scalerl_version": _scalerl_version(),
        "git_commit": git_commit(repo),
        "python": sys.version.split()[0],
        "packages": installed_packages(),
    }


def write_provenance(path: str | Path, run_yaml: str | Path, sweep_data: dict[str, Any],
                     repo: str | Path) -> None:
    """provenance.json of the run whose run.yaml is `run_yaml`."""
    run_cfg = RunConfig.from_dict(yaml.safe_load(Path(run_yaml).read_text()))
    write_json_atomic(path, provenance_record(run_cfg, sweep_data, repo))
