"""SweepConfig: the workflow's config file (config/config.yaml, config/gpu.yaml), typed.

`load_sweep(mapping)` validates a whole sweep config and fills every default from the
package's own config classes (docs/design.md, "Sweep"), so the workflow's JSON schema only
types what snakemake itself reads (`results_dir`, `resources`). Every key's default and
meaning is a field of one class here (`TopKeys`, `DataSection`, `ModelEntry`, `RecipeEntry`,
`Grid`, `Racing`, `TrainKeys`, `EvalKeys`, `Downstream`, `FitSection`, `RuleResources`) or
of the package's run classes, and config/README.md's reference is generated from them
(`scalerl.sweep.docs`). Sections:

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
from scalerl.rl.run_config import EvalConfig, RunConfig, TaskWeights
from scalerl.tasks.loaders import FORMATS

__all__ = ["DataSection", "Downstream", "EvalKeys", "FitSection", "Grid", "LengthConfig",
           "ModelEntry", "Racing", "RecipeEntry", "RuleResources", "SweepConfig", "TopKeys",
           "TrainKeys", "job_resources", "load_sweep", "NAME_PATTERN", "SWEEP_RECIPE_FIELDS",
           "RUN_FIELDS_SET_BY_SWEEP"]

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*$")
# Recipe fields that the sweep itself sets (batch shape; the length budgets come from gen_len).
SWEEP_RECIPE_FIELDS = ("prompts_per_step", "generations_per_prompt", "think_budget",
                       "answer_budget", "length_penalty")
# RunConfig fields that the sweep writes for each run (not settable under `train`).
RUN_FIELDS_SET_BY_SWEEP = ("run", "seed", "model", "base", "prompts", "recipe_name", "recipe",
                           "task_weights", "eval", "steps_per_chunk", "chunk_steps")
SECTIONS = ("results_dir", "data", "models", "recipes", "mixes", "sweep", "length", "train",
            "eval", "fit", "resources")
RULES = ("data", "base", "train", "eval", "fit", "report")


@dataclasses.dataclass(frozen=True)
class LengthConfig(Config):
    """How a generation length L becomes the recipe's length budgets (ScaleRL §3.2 / A.16)."""

    answer_budget: int = field_(
        2048, "tokens after </think> or the interruption; thinking hi = L − answer_budget "
        "(paper: 2,048)", ge=1)
    think_min_fraction: float = field_(
        0.8333, "thinking budget lo = round(fraction × hi) (paper: 10k/12k = 0.833)", gt=0, le=1)
    penalty_cache_fraction: float = field_(
        0.1429, "length_penalty recipes: L_max = L, L_cache = round(fraction × L) "
        "(paper DAPO baseline: 2k/14k)", gt=0, le=1)

    def recipe_fields(self, gen_len: int) -> dict[str, Any]:
        """The RecipeConfig fields that give a completion `gen_len` tokens (the last layer of
        `scalerl.sweep.runs.run_recipe`)."""
        if gen_len <= self.answer_budget:
            raise ConfigError(f"gen_len = {gen_len} leaves no thinking budget with "
                              f"length.answer_budget = {self.answer_budget}; raise gen_len or "
                              "lower answer_budget")
        hi = gen_len - self.answer_budget
        lo = max(1, round(self.think_min_fraction * hi))
        cache = max(1, round(self.penalty_cache_fraction * gen_len))
        return {"think_budget": [lo, hi], "answer_budget": self.answer_budget,
                "length_penalty": {"max_len": gen_len, "cache_len": cache}}


@dataclasses.dataclass(frozen=True)
class TopKeys(Config):
    """The sweep config's top-level keys that are not sections of their own."""

    results_dir: str = field_("results", "where every output goes (relative to the working "
                              "directory)")
    mixes: dict[str, Any] = field_(
        default_factory=lambda: {"mc": {"math": 0.5, "code": 0.5}},
        doc="task mixes by name, each a `TaskWeights` (`mixes.<name>.*` below); the default "
        "when the section is absent")


