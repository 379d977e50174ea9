"""`scalerl train` with trainer_ranks 2 (relaunched under torchrun, gloo on CPU): killed with
SIGKILL (the whole process group: launcher, torchrun and both ranks) after its first
intra-chunk save, the rerun resumes from that save, and the chunk ends where a single-process
chunk ends (same rows, weights within 1e-5: the 2-rank step differs by float rounding)."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rl"))
from test_trainer_helpers import (  # noqa: E402
    cache_dir,
    descendants,
    freeze_at_save,
    micro_base,
    run_config_dict,
)

from scalerl.rl import checkpoint as ckpt  # noqa: E402
from scalerl.rl.rollout_log import read_rollouts  # noqa: E402
from scalerl.rl.run_config import RunConfig  # noqa: E402
from scalerl.rl.steps import read_steps  # noqa: E402
from scalerl.rl.trainer import train_chunk  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def micro(request, tmp_path_factory):
    return micro_base(cache_dir(request, tmp_path_factory))


def _command(micro: Path, config: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "scalerl", "train", "--config", str(config), "--chunk", "0",
            "--init", str(micro / "base"), "--prompts", str(micro / "prompts.parquet"),
            "--out", str(out)]


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    return env


def test_two_ranks_sigkill_then_rerun_resumes(micro, tmp_path):
    data = run_config_dict(off_policy="on-policy")
    data.update(steps_per_chunk=6, save_every=2, trainer_ranks=2)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(data))
    out = tmp_path / "chunk0"
    partial = out.with_name("chunk0.partial")
    # rank 0 freezes itself in its second save (the first complete), then everything dies at
    # once: launcher, torchrun and both ranks (which torchrun starts in sessions of their own)
    proc, _ = freeze_at_save(_command(micro, config, out), partial, save_at=2, env=_env())
    for pid in [proc.pid, *descendants(proc.pid)]:
        os.kill(pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert not out.exists()
    killed_at = ckpt.read_trainer_summary(partial)["step"]
    assert killed_at == 2
    assert sorted(p.name for p in (partial / "dcp").iterdir()) == [
        ".metadata", "__0_0.distcp", "__1_0.distcp"]

    rerun = subprocess.run(_command(micro, config, out), env=_env(), capture_output=True,
                           text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-6000:]
    assert f"steps {killed_at + 1}..6 (resuming a partial save), 2 FSDP" in rerun.stderr
    for done in range(1, killed_at + 1):  # steps before the kill are not recomputed
        assert f"step {done}/6 " not in rerun.stderr
    assert not partial.exists()
    resumed = read_steps(out / "steps.parquet")
    assert resumed["step"].tolist() == list(range(1, 7))

    ref = tmp_path / "reference"
    single = {**data, "trainer_ranks": 1}
    train_chunk(RunConfig.from_dict(single), chunk=0, init=micro / "base",
                prompts=micro / "prompts.parquet", out=ref)
    expected = read_steps(ref / "steps.parquet")
    for col in ("reward_mean", "pass_rate", "tokens", "compute_flops", "npr_retired", "lr"):
        assert resumed[col].tolist() == expected[col].tolist(), col
    for col in ("loss", "grad_norm", "entropy"):
        assert resumed[col].tolist() == pytest.approx(expected[col].tolist(), abs=1e-5), col
    # rank 0 logs every sample, the steps before the kill kept across the resume
    got, want = read_rollouts(out).to_pydict(), read_rollouts(ref).to_pydict()
    assert len(set(got["step"])) == 6 and len(got["step"]) == len(want["step"])
    for col in ("step", "trainer_version", "prompt_id", "reward", "correct", "filter_reason"):
        assert got[col] == want[col], col
    from safetensors.torch import load_file

    a, b = load_file(str(out / "model.safetensors")), load_file(str(ref / "model.safetensors"))
    assert sorted(a) == sorted(b)
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-5, msg=name)
