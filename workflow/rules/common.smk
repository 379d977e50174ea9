# Helpers only (no rules): validate and expand the sweep, name the paths that rules share, and
# hand each job its options. The science (validation with defaults, run ids, run configs, the
# options of every command, provenance) lives in scalerl.sweep (docs/design.md, "Sweep"); each
# file's path is named once, by the rule that writes it (`rules.X.output.Y`); the stages live
# in the other .smk files and call `scalerl`.
import os
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from scalerl.config import ConfigError
from scalerl import sweep  # (not its names: `expand` is snakemake's here)
from scalerl.fit.forecast.racing import read_stopped
from scalerl.sweep.provenance import write_provenance, write_run_yaml, write_yaml

# Software of every job that runs scalerl (used with --software-deployment-method conda).
CONDA_ENV = "../envs/scalerl.yaml"
# Jobs call `scalerl <command>`: the scalerl installed beside the Python running snakemake
# comes first on PATH, so the workflow works from a venv that is not activated (and SLURM jobs
# inherit the same PATH through sbatch --export=ALL).
_BIN = str(Path(sys.executable).parent)
if _BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _BIN + os.pathsep + os.environ.get("PATH", "")


# -- evaluated at parse time ---------------------------------------------------------------
try:  # the package first: its messages name every bad key and the fix
    SWEEP = sweep.load_sweep(config)
    RUNS = sweep.expand(SWEEP)
    sweep.check_runs(SWEEP, RUNS)
except ConfigError as err:
    raise WorkflowError(str(err)) from None
validate(config, "../schemas/config.schema.yaml")
CHUNKS = SWEEP.chunks


def res(*parts):
    """A path under the sweep's results_dir."""
    return str(Path(SWEEP.results_dir, *parts))


def run_dir(run, *parts):
    return res("runs", run, *parts)


def threads_of(kind):
    """Cores of the jobs of a kind (`resources.<kind>.threads`, the package's default 1)."""
    return SWEEP.resources[kind].threads


def job_resources(kind):
    """The snakemake resources of the jobs of a kind (`scalerl.sweep.job_resources`, which
    gives GPUs, memory, run time; a multi-node or multi-GPU train job as the SLURM executor
    submits it)."""
    return sweep.job_resources(SWEEP.resources[kind])


def report_file(name, caption):
    """report/NAME, shown in `snakemake --report` with workflow/report/CAPTION."""
    return report(res("report", name), caption=f"../report/{caption}", category="Scaling report")


def options(args):
    """A list of command-line options (`scalerl.sweep.options`) as one shell string."""
    return shlex.join(args)


# -- the files the local `run:` rules write (each logs what it wrote) ----------------------------
def logged(log, path):
    Path(log).write_text(f"wrote {path}\n")


def write_config(path, data, log):
    write_yaml(path, data)
    logged(log, path)


def write_run_config(path, run, log):
    """runs/RUN/run.yaml: the run's RunConfig (`scalerl.sweep.run_config`)."""
    cfg = sweep.run_config(SWEEP, RUNS[run], base=checkpoint_dir(run, 0),
                           prompts=str(rules.data.output.prompts))
    write_run_yaml(path, cfg)
    logged(log, path)


def write_run_provenance(path, run_yaml, log):
    write_provenance(path, run_yaml, config, workflow.basedir)
    logged(log, path)


# -- the outputs of other rules (called lazily, once every rule exists) ----------------------
def checkpoint_dir(run, chunk):
    """The model evaluated as chunk `chunk`: the base model for 0, else training chunk k's
    checkpoint."""
    chunk = int(chunk)
    if chunk == 0:
        return rules.base.output.model.format(model=RUNS[run].model)
    return rules.train.output.checkpoint.format(run=run, chunk=chunk)


def model_config_file(run):
    return rules.model_config.output.yaml.format(model=RUNS[run].model)


def eval_files(run, upto=None):
    """The run's eval files, chunk 0 (base model) to `upto` (default: its last chunk)."""
    last = last_chunk(run) if upto is None else upto
    return [rules.eval.output.table.format(run=run, chunk=k) for k in range(last + 1)]


def sweep_mate_evals(run):
    """The eval files of the runs fitted jointly with `run` (`scalerl.sweep.sweep_mates`)."""
    return [f for mate in sweep.sweep_mates(SWEEP, RUNS[run], RUNS.values())
            for f in eval_files(mate.id)]


def downstream_chunks(run):
    last = last_chunk(run)
    return list(range(last + 1)) if SWEEP.downstream_chunks == "all" else [last]


# -- racing (a data-dependent DAG: the checkpoint `race` decides which chunks exist) --------
def stopped_at(run):
    """The chunk after which racing stopped `run`, or None (racing off, or never stopped)."""
    if not SWEEP.grid.racing.enabled:
        return None
    for k in range(1, CHUNKS):
        if run in read_stopped(checkpoints.race.get(chunk=k).output.decisions):
            return k
    return None


def last_chunk(run):
    stop = stopped_at(run)
    return CHUNKS if stop is None else stop


def race_inputs(chunk):
    """Predictions after `chunk` of the runs still racing then."""
    alive = [r for r in RUNS
             if all(r not in read_stopped(checkpoints.race.get(chunk=k).output.decisions)
                    for k in range(1, chunk))]
    return [rules.predict_chunk.output.table.format(run=r, chunk=chunk) for r in alive]


def racing_decisions(wildcards=None):
    """decisions of every race (none when racing is off)."""
    if not SWEEP.grid.racing.enabled:
        return []
    return [checkpoints.race.get(chunk=k).output.decisions for k in range(1, CHUNKS)]


def racing_report_args(decisions):
    return f"--racing {' '.join(map(shlex.quote, decisions))}" if decisions else ""


def model_size_args(bases):
    """--size MODEL=BASE_DIR per model of the sweep (`bases` in SWEEP.grid.models order): the
    report reads each model's parameter count from its base directory."""
    return " ".join(f"--size {shlex.quote(f'{m}={b}')}" for m, b in zip(SWEEP.grid.models, bases))


def trained_checkpoints(wildcards=None):
    """Every training chunk's checkpoint of every run (the chunks racing left)."""
    return [checkpoint_dir(run, k) for run in sorted(RUNS) for k in range(1, last_chunk(run) + 1)]


def all_outputs(wildcards=None):
    """Every final artifact of the sweep (the chunks racing left to each run)."""
    outs = list(rules.report.output)
    for run in RUNS:
        outs += [rules.provenance.output.json.format(run=run),
                 rules.fit.output.fit.format(run=run)]
        # Checkpoints are targets too: a deleted one is retrained (with what depends on it)
        # instead of being treated as a disposable intermediate.
        outs += [checkpoint_dir(run, k) for k in range(1, last_chunk(run) + 1)]
        outs += [rules.eval_downstream.output.table.format(run=run, dataset=name, chunk=k)
                 for name in SWEEP.downstream for k in downstream_chunks(run)]
    return outs
