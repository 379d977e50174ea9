"""Engine settings and the shared interruption helpers."""

import random
from collections import Counter

import pytest

from scalerl.config import ConfigError
from scalerl.rollout.base import Request
from scalerl.rollout.config import (
    EngineConfig,
    RequestError,
    check_request,
    contains,
    draw_think_budget,
    ends_with,
    sample_seed,
)


def test_think_budget_is_uniform_over_the_inclusive_range():
    rng = random.Random(0)
    counts = Counter(draw_think_budget(rng, 10, 12) for _ in range(3000))
    assert set(counts) == {10, 11, 12}
    assert all(abs(c / 3000 - 1 / 3) < 0.03 for c in counts.values())  # ~1000 each
    assert draw_think_budget(rng, 7, 7) == 7
    with pytest.raises(ValueError, match="lo <= hi"):
        draw_think_budget(rng, 12, 10)


def test_sample_seed_is_stable_and_distinct():
    assert sample_seed(0, "p1", 0) == sample_seed(0, "p1", 0)
    assert len({sample_seed(0, "p1", 0), sample_seed(0, "p1", 1), sample_seed(1, "p1", 0),
                sample_seed(0, "p2", 0)}) == 4
    assert 0 <= sample_seed(5, "x", 3) < 2**63


def test_check_request_budgets_and_context():
    ok = Request("p", (1, 2), max_new_tokens=10, think_budget=5, answer_budget=4)
    check_request(ok, n_interrupt_tokens=1, max_context=12)  # 5 + 1 + 4 = 10 <= 10
    with pytest.raises(RequestError, match="= 11 > max_new_tokens 10"):
        check_request(ok, n_interrupt_tokens=2, max_context=None)
    with pytest.raises(RequestError, match="exceed the model context 11"):
        check_request(ok, n_interrupt_tokens=1, max_context=11)  # 2 + 10 > 11
    with pytest.raises(RequestError, match="think_budget must be >= 1"):
        check_request(Request("p", (1,), think_budget=0), 1, None)


def test_token_suffix_helpers():
    assert ends_with([1, 2, 3], [2, 3]) and not ends_with([1, 2, 3], [1, 2])
    assert not ends_with([3], [2, 3]) and not ends_with([1], [])
    assert contains([1, 2, 3, 4], [2, 3]) and not contains([1, 3, 2], [2, 3])


def test_engine_config_validation():
    assert EngineConfig().temperature == 1.0 and EngineConfig().backend == "hf"
    with pytest.raises(ConfigError, match="temperature"):
        EngineConfig(temperature=0.0)
    with pytest.raises(ConfigError, match="not one of"):
        EngineConfig.from_dict({"backend": "sglang"})
    assert EngineConfig(device="cpu").resolved_device() == "cpu"
