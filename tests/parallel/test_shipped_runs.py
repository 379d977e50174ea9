"""The one trainer at world size 1 and 2 (gloo) on the shipped configs' own runs.

Each run is derived from config/gpu.yaml or config/config.yaml through `scalerl.sweep`, with
only what this CPU machine forces changed (tests/parallel/shipped.py says what). gpu.yaml's run
keeps its numerics: fp32 master weights of a model declared bfloat16, bf16 autocast compute,
the chunked FP32 head, token-budget micro-batches and gradient checkpointing. Both runs use
PipelineRL generator processes, on the fixed schedule (`pipeline_fixed_lag`: the same samples
whatever the timing) so that one rank and two ranks train on the same batches and can be
compared: after 2 steps the same samples, step statistics and weights within the stated
tolerances. A 2-rank chunk killed with SIGKILL in the middle of a save resumes from the save
before it. A checkpoint is one format at every world size: gpu.yaml's chunk 1 written at one
rank continues as chunk 2 at two ranks, and the one written at two ranks continues at one.
"""

import os
import signal
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from safetensors.torch import load_file
from shipped import CONFIG_YAML, GPU_YAML, derive_run, scalerl, train_command, write_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rl"))
from test_trainer_helpers import (  # noqa: E402
    cache_dir,
    descendants,
    freeze_at_save,
    micro_base,
    saved_optimizer_state,
)

from scalerl.rl import checkpoint as ckpt  # noqa: E402
from scalerl.rl.rollout_log import read_rollouts  # noqa: E402
from scalerl.rl.steps import read_steps  # noqa: E402

pytestmark = pytest.mark.slow


def _additions(root: Path) -> Path:
    """prompts.parquet of 1-digit additions (train + 10 val) and 8 small code tasks (the
    shipped mixes draw both tasks)."""
    from scalerl.tasks.synthetic import generate_code, generate_math

    drawn = generate_math(100, 3, difficulties=(1,), families=("add",))
    examples = list({ex.prompt_id: ex for ex in drawn}.values())  # 1-digit sums repeat
    rows = [{**ex.to_row(), "split": "train" if i < len(examples) - 10 else "val"}
            for i, ex in enumerate(examples)]
    rows += [{**ex.to_row(), "split": "train" if i < 6 else "val"}
             for i, ex in enumerate(generate_code(8, 3, difficulties=(1,)))]
    pd.DataFrame(rows)[["prompt_id", "task", "source", "split", "prompt", "answer", "tests",
                        "difficulty"]].to_parquet(root / "prompts.parquet")
    return root / "prompts.parquet"


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory):
    """gpu.yaml's first run (qwen3-0.6b) on a local Qwen3-architecture model."""
    from scalerl.models.local_qwen3 import LocalQwen3, build_local_qwen3
    from scalerl.tasks.synthetic import generate_math

    root = tmp_path_factory.mktemp("gpu_yaml")
    prompts = _additions(root)
    drawn = generate_math(100, 3, difficulties=(1,), families=("add",))
    examples = list({ex.prompt_id: ex for ex in drawn}.values())[:-10]
    build_local_qwen3(root / "hf_src", [], LocalQwen3(max_positions=512), sft_examples=examples,
                      sft_steps=120)
    cfg, base_cfg = derive_run(
        GPU_YAML, model_dir=root / "hf_src", base=root / "base", prompts=prompts, gen_len=24,
        answer_budget=8, batch="8x4", steps=2, train={"pipeline_fixed_lag": 1},
        numerics={"logprob_chunk_tokens": 8, "micro_batch_tokens": 96})
    (root / "base.yaml").write_text(yaml.safe_dump(base_cfg))
    scalerl("base", "--config", str(root / "base.yaml"), "--out", str(root / "base"))
    return root, cfg, write_run(cfg, root / "run.yaml")


