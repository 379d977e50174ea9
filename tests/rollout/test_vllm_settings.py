"""VllmSettings: the vLLM keyword arguments, the derived context length, seeds per engine."""

import pytest

from scalerl.config import ConfigError
from scalerl.rl.run_config import RunConfig
from scalerl.rollout.config import EngineConfig
from scalerl.rollout.vllm_settings import (
    VllmSettings,
    longest_prompt_tokens,
    resolve_max_model_len,
)


def test_defaults_start_at_the_paper_lengths():
    s = VllmSettings()
    assert s.engine_kwargs() == {"gpu_memory_utilization": 0.5, "enforce_eager": False,
                                 "tensor_parallel_size": 1, "enable_prefix_caching": True}
    # ScaleRL 12k thinking + 2k answer + 15 interruption tokens, a 600-token prompt
    paper = resolve_max_model_len(s, 12288 + 15 + 2048, 600)
    assert paper.max_model_len == 600 + 14351
    assert paper.engine_kwargs()["max_model_len"] == 14951


def test_kv_cache_bytes_and_given_lengths():
    s = VllmSettings(kv_cache_mb=3, max_model_len=100, tensor_parallel_size=2)
    kw = s.engine_kwargs()
    assert kw["kv_cache_memory_bytes"] == 3 * 1024 * 1024
    assert kw["max_model_len"] == 100 and kw["tensor_parallel_size"] == 2
    assert resolve_max_model_len(s, 60, 40) is s  # exactly enough
    with pytest.raises(ConfigError, match="vllm.max_model_len = 100 is below .* 101"):
        resolve_max_model_len(s, 61, 40)


def test_one_seed_per_engine():
    assert VllmSettings().engine_seed(5) == 5
    assert [VllmSettings().engine_seed(5, i) for i in range(3)] == [5, 6, 7]
    assert VllmSettings(seed=9).engine_seed(5, 2) == 9


def test_blocking_engines_take_the_synchronous_path():
    assert VllmSettings().for_blocking_use().inflight_updates == "step"
    assert VllmSettings(inflight_updates="pause").for_blocking_use().inflight_updates == "pause"
    blocking = VllmSettings(sleep_during_update=True, weight_transfer="nccl").for_blocking_use()
    assert (blocking.sleep_during_update, blocking.weight_transfer) == (False, "shm")
    assert "enable_sleep_mode" not in blocking.engine_kwargs()
    assert VllmSettings(sleep_during_update=True).engine_kwargs()["enable_sleep_mode"]


def test_longest_prompt_tokens():
    assert longest_prompt_tokens(["ab", "abcd", "a"], list) == 4
    assert longest_prompt_tokens([], list) == 0


def test_run_config_and_engine_config_take_the_settings():
    run = RunConfig.from_dict({"vllm": {"max_model_len": 2048, "kv_cache_mb": 512,
                                        "enforce_eager": True, "seed": 3}})
    assert run.vllm == VllmSettings(max_model_len=2048, kv_cache_mb=512, enforce_eager=True,
                                    seed=3)
    assert RunConfig().vllm == VllmSettings()
    with pytest.raises(ConfigError, match="unknown key.*vllm.max_len"):
        RunConfig.from_dict({"vllm": {"max_len": 1}})
    with pytest.raises(ConfigError, match="inflight_updates: 'later' is not one of"):
        RunConfig.from_dict({"vllm": {"inflight_updates": "later"}})
    with pytest.raises(ConfigError, match="gpu_memory_utilization = 1.5 must be <= 1"):
        RunConfig.from_dict({"vllm": {"gpu_memory_utilization": 1.5}})
    eng = EngineConfig(backend="vllm").replace(vllm=run.vllm.to_dict())
    assert eng.vllm == run.vllm
    assert EngineConfig().vllm is None


def test_the_vllm_extra_of_pyproject_is_the_supported_range():
    """pyproject's `vllm` extra and the range the engines enforce at start
    (`scalerl.rollout.vllm_contract.VLLM_SPEC`) are the same; 0.33 is outside (issue 35)."""
    import tomllib
    from pathlib import Path

    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    from scalerl.rollout.vllm_contract import VLLM_SPEC

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    extra = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]["vllm"]
    req, = (Requirement(r) for r in extra)
    assert req.name == "vllm" and req.specifier == SpecifierSet(VLLM_SPEC)
    assert "0.32.0" in req.specifier and "0.32.5" in req.specifier
    assert "0.33.0" not in req.specifier and "0.31.0" not in req.specifier