@dataclasses.dataclass(frozen=True)
class DataSection(Config):
    """`data`: the prompt set of the whole sweep."""

    config: dict[str, Any] = field_(
        default_factory=dict,
        doc="the DATA.yaml of `scalerl data` (sources, sizes, splits, filters; see `scalerl "
        "data --help` and `scalerl.data`); one prompt set for the whole sweep. A file/hub "
        "source in an upstream schema names it with `format:` (`polaris`, `deepcoder`, "
        "`taco`, `apps`; graded by test programs: `humaneval`, `mbpp`, `acecode`, `kodcode`, "
        "see \"Code test formats\" above; `scalerl.tasks.loaders` documents the columns): "
        "starter code is added to the prompt, TACO/APPS call-based outputs follow the upstream "
        "one-element-list convention, and Polaris' difficulty `\"6/8\"` becomes a pass rate of "
        "0.75 for `filters.dataset_pass_rate` (with `min_pass_rate` / `max_pass_rate`)")


@dataclasses.dataclass(frozen=True)
class ModelEntry(Config):
    """How `scalerl base` builds one model, and recipe overrides for its runs."""

    config: dict[str, Any] = field_(
        default_factory=dict,
        doc="the MODEL.yaml of `scalerl base`: `model:` (a `ModelConfig`: `name` = "
        "`tiny-s`/`tiny-m`/`tiny-l`, a local HF directory or a hub id; `dtype`, "
        "`fp32_lm_head`, `prompt_format`, `allow_download`, ...) and, for tiny models, `sft:` "
        "(the warm start: steps, lr, pass-rate band, ...). `<name>` is the model's label in "
        "run ids")
    recipe_overrides: dict[str, Any] = field_(
        default_factory=dict, doc="`RecipeConfig` fields for this model's runs only (e.g. a "
        "smaller RL learning rate for a wider model), merged after `train.recipe_overrides` "
        "and before `recipes.<name>.overrides`; batch shape and length budgets may not appear "
        "here")


@dataclasses.dataclass(frozen=True)
class RecipeEntry(Config):
    """A named recipe: a preset of scalerl.rl.recipe plus RecipeConfig overrides."""

    preset: str = field_("scalerl", "a preset of `scalerl.rl.recipe`: `scalerl`, `loo-dapo`, "
                         "`loo-fp32`, `loo-savg`, `loo-plan`, `loo-batch`, `loo-lp`, `loo-8op`, "
                         "`loo-npr`, `deepseek-grpo`, `qwen25-dapo`, `magistral`, `minimax-m1`")
    overrides: dict[str, Any] = field_(
        default_factory=dict, doc="`RecipeConfig` fields replacing the preset's (loss, clips, "
        "aggregation, normalisation, filters, off-policy mode, optimizer, rewards, "
        "interruption text, ...), merged last of the override layers. The batch shape and "
        "length budgets are set by the sweep and may not appear here. A name in "
        "`sweep.recipes` that is not defined here is taken as a preset name with no overrides")


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

    models: tuple[str, ...] = field_(
        (), "model names from `models`, smallest first: the report's \"does more scale raise "
        "the ceiling A?\" section compares the first with the last (required)")
    gen_lens: tuple[int, ...] = field_((), "generation lengths L in tokens (thinking + answer; "
                                       "required)")
    recipes: tuple[str, ...] = field_(("scalerl",), "recipe names from `recipes` or preset "
                                      "names")
    batches: tuple[str, ...] = field_(("48x16",), 'batch shapes "PROMPTSxGENERATIONS" '
                                      "(paper: 48 prompts x 16 = 768 completions per step)")
    seeds: tuple[int, ...] = field_((0,), "seeds (data order, sampling, initialisation; several "
                                    "give error bars)")
    mixes: tuple[str, ...] = field_(("mc",), "task-mix names from `mixes`; the run id carries "
                                    "the mix only when there are several")
    racing: Racing = field_(default_factory=Racing, doc="early stopping of clearly worse runs")