@pytest.fixture(scope="module")
def cpu_run(request, tmp_path_factory):
    """config.yaml's first run (tiny-s, L 56) on the cached micro base in place of tiny-s."""
    root = tmp_path_factory.mktemp("config_yaml")
    micro = micro_base(cache_dir(request, tmp_path_factory))
    cfg, base_cfg = derive_run(
        CONFIG_YAML, model_dir=micro / "base", base=root / "base",
        prompts=micro / "prompts.parquet", gen_len=56, answer_budget=8, batch="8x4", steps=2,
        train={} if "pipeline_fixed_lag" in yaml.safe_load(CONFIG_YAML.read_text())["train"]
        else {"pipeline_fixed_lag": 1})
    (root / "base.yaml").write_text(yaml.safe_dump({"model": base_cfg["model"]}))
    scalerl("base", "--config", str(root / "base.yaml"), "--out", str(root / "base"))
    return root, cfg, write_run(cfg, root / "run.yaml")


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "model.safetensors"))


def _trained(root: Path, run_yaml: Path, name: str, *sets: str) -> Path:
    """Chunk 0 of the run trained into root/NAME (once per module: tests share it)."""
    out = root / name
    if not out.exists():
        proc = scalerl(*train_command(run_yaml, out, *sets))
        ranks = next((s.split("=")[1] for s in sets if s.startswith("trainer_ranks=")), "1")
        assert f"{ranks} trainer rank(s)" in proc.stderr
    return out


def _compare_runs(root: Path, one: Path, two: Path, atol: float) -> dict:
    """The same samples, step statistics, and weights within `atol` (see the tests)."""
    a, b = read_steps(one / "steps.parquet"), read_steps(two / "steps.parquet")
    assert a["step"].tolist() == b["step"].tolist() == [1, 2]
    for col in ("reward_mean", "pass_rate", "tokens", "zero_variance_fraction"):
        assert a[col].tolist() == b[col].tolist(), col  # the same samples at both sizes
    assert (a["zero_variance_fraction"] < 1).all(), "a step without a kept sample trains nothing"
    for col in ("loss", "grad_norm"):  # one batch gradient, summed in another order
        assert b[col].tolist() == pytest.approx(a[col].tolist(), rel=2e-2, abs=1e-6), col
    ra, rb = read_rollouts(one).to_pydict(), read_rollouts(two).to_pydict()
    for col in ("step", "prompt_id", "sample_idx", "version_started", "n_tokens", "reward",
                "response", "filter_reason"):
        assert ra[col] == rb[col], col
    base, wa, wb = _weights(root / "base"), _weights(one), _weights(two)
    assert sorted(wa) == sorted(wb)
    moved = max(float((wa[n].float() - base[n].float()).abs().max()) for n in wa)
    diff = {n: float((wa[n] - wb[n]).abs().max()) for n in wa}
    assert moved > 0, "two steps changed no weight: the comparison would be empty"
    assert max(diff.values()) <= atol, sorted(diff.items(), key=lambda kv: -kv[1])[:3]
    return {"moved": moved, "max_diff": max(diff.values()), "steps": (a, b)}


def test_gpu_yaml_run_trains_alike_at_one_and_two_ranks(gpu_run):
    """The paper's optimizer (AdamW eps 1e-15, lr 5e-7 after 100 warmup steps: lr 5e-9 and
    1e-8 at steps 1 and 2) moves every weight by about ±lr per step whatever the gradient's
    size, so a gradient entry near 0 whose sign differs between the two reduction orders moves
    its weight the other way: the stated tolerance is 2 x (5e-9 + 1e-8) = 3e-8."""
    root, cfg, run_yaml = gpu_run
    one = _trained(root, run_yaml, "ranks1", "trainer_ranks=1")
    two = _trained(root, run_yaml, "ranks2", "trainer_ranks=2")
    numerics = cfg.numerics
    assert (numerics.param_dtype, numerics.compute_dtype, numerics.gradient_checkpointing) == (
        "float32", "bfloat16", True)
    assert numerics.logprob_chunk_tokens and numerics.micro_batch_tokens
    recipe = cfg.recipe
    assert (recipe.off_policy, recipe.optimizer.lr, recipe.optimizer.eps) == (
        "pipeline", 5e-7, 1e-15)
    assert ckpt.read_trainer_summary(root / "base")["step"] == 0
    base_info = yaml.safe_load((root / "base" / "base_info.json").read_text())
    assert base_info["config"]["model"]["dtype"] == "bfloat16"  # declared bf16, trained fp32
    out = _compare_runs(root, one, two, atol=3e-8)
    assert {t.dtype for t in _weights(two).values()} == {torch.float32}
    a = out["steps"][0]
    assert (a["padding_fraction"] >= 0).all() and (a["lr"] > 0).all()


