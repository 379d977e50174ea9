"""The trainer end to end with the real engine, losses and verifiers on a micro base model.

Every recipe preset runs two steps; chunks continue exactly; micro-batching equals the full
batch; non-finite losses/gradients stop with a message naming the step; bad inputs are
rejected. The SIGKILL resume tests are in test_trainer_resume.py.
"""

import subprocess
import sys

import pytest
import torch
from test_trainer_helpers import (
    OneRankStep,
    cache_dir,
    micro_base,
    micro_recipe,
    run_config_dict,
)

from scalerl.config import ConfigError
from scalerl.rl import checkpoint as ckpt
from scalerl.rl.batch import score_batch, split_shares
from scalerl.rl.recipe import list_presets, recipe_from_preset
from scalerl.rl.rollout_log import read_rollouts
from scalerl.rl.run_config import RunConfig
from scalerl.rl.steps import STEP_COLUMNS, TIME_COLUMNS, read_steps
from scalerl.rl.trainer import NonFiniteError, train_chunk
from scalerl.rollout.base import Completion, Request

PIPELINE_PRESETS = {name for name in list_presets()
                    if recipe_from_preset(name).off_policy == "pipeline"}


@pytest.fixture(scope="module")
def micro(request, tmp_path_factory):
    return micro_base(cache_dir(request, tmp_path_factory))


def _cfg(**changes) -> RunConfig:
    return RunConfig.from_dict(run_config_dict()).replace(**changes)


def _train(micro, tmp_path, cfg, chunk=1, init=None, name="out"):
    return train_chunk(cfg, chunk=chunk, init=init or micro / "base",
                       prompts=micro / "prompts.parquet", out=tmp_path / name)


@pytest.mark.parametrize("preset", [
    pytest.param(p, marks=pytest.mark.slow) if p in PIPELINE_PRESETS else p
    for p in list_presets()
])
def test_every_preset_trains_two_steps(micro, tmp_path, preset):
    cfg = _cfg(recipe=micro_recipe(preset, prompts_per_step=4),
               task_weights={"math": 1.0, "code": 0.25})
    result = _train(micro, tmp_path, cfg)
    frame = read_steps(tmp_path / "out" / "steps.parquet")
    assert list(frame.columns) == list(STEP_COLUMNS)
    assert frame["step"].tolist() == [1, 2] and set(frame["chunk"]) == {1}
    assert frame["compute_flops"].is_monotonic_increasing and frame["tokens"].iloc[0] > 0
    assert (frame["pass_rate"] > 0).any() and (frame["pass_rate"] < 1).any()
    assert (frame["grad_norm"] > 0).any()  # a real gradient reached the parameters
    recipe = cfg.recipe
    lag = recipe.max_lag if recipe.off_policy == "pipeline" else 0
    if recipe.off_policy == "ppo":  # second mini-batch of the round is one version stale
        assert frame["staleness_max"].tolist() == [0, 1]
    else:
        assert frame["staleness_max"].max() <= lag
    if recipe.length_control == "interruption":
        assert frame["truncation_rate"].max() < 1.0
    samples = read_rollouts(tmp_path / "out").to_pandas()  # one row per trained sample
    assert len(samples) == 2 * recipe.samples_per_step
    assert samples.groupby("step")["staleness"].max().tolist() == frame["staleness_max"].tolist()
    summary = ckpt.read_trainer_summary(tmp_path / "out")
    assert summary["step"] == 2 and summary["compute_flops"] == frame["compute_flops"].iloc[-1]
    assert not (tmp_path / "out.partial").exists()
    assert len(result.rows) == 2


@pytest.mark.parametrize("chunking", [{"steps_per_chunk": 2}, {"chunk_steps": [1, 3]}],
                         ids=["equal", "growing"])
