"""The sweep: the workflow's config typed and validated, expanded into runs, one RunConfig each.

- `config`: `load_sweep` (every section, defaults from the package's classes, all problems
  reported at once); `job_resources` (a rule's snakemake resources, multi-node included);
- `runs`: `expand` (run ids), `run_config` (the documented merge order), `check_runs`;
- `provenance`: run.yaml and provenance.json;
- `docs`: config/README.md's generated reference of the run and recipe knobs.

The Snakefile's `workflow/rules/common.smk` calls these; nothing here needs snakemake.
"""

from scalerl.sweep.config import SweepConfig, job_resources, load_sweep
from scalerl.sweep.runs import Run, check_runs, expand, run_config, run_id

__all__ = ["Run", "SweepConfig", "check_runs", "expand", "job_resources", "load_sweep",
           "run_config", "run_id"]
