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
from test_trainer_helpers import cache_dir, micro_base, run_config_dict  # noqa: E402

from scalerl.rl import checkpoint as ckpt  # noqa: E402
from scalerl.rl.rollout_log import read_rollouts  # noqa: E402
from scalerl.rl.steps import read_steps  # noqa: E402

pytestmark = pytest.mark.slow
DETECT_S = 30.0  # the trainer must stop this soon after its generator died


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
    cmd = [sys.executable, "-m", "scalerl", "train", "--config", str(config), "--chunk", "0",
           "--init", str(micro / "base"), "--prompts", str(micro / "prompts.parquet"),
           "--out", str(out)]
    partial = out.with_name("chunk0.partial")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (partial / ckpt.SUMMARY_FILE).is_file():
            assert proc.poll() is None, f"the chunk ended before its first save:\n" \
                                        f"{proc.stderr.read()}"
            assert time.monotonic() < deadline, "no intra-chunk save appeared"
            time.sleep(0.02)
        generators = _generators(proc.pid)
        assert len(generators) == 1, f"expected one generator process, found {generators}"
        os.kill(generators[0], signal.SIGKILL)
        killed = time.monotonic()
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
    assert saved in (2, 4, 6) and waited < DETECT_S

    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert f"steps {saved + 1}..8 (resuming a partial save)" in rerun.stderr
    assert not partial.exists()
    assert read_steps(out / "steps.parquet")["step"].tolist() == list(range(1, 9))
    rollouts = read_rollouts(out).to_pandas()
    assert rollouts.groupby("step").size().tolist() == [16] * 8  # 4 prompts x 4, none lost
    assert rollouts["staleness"].max() <= 2