def test_next_chunk_continues_exactly_where_the_last_stopped(micro, tmp_path, chunking):
    """Chunks 1 + 2 (2 + 2 steps, or 1 + 3) end in the state of one 4-step chunk (on-policy,
    CPU); both number their rows and states as the workflow numbers their checkpoints."""
    recipe = {"off_policy": "on-policy"}
    split = _cfg(recipe=recipe, **chunking)
    first = split.steps_in_chunk(1)
    _train(micro, tmp_path, split, name="c1")
    _train(micro, tmp_path, split, chunk=2, init=tmp_path / "c1", name="c2")
    whole = _cfg(recipe=recipe, steps_per_chunk=4)
    _train(micro, tmp_path, whole, name="whole")

    c2, full = ckpt.load_trainer_state(tmp_path / "c2"), ckpt.load_trainer_state(tmp_path / "whole")
    assert c2["step"] == full["step"] == 4 and c2["chunk"] == 2
    assert ckpt.read_trainer_summary(tmp_path / "c2")["chunk"] == 2
    assert c2["sampler"] == full["sampler"]  # NPR history, epoch order, position, task RNG
    assert c2["requests"] == full["requests"]
    assert c2["compute"]["flops"] == full["compute"]["flops"]
    assert c2["compute"]["tokens"] == full["compute"]["tokens"]
    assert set(read_rollouts(tmp_path / "c2").to_pandas()["chunk"]) == {2}
    rows = read_steps(tmp_path / "c2" / "steps.parquet")
    ref = read_steps(tmp_path / "whole" / "steps.parquet").iloc[first:].reset_index(drop=True)
    assert rows["step"].tolist() == list(range(first + 1, 5)) and set(rows["chunk"]) == {2}
    for col in ("reward_mean", "pass_rate", "loss", "grad_norm", "compute_flops", "npr_retired"):
        assert rows[col].tolist() == pytest.approx(ref[col].tolist(), rel=1e-6, abs=1e-9), col
    a = _weights(tmp_path / "c2")
    b = _weights(tmp_path / "whole")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-6)


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def test_chunk_inputs_are_checked(micro, tmp_path):
    cfg = _cfg(recipe={"off_policy": "on-policy"},
               steps_per_chunk=1)
    with pytest.raises(ConfigError, match="not a trainer checkpoint"):
        _train(micro, tmp_path, cfg, chunk=2)
    with pytest.raises(ConfigError, match="numbered from 1"):
        _train(micro, tmp_path, cfg, chunk=0, name="zero")
    _train(micro, tmp_path, cfg, name="c1")
    with pytest.raises(ConfigError, match="--chunk 1 starts from the base model"):
        _train(micro, tmp_path, cfg, chunk=1, init=tmp_path / "c1", name="again")
    with pytest.raises(ConfigError, match="is chunk 1 of run 't'; chunk 3 of run 't' needs "
                                          "chunk 2 of it"):
        _train(micro, tmp_path, cfg, chunk=3, init=tmp_path / "c1", name="c3")
    with pytest.raises(ConfigError, match=r"chunk_steps lists 1 chunk\(s\) \(1..1\)"):
        _train(micro, tmp_path, cfg.replace(chunk_steps=[1]), chunk=2, init=tmp_path / "c1",
               name="c2")
    with pytest.raises(ConfigError, match="every chunk needs >= 1 step"):
        cfg.replace(chunk_steps=[2, 0])
    import pandas as pd

    math_only = pd.read_parquet(micro / "prompts.parquet").query("task == 'math'")
    math_only.to_parquet(tmp_path / "math.parquet")
    with pytest.raises(ValueError, match="no train prompts of that task"):
        train_chunk(cfg.replace(task_weights={"code": 1.0}), chunk=1, init=micro / "base",
                    prompts=tmp_path / "math.parquet", out=tmp_path / "x")
    tight = cfg.replace(max_new_tokens=10)
    with pytest.raises(ConfigError, match="max_new_tokens = 10"):
        _train(micro, tmp_path, tight, name="y")


def test_the_model_config_reaches_the_trainer(micro, tmp_path):
    """`--model-config` (prompt format, dtype) is what the trainer formats prompts with: the
    char tokenizer has no chat template, so asking for `chat` must fail, naming the fix."""
    from scalerl.models.config import ModelConfig

    cfg = _cfg(recipe={"off_policy": "on-policy"},
               steps_per_chunk=1)
    with pytest.raises(ValueError, match="use prompt_format: raw"):
        train_chunk(cfg, chunk=1, init=micro / "base", prompts=micro / "prompts.parquet",
                    out=tmp_path / "chat", model_cfg=ModelConfig(prompt_format="chat"))
    assert not (tmp_path / "chat").exists()


