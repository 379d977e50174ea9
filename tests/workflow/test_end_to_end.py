"""The whole workflow on a tiny sweep, in a temporary directory, through `python -m snakemake`.

One test, in order (each step needs the previous one's files):
1. start the run and interrupt it (SIGINT to the process group, like Ctrl-C) once the second
   training chunk has started; restarting the same command finishes the sweep (the default
   profile's `rerun-incomplete` redoes the interrupted job);
2. every eval Parquet passes `read_eval_table` (schema + invariants) and carries the run's
   config hash; chunk 0 is the base model (step 0, compute 0), compute grows with the chunk;
   the downstream set is evaluated on the last checkpoint into its own file;
3. fit.json per task and the report (scaling.parquet / .md / curves.png / mismatch.png) exist
   and agree; each checkpoint's steps and rollouts rows carry its chunk number;
4. provenance.json holds the resolved config, version, git commit and packages;
5. `snakemake --report` builds the HTML report;
6. a second `-n` has nothing to do; deleting one checkpoint reruns exactly what depends on it;
7. the HTML report opened in headless Chromium shows the scaling table and the curves image
   (skipped without chromium unless SCALERL_REQUIRE_BROWSER=1).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from report_browser import check_report
from snakemake_run import REPO, SNAKEFILE, job_counts

from scalerl.eval.schema import metadata_of, read_eval_table
from scalerl.rl.rollout_log import read_rollouts
from scalerl.rl.steps import read_steps

TINY = Path(__file__).with_name("tiny.yaml")
DOWNSTREAM = REPO / "tests" / "fixtures" / "workflow" / "downstream.jsonl"
RUN = "tiny-s_L48_scalerl_b4x4_s0"
CHUNKS = 4


def _config(workdir):
    """tiny.yaml plus a downstream set (absolute path: the run happens in `workdir`)."""
    path = workdir / "tiny.yaml"
    if not path.exists():
        cfg = yaml.safe_load(TINY.read_text())
        cfg["eval"]["downstream"] = {"synth": {"path": str(DOWNSTREAM)}}
        path.write_text(yaml.safe_dump(cfg))
    return path


def _cmd(workdir, *args):
    return [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory",
            str(workdir), "--configfile", str(_config(workdir)), "--cores", "2",
            "--workflow-profile", "none", "--rerun-incomplete", *args]


def _run(workdir, *args, timeout=900):
    out = subprocess.run(_cmd(workdir, *args), capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    return out


def _pass_rate(run_dir, chunk, task):
    table = read_eval_table(run_dir / "eval" / f"chunk{chunk}.parquet").to_pandas()
    return table.loc[table["task"] == task, "correct"].mean()


def _interrupt_during_chunk2(workdir):
    """Start the sweep; SIGINT the whole process group once chunk 2 is being trained."""
    marker = workdir / "results" / "logs" / "train" / RUN / "chunk2.log"
    log = open(workdir / "first_attempt.log", "w")
    # SIGINT back to its default in the child: a shell that runs the suite in the background
    # (`make test &`) starts it ignored, and Python then installs no KeyboardInterrupt handler.
    proc = subprocess.Popen(_cmd(workdir), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 600
    while not marker.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the run ended or stalled before chunk 2: "
                        f"{(workdir / 'first_attempt.log').read_text()[-3000:]}")
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        code = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait()
    log.close()
    return code


def check_sweep_outputs(workdir):
    """The finished tiny sweep in `workdir`: eval Parquets, downstream, fits, report and
    provenance (steps 2-4 of the module docstring; tests/workflow/test_slurm.py reuses it)."""
    run_dir = workdir / "results" / "runs" / RUN
    # -- eval files ---------------------------------------------------------------------------
    provenance = json.loads((run_dir / "provenance.json").read_text())
    steps, flops = [], []
    for k in range(CHUNKS + 1):
        table = read_eval_table(run_dir / "eval" / f"chunk{k}.parquet")
        cols = table.to_pydict()
        assert set(cols["chunk"]) == {k} and set(cols["run"]) == {RUN}
        assert set(cols["model"]) == {"tiny-s"} and set(cols["gen_len"]) == {48}
        assert set(cols["recipe"]) == {"scalerl"} and set(cols["dataset"]) == {"val"}
        assert sorted(set(cols["task"])) == ["code", "math"]
        assert table.num_rows == 2 * 4 * 2  # 2 tasks x max_prompts 4 x k = 2
        assert metadata_of(table)["scalerl.config_hash"] == provenance["config_hash"]
        steps.append(cols["step"][0])
        flops.append(cols["compute_flops"][0])
    assert steps == [0, 1, 3, 5, 8]  # chunks of 1, 2, 2, 3 steps; chunk 0 = the base model
    assert flops[0] == 0.0 and all(b > a for a, b in zip(flops, flops[1:]))

    downstream = read_eval_table(run_dir / "downstream" / "synth" / f"chunk{CHUNKS}.parquet")
    cols = downstream.to_pydict()
    assert set(cols["dataset"]) == {"synth"} and set(cols["chunk"]) == {CHUNKS}
    assert downstream.num_rows == 5 * 2  # every prompt of the file (3 math + 2 code) x k = 2
    assert set(cols["step"]) == {steps[-1]}

    # -- fits and report ----------------------------------------------------------------------
    # Every task group is either fitted (fit.json) or listed with its reason in fits.json.
    records = json.loads((run_dir / "fit" / "fits.json").read_text())
    assert len(records) == 2
    fitted = []
    for task in ("math", "code"):
        path = run_dir / "fit" / f"task={task}" / "fit.json"
        if path.exists():
            fit = json.loads(path.read_text())
            assert {"A", "B", "C_mid", "R0", "r2"} <= set(fit)
            assert fit["meta"]["run"] == RUN and str(fit["meta"]["gen_len"]) == "48"
            assert fit["R0"] == pytest.approx(_pass_rate(run_dir, 0, task))
            fitted.append(task)
    assert fitted, f"no task could be fitted: {records}"
    report = workdir / "results" / "report"
    table = pd.read_parquet(report / "scaling.parquet")
    assert sorted(table["task"]) == sorted(fitted)
    assert {"A", "B", "C_mid", "R0", "model", "gen_len", "recipe"} <= set(table.columns)
    assert "| tiny-s |" in (report / "scaling.md").read_text()
    assert (report / "curves.png").read_bytes()[:4] == b"\x89PNG"
    # the generator–trainer mismatch of the run, and one chunk number: checkpoint chunk{k}'s
    # steps and rollouts rows carry chunk k, as its eval Parquet does
    assert (report / "mismatch.png").read_bytes()[:4] == b"\x89PNG"
    assert f"| {RUN} | {steps[-1]} |" in (report / "scaling.md").read_text()
    for k in range(1, CHUNKS + 1):
        assert set(read_steps(run_dir / f"chunk{k}" / "steps.parquet")["chunk"]) == {k}
        assert set(read_rollouts(run_dir / f"chunk{k}").column("chunk").to_pylist()) == {k}

    # -- provenance ---------------------------------------------------------------------------
    assert provenance["run"] == RUN and provenance["scalerl_version"]
    assert provenance["git_commit"] and "torch" in provenance["packages"]
    recipe = provenance["run_config"]["recipe"]
    assert recipe["prompts_per_step"] == 4
    assert recipe["think_budget"] == [26, 32]  # hi = 48 - 16, lo = 0.8 hi


@pytest.mark.slow
def test_tiny_sweep_end_to_end(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is needed for the provenance record")
    code = _interrupt_during_chunk2(tmp_path)
    assert code != 0, "the interrupted run must not report success"
    run_dir = tmp_path / "results" / "runs" / RUN
    assert (run_dir / "chunk1").is_dir() and not (run_dir / "chunk4").exists()

    out = _run(tmp_path)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]

    check_sweep_outputs(tmp_path)

    # -- HTML report --------------------------------------------------------------------------
    html = _run(tmp_path, "--report", str(tmp_path / "report.html"))
    assert html.returncode == 0, html.stderr[-3000:]
    assert (tmp_path / "report.html").stat().st_size > 10_000

    # -- reruns -------------------------------------------------------------------------------
    again = _run(tmp_path, "-n")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    shutil.rmtree(run_dir / "chunk3")
    plan = _run(tmp_path, "-n")
    assert plan.returncode == 0, plan.stderr
    assert job_counts(plan.stdout) == {"train": 2, "eval": 2, "fit": 1, "predictions": 1,
                                        "report": 1, "all": 1, "eval_downstream": 1,
                                        "total": 9}

    # -- the HTML report in a headless browser (last: it skips without chromium) -------------
    assert check_report(tmp_path / "report.html"), "no curves image shown in the report"
