"""Fault injection: SIGKILL the tiny workflow's snakemake process group, restart, verify.

For each trial (seeded RNG): a fresh results directory, a target stage (data, base, train,
eval, fit, report, or a checkpoint write), `snakemake` started in its own session, then
`os.killpg(pgid, SIGKILL)`; `--unlock` (the kill leaves snakemake's lock), then the same command
is rerun to completion. When the kill lands:

- a stage: once the stage's log appears, plus a seeded random delay (where the kill lands in the
  stage depends on the machine's speed: the record says what was there at the kill);
- a checkpoint write: exactly in the middle of the chunk's `save_at`-th intra-chunk save
  (seeded, >= 2), when the save before it is complete on disk. The trainer runs with the
  failpoint `checkpoint_write:chunk<k>.partial@<save_at>=stop` (`scalerl.utils.failpoints`): it
  freezes itself (SIGSTOP) after writing that save's model weights into the temporary directory;
  the harness waits until it sees the stopped process in /proc and kills the group (and every
  descendant, as trainer ranks run in sessions of their own). So "a save
  existed at the kill, and a half-written one beside it" holds by construction on any machine.

The trial then checks:

- the rerun exits 0;
- every output passes its schema reader (`check_sweep_outputs` of the end-to-end test, plus
  `read_rollouts` / `read_steps` of every chunk);
- every chunk whose `.partial` save existed at kill time resumed from it (its train log says
  "resuming a partial save" and its first step is the saved step + 1): recomputed steps = 0;
- no checkpoint temp directory is left (the rerun removes what the killed save left);
- prompt accounting against an uninterrupted reference run of the same config: on-policy, the
  (step, prompt_id) multiset of every chunk's rollouts.parquet equals the reference's (no prompt
  lost or trained twice); pipeline mode, every row has staleness <= max_lag and every step has
  prompts_per_step x generations_per_prompt samples.

Prints one line per trial and a final table; writes OUT/results.json atomically.

Left out: faults other than SIGKILL (disk full, damaged files: tests/faults), multi-node runs,
and GPU engines (the tiny config trains on CPU with the HF engine).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "workflow" / "Snakefile"
sys.path.insert(0, str(REPO / "tests" / "workflow"))
sys.path.insert(0, str(REPO / "tests" / "rl"))
from test_end_to_end import CHUNKS, RUN, check_sweep_outputs  # noqa: E402
from test_trainer_helpers import descendants, stopped_below  # noqa: E402

from scalerl.rl import checkpoint as ckpt  # noqa: E402
from scalerl.rl.rollout_log import ROLLOUTS_FILE, read_rollouts  # noqa: E402
from scalerl.rl.steps import read_steps  # noqa: E402
from scalerl.utils import failpoints  # noqa: E402
from scalerl.utils.io import atomic_path  # noqa: E402

TINY = REPO / "tests" / "workflow" / "tiny.yaml"
DOWNSTREAM = REPO / "tests" / "fixtures" / "workflow" / "downstream.jsonl"
STAGES = ("data", "base", "train", "checkpoint_write", "eval", "fit", "report")
MODES = ("on-policy", "pipeline")
MAX_LAG = 2
RESUME_LINE = re.compile(r"chunk (\d+): steps (\d+)\.\.(\d+) \((resuming a partial save|from )")


def write_config(config: Path, workdir: Path, save_every: int, mode: str) -> Path:
    """`config` plus the downstream set, `train.save_every` and the off-policy `mode`
    ("on-policy", or "pipeline" with max_lag MAX_LAG), written into `workdir`."""
    cfg = yaml.safe_load(config.read_text())
    cfg.setdefault("eval", {})["downstream"] = {"synth": {"path": str(DOWNSTREAM)}}
    train = cfg.setdefault("train", {})
    train["save_every"] = save_every
    overrides = train.setdefault("recipe_overrides", {})
    overrides["off_policy"] = mode
    if mode == "pipeline":
        overrides["max_lag"] = MAX_LAG
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def snakemake_cmd(workdir: Path, configfile: Path) -> list[str]:
    """The one command a trial starts, kills and reruns."""
    return [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory",
            str(workdir), "--configfile", str(configfile), "--cores", "1",
            "--workflow-profile", "none", "--rerun-incomplete"]


def _env() -> dict[str, str]:
    """OMP_NUM_THREADS=1, this checkout's package, this interpreter's `scalerl` script."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "PATH": path}


