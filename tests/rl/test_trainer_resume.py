"""Crash safety: a chunk killed with SIGKILL resumes from its last intra-chunk save.

Real subprocesses (`python -m scalerl train`), real SIGKILL. On-policy on CPU with a fixed seed,
the interrupted-and-resumed chunk must end in the state of an uninterrupted one; in pipeline
mode the generator processes must not outlive the killed trainer and the rerun must complete.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from test_trainer_helpers import (
    cache_dir,
    descendants,
    freeze_at_save,
    micro_base,
    run_config_dict,
    saved_optimizer_state,
)

from scalerl.rl import checkpoint as ckpt
from scalerl.rl.run_config import RunConfig
from scalerl.rl.steps import read_steps
from scalerl.rl.trainer import train_chunk

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def micro(request, tmp_path_factory):
    return micro_base(cache_dir(request, tmp_path_factory))


def _command(micro: Path, config: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "scalerl", "train", "--config", str(config), "--chunk", "1",
            "--init", str(micro / "base"), "--prompts", str(micro / "prompts.parquet"),
            "--out", str(out)]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _kill_in_second_save(cmd: list[str], out: Path):
    """Start the chunk, SIGKILL it in the middle of its second intra-chunk save (the first one
    complete: `freeze_at_save`); return (the saved step, the trainer's descendants)."""
    partial = out.with_name(out.name + ".partial")
    proc, trainer = freeze_at_save(cmd, partial, save_at=2)
    children = descendants(trainer)
    os.kill(trainer, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert not out.exists()
    assert any(p.name.startswith(".chunk0.partial.tmp-") for p in out.parent.iterdir())
    return ckpt.read_trainer_summary(partial)["step"], children


def test_sigkill_then_rerun_equals_an_uninterrupted_chunk(micro, tmp_path):
    data = run_config_dict(off_policy="on-policy")
    data.update(steps_per_chunk=8, save_every=2)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(data))
    out = tmp_path / "chunk0"
    killed_at, _ = _kill_in_second_save(_command(micro, config, out), out)
    assert killed_at == 2  # save 1 (step 2) complete, save 2 (step 4) half-written

    rerun = subprocess.run(_command(micro, config, out), capture_output=True, text=True,
                           timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert f"steps {killed_at + 1}..8 (resuming a partial save)" in rerun.stderr
    assert ", step 8 reward " in rerun.stderr  # the per-step progress line
    for done in range(1, killed_at + 1):  # steps before the kill are not recomputed
        assert f", step {done} reward " not in rerun.stderr
    assert not out.with_name("chunk0.partial").exists()
    assert not [p.name for p in out.parent.iterdir() if ".tmp-" in p.name]  # removed by the rerun
    resumed = read_steps(out / "steps.parquet")
    assert resumed["step"].tolist() == list(range(1, 9))

    ref = tmp_path / "reference"
    train_chunk(RunConfig.from_dict(data), chunk=1, init=micro / "base",
                prompts=micro / "prompts.parquet", out=ref)
    expected = read_steps(ref / "steps.parquet")
    for col in ("reward_mean", "pass_rate", "loss", "grad_norm", "entropy", "compute_flops",
                "tokens", "npr_retired", "lr"):
        assert resumed[col].tolist() == pytest.approx(expected[col].tolist(), rel=1e-6, nan_ok=True), col
    from safetensors.torch import load_file

    a, b = load_file(str(out / "model.safetensors")), load_file(str(ref / "model.safetensors"))
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-7)
    sa, sb = ckpt.load_trainer_state(out), ckpt.load_trainer_state(ref)
    assert sa["sampler"] == sb["sampler"] and sa["requests"] == sb["requests"]
    oa, ob = saved_optimizer_state(out), saved_optimizer_state(ref)
    assert oa["state"].keys() == ob["state"].keys()
    for key, va in oa["state"].items():
        vb = ob["state"][key]
        torch.testing.assert_close(va["exp_avg_sq"], vb["exp_avg_sq"], rtol=1e-6, atol=1e-12)


def test_pipeline_generators_die_with_the_trainer_and_the_rerun_completes(micro, tmp_path):
    data = run_config_dict(max_lag=2)
    data.update(steps_per_chunk=8, save_every=2)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(data))
    out = tmp_path / "chunk0"
    killed_at, children = _kill_in_second_save(_command(micro, config, out), out)
    assert killed_at == 2
    assert children, "the pipeline started no generator process"
    deadline = time.monotonic() + 120  # they poll their parent's liveness: a guard, not a race
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in children), "generator processes outlived the trainer"

    rerun = subprocess.run(_command(micro, config, out), capture_output=True, text=True,
                           timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert f"steps {killed_at + 1}..8 (resuming a partial save)" in rerun.stderr
    rows = read_steps(out / "steps.parquet")
    assert rows["step"].tolist() == list(range(1, 9))
    assert rows["staleness_max"].max() <= 2
    assert ckpt.read_trainer_summary(out)["step"] == 8