# -- the optimizer step ------------------------------------------------------------------------
def _completion(group, tokens, logps, mask=None, prompt=(1, 9, 9)):
    mask = mask or [True] * len(tokens)
    return Completion(Request(f"p{group}", prompt, tag=group), list(tokens), list(logps),
                      list(mask), [0] * len(tokens), "", "stop", False, False)


def _one_share(completions, correct, recipe):
    """The trainer's batch at one rank: `score_batch`, the one share of `split_shares`."""
    scored = score_batch(completions, correct, recipe, 0)
    return split_shares(scored, 1)[0], scored.stats


def test_score_split_and_pad_by_hand():
    recipe = recipe_from_preset("scalerl")
    comps = [_completion(0, [5, 6], [-1.0, -2.0]), _completion(0, [7], [-0.5]),
             _completion(1, [5], [-1.0]), _completion(1, [6, 2, 3], [-1.0, 0.0, -3.0],
                                                     mask=[True, False, True])]
    # group 0: rewards +1, -1 (kept); group 1: -1, -1 (zero variance, dropped)
    share, stats = _one_share(comps, [True, False, False, False], recipe)
    batch = share.pad(0)
    assert stats.pass_rate == 0.25 and stats.reward_mean == -0.5
    assert stats.zero_variance_fraction == 0.5 and stats.n_kept == 2
    assert stats.prompt_tokens == [3, 3, 3, 3] and stats.completion_tokens == [2, 1, 1, 3]
    # centred advantages +1, -1; batch std of {+1, -1} = 1 -> advantages ±1/(1 + 1e-6)
    torch.testing.assert_close(batch.advantages, torch.tensor([1.0, -1.0]) / (1 + 1e-6))
    torch.testing.assert_close(batch.input_ids, torch.tensor([[1, 9, 9, 5, 6], [1, 9, 9, 7, 0]]))
    torch.testing.assert_close(batch.loss_mask, torch.tensor([[0, 0, 0, 1, 1], [0, 0, 0, 1, 0]]
                                                             ).bool())
    torch.testing.assert_close(batch.gen_logprobs[0, 3:], torch.tensor([-1.0, -2.0]))
    assert batch.n_tokens == 9
    # without the filter the inserted token (mask False) carries no generator logprob
    loo = recipe_from_preset("loo-batch")
    batch = _one_share(comps, [True, False, False, False], loo)[0].pad(0)
    assert batch.n_sequences == 4
    torch.testing.assert_close(batch.gen_logprobs[3, 3:], torch.tensor([-1.0, 0.0, -3.0]))


def _model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=12, hidden_size=16, num_hidden_layers=1, num_attention_heads=1,
                      num_key_value_heads=1, intermediate_size=32)
    return LlamaForCausalLM(cfg)


def _toy_step(model, recipe, *, step: int = 1, micro_groups: int = 0) -> dict:
    """One optimizer step on the trainer's path at one rank, on the toy batch."""
    comps = [_completion(g, [3 + (g + j) % 5, 4, 5 + j][: 1 + (g + j) % 3],
                         [-1.5, -2.0, -2.5][: 1 + (g + j) % 3])
             for g in range(3) for j in range(2)]
    share, _ = _one_share(comps, [True, False, False, True, True, False], recipe)
    return OneRankStep(model, recipe).step(share.pad(0), step=step, micro_groups=micro_groups,
                                           normalizer=share.normalizer)