def test_config_yaml_run_trains_alike_at_one_and_two_ranks(cpu_run):
    """config.yaml's optimizer (lr 5e-5, no warmup, eps 1e-8) moves a weight by at most about
    lr per step; a sign flip of a gradient entry near 0 (reduction order) can move it 2 x lr
    the other way over two steps: the stated tolerance is 4 x 5e-5 = 2e-4, and most weights
    agree to float rounding (checked below)."""
    root, cfg, run_yaml = cpu_run
    assert cfg.recipe.off_policy == "pipeline" and cfg.generators == 1
    one = _trained(root, run_yaml, "ranks1", "trainer_ranks=1")
    two = _trained(root, run_yaml, "ranks2", "trainer_ranks=2")
    out = _compare_runs(root, one, two, atol=2e-4)
    _most_weights_agree(one, two, out)


def _most_weights_agree(one: Path, two: Path, out: dict) -> None:
    wa, wb = _weights(one), _weights(two)
    close = sum(int(((wa[n] - wb[n]).abs() <= 1e-6).sum()) for n in wa)
    assert close / sum(t.numel() for t in wa.values()) > 0.99, out


def test_config_yaml_run_on_two_nodes_trains_as_on_one(cpu_run):
    """Two torchrun agents on this machine stand in for two nodes (c10d rendezvous, one rank
    and one PipelineRL generator each): each node's generator makes its half of every batch
    from weights pushed to that node, the main rank gathers the halves. The batches, the step
    statistics and the weights equal the one-node 2-rank run's (same tolerance)."""
    import socket
    import subprocess

    root, _, run_yaml = cpu_run
    one_node = _trained(root, run_yaml, "ranks2", "trainer_ranks=2")
    out = root / "two_nodes"
    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
           "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=two-nodes",
           "-m", "scalerl", *train_command(run_yaml, out, "generators=2")]
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                          os.environ.get("PYTHONPATH", "")])}
    agents = [subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True) for _ in range(2)]
    logs = [agent.communicate(timeout=1200)[1] for agent in agents]
    assert [a.returncode for a in agents] == [0, 0], "\n".join(log[-3000:] for log in logs)
    assert any("2 trainer rank(s)" in log for log in logs)
    compared = _compare_runs(root, one_node, out, atol=2e-4)
    _most_weights_agree(one_node, out, compared)


