# Helpers only (no rules): validate the config, expand the sweep, name every path. The sweep's
# science (validation with defaults, run ids, run configs, provenance) lives in scalerl.sweep
# (docs/design.md, "Sweep"); the stages live in the other .smk files and call `scalerl`.
import os
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from scalerl.config import ConfigError
from scalerl import sweep  # (not its names: `expand` is snakemake's here)
from scalerl.fit.racing import read_stopped
from scalerl.sweep.provenance import write_provenance, write_run_yaml, write_yaml

# Software of every job that runs scalerl (used with --software-deployment-method conda).
CONDA_ENV = "../envs/scalerl.yaml"
# Jobs call `scalerl <command>`: the scalerl installed beside the Python running snakemake
# comes first on PATH, so the workflow works from a venv that is not activated (and SLURM jobs
# inherit the same PATH through sbatch --export=ALL).
_BIN = str(Path(sys.executable).parent)
if _BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _BIN + os.pathsep + os.environ.get("PATH", "")


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
    return base_dir(RUNS[run].model) if chunk == 0 else run_dir(run, f"chunk{chunk}")


def model_config_file(run):
    return res("models", RUNS[run].model, "model.yaml")


def eval_files(run, upto=None):
    """The run's eval files, chunk 0 (base model) to `upto` (default: its last chunk)."""
    last = last_chunk(run) if upto is None else upto
    return [run_dir(run, "eval", f"chunk{k}.parquet") for k in range(last + 1)]


def downstream_chunks(run):
    last = last_chunk(run)
    return list(range(last + 1)) if SWEEP.downstream_chunks == "all" else [last]


# -- racing (a data-dependent DAG: the checkpoint `race` decides which chunks exist) --------
def stopped_at(run):
    """The chunk after which racing stopped `run`, or None (racing off, or never stopped)."""
    if not SWEEP.grid.racing.enabled:
        return None
    for k in range(1, CHUNKS):
        if run in read_stopped(checkpoints.race.get(chunk=k).output[0]):
            return k
    return None


def last_chunk(run):
    stop = stopped_at(run)
    return CHUNKS if stop is None else stop


def race_inputs(chunk):
    """Predictions after `chunk` of the runs still racing then."""
    alive = [r for r in RUNS if all(r not in read_stopped(checkpoints.race.get(chunk=k).output[0])
                                    for k in range(1, chunk))]
    return [run_dir(r, "predict", f"chunk{chunk}.parquet") for r in alive]


def race_args():
    racing = SWEEP.grid.racing
    return (f"--task {racing.task} --margin {racing.margin} --min-fraction {racing.min_fraction}"
            " --seed-pattern '_s[0-9]+'")


def racing_decisions(wildcards=None):
    """decisions.json of every race (none when racing is off)."""
    if not SWEEP.grid.racing.enabled:
        return []
    return [checkpoints.race.get(chunk=k).output[0] for k in range(1, CHUNKS)]


def racing_report_args(decisions):
    return f"--racing {' '.join(map(shlex.quote, decisions))}" if decisions else ""


def predict_args():
    return shlex.join(["--chunks", str(CHUNKS), "--compute-col", f"compute_{SWEEP.fit.compute}",
                       *SWEEP.fit.predict_args])


def all_outputs(wildcards=None):
    """Every final artifact of the sweep (the chunks racing left to each run)."""
    outs = [res("report", name) for name in ("scaling.parquet", "scaling.md", "curves.png")]
    for run in RUNS:
        outs += [run_dir(run, "provenance.json"), run_dir(run, "fit")]
        # Checkpoints are targets too: a deleted one is retrained (with what depends on it)
        # instead of being treated as a disposable intermediate.
        outs += [checkpoint_dir(run, k) for k in range(1, last_chunk(run) + 1)]
        outs += [run_dir(run, "downstream", name, f"chunk{k}.parquet")
                 for name in SWEEP.downstream for k in downstream_chunks(run)]
    return outs


# -- per-job files and arguments -------------------------------------------------------------
def write_run_config(path, run):
    write_run_yaml(path, sweep.run_config(SWEEP, RUNS[run], base=base_dir(RUNS[run].model),
                                          prompts=PROMPTS))


def write_run_provenance(path, run_yaml):
    write_provenance(path, run_yaml, config, workflow.basedir)


def fit_meta_args(run):
    """`--meta key=value` options that tag a run's fits with its sweep coordinates."""
    return " ".join(f"--meta {shlex.quote(f'{k}={v}')}" for k, v in RUNS[run].meta().items())


def report_order_args():
    """`--order model=...`: the sweep's model list is read smallest first by the report."""
    return f"--order {shlex.quote('model=' + ','.join(SWEEP.grid.models))}"


def rule_resources(rule_name):
    """The `resources` entry of a rule (defaults filled by the schema)."""
    return config["resources"][rule_name]


def job_resources(rule_name):
    """The snakemake resources of a rule's jobs (`scalerl.sweep.job_resources`: GPUs, memory,
    run time; a multi-node or multi-GPU train job as the SLURM executor must submit it)."""
    return sweep.job_resources(SWEEP.resources[rule_name])


# -- evaluated at parse time ---------------------------------------------------------------
try:  # the package first: its messages name every bad key and the fix
    SWEEP = sweep.load_sweep(config)
    RUNS = sweep.expand(SWEEP)
    sweep.check_runs(SWEEP, RUNS)
except ConfigError as err:
    raise WorkflowError(str(err)) from None
validate(config, "../schemas/config.schema.yaml")  # fills results_dir and resources defaults
PROMPTS = res("data", "prompts.parquet")
CHUNKS = SWEEP.chunks
