"""SweepConfig: the workflow's config file (config/config.yaml, config/gpu.yaml), typed.

`load_sweep(mapping)` validates a whole sweep config and fills every default from the
package's own config classes (docs/design.md, "Sweep"), so the workflow's JSON schema keeps
only what snakemake itself needs (`results_dir`, `resources`). Sections:

- `data.config`: a `scalerl.data.config.DataConfig` mapping (`scalerl data`);
- `models.<name>`: `config` (a `BaseConfig` mapping for `scalerl base`) and
  `recipe_overrides` (RecipeConfig fields for that model's runs);
- `recipes.<name>`: `preset` + `overrides`; a name of `sweep.recipes` not defined here must be
  a preset;
- `mixes.<name>`: task weights (`TaskWeights`);
- `sweep`: the grid (`Grid`) and `racing` (off by default);
- `length`: how `sweep.gen_lens` become length budgets (`LengthConfig`);
- `train`: `chunks`, `steps_per_chunk` (one integer or one per chunk), `recipe_overrides`
  (every run), plus any `RunConfig` field the sweep does not set itself;
- `eval`: `EvalConfig` fields plus `downstream` sets and `downstream_chunks`;
- `fit`, `resources`.

Every problem found is reported at once, one line each, naming the key and the fix
(`ConfigError`). Deliberately left out: expanding the grid into runs (`scalerl.sweep.runs`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from scalerl.config import Config, ConfigError, field_
from scalerl.rl.run_config import EvalConfig, LengthConfig, RunConfig, TaskWeights
from scalerl.tasks.loaders import FORMATS

__all__ = ["SweepConfig", "job_resources", "load_sweep", "NAME_PATTERN", "SWEEP_RECIPE_FIELDS",
           "RUN_FIELDS_SET_BY_SWEEP"]

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*$")
# Recipe fields that the sweep itself sets (batch shape; the length budgets come from gen_len).
SWEEP_RECIPE_FIELDS = ("prompts_per_step", "generations_per_prompt", "think_budget",
                       "answer_budget", "length_penalty")
# RunConfig fields that the sweep writes for each run (not settable under `train`).
RUN_FIELDS_SET_BY_SWEEP = ("run", "seed", "model", "base", "prompts", "gen_len", "length",
                           "recipe", "task_weights", "eval", "steps_per_chunk", "chunk_steps")
TRAIN_SWEEP_KEYS = ("chunks", "steps_per_chunk", "recipe_overrides")
SECTIONS = ("results_dir", "data", "models", "recipes", "mixes", "sweep", "length", "train",
            "eval", "fit", "resources")
RULES = ("data", "base", "train", "eval", "fit", "report")


@dataclasses.dataclass(frozen=True)
class ModelEntry(Config):
    """How `scalerl base` builds one model, and recipe overrides for its runs."""

    config: dict[str, Any] = field_(default_factory=dict,
                                    doc="the BaseConfig given to `scalerl base`")
    recipe_overrides: dict[str, Any] = field_(
        default_factory=dict, doc="RecipeConfig overrides for this model's runs, applied after "
        "train.recipe_overrides and before the recipe's own")


@dataclasses.dataclass(frozen=True)
class RecipeEntry(Config):
    """A named recipe: a preset of scalerl.rl.recipe plus RecipeConfig overrides."""

    preset: str = field_("scalerl", "a preset (scalerl, loo-*, deepseek-grpo, ...)")
    overrides: dict[str, Any] = field_(default_factory=dict,
                                       doc="RecipeConfig fields replacing the preset's")


@dataclasses.dataclass(frozen=True)
class Racing(Config):
    """Stop runs whose predicted ceiling is clearly below the best (off by default)."""

    enabled: bool = field_(False, "stop runs after a chunk when their A upper bound is below "
                           "the best run's A lower bound minus margin")
    margin: float = field_(0.02, "margin on A (paper: 0.02)", ge=0)
    min_fraction: float = field_(0.3, "compute fraction before any run may be stopped",
                                 ge=0, le=1)
    task: str = field_("math", "the task whose A is compared", choices=("math", "code"))


@dataclasses.dataclass(frozen=True)
class Grid(Config):
    """The grid: every combination is one run (id in `scalerl.sweep.runs.run_id`)."""

    models: tuple[str, ...] = field_((), "names from `models`")
    gen_lens: tuple[int, ...] = field_((), "generation lengths L (thinking + answer tokens)")
    recipes: tuple[str, ...] = field_(("scalerl",), "names from `recipes` or preset names")
    batches: tuple[str, ...] = field_(("48x16",), 'batch shapes "PROMPTSxGENERATIONS" '
                                      "(paper: 48x16)")
    seeds: tuple[int, ...] = field_((0,), "seeds (several give error bars)")
    mixes: tuple[str, ...] = field_(("mc",), "names from `mixes`; the run id carries the mix "
                                    "only when there are several")
    racing: Racing = field_(default_factory=Racing, doc="early stopping of clearly worse runs")


@dataclasses.dataclass(frozen=True)
class Downstream(Config):
    """An extra prompt file evaluated on some checkpoints (AIME-, LiveCodeBench-style)."""

    path: str = field_("", "Parquet or JSONL with prompts.parquet columns (split optional), "
                       "or a dataset in the layout `format` names")
    format: str = field_("", "the file's upstream layout, converted as `scalerl data` does "
                         "(humaneval, mbpp, acecode, kodcode graded by test programs; "
                         "deepcoder, taco, apps, polaris); '' = prompts.parquet columns",
                         choices=("", *FORMATS))
    max_prompts: int = field_(0, "prompts per task (0 = all)", ge=0)


@dataclasses.dataclass(frozen=True)
class FitSection(Config):
    """Sigmoid fits per run (`scalerl fit`) and the sweep report (`scalerl report`)."""

    group_by: str = field_("task", "eval column whose groups get separate fits")
    compute: str = field_("flops", "compute axis of the fits", choices=("flops", "device_hours"))
    extra_args: tuple[str, ...] = field_((), "further `scalerl fit` options, verbatim")
    predict_args: tuple[str, ...] = field_(
        (), "further `scalerl predict` options, verbatim (e.g. [--bootstrap, '50'])")


@dataclasses.dataclass(frozen=True)
class RuleResources(Config):
    """Resources of one rule (local scheduling and cluster submission, `job_resources`)."""

    threads: int = field_(1, "cores the job uses (SLURM --cpus-per-task; per node)", ge=1)
    gpu: int = field_(0, "GPUs the job needs on each node (SLURM --gpus; --gres=gpu:N per "
                      "node when nodes > 1)", ge=0)
    mem_mb: int = field_(4000, "memory in MB (SLURM --mem; per node)", ge=1)
    runtime: int = field_(60, "wall-clock limit in minutes (SLURM --time)", ge=1)
    nodes: int = field_(1, "nodes of one job (train: the FSDP2 trainer ranks and the "
                        "generators split over them; nodes x gpu = trainer_ranks + "
                        "generators x their devices)", ge=1)


def job_resources(res: RuleResources) -> dict[str, Any]:
    """The snakemake resources of a rule's jobs. One node: gpu, mem_mb, runtime (with
    `tasks_per_gpu: 0` for several GPUs: one `scalerl train` process that starts its ranks
    itself, not one task per GPU). Several nodes, as snakemake-executor-plugin-slurm submits
    them: `--nodes`, `--gres=gpu:N` per node, one task per node, `mpi: srun` (the rule's command
    runs on the first node and starts `srun torchrun` itself, `scalerl.parallel.world`)."""
    out: dict[str, Any] = {"mem_mb": res.mem_mb, "runtime": res.runtime}
    if res.nodes == 1:
        out["gpu"] = res.gpu
        if res.gpu > 1:
            out["tasks_per_gpu"] = 0
        return out
    out.update(nodes=res.nodes, gpu=0, tasks=res.nodes, tasks_per_gpu=0, mpi="srun",
               cpus_per_task=res.threads)
    if res.gpu:
        out["gres"] = f"gpu:{res.gpu}"
    return out


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """A validated sweep config with every default filled (see the module docstring)."""

    results_dir: str
    data_config: dict[str, Any]
    models: dict[str, ModelEntry]
    recipes: dict[str, RecipeEntry]
    mixes: dict[str, TaskWeights]
    grid: Grid
    length: LengthConfig
    chunks: int
    steps_per_chunk: int | tuple[int, ...]
    recipe_overrides: dict[str, Any]
    run_fields: dict[str, Any]  # further RunConfig fields from `train`
    eval: EvalConfig
    downstream: dict[str, Downstream]
    downstream_chunks: str
    fit: FitSection
    resources: dict[str, RuleResources]

    def recipe(self, name: str) -> RecipeEntry:
        """The recipe `name`: defined under `recipes`, else the preset of that name."""
        return self.recipes.get(name) or RecipeEntry(preset=name)


def _section(data: Mapping[str, Any], key: str, default: Any) -> Any:
    value = data.get(key, default)
    return default if value is None else value


class _Problems(list):
    """Collects problems; `check(fn)` runs fn and records a ConfigError as one line."""

    def check(self, fn: Any, where: str = "") -> Any:
        try:
            return fn()
        except ConfigError as err:
            text = str(err)
            self.append(text if not where or text.startswith(where) else f"{where}: {text}")
            return None


def _named(problems: _Problems, section: str, data: Any, cls: type) -> dict[str, Any]:
    if not isinstance(data, dict):
        problems.append(f"{section}: expected a mapping of names, got {data!r}")
        return {}
    out = {}
    for name, spec in data.items():
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            problems.append(f"{section}: name {name!r} is not allowed: names use letters, "
                            "digits, '.' and '-' (they become part of run ids and paths)")
            continue
        value = problems.check(lambda s=spec, n=name: cls.from_dict(s, _prefix=f"{section}.{n}."))
        if value is not None:
            out[name] = value
    return out


def _train(problems: _Problems, data: Any) -> tuple[int, Any, dict, dict]:
    if not isinstance(data, dict):
        problems.append(f"train: expected a mapping, got {data!r}")
        data = {}
    chunks = data.get("chunks", 4)
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        problems.append(f"train.chunks: {chunks!r} is not an integer >= 1")
        chunks = 1
    steps = data.get("steps_per_chunk", RunConfig.steps_per_chunk)
    ok_int = isinstance(steps, int) and not isinstance(steps, bool) and steps >= 1
    ok_list = (isinstance(steps, list) and steps
               and all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in steps))
    if not (ok_int or ok_list):
        problems.append(f"train.steps_per_chunk: {steps!r} is not valid: optimizer steps per "
                        "chunk, one integer >= 1 or a list of integers >= 1 (one per chunk)")
    elif ok_list and len(steps) != chunks:
        problems.append(f"train.steps_per_chunk lists {len(steps)} chunk length(s) but "
                        f"train.chunks is {chunks}; give one entry per chunk")
    steps = tuple(steps) if ok_list else steps
    overrides = data.get("recipe_overrides") or {}
    if not isinstance(overrides, dict):
        problems.append(f"train.recipe_overrides: expected a mapping, got {overrides!r}")
        overrides = {}
    run_fields = {k: v for k, v in data.items() if k not in TRAIN_SWEEP_KEYS}
    valid = {f.name for f in dataclasses.fields(RunConfig)} - set(RUN_FIELDS_SET_BY_SWEEP)
    for key in sorted(run_fields):
        if key in RUN_FIELDS_SET_BY_SWEEP:
            problems.append(f"train.{key} is set by the sweep for each run; remove it here")
        elif key not in valid:
            problems.append(f"unknown key train.{key}; valid keys here: "
                            f"{', '.join(sorted(valid | set(TRAIN_SWEEP_KEYS)))}")
    run_fields = {k: v for k, v in run_fields.items() if k in valid}
    problems.check(lambda: RunConfig.from_dict(run_fields, _prefix="train."))
    return chunks, steps, overrides, run_fields


def _eval(problems: _Problems, data: Any) -> tuple[EvalConfig, dict, str]:
    if not isinstance(data, dict):
        problems.append(f"eval: expected a mapping, got {data!r}")
        data = {}
    fields = {k: v for k, v in data.items() if k not in ("downstream", "downstream_chunks")}
    ev = problems.check(lambda: EvalConfig.from_dict(fields, _prefix="eval.")) or EvalConfig()
    downstream = _named(problems, "eval.downstream", data.get("downstream") or {}, Downstream)
    for name, spec in downstream.items():
        if not spec.path:
            problems.append(f"eval.downstream.{name}: path is required")
    when = data.get("downstream_chunks", "last")
    if when not in ("last", "all"):
        problems.append(f"eval.downstream_chunks: {when!r} is not one of ['last', 'all']")
    return ev, downstream, when


def _cross_checks(problems: _Problems, cfg: SweepConfig) -> None:
    from scalerl.rl.recipe import list_presets

    grid = cfg.grid
    for dim, pool in (("models", cfg.models), ("mixes", cfg.mixes)):
        for name in getattr(grid, dim):
            if name not in pool:
                problems.append(f"sweep.{dim}: {name!r} is not defined under `{dim}` "
                                f"(defined: {', '.join(sorted(pool)) or 'none'})")
    for dim in ("models", "gen_lens"):
        if not getattr(grid, dim):
            problems.append(f"sweep.{dim}: must list at least one entry (an empty sweep has "
                            "no runs)")
    presets = list_presets()
    for name in grid.recipes:
        if name not in cfg.recipes and name not in presets:
            problems.append(f"sweep.recipes: {name!r} is neither defined under `recipes` nor a "
                            f"preset ({', '.join(presets)})")
    for dim in ("models", "recipes", "mixes"):
        for name in getattr(grid, dim):
            if not NAME_PATTERN.match(name):
                problems.append(f"sweep.{dim}: name {name!r} is not allowed: names use letters, "
                                "digits, '.' and '-'")
    for i, batch in enumerate(grid.batches):
        if not re.fullmatch(r"[1-9][0-9]*x[1-9][0-9]*", batch):
            problems.append(f"sweep.batches.{i}: {batch!r} is not PROMPTSxGENERATIONS "
                            "(e.g. 48x16)")
    for dim in ("models", "gen_lens", "recipes", "batches", "seeds", "mixes"):
        values = getattr(grid, dim)
        if len(set(values)) != len(values):
            problems.append(f"sweep.{dim}: {list(values)} lists an entry twice")
    for gen_len in grid.gen_lens:
        if gen_len <= cfg.length.answer_budget:
            problems.append(f"sweep.gen_lens: {gen_len} leaves no thinking budget with "
                            f"length.answer_budget = {cfg.length.answer_budget}")
    sources = [("train.recipe_overrides", cfg.recipe_overrides)]
    sources += [(f"models.{n}.recipe_overrides", m.recipe_overrides)
                for n, m in cfg.models.items()]
    sources += [(f"recipes.{n}.overrides", r.overrides) for n, r in cfg.recipes.items()]
    for where, overrides in sources:
        clash = sorted(set(overrides) & set(SWEEP_RECIPE_FIELDS))
        if clash:
            problems.append(f"{where}: {', '.join(clash)} are set by the sweep "
                            "(sweep.batches, sweep.gen_lens, length.*); remove them here")


def load_sweep(data: Mapping[str, Any]) -> SweepConfig:
    """Validate a sweep config mapping (parsed YAML) and fill defaults; ConfigError listing
    every problem ("invalid config (see config/README.md): ...") otherwise."""
    problems = _Problems()
    if not isinstance(data, Mapping):
        raise ConfigError(f"invalid config: expected a mapping at the top level, got {data!r}")
    for key in sorted(set(data) - set(SECTIONS), key=str):
        problems.append(f"unknown key {key}; valid keys here: {', '.join(sorted(SECTIONS))}")
    for key in ("models", "sweep"):
        if key not in data:
            problems.append(f"'{key}' is a required section")
    results_dir = _section(data, "results_dir", "results")
    if not isinstance(results_dir, str) or not results_dir:
        problems.append(f"results_dir: {results_dir!r} must be a non-empty path")
    data_section = _section(data, "data", {})
    data_config = data_section.get("config", {}) if isinstance(data_section, dict) else {}
    if isinstance(data_section, dict) and set(data_section) - {"config"}:
        problems.append(f"unknown key data.{sorted(set(data_section) - {'config'})[0]}; "
                        "valid keys here: config")
    models = _named(problems, "models", _section(data, "models", {}), ModelEntry)
    recipes = _named(problems, "recipes", _section(data, "recipes", {}), RecipeEntry)
    mixes = _named(problems, "mixes", _section(data, "mixes", {"mc": {"math": 0.5, "code": 0.5}}),
                   TaskWeights)
    grid = problems.check(lambda: Grid.from_dict(_section(data, "sweep", {}), _prefix="sweep."))
    length = problems.check(lambda: LengthConfig.from_dict(_section(data, "length", {}),
                                                           _prefix="length."))
    chunks, steps, overrides, run_fields = _train(problems, _section(data, "train", {}))
    ev, downstream, when = _eval(problems, _section(data, "eval", {}))
    fit = problems.check(lambda: FitSection.from_dict(_section(data, "fit", {}), _prefix="fit."))
    resources_data = _section(data, "resources", {})
    unknown_rules = sorted(set(resources_data) - set(RULES)) if isinstance(resources_data,
                                                                           dict) else []
    for rule in unknown_rules:
        problems.append(f"unknown key resources.{rule}; valid keys here: {', '.join(RULES)}")
    resources = {rule: problems.check(lambda r=rule: RuleResources.from_dict(
        (resources_data or {}).get(r) or {}, _prefix=f"resources.{r}.")) or RuleResources()
        for rule in RULES}
    if problems or grid is None or length is None or fit is None:
        raise ConfigError(_message(problems))
    cfg = SweepConfig(
        results_dir=results_dir, data_config=dict(data_config or {}), models=models,
        recipes=recipes, mixes=mixes, grid=grid, length=length, chunks=chunks,
        steps_per_chunk=steps, recipe_overrides=dict(overrides), run_fields=run_fields, eval=ev,
        downstream=downstream, downstream_chunks=when, fit=fit, resources=resources)
    _cross_checks(problems, cfg)
    if problems:
        raise ConfigError(_message(problems))
    return cfg


def _message(problems: list[str]) -> str:
    return "invalid config (see config/README.md):\n" + "\n".join(f"  - {p}" for p in problems)