def stage_marker(workdir: Path, stage: str, chunk: int) -> Iterable[Path]:
    """Paths whose appearance means `stage` is running (any of them)."""
    logs = workdir / "results" / "logs"
    if stage == "data":
        return [logs / "data.log"]
    if stage == "base":
        return [logs / "base" / "tiny-s.log"]
    if stage == "train":
        return [logs / "train" / RUN / f"chunk{chunk}.log"]
    if stage == "eval":
        return [logs / "eval" / RUN / f"chunk{chunk}.log"]
    if stage == "fit":
        return [logs / "fit" / f"{RUN}.log"]
    return [logs / "report.log"]


def temp_dirs(workdir: Path) -> list[str]:
    """Names of the run's checkpoint temp directories (a save being written, or left by one)."""
    runs = workdir / "results" / "runs" / RUN
    return sorted(p.name for p in runs.glob(".chunk*.tmp-*"))


def partial_steps(workdir: Path) -> dict[int, int]:
    """{workflow chunk: last saved step} of every `.partial` save present now."""
    runs = workdir / "results" / "runs" / RUN
    saved = {}
    for partial in runs.glob("chunk*.partial"):
        if (partial / ckpt.SUMMARY_FILE).is_file():
            chunk = int(partial.name[len("chunk"):-len(".partial")])
            saved[chunk] = ckpt.read_trainer_summary(partial)["step"]
    return saved


def failpoint_env(chunk: int, save_at: int) -> dict[str, str]:
    """The environment that freezes chunk `chunk`'s trainer in its `save_at`-th partial save."""
    return {failpoints.ENV: f"checkpoint_write:chunk{chunk}.partial@{save_at}=stop"}