@dataclasses.dataclass(frozen=True)
class TrainKeys(Config):
    """The sweep's own keys of `train` (beside any RunConfig field the sweep does not set)."""

    chunks: int = field_(4, "training chunks per run; each is one job with one checkpoint and "
                         "one evaluation; chunk k starts from chunk k-1 (chunk 1 from the base "
                         "model, chunk 0)", ge=1)
    steps_per_chunk: int | tuple[int, ...] = field_(
        RunConfig.steps_per_chunk, "optimizer steps per chunk: one integer for every chunk, or "
        "a list with one entry per chunk (length `train.chunks`). Growing chunks such as "
        "`[3, 3, 6, 10, 18, 20]` (checkpoints at steps 3, 6, 12, 22, 40, 60) spread the evaluation points evenly over "
        "log compute, the axis of the sigmoid fit, and put four of them in the first half of "
        "the compute so the report's extrapolation check (fit on <= half, score the rest) can "
        "run")
    recipe_overrides: dict[str, Any] = field_(
        default_factory=dict, doc="`RecipeConfig` fields for every run, the first of the "
        "override layers (`scalerl.sweep.run_recipe`)")


@dataclasses.dataclass(frozen=True)
class Downstream(Config):
    """An extra prompt file evaluated on some checkpoints (AIME-, LiveCodeBench-style)."""

    path: str = field_(
        "", "an extra prompt file (Parquet or JSONL with `prompt_id, task, prompt, "
        "answer/tests`, split optional, or a dataset in the layout `format` names), e.g. "
        "AIME-style, LiveCodeBench-style, HumanEval or MBPP; evaluated like the held-out set "
        "into `runs/RUN/downstream/<name>/chunk{k}.parquet` (same schema, `dataset = <name>`, "
        "`test_type` per row), on the run's tasks the file has (required)")
    format: str = field_("", "the file's upstream layout, converted as `scalerl data` converts "
                         "it: `humaneval`, `mbpp`, `acecode`, `kodcode` (test programs), "
                         "`deepcoder`, `taco`, `apps`, `polaris`; '' = prompts.parquet columns. "
                         "E.g. `downstream: {humaneval: {path: data/HumanEval.jsonl, format: "
                         "humaneval}}`",
                         choices=("", *FORMATS))
    max_prompts: int = field_(0, "prompts per task of that file (0 = all)", ge=0)


@dataclasses.dataclass(frozen=True)
class EvalKeys(Config):
    """The sweep's own keys of `eval` (beside the `EvalConfig` fields)."""

    downstream_chunks: str = field_("last", "evaluate downstream sets on the `last` checkpoint "
                                    "or on `all`", choices=("last", "all"))
    downstream: dict[str, Any] = field_(default_factory=dict,
                                        doc="extra prompt files by name (`eval.downstream."
                                        "<name>.*` below)")


@dataclasses.dataclass(frozen=True)
class FitSection(Config):
    """Sigmoid fits per run (`scalerl fit`) and the sweep report (`scalerl report`)."""

    group_by: str = field_("task", "eval column whose groups get separate sigmoid fits (and a "
                           "column of the report)")
    compute: str = field_("flops", "compute axis of the fits and predictions: `flops` or "
                          "`device_hours` (the paper's GPU-hours; the eval column "
                          "`compute_<compute>`)", choices=("flops", "device_hours"))
    extra_args: tuple[str, ...] = field_((), "further `scalerl fit` options, verbatim")
    predict_args: tuple[str, ...] = field_(
        (), "further `scalerl predict` options, verbatim (e.g. [--bootstrap, '50']; "
        "[--prior, none] for the plain least-squares sigmoid instead of the curve prior)")
    joint: bool = field_(True, "fit each run's predictions (the report's backtest) jointly "
                         "with its sweep-mates, the runs of the same recipe, batch and mix "
                         "(`scalerl predict --sweep-eval`; racing's chunk predictions stay "
                         "per run)")

    @property
    def compute_col(self) -> str:
        """The eval Parquet's column of the compute axis (`scalerl.eval.schema`)."""
        return f"compute_{self.compute}"


