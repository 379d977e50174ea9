"""Fault injection for PipelineRL: a generator process SIGKILLed mid-chunk stops the trainer
within a bounded time with an error naming the generator (exit code 4, no hang), the last
intra-chunk save is kept, and rerunning the same command resumes from it and completes.

Real subprocesses (`python -m scalerl train` on the micro base of tests/rl); the generator is
found as the child of the trainer's forkserver process (`scalerl.rl.pipeline`)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rl"))
from test_trainer_helpers import (  # noqa: E402
    cache_dir,
    freeze_at_save,
    micro_base,
    run_config_dict,
)

from scalerl.rl import checkpoint as ckpt  # noqa: E402
from scalerl.rl.rollout_log import read_rollouts  # noqa: E402
from scalerl.rl.steps import read_steps  # noqa: E402

pytestmark = pytest.mark.slow
DETECT_S = 120.0  # "no hang": the trainer checks its generators after 1 s of waiting; the
# bound leaves room for a loaded machine (the measured delay is in the failure message)


@pytest.fixture(scope="module")
def micro(request, tmp_path_factory):
    return micro_base(cache_dir(request, tmp_path_factory))


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _generators(trainer: int) -> list[int]:
    """The generator processes: children of the trainer's forkserver."""
    servers = [c for c in _children(trainer) if "forkserver" in _cmdline(c)]
    return [g for s in servers for g in _children(s)]


def test_killed_generator_stops_the_trainer_and_the_rerun_resumes(micro, tmp_path):
    data = run_config_dict(max_lag=2)
    data.update(steps_per_chunk=8, save_every=2)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(data))
    out = tmp_path / "chunk0"
    cmd = [sys.executable, "-m", "scalerl", "train", "--config", str(config), "--chunk", "1",
           "--init", str(micro / "base"), "--prompts", str(micro / "prompts.parquet"),
           "--out", str(out)]
    partial = out.with_name("chunk0.partial")
    # the trainer freezes itself in its second save (the first complete), so the generator is
    # killed mid-chunk on any machine; then the trainer goes on and must notice
    proc, trainer = freeze_at_save(cmd, partial, save_at=2)
    try:
        assert trainer == proc.pid
        generators = _generators(proc.pid)
        assert len(generators) == 1, f"expected one generator process, found {generators}"
        os.kill(generators[0], signal.SIGKILL)
        killed = time.monotonic()
        os.kill(trainer, signal.SIGCONT)
        try:
            code = proc.wait(timeout=DETECT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the trainer did not notice its dead generator within {DETECT_S} s")
        waited = time.monotonic() - killed
        stderr = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert not out.exists(), "the chunk finished before the kill landed; make it longer"
    assert code == 4, stderr
    assert "generator process scalerl-generator-0" in stderr, stderr
    assert f"pid {generators[0]}" in stderr and "exited with code -9" in stderr
    assert "re-run the same command to resume" in stderr and "Traceback" not in stderr
    saved = ckpt.read_trainer_summary(partial)["step"]
    # save 2 (step 4) completes after SIGCONT; steps whose batches the generator finished before
    # it died (up to max_lag ahead) still train and may save once more
    assert saved in (2, 4, 6) and waited < DETECT_S

    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert f"steps {saved + 1}..8 (resuming a partial save)" in rerun.stderr
    assert not partial.exists()
    assert read_steps(out / "steps.parquet")["step"].tolist() == list(range(1, 9))
    rollouts = read_rollouts(out).to_pandas()
    assert rollouts.groupby("step").size().tolist() == [16] * 8  # 4 prompts x 4, none lost
    assert rollouts["staleness"].max() <= 2
