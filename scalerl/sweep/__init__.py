"""The sweep: the workflow's config typed and validated, expanded into runs, one RunConfig each.

- `config`: `load_sweep` (every section, defaults from the package's classes, all problems
  reported at once); `job_resources` (a rule's snakemake resources, multi-node included);
  `LengthConfig` (a generation length's recipe budgets);
- `runs`: `expand` (run ids), `run_recipe` (a run's recipe: the one merge, its documented
  order), `run_config` (the run's RunConfig around it), `check_runs`;
- `options`: the options of `scalerl fit`, `predict`, `race` and `report` that the sweep
  decides (compute column, run coordinates, seed cells, report axes);
- `provenance`: run.yaml and provenance.json;
- `docs`: config/README.md's generated reference of the run and recipe knobs.

The workflow's `workflow/rules/common.smk` calls these; nothing here needs snakemake.
"""

from scalerl.sweep.config import LengthConfig, SweepConfig, job_resources, load_sweep
from scalerl.sweep.options import (
    fit_options,
    predict_options,
    race_options,
    report_options,
    sweep_mates,
)
from scalerl.sweep.runs import AXES, Run, check_runs, expand, run_config, run_id, run_recipe

__all__ = ["AXES", "LengthConfig", "Run", "SweepConfig", "check_runs", "expand", "fit_options",
           "job_resources", "load_sweep", "predict_options", "race_options", "report_options",
           "run_config", "run_id", "run_recipe", "sweep_mates"]