def run_and_kill(workdir: Path, cmd: list[str], stage: str, chunk: int, delay: float,
                 save_at: int = 2, timeout: float = 900) -> tuple[bool, dict[int, int], list]:
    """Start `cmd`, SIGKILL its process group once `stage` runs (+ `delay` s) or, for a
    checkpoint write, once the trainer froze itself in its `save_at`-th save (module docstring).

    Returns (killed: False when the run ended first, partial saves at kill time, checkpoint
    temp directories at kill time)."""
    write = stage == "checkpoint_write"
    env = {**_env(), **(failpoint_env(chunk, save_at) if write else {})}
    with open(workdir / "killed_attempt.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)
        deadline = time.monotonic() + timeout

        def reached() -> bool:
            if write:  # a stopped process stays stopped: no race with the machine's speed
                return bool(stopped_below(proc.pid))
            return any(p.exists() for p in stage_marker(workdir, stage, chunk))

        while not reached():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                return False, partial_steps(workdir), temp_dirs(workdir)
            time.sleep(0.2)
        time.sleep(delay)
        saved, temps = partial_steps(workdir), temp_dirs(workdir)
        if proc.poll() is not None:
            return False, saved, temps
        below = descendants(proc.pid)  # incl. processes in sessions of their own (torchrun)
        os.killpg(proc.pid, signal.SIGKILL)
        for pid in below:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()
    return True, saved, temps


def partial_saves(config: Path, chunk: int) -> int:
    """Intra-chunk saves the workflow chunk `chunk` (1-based) writes under `config`."""
    train = yaml.safe_load(config.read_text())["train"]
    steps = train["steps_per_chunk"]
    steps = steps[chunk - 1] if isinstance(steps, list) else steps
    every = train.get("save_every", 0)
    return (steps - 1) // every if every else 0


def chunk_rows(workdir: Path) -> dict[int, list[dict]]:
    """{workflow chunk: rollouts rows} of every finished chunk, each read by `read_rollouts`."""
    runs = workdir / "results" / "runs" / RUN
    rows = {}
    for k in range(1, CHUNKS + 1):
        read_steps(runs / f"chunk{k}" / "steps.parquet")
        rows[k] = read_rollouts(runs / f"chunk{k}" / ROLLOUTS_FILE).to_pylist()
    return rows


def on_policy_discrepancy(rows: Iterable[Mapping], reference: Iterable[Mapping]) -> dict:
    """Prompts lost or duplicated: the (step, prompt_id) multisets of a run vs its reference."""
    got = Counter((r["step"], r["prompt_id"]) for r in rows)
    want = Counter((r["step"], r["prompt_id"]) for r in reference)
    return {"lost": sum((want - got).values()), "duplicated": sum((got - want).values())}


def pipeline_discrepancy(rows: Iterable[Mapping], max_lag: int, per_step: int,
                         steps: Iterable[int] | None = None) -> dict:
    """Pipeline mode: rows staler than `max_lag`, and samples missing/extra per step (`steps`:
    the steps the chunk must have, e.g. its reference's, so a step with no rows counts as
    lost; default the steps present)."""
    rows = list(rows)
    counts = Counter(r["step"] for r in rows)
    expected = set(counts if steps is None else steps)
    return {"too_stale": sum(r["staleness"] > max_lag for r in rows),
            "lost": sum(max(per_step - counts.get(s, 0), 0) for s in expected),
            "duplicated": sum(max(n - (per_step if s in expected else 0), 0)
                              for s, n in counts.items())}


def recomputed_steps(workdir: Path, saved: Mapping[int, int]) -> int:
    """Steps at or before a kill-time partial save that the rerun trained again."""
    total = 0
    for chunk, last_saved in saved.items():
        log = workdir / "results" / "logs" / "train" / RUN / f"chunk{chunk}.log"
        starts = [int(m.group(2)) for m in RESUME_LINE.finditer(log.read_text())]
        first = starts[-1] if starts else 1
        total += max(last_saved - first + 1, 0)
    return total


def run_trial(index: int, stage: str, rng: random.Random, base: Path, config: Path,
              reference: Mapping[int, list[dict]], save_every: int, mode: str) -> dict:
    """One kill + rerun + verification; the trial's record."""
    workdir = base / f"trial{index}"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    configfile = write_config(config, workdir, save_every, mode)
    cmd = snakemake_cmd(workdir, configfile)
    chunk = rng.randint(1, CHUNKS) if stage in ("train", "checkpoint_write", "eval") else 0
    save_at = 0
    if stage == "checkpoint_write":  # a chunk with a complete save before the killed one
        chunk = rng.choice([k for k in range(1, CHUNKS + 1)
                            if partial_saves(configfile, k) >= 2])
        save_at = rng.randint(2, partial_saves(configfile, chunk))
    delay = 0.0 if stage == "checkpoint_write" else rng.uniform(0.0, 3.0)
    start = time.monotonic()
    killed, saved, temps = run_and_kill(workdir, cmd, stage, chunk, delay, save_at=save_at)
    # SIGKILL leaves snakemake's lock in .snakemake/locks: `--unlock` (what its error message
    # tells a user to run) before the same command again.
    subprocess.run([*cmd, "--unlock"], capture_output=True, env=_env(), timeout=300)
    with open(workdir / "rerun.log", "w") as log:
        rerun = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=_env(),
                               timeout=1800)
    record = {"trial": index, "mode": mode, "stage": stage, "chunk": chunk,
              "delay_s": round(delay, 2), "save_at": save_at, "killed": killed, "partial_saves_at_kill": saved, "temp_dirs_at_kill": temps,
              "rerun_rc": rerun.returncode, "temp_dirs_after_rerun": temp_dirs(workdir)}
    try:
        check_sweep_outputs(workdir)
        rows = chunk_rows(workdir)
        record["outputs_verified"] = True
    except Exception as err:  # noqa: BLE001 - recorded, the table counts it
        record.update(outputs_verified=False, error=f"{type(err).__name__}: {err}"[:500])
        rows = {}
    lost = dup = stale = 0
    for k, ref in reference.items():
        if mode == "pipeline":
            per_step = Counter(r["step"] for r in ref).most_common(1)[0][1]
            diff = pipeline_discrepancy(rows.get(k, []), MAX_LAG, per_step,
                                        steps={r["step"] for r in ref})
            stale += diff["too_stale"]
        else:
            diff = on_policy_discrepancy(rows.get(k, []), ref)
        lost, dup = lost + diff["lost"], dup + diff["duplicated"]
    record.update(too_stale=stale, prompts_lost=lost, prompts_duplicated=dup,
                  recomputed_steps=recomputed_steps(workdir, saved) if rows else None,
                  wall_s=round(time.monotonic() - start, 1))
    record["resumed_cleanly"] = (rerun.returncode == 0 and record["outputs_verified"]
                                 and lost == dup == stale == 0
                                 and record["recomputed_steps"] == 0
                                 and not record["temp_dirs_after_rerun"])
    return record


