"""Memory planner: will a run (or every run of a sweep) fit its devices? `scalerl plan`.

- `scalerl.plan.arch`: model architecture numbers (`ModelArch`, `resolve_arch`, Qwen3 table).
- `scalerl.plan.memory`: `PlanInputs` and every memory term with its formula.
- `scalerl.plan.check`: `check_fits(inputs) -> PlanReport`, the problems and the knobs.
- `scalerl.plan.adapters`: run.yaml / sweep config -> PlanInputs, and `preflight` for
  `scalerl train`.
- `scalerl.plan.cli`: `scalerl plan --config RUN_OR_SWEEP.yaml --gpu-mem 80GB`.
- `scalerl.plan.measure`: `LiveBytes`, live tensor bytes of real code (checks the formulas).

Deliberately left out: measuring the device while planning; the planner is arithmetic over
the configs, so it runs anywhere in well under a second per run.
"""

from scalerl.plan.adapters import (
    PlanError,
    plan_inputs_from_run,
    plan_inputs_from_sweep,
    preflight,
    sweep_runs,
)
from scalerl.plan.arch import PUBLIC_ARCHS, ModelArch, resolve_arch
from scalerl.plan.check import PlanReport, check_fits
from scalerl.plan.memory import PlanInputs

__all__ = ["ModelArch", "PUBLIC_ARCHS", "PlanError", "PlanInputs", "PlanReport", "check_fits",
           "sweep_runs", "plan_inputs_from_run", "plan_inputs_from_sweep",
           "preflight", "resolve_arch"]