@pytest.mark.parametrize("aggregation", ["prompt", "sample", "token"])
def test_micro_batches_give_the_full_batch_gradient(aggregation):
    recipe = recipe_from_preset("scalerl", {"loss": {"aggregation": aggregation},
                                            "optimizer": {"grad_clip": None}})
    grads = []
    for micro in (0, 1):
        model = _model()
        out = _toy_step(model, recipe, micro_groups=micro)
        grads.append((out["loss"], [p.grad.clone() for p in model.parameters()]))
    assert grads[0][0] == pytest.approx(grads[1][0], rel=1e-5)
    for a, b in zip(grads[0][1], grads[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_non_finite_loss_stops_with_the_step():
    recipe = recipe_from_preset("scalerl")
    model = _model()
    with torch.no_grad():
        model.model.norm.weight[0] = float("nan")
    with pytest.raises(NonFiniteError, match="step 7: the trainer's log-probabilities are non-finite"):
        _toy_step(model, recipe, step=7)


def test_non_finite_gradient_names_the_parameter():
    recipe = recipe_from_preset("scalerl")
    model = _model()
    model.model.layers[0].mlp.down_proj.weight.register_hook(lambda g: g * float("inf"))
    before = model.model.layers[0].mlp.down_proj.weight.detach().clone()
    with pytest.raises(NonFiniteError, match=r"step 3: gradient norm is (inf|nan).*down_proj"):
        _toy_step(model, recipe, step=3)
    torch.testing.assert_close(model.model.layers[0].mlp.down_proj.weight.detach(), before)


def test_cli_help_and_bad_input(tmp_path):
    run = [sys.executable, "-m", "scalerl", "train"]
    help_ = subprocess.run(run + ["--help"], capture_output=True, text=True, timeout=120)
    assert help_.returncode == 0 and "--init" in help_.stdout and ".partial" in help_.stdout
    cfg = tmp_path / "run.yaml"
    cfg.write_text("run: x\nrecipe: {preset: scalerl}\n")  # the old spelling: a clear error
    bad = subprocess.run(run + ["--config", str(cfg), "--chunk", "1", "--init", "b",
                                "--prompts", "p", "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown key(s) recipe.preset" in bad.stderr
    cfg.write_text("run: x\n")
    zero = subprocess.run(run + ["--config", str(cfg), "--chunk", "0", "--init", "b",
                                 "--prompts", "p", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert zero.returncode == 2 and "training chunks are numbered from 1" in zero.stderr


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["on-policy", "pipeline"])
def test_vllm_engine_trains(micro, tmp_path, mode):
    cfg = _cfg(recipe={"off_policy": mode}, engine="vllm",
               vllm={"kv_cache_mb": 64, "enforce_eager": True})  # CPU: small cache, no graphs
    _train(micro, tmp_path, cfg)
    frame = read_steps(tmp_path / "out" / "steps.parquet")
    assert frame["step"].tolist() == [1, 2] and (frame["grad_norm"] > 0).any()
    assert frame["staleness_max"].max() <= (2 if mode == "pipeline" else 0)
    # the trainer re-scores the vLLM samples: the IS ratio stays near 1 at step 1 (same weights)
    assert frame["is_ratio_mean"].iloc[0] == pytest.approx(1.0, abs=0.05)


@pytest.mark.gpu
def test_a_chunk_on_cuda(micro, tmp_path):
    """The CUDA path of the trainer: float32 master weights, the body under bf16 autocast
    (numerics auto), the chunked FP32 head; the HF engine generates with the trainer's
    float32 model, so the mismatch columns measure the bf16 body of the trainer's scoring
    (stated: mismatch_kl < 0.05, ρ within [0.5, 2])."""
    cfg = _cfg(recipe={"off_policy": "on-policy"}, device="cuda",
               numerics={"logprob_chunk_tokens": 16, "micro_batch_tokens": 64})
    _train(micro, tmp_path, cfg)
    frame = read_steps(tmp_path / "out" / "steps.parquet")
    assert frame["step"].tolist() == [1, 2] and set(frame["chunk"]) == {1}
    assert (frame["grad_norm"] > 0).all() and (frame["compute_device_hours"] > 0).all()
    assert ((frame["mismatch_kl"] > -1e-6) & (frame["mismatch_kl"] < 0.05)).all()  # float32 ≈ 0
    assert ((frame["is_ratio_min"] > 0.5) & (frame["is_ratio_max"] < 2.0)).all()
    weights = _weights(tmp_path / "out")
    assert {t.dtype for t in weights.values()} == {torch.float32}


def test_failed_chunk_leaves_only_its_partial_save(micro, tmp_path, monkeypatch):
    import scalerl.rl.trainer as trainer_mod

    cfg = _cfg(recipe={"off_policy": "on-policy"},
               steps_per_chunk=3, save_every=1)
    real_step = trainer_mod.optimizer_step

    def failing_step(*args, step, **kwargs):
        if step == 3:
            raise RuntimeError("power cut at step 3")
        return real_step(*args, step=step, **kwargs)

    monkeypatch.setattr(trainer_mod, "optimizer_step", failing_step)
    with pytest.raises(RuntimeError, match="power cut"):
        _train(micro, tmp_path, cfg)
    assert not (tmp_path / "out").exists()  # no half-written chunk under the real name
    assert ckpt.read_trainer_summary(tmp_path / "out.partial")["step"] == 2
    monkeypatch.setattr(trainer_mod, "optimizer_step", real_step)
    with pytest.raises(ConfigError, match="delete .*out.partial"):
        _train(micro, tmp_path, cfg.replace(seed=1))  # another config must not resume it
    result = _train(micro, tmp_path, cfg)
    assert result.resumed_at_step == 2 and [r["step"] for r in result.rows] == [1, 2, 3]
    assert not (tmp_path / "out.partial").exists()


def test_threads_split_the_cores_and_cuda_must_exist(monkeypatch):
    from scalerl.parallel.world import init_world
    from scalerl.rl.trainer import plan_threads

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = _cfg(threads=0, generators=1)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert plan_threads(cfg, 2) == 1 and plan_threads(cfg, 1) == 2
    assert plan_threads(cfg.replace(threads=3), 2) == 3
    with pytest.raises(RuntimeError, match="no CUDA device"):
        init_world("cuda")


def test_steps_rows_time_the_phases_of_a_step(micro, tmp_path):
    """time_* columns: every phase measured, on-policy generates in-process (no waiting), and
    the phases add up to no more than the step's wall-clock."""
    cfg = _cfg(recipe={"off_policy": "on-policy", "prompts_per_step": 4})
    _train(micro, tmp_path, cfg)
    frame = read_steps(tmp_path / "out" / "steps.parquet")
    times = frame[list(TIME_COLUMNS)]
    assert times.notna().all().all() and (times >= 0).all().all()
    assert (frame["time_generate_s"] > 0).all() and (frame["time_wait_s"] == 0).all()
    assert (frame["time_optimizer_s"] > 0).all()
    # on-policy on CPU the generator is the trainer's own float32 model: the mismatch columns
    # see rounding only (incremental decoding against one full forward); CISPO has no
    # sequence ratio
    assert (frame["mismatch_kl"].abs() < 1e-4).all()
    assert ((frame[["is_ratio_max", "is_ratio_min"]] - 1).abs() < 1e-2).all().all()
    assert (frame["is_ratio_min"] <= frame["is_ratio_mean"]).all()
    assert (frame["is_ratio_mean"] <= frame["is_ratio_max"]).all()
    assert frame["seq_ratio_mean"].isna().all()
    wall = frame["compute_device_hours"].diff().fillna(frame["compute_device_hours"]) * 3600
    assert (times.sum(axis=1) <= wall + 1e-6).all()


def test_in_process_generation_samples_in_the_model_dtype(micro, tmp_path, monkeypatch):
    """One generation dtype rule at every world size (config/README.md, "Dtypes"): the
    in-process HF engine samples in the model config's dtype, so float32 master weights of a
    bfloat16 model generate in bfloat16 at one rank (a copy that gets the weights after every
    step), as they do at several; a float32 model shares the trainer's own model. The bf16
    sampler then differs from the float32 trainer: a larger generator-trainer mismatch."""
    import scalerl.rollout.hf_engine as hf
    from scalerl.models.config import ModelConfig as Model

    seen = []
    real_init = hf.HFEngine.__init__

    def spy(self, model, *args, **kwargs):
        seen.append(next(model.parameters()).dtype)
        real_init(self, model, *args, **kwargs)

    monkeypatch.setattr(hf.HFEngine, "__init__", spy)
    cfg = _cfg(recipe={"off_policy": "on-policy"})
    assert cfg.numerics.param_dtype == "float32"
    kl = {}
    for dtype in ("float32", "bfloat16"):
        train_chunk(cfg, chunk=1, init=micro / "base", prompts=micro / "prompts.parquet",
                    out=tmp_path / dtype, model_cfg=Model(dtype=dtype))
        assert seen[-1] == getattr(torch, dtype)
        frame = read_steps(tmp_path / dtype / "steps.parquet")
        assert frame["step"].tolist() == [1, 2]
        kl[dtype] = float(frame["mismatch_kl"].mean())
        weights = _weights(tmp_path / dtype)  # the trainer's master weights stay float32
        assert {t.dtype for t in weights.values()} == {torch.float32}
    assert kl["bfloat16"] > 10 * max(kl["float32"], 1e-9), kl