@dataclasses.dataclass(frozen=True)
class RuleResources(Config):
    """Resources of one rule kind (`data`, `base`, `train`, `eval`, `fit`, `report`): local
    scheduling and cluster submission (`job_resources`)."""

    threads: int = field_(1, "cores of a job; on SLURM `--cpus-per-task` (per node)", ge=1)
    gpu: int = field_(0, "GPUs of a job on each node (SLURM `--gpus`, `--gres=gpu:N` per node "
                      "when nodes > 1; locally the default profile runs GPU jobs one at a "
                      "time)", ge=0)
    mem_mb: int = field_(4000, "memory in MB (SLURM `--mem`; per node)", ge=1)
    runtime: int = field_(60, "wall-clock limit in minutes (SLURM `--time`; size it for one "
                          "chunk)", ge=1)
    nodes: int = field_(1, "nodes of one job (train): `gpu`, `threads` and `mem_mb` are then "
                        "per node, and the job is submitted as `--nodes N --gres=gpu:<gpu> "
                        "--ntasks N` with `mpi: srun` (`scalerl.sweep.job_resources`); nodes x "
                        "gpu = trainer_ranks + generators x their devices "
                        "(config/layout-*.yaml)", ge=1)


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


def _choices(cls: type, name: str) -> tuple:
    return next(f.metadata["choices"] for f in dataclasses.fields(cls) if f.name == name)


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
    chunks = data.get("chunks", TrainKeys.chunks)
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        problems.append(f"train.chunks: {chunks!r} is not an integer >= 1")
        chunks = 1
    steps = data.get("steps_per_chunk", TrainKeys.steps_per_chunk)
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
    own = [f.name for f in dataclasses.fields(TrainKeys)]
    run_fields = {k: v for k, v in data.items() if k not in own}
    valid = {f.name for f in dataclasses.fields(RunConfig)} - set(RUN_FIELDS_SET_BY_SWEEP)
    for key in sorted(run_fields):
        if key in RUN_FIELDS_SET_BY_SWEEP:
            fix = ("put recipe fields under train.recipe_overrides" if key == "recipe"
                   else "remove it here")
            problems.append(f"train.{key} is set by the sweep for each run; {fix}")
        elif key not in valid:
            problems.append(f"unknown key train.{key}; valid keys here: "
                            f"{', '.join(sorted(valid | set(own)))}")
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
    when = data.get("downstream_chunks", EvalKeys.downstream_chunks)
    choices = _choices(EvalKeys, "downstream_chunks")
    if when not in choices:
        problems.append(f"eval.downstream_chunks: {when!r} is not one of {list(choices)}")
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
    results_dir = _section(data, "results_dir", TopKeys.results_dir)
    if not isinstance(results_dir, str) or not results_dir:
        problems.append(f"results_dir: {results_dir!r} must be a non-empty path")
    data_section = _section(data, "data", {})
    data_config = data_section.get("config", {}) if isinstance(data_section, dict) else {}
    if isinstance(data_section, dict) and set(data_section) - {"config"}:
        problems.append(f"unknown key data.{sorted(set(data_section) - {'config'})[0]}; "
                        "valid keys here: config")
    models = _named(problems, "models", _section(data, "models", {}), ModelEntry)
    recipes = _named(problems, "recipes", _section(data, "recipes", {}), RecipeEntry)
    mixes = _named(problems, "mixes", _section(data, "mixes", TopKeys().mixes), TaskWeights)
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