def _kill_in_second_save_and_rerun(root: Path, run_yaml: Path) -> str:
    """3 steps at 2 ranks, saving after every step: killed (all processes) in the middle of
    save 2 with save 1 complete, then the same command again."""
    out = root / "killed"
    cmd = [sys.executable, "-m", "scalerl", *train_command(
        run_yaml, out, "trainer_ranks=2", "steps_per_chunk=3", "save_every=1")]
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                          os.environ.get("PYTHONPATH", "")])}
    partial = out.with_name(out.name + ".partial")
    proc, _ = freeze_at_save(cmd, partial, save_at=2, env=env)
    for pid in [proc.pid, *descendants(proc.pid)]:  # torchrun's ranks: sessions of their own
        os.kill(pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert not out.exists() and ckpt.read_trainer_summary(partial)["step"] == 1
    assert sorted(p.name for p in (partial / "dcp").iterdir()) == [
        ".metadata", "__0_0.distcp", "__1_0.distcp"]
    rerun = scalerl(*cmd[3:])
    assert "steps 2..3 (resuming a partial save)" in rerun.stderr
    assert "removed .killed.partial.tmp-" in rerun.stderr  # the half-written save
    assert not partial.exists()
    assert read_steps(out / "steps.parquet")["step"].tolist() == [1, 2, 3]
    rollouts = read_rollouts(out).to_pandas()
    assert sorted(set(rollouts["step"])) == [1, 2, 3]
    assert rollouts.groupby("step").size().nunique() == 1  # every step has B x G samples
    return rerun.stderr


def test_gpu_yaml_two_ranks_killed_in_a_save_resume(gpu_run):
    root, _, run_yaml = gpu_run
    _kill_in_second_save_and_rerun(root, run_yaml)


def test_config_yaml_two_ranks_killed_in_a_save_resume(cpu_run):
    root, _, run_yaml = cpu_run
    _kill_in_second_save_and_rerun(root, run_yaml)


def _chunk_2(root: Path, run_yaml: Path, init: Path, ranks: int) -> Path:
    """Chunk 2 of the run (2 more steps) from the chunk-1 checkpoint `init`, at `ranks`."""
    out = root / f"chunk2_from_{init.name}_at_{ranks}"
    cmd = train_command(run_yaml, out, f"trainer_ranks={ranks}")
    cmd[cmd.index("--chunk") + 1] = "2"
    proc = scalerl(*cmd, "--init", str(init))
    assert f"{ranks} trainer rank(s)" in proc.stderr and "steps 3..4" in proc.stderr
    return out


def test_gpu_yaml_checkpoint_resumes_from_one_rank_at_two_and_back(gpu_run):
    """Chunk 1 written at one rank and continued as chunk 2 at two ranks (1 -> 2), and written
    at two and continued at one (2 -> 1), against chunk 2 at one rank from the one-rank
    checkpoint (1 -> 1). Every continuation draws the same samples, restores the LR schedule
    (steps 3 and 4 at lr 5e-7 x 3/100 and x 4/100) and the AdamW state of chunk 1 (its step
    count reaches 4, not 2, and its moments stay within 2 % of the reference's in norm; the
    state of 2 steps differs from that of 4 by far more), and ends within 1e-7 of the
    reference's weights: 3e-8 between the chunk-1 checkpoints of either size (the first test)
    plus 2 x (1.5e-8 + 2e-8) for the two steps of chunk 2 in another reduction order."""
    root, _, run_yaml = gpu_run
    one = _trained(root, run_yaml, "ranks1", "trainer_ranks=1")
    two = _trained(root, run_yaml, "ranks2", "trainer_ranks=2")
    assert sorted(p.name for p in (one / "dcp").iterdir()) == [".metadata", "__0_0.distcp"]
    assert sorted(p.name for p in (two / "dcp").iterdir()) == [
        ".metadata", "__0_0.distcp", "__1_0.distcp"]
    reference = _chunk_2(root, run_yaml, one, 1)
    ref_steps = read_steps(reference / "steps.parquet")
    assert ref_steps["step"].tolist() == [3, 4]
    assert ref_steps["lr"].tolist() == pytest.approx([5e-7 * 3 / 100, 5e-7 * 4 / 100])
    ref_state = saved_optimizer_state(reference)
    ref_weights = _weights(reference)
    for init, ranks in ((one, 2), (two, 1)):
        out = _chunk_2(root, run_yaml, init, ranks)
        steps = read_steps(out / "steps.parquet")
        for col in ("step", "lr", "reward_mean", "pass_rate", "tokens"):
            assert steps[col].tolist() == ref_steps[col].tolist(), (col, init.name, ranks)
        state = saved_optimizer_state(out)
        assert state["state"].keys() == ref_state["state"].keys()
        for key, value in state["state"].items():
            want = ref_state["state"][key]
            assert float(value["step"]) == float(want["step"]) == 4.0
            for moment in ("exp_avg", "exp_avg_sq"):  # another reduction order: within 2 %
                error = (value[moment] - want[moment]).norm() / want[moment].norm()
                assert error < 2e-2, (init.name, ranks, key, moment, float(error))
        weights = _weights(out)
        diff = max(float((weights[n] - ref_weights[n]).abs().max()) for n in ref_weights)
        assert diff <= 1e-7, (init.name, ranks, diff)
