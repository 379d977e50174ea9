"""A Qwen3-architecture model through the command line: `scalerl base` (a local Hugging Face
model directory) -> `scalerl train` (2 steps) -> `scalerl eval`, with the HF engine and with
vLLM (CPU here; the same commands a GPU run uses).

The model is built locally (`scalerl.models.local_qwen3`: transformers' Qwen3 modelling with
small dimensions, its own byte-level BPE tokenizer with the chat template and the thinking
tokens, max_position_embeddings 8192 so vLLM's max_model_len is 8192) and warm-started on
1-digit additions so a group's rewards vary; nothing is downloaded. The run is the ScaleRL
preset (PipelineRL, CISPO, FP32 head, interruption) at 4 prompts x 4 samples with fp32 master
weights and the trainer numerics on (token-budget micro-batches, chunked head, checkpointing).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from safetensors.torch import load_file

from scalerl.eval.schema import read_eval_table
from scalerl.rl.steps import read_steps

pytestmark = pytest.mark.slow

MAX_POSITIONS = 8192
REPO = Path(__file__).resolve().parents[2]


def _scalerl(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "scalerl", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, f"scalerl {args[0]} failed:\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """hf_src/ (the local Qwen3 directory), prompts.parquet and base/ (`scalerl base`)."""
    from scalerl.models.local_qwen3 import LocalQwen3, build_local_qwen3
    from scalerl.tasks.synthetic import generate_math

    root = tmp_path_factory.mktemp("qwen3_local")
    drawn = generate_math(100, 3, difficulties=(1,), families=("add",))
    examples = list({ex.prompt_id: ex for ex in drawn}.values())  # 1-digit sums repeat
    assert len(examples) > 60
    build_local_qwen3(root / "hf_src", [], LocalQwen3(max_positions=MAX_POSITIONS),
                      sft_examples=examples[:-10], sft_steps=120)
    rows = [{**ex.to_row(), "split": "train" if i < len(examples) - 10 else "val"}
            for i, ex in enumerate(examples)]
    pd.DataFrame(rows)[["prompt_id", "task", "source", "split", "prompt", "answer", "tests",
                        "difficulty"]].to_parquet(root / "prompts.parquet")
    (root / "base.yaml").write_text(yaml.safe_dump(
        {"model": {"name": str(root / "hf_src"), "dtype": "float32", "prompt_format": "chat"}}))
    _scalerl("base", "--config", str(root / "base.yaml"), "--out", str(root / "base"))
    return root


def _run_yaml(path: Path, engine: str) -> Path:
    recipe = {"prompts_per_step": 4, "generations_per_prompt": 4, "think_budget": [12, 16],
              "answer_budget": 8, "interruption_text": "</think>", "max_lag": 2,
              "optimizer": {"lr": 1e-4, "warmup_steps": 1}}
    path.write_text(yaml.safe_dump({
        "run": f"qwen3-local_{engine}", "seed": 0, "model": "qwen3-local",
        "recipe": recipe, "steps_per_chunk": 2,
        "save_every": 0, "threads": 1, "engine": engine, "device": "cpu",
        "task_weights": {"math": 1.0, "code": 0.0},
        "eval": {"samples_per_prompt": 2, "max_prompts": 6},
        "numerics": {"param_dtype": "float32", "compute_dtype": "float32",
                     "micro_batch_tokens": 128, "logprob_chunk_tokens": 16,
                     "gradient_checkpointing": True}}))
    return path


def _base_to_eval(ws: Path, tmp_path: Path, engine: str) -> None:
    run_yaml = _run_yaml(tmp_path / "run.yaml", engine)
    base, prompts, ckpt = ws / "base", ws / "prompts.parquet", tmp_path / "chunk1"
    info = json.loads((base / "base_info.json").read_text())
    assert info["kind"] == "hf" and Path(info["source"]) == (ws / "hf_src").resolve()
    assert json.loads((base / "config.json").read_text())["model_type"] == "qwen3"

    train = _scalerl("train", "--config", str(run_yaml), "--chunk", "1", "--init", str(base),
                     "--prompts", str(prompts), "--out", str(ckpt), "--gpu-mem", "80GB")
    assert "memory plan fits" in train.stderr
    steps = read_steps(ckpt / "steps.parquet")
    assert steps["step"].tolist() == [1, 2]
    assert ((steps["pass_rate"] > 0) & (steps["pass_rate"] < 1)).any()  # rewards varied
    assert (steps["grad_norm"] > 0).any()  # a real update reached the parameters
    assert steps["padding_fraction"].between(0, 1).all()
    weights = load_file(ckpt / "model.safetensors")
    assert {t.dtype for t in weights.values()} == {torch.float32}  # param_dtype float32

    for chunk, model_dir in ((0, base), (1, ckpt)):
        out = tmp_path / f"eval{chunk}.parquet"
        _scalerl("eval", "--config", str(run_yaml), "--checkpoint", str(model_dir),
                 "--chunk", str(chunk), "--prompts", str(prompts), "--out", str(out))
        table = read_eval_table(out).to_pandas()
        assert len(table) == 6 * 2 and set(table["step"]) == {0 if chunk == 0 else 2}
        assert table["correct"].between(0, 1).all()


def test_qwen3_local_base_train_eval_hf(workspace, tmp_path):
    _base_to_eval(workspace, tmp_path, "hf")


@pytest.mark.vllm
def test_qwen3_local_base_train_eval_vllm(workspace, tmp_path):
    from scalerl.models.loading import load_model_config
    from scalerl.rollout.config import EngineConfig
    from scalerl.rollout.factory import make_engine

    engine = make_engine(workspace / "base", load_model_config(None, workspace / "base"),
                         EngineConfig(backend="vllm", device="cpu", max_batch=4))
    try:
        assert engine.max_context >= MAX_POSITIONS  # vLLM's max_model_len
    finally:
        engine.close()
    _base_to_eval(workspace, tmp_path, "vllm")
