"""The trainer's prompt source (task mix, NPR, resumable order) and request factory."""

import pytest

from scalerl.rl.curriculum import AllPromptsRetired
from scalerl.rl.prompts import PromptSource, load_prompt_table
from scalerl.rl.recipe import recipe_from_preset
from scalerl.rl.rollouts import RequestFactory
from scalerl.rollout.budget import GenerationBudget


def _rows(n_math=6, n_code=3):
    rows = [{"prompt_id": f"m{i}", "task": "math", "prompt": f"{i}+1=", "answer": str(i + 1)}
            for i in range(n_math)]
    rows += [{"prompt_id": f"c{i}", "task": "code", "prompt": f"f{i}", "tests": "{}"}
             for i in range(n_code)]
    return rows


def _source(weights, threshold=None, seed=0, rows=None):
    return PromptSource(rows or _rows(), weights, lambda text: [ord(c) for c in text],
                        npr_threshold=threshold, npr_min_samples=1, seed=seed)


def test_task_mix_follows_the_weights():
    only_math = _source({"math": 1.0, "code": 0.0}).draw(20)
    assert all(p.startswith("m") for p in only_math)
    mixed = _source({"math": 3.0, "code": 1.0}).draw(400)
    share = sum(p.startswith("c") for p in mixed) / 400
    assert share == pytest.approx(0.25, abs=0.06)  # binomial sd ~0.022


def test_resumed_source_draws_the_same_prompts():
    a = _source({"math": 1.0, "code": 1.0}, threshold=0.9)
    a.draw(7)
    a.update(["m0", "m1", "c0"], [True, False, True])  # m0 and c0 retire (pass rate 1.0)
    state = a.state_dict()
    expected = a.draw(25)
    b = _source({"math": 1.0, "code": 1.0}, threshold=0.9)
    b.load_state_dict(state)
    assert b.draw(25) == expected
    assert "m0" not in expected and "c0" not in expected and b.n_retired == 2


def test_an_exhausted_task_leaves_the_mix_then_all_retired_raises():
    source = _source({"math": 1.0, "code": 1.0}, threshold=0.5)
    source.update(["c0", "c1", "c2"], [True] * 3)
    assert all(p.startswith("m") for p in source.draw(30))
    source.update([f"m{i}" for i in range(6)], [True] * 6)
    with pytest.raises(AllPromptsRetired, match="every training prompt"):
        source.draw(1)


def test_missing_task_and_mismatched_state_are_errors():
    with pytest.raises(ValueError, match="no train prompts of that task"):
        _source({"math": 1.0, "code": 1.0}, rows=_rows(n_code=0))
    other = _source({"math": 1.0, "code": 0.0})
    with pytest.raises(ValueError, match="original task_weights"):
        other.load_state_dict(_source({"math": 1.0, "code": 1.0}).state_dict())


def test_prompt_table_checks(tmp_path):
    import pandas as pd

    pd.DataFrame([{"prompt_id": "a", "task": "math"}]).to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="missing column"):
        load_prompt_table(tmp_path / "bad.parquet")
    with pytest.raises(FileNotFoundError, match="scalerl data"):
        load_prompt_table(tmp_path / "none.parquet")


def test_requests_carry_groups_unique_samples_and_budgets():
    budget = GenerationBudget(max_new_tokens=20, gen_len=11, think_budget=(5, 7),
                              answer_budget=4)
    factory = RequestFactory(_source({"math": 1.0}), 3, budget, seed=0)
    first, second = factory.make(2), factory.make(1)
    reqs = first + second
    assert [r.tag for r in reqs] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert [r.sample_idx for r in reqs] == list(range(9))  # group * G + j: fresh seeds
    assert all(5 <= r.think_budget <= 7 and r.answer_budget == 4 for r in reqs)
    assert all(r.max_new_tokens == 20 and r.prompt_ids for r in reqs)
    lp_budget = GenerationBudget.from_recipe(recipe_from_preset("loo-lp"), 1, cap=20)
    lp = RequestFactory(_source({"math": 1.0}), 2, lp_budget, 0)
    assert all(r.think_budget is None and r.answer_budget == 0 for r in lp.make(2))
    state = factory.state_dict()
    again = RequestFactory(_source({"math": 1.0}), 3, budget, 0)
    again.source.load_state_dict(factory.source.state_dict())
    again.load_state_dict(state)
    assert again.make(2) == factory.make(2)
