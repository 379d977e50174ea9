# Helpers only (no rules): validate the config, expand the sweep into runs, name every path,
# write the per-job YAML files and the provenance record. The stages live in the other .smk
# files and call the scalerl package; nothing here trains or evaluates.
import copy
import dataclasses
import hashlib
import importlib.metadata
import itertools
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import jsonschema
import yaml
from snakemake.exceptions import WorkflowError

SCHEMA_PATH = Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml"
# Software of every job that runs scalerl (used with --software-deployment-method conda).
CONDA_ENV = "../envs/scalerl.yaml"
# Jobs call `scalerl <command>`: the scalerl installed beside the Python running snakemake
# comes first on PATH, so the workflow works from a venv that is not activated (and SLURM jobs
# inherit the same PATH through sbatch --export=ALL).
_BIN = str(Path(sys.executable).parent)
if _BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _BIN + os.pathsep + os.environ.get("PATH", "")
# Recipe fields that the sweep itself sets (batch shape, generation length).
SWEEP_RECIPE_FIELDS = ("prompts_per_step", "generations_per_prompt", "think_budget",
                       "answer_budget", "length_penalty")


# -- validation ----------------------------------------------------------------------------
def _default_filling_validator(root_schema):
    """A Draft 2020-12 validator that fills `default`s (following local $refs) as it goes."""
    base = jsonschema.Draft202012Validator
    validate_properties = base.VALIDATORS["properties"]

    def resolve(subschema):
        ref = subschema.get("$ref", "")
        if ref.startswith("#/"):
            node = root_schema
            for part in ref[2:].split("/"):
                node = node[part]
            return node
        return subschema

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                target = subschema if "default" in subschema else resolve(subschema)
                if "default" in target and name not in instance:
                    instance[name] = copy.deepcopy(target["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(base, {"properties": set_defaults})(root_schema)


def _key_path(error):
    return ".".join(str(p) for p in error.absolute_path) or "<top level>"


def _describe_error(error):
    """One readable line for a jsonschema error: the key path and what to do."""
    where = _key_path(error)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        keys = ", ".join(k if where == "<top level>" else f"{where}.{k}" for k in unknown)
        return f"unknown key {keys}; valid keys here: {', '.join(allowed)}"
    if error.validator == "required":
        return f"{where}: {error.message}"
    if error.validator == "minItems" and error.instance == []:
        return f"{where}: must list at least one entry (an empty sweep has no runs)"
    if error.validator == "type":
        return f"{where}: {error.instance!r} is not of type {error.validator_value!r}"
    if error.validator in ("oneOf", "anyOf"):
        return f"{where}: {error.instance!r} is not valid: {error.schema.get('description', '')}"
    if error.validator == "propertyNames":
        return (f"{where}: name {error.instance!r} is not allowed: names use letters, digits, "
                "'.' and '-' (they become part of run ids and paths)")
    return f"{where}: {error.message}"


def validate_config(cfg):
    """Fill defaults and validate `cfg` in place; raise WorkflowError naming every bad key."""
    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    validator = _default_filling_validator(schema)
    errors = sorted(validator.iter_errors(cfg), key=lambda e: list(e.absolute_path))
    if errors:
        lines = "\n".join(f"  - {_describe_error(e)}" for e in errors)
        raise WorkflowError(f"invalid config (see config/README.md):\n{lines}")
    problems = []
    for dim, pool in (("models", cfg["models"]), ("mixes", cfg["mixes"])):
        for name in cfg["sweep"][dim]:
            if name not in pool:
                problems.append(f"sweep.{dim}: {name!r} is not defined under `{dim}` "
                                f"(defined: {', '.join(sorted(pool)) or 'none'})")
    presets = _recipe_presets()
    for name in cfg["sweep"]["recipes"]:
        if name not in cfg["recipes"] and presets is not None and name not in presets:
            problems.append(f"sweep.recipes: {name!r} is neither defined under `recipes` nor a "
                            f"preset ({', '.join(presets)})")
    recipe_overrides = [("train.recipe_overrides", cfg["train"]["recipe_overrides"])]
    recipe_overrides += [(f"models.{name}.recipe_overrides", spec.get("recipe_overrides", {}))
                         for name, spec in cfg["models"].items()]
    recipe_overrides += [(f"recipes.{name}.overrides", spec["overrides"])
                         for name, spec in cfg["recipes"].items()]
    for where, overrides in recipe_overrides:
        clash = sorted(set(overrides) & set(SWEEP_RECIPE_FIELDS))
        if clash:
            problems.append(f"{where}: {', '.join(clash)} are set by the sweep "
                            "(sweep.batches, sweep.gen_lens, length.*); remove them here")
    steps = cfg["train"]["steps_per_chunk"]
    if isinstance(steps, list) and len(steps) != cfg["train"]["chunks"]:
        problems.append(f"train.steps_per_chunk lists {len(steps)} chunk length(s) but "
                        f"train.chunks is {cfg['train']['chunks']}; give one entry per chunk")
    for gen_len in cfg["sweep"]["gen_lens"]:
        if gen_len <= cfg["length"]["answer_budget"]:
            problems.append(f"sweep.gen_lens: {gen_len} leaves no thinking budget with "
                            f"length.answer_budget = {cfg['length']['answer_budget']}")
    if problems:
        raise WorkflowError("invalid config (see config/README.md):\n"
                            + "\n".join(f"  - {p}" for p in problems))
    return cfg


def _recipe_presets():
    try:
        from scalerl.rl.recipe import list_presets
    except ImportError:  # the package is not importable here: the jobs will check
        return None
    return list_presets()


# -- the sweep -----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Run:
    """One point of the sweep."""

    id: str
    model: str
    gen_len: int
    recipe: str
    prompts: int
    generations: int
    seed: int
    mix: str


def expand_sweep(cfg):
    """Every combination of the sweep's dimensions as a Run with a readable id."""
    sweep = cfg["sweep"]
    runs = {}
    tag_mix = len(sweep["mixes"]) > 1
    for model, gen_len, recipe, batch, seed, mix in itertools.product(
        sweep["models"], sweep["gen_lens"], sweep["recipes"], sweep["batches"], sweep["seeds"],
        sweep["mixes"],
    ):
        prompts, generations = (int(x) for x in batch.split("x"))
        run_id = f"{model}_L{gen_len}_{recipe}_b{prompts}x{generations}_s{seed}"
        if tag_mix:
            run_id += f"_{mix}"
        runs[run_id] = Run(run_id, model, gen_len, recipe, prompts, generations, seed, mix)
    return runs


def deep_merge(base, changes):
    """`base` updated by `changes`, nested mappings merged (returns a new dict)."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def length_fields(cfg, gen_len):
    """Recipe fields that give a completion `gen_len` tokens (see config/README.md)."""
    length = cfg["length"]
    hi = gen_len - length["answer_budget"]
    lo = max(1, round(length["think_min_fraction"] * hi))
    cache = max(1, round(length["penalty_cache_fraction"] * gen_len))
    return {
        "think_budget": [lo, hi],
        "answer_budget": length["answer_budget"],
        "length_penalty": {"max_len": gen_len, "cache_len": cache},
    }


def chunk_length_fields(steps_per_chunk):
    """RunConfig fields for train.steps_per_chunk: one length for all chunks, or one each."""
    if isinstance(steps_per_chunk, list):
        return {"chunk_steps": steps_per_chunk}
    return {"steps_per_chunk": steps_per_chunk}


def run_config(cfg, run):
    """The RunConfig mapping written to results/runs/RUN/run.yaml."""
    spec = cfg["recipes"].get(run.recipe, {"preset": run.recipe, "overrides": {}})
    overrides = deep_merge(cfg["train"]["recipe_overrides"],
                           cfg["models"][run.model].get("recipe_overrides", {}))
    overrides = deep_merge(overrides, spec["overrides"])
    overrides = deep_merge(overrides, length_fields(cfg, run.gen_len))
    overrides["prompts_per_step"] = run.prompts
    overrides["generations_per_prompt"] = run.generations
    train, ev = cfg["train"], cfg["eval"]
    data = {
        "run": run.id,
        "seed": run.seed,
        "model": run.model,
        "base": base_dir(run.model),
        "prompts": PROMPTS,
        "recipe": {"preset": spec["preset"], "overrides": overrides},
        **chunk_length_fields(train["steps_per_chunk"]),
        "save_every": train["save_every"],
        "task_weights": dict(cfg["mixes"][run.mix]),
        "temperature": train["temperature"],
        "engine": train["engine"],
        "device": train["device"],
        "threads": train["threads"],
        "generators": train["generators"],
        "train_micro_batch": train["train_micro_batch"],
        "eval": {
            "samples_per_prompt": ev["samples_per_prompt"],
            "max_prompts": ev["max_prompts"],
            "temperature": ev["temperature"],
        },
    }
    return deep_merge(data, train["run_overrides"])


def check_with_package(cfg, runs):
    """Validate every job config with the package's own typed configs (strict keys)."""
    problems = []
    try:
        from scalerl.config import ConfigError
        from scalerl.rl.run_config import RunConfig
    except ImportError:
        return
    from scalerl.rl.recipe import recipe_from_preset

    shared = cfg["train"]["recipe_overrides"]
    try:
        recipe_from_preset("scalerl", shared)
    except (ConfigError, ValueError) as err:
        problems.append(f"train.recipe_overrides: {err}")
    for name in cfg["sweep"]["recipes"]:
        spec = cfg["recipes"].get(name, {"preset": name, "overrides": {}})
        try:
            recipe_from_preset(spec["preset"], deep_merge(shared, spec["overrides"]))
        except (ConfigError, ValueError) as err:
            problems.append(f"recipes.{name} (preset + overrides): {err}")
    if not problems:
        failed_models = set()
        for run in runs.values():
            if run.model in failed_models:
                continue
            try:
                RunConfig.from_dict(run_config(cfg, run)).recipe.build()
            except (ConfigError, ValueError) as err:
                problems.append(f"run {run.id} (models.{run.model}.recipe_overrides, "
                                f"train.run_overrides, eval, length keys): {err}")
                failed_models.add(run.model)  # one per model is enough: its runs share these
    model_cls = _package_class("scalerl.models.cli", "BaseConfig")
    for name in cfg["sweep"]["models"]:
        if model_cls is not None:
            try:
                model_cls.from_dict(cfg["models"][name]["config"])
            except (ConfigError, ValueError) as err:
                problems.append(f"models.{name}.config: {err}")
    data_cls = _package_class("scalerl.data.config", "DataConfig")
    if data_cls is not None:
        try:
            data_cls.from_dict(cfg["data"]["config"])
        except (ConfigError, ValueError) as err:
            problems.append(f"data.config: {err}")
    if problems:
        raise WorkflowError("invalid config (see config/README.md):\n"
                            + "\n".join(f"  - {p}" for p in problems))


def _package_class(module, name):
    try:
        return getattr(__import__(module, fromlist=[name]), name)
    except (ImportError, AttributeError):
        return None


# -- paths ---------------------------------------------------------------------------------
def res(*parts):
    return str(Path(config["results_dir"], *parts))


def base_dir(model):
    return res("models", model, "base")


def run_dir(run, *parts):
    return res("runs", run, *parts)


def checkpoint_dir(run, chunk):
    """The model evaluated as chunk `chunk`: the base model for 0, else the chunk's output."""
    chunk = int(chunk)
    if chunk == 0:
        return base_dir(RUNS[run].model)
    return run_dir(run, f"chunk{chunk}")


def eval_file(run, chunk):
    return run_dir(run, "eval", f"chunk{chunk}.parquet")


def eval_files(run):
    """The run's eval files, chunk 0 (base model) to the last chunk."""
    return [eval_file(run, k) for k in range(CHUNKS + 1)]


def downstream_file(run, name, chunk):
    return run_dir(run, "downstream", name, f"chunk{chunk}.parquet")


def downstream_chunks():
    n = config["train"]["chunks"]
    return list(range(n + 1)) if config["eval"]["downstream_chunks"] == "all" else [n]


def all_outputs():
    """Every final artifact of the sweep."""
    outs = [res("report", name) for name in ("scaling.parquet", "scaling.md", "curves.png")]
    for run in RUNS:
        outs.append(run_dir(run, "provenance.json"))
        outs.append(run_dir(run, "fit"))
        # Checkpoints are targets too: a deleted one is retrained (with what depends on it)
        # instead of being treated as a disposable intermediate.
        outs.extend(checkpoint_dir(run, k) for k in range(1, CHUNKS + 1))
        for name in config["eval"]["downstream"]:
            outs.extend(downstream_file(run, name, k) for k in downstream_chunks())
    return outs


# -- per-job files -------------------------------------------------------------------------
def write_yaml(path, data):
    """Write `data` as YAML atomically (temporary sibling, then rename)."""
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def config_hash(data):
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def git_commit():
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=workflow.basedir,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def installed_packages():
    """name -> version of every installed distribution (a `pip freeze` without pip)."""
    dists = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            dists[name] = dist.version
    return dict(sorted(dists.items(), key=lambda kv: kv[0].lower()))


def write_provenance(path, run_yaml):
    """The resolved run config, package version, git commit and installed packages.

    `config_hash` is the hash `scalerl eval` and `scalerl train` store in their outputs
    (`scalerl.config.config_hash` of the RunConfig), so files can be matched to this record.
    """
    from scalerl.config import config_hash as package_config_hash
    from scalerl.rl.run_config import RunConfig

    run_cfg = RunConfig.from_dict(yaml.safe_load(Path(run_yaml).read_text()))
    record = {
        "run": run_cfg.run,
        "config_hash": package_config_hash(run_cfg),
        "run_config": run_cfg.to_dict(),
        "resolved_recipe": run_cfg.recipe.build().to_dict(),
        "sweep_config_hash": config_hash(dict(config)),
        "scalerl_version": _scalerl_version(),
        "git_commit": git_commit(),
        "python": sys.version.split()[0],
        "packages": installed_packages(),
    }
    text = json.dumps(record, indent=2, default=str) + "\n"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _scalerl_version():
    try:
        return importlib.metadata.version("scalerl")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def fit_meta_args(run):
    """`--meta key=value` options that tag a run's fits with its sweep coordinates."""
    meta = {"run": run.id, "model": run.model, "gen_len": run.gen_len, "recipe": run.recipe,
            "batch": f"{run.prompts}x{run.generations}", "seed": run.seed, "mix": run.mix}
    return " ".join(f"--meta {shlex.quote(f'{k}={v}')}" for k, v in meta.items())


def report_order_args():
    """`--order model=...`: the sweep's model list is read smallest first by the report."""
    models = ",".join(map(str, config["sweep"]["models"]))
    return f"--order {shlex.quote(f'model={models}')}"


def eval_label_args(run):
    """`--label` options: the sweep's names for the eval columns gen_len and recipe."""
    return f"--label gen_len={run.gen_len} --label recipe={shlex.quote(run.recipe)}"


def rule_resources(rule_name):
    """The `resources` entry of a rule (defaults filled by the schema)."""
    return config["resources"][rule_name]


# -- evaluated at parse time ---------------------------------------------------------------
validate_config(config)
PROMPTS = res("data", "prompts.parquet")
RUNS = expand_sweep(config)
check_with_package(config, RUNS)
CHUNKS = config["train"]["chunks"]