def summarize(records: list[dict]) -> dict:
    """The table's figures."""
    return {"trials": len(records),
            "faults_by_stage": dict(Counter(r["stage"] for r in records if r["killed"])),
            "resumed_cleanly": sum(r["resumed_cleanly"] for r in records),
            "outputs_verified": sum(r["outputs_verified"] for r in records),
            "prompts_lost_or_duplicated": sum(r["prompts_lost"] + r["prompts_duplicated"]
                                              for r in records),
            "recomputed_steps_beyond_last_save": sum(r["recomputed_steps"] or 0
                                                     for r in records)}


def reference_rows(out: Path, config: Path, save_every: int, mode: str) -> dict[int, list]:
    """The rollouts of an uninterrupted run of the same config (built once per OUT and mode)."""
    ref_dir = out / f"reference-{mode}"
    if not (ref_dir / "results" / "report" / "scaling.md").exists():
        shutil.rmtree(ref_dir, ignore_errors=True)
        ref_dir.mkdir(parents=True)
        subprocess.run(snakemake_cmd(ref_dir, write_config(config, ref_dir, save_every, mode)),
                       check=True, capture_output=True, env=_env(), timeout=1800)
    return chunk_rows(ref_dir)


def run_benchmark(trials: int, seed: int, out: Path, config: Path = TINY,
                  stages: list[str] | None = None, save_every: int = 1,
                  modes: tuple[str, ...] = ("on-policy",)) -> dict:
    """Reference run(s), then `trials` kill/rerun trials; the summary (also OUT/results.json).

    Trial i kills during `stages[i % len(stages)]` (a seeded random stage without `stages`)
    in mode `modes[i % len(modes)]`."""
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    references = {mode: reference_rows(out, config, save_every, mode) for mode in modes}
    records = []
    for i in range(trials):
        stage = stages[i % len(stages)] if stages else rng.choice(STAGES)
        mode = modes[i % len(modes)]
        record = run_trial(i, stage, rng, out, config, references[mode], save_every, mode)
        print(json.dumps(record), flush=True)
        records.append(record)
    summary = {**summarize(records), "records": records}
    with atomic_path(out / "results.json") as tmp:
        tmp.write_text(json.dumps(summary, indent=2))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("fault_injection_out"))
    parser.add_argument("--config", type=Path, default=TINY)
    parser.add_argument("--stages", nargs="*", choices=STAGES, default=None,
                        help="cycle through these stages (default: seeded random choice)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=["on-policy"],
                        help="off-policy modes the trials cycle through")
    parser.add_argument("--keep", action="store_true", help="keep the trial directories")
    args = parser.parse_args()
    summary = run_benchmark(args.trials, args.seed, args.out, args.config, args.stages,
                            modes=tuple(args.modes))
    if not args.keep:
        for i in range(args.trials):
            shutil.rmtree(args.out / f"trial{i}", ignore_errors=True)
    for key, value in summary.items():
        if key != "records":
            print(f"{key:36s} {value}")


if __name__ == "__main__":
    main()
