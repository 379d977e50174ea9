"""`VllmSettings`: the vLLM engine knobs a run sets (RunConfig `vllm:`, config/gpu.yaml).

One typed, documented place for what `scalerl.rollout.vllm_engine.VLLMEngine` passes to vLLM:
context length, memory (KV-cache bytes or a share of device memory), CUDA graphs, tensor
parallelism, prefix caching and the engine's sampling seed. The defaults start vLLM at the
paper's lengths (ScaleRL: 12k thinking + 2k answer tokens, docs/design.md): `max_model_len`
0 derives the context from the generation cap plus the longest prompt
(`resolve_max_model_len`), the KV cache is sized from `gpu_memory_utilization`, CUDA graphs
are on.

Seeds: vLLM's sampler has a fast batched path (one generator per engine) and a slow one that
draws every request from its own seeded generator. `seed_per_request: false` (the default)
takes the fast path: the engine is seeded once (`seed`, or the run seed + generator index);
the synchronous engine re-seeds at the start of every blocking `generate`, so a run repeated
with the same requests in the same order reproduces its samples, but a sample depends on
what else is in the batch (the asynchronous engine of PipelineRL generators does not
reproduce them: scheduling timing enters). `seed_per_request: true` gives every request the seed of (seed, prompt_id,
sample_idx) (batch-independent samples, as the HF engine does), at the slow path's cost.

Weights and memory: `weight_transfer` picks the transport of new weights to PipelineRL
generators (`scalerl.rollout.weight_transfer.choose_transport`), `sleep_during_update` frees a
colocated generator's KV cache during the optimizer step (`engine_kwargs` then asks for
vLLM's sleep mode, CUDA only).

Deliberately left out: vLLM options the trainer's numerics depend on (dtype, FP32 LM head,
logprobs mode: set by the model config and the engine itself) and multi-node settings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from scalerl.config import Config, ConfigError, field_

__all__ = ["VllmSettings", "longest_prompt_tokens", "resolve_max_model_len"]


@dataclasses.dataclass(frozen=True)
class VllmSettings(Config):
    """vLLM engine settings (used when the engine is `vllm`; ignored by the HF engine)."""

    max_model_len: int = field_(
        0, "context length (prompt + generated tokens) vLLM reserves per sequence; 0: the "
        "generation cap + the longest prompt (scalerl.rollout.vllm_settings)", ge=0,
    )
    gpu_memory_utilization: float = field_(
        0.5, "share of the device memory vLLM may take (weights + activations + KV cache); "
        "used when kv_cache_mb is 0. Lower it when the trainer shares the device", gt=0, le=1,
    )
    kv_cache_mb: int = field_(
        0, "KV-cache size in MiB (on CPU: RAM reserved); 0: what gpu_memory_utilization leaves",
        ge=0,
    )
    enforce_eager: bool = field_(
        False, "run without CUDA graphs (start-up faster, decoding slower); true on CPU tests",
    )
    tensor_parallel_size: int = field_(
        1, "devices one engine shards the model over (each generator needs this many)", ge=1,
    )
    enable_prefix_caching: bool = field_(
        True, "reuse KV blocks of identical prompt prefixes (the G samples of a prompt share "
        "their prompt; a phase-2 request re-reads its phase-1 context). Salted per weight "
        "version: a request reuses only KV computed by requests submitted at the same version, "
        "never KV of older weights (in-flight requests keep their own, PipelineRL)",
    )
    inflight_updates: str = field_(
        "auto", "how weights change under running requests: pause = vLLM's AsyncLLM "
        "pause_generation(keep) / reload / resume_generation (engine core in its own process, "
        "scalerl.rollout.vllm_async_engine); step = the synchronous in-process core reloaded "
        "between two steps (scalerl.rollout.vllm_engine); auto = pause in PipelineRL "
        "generators where the installed vLLM has that API, step for evaluation and the "
        "in-process modes (no update under running requests there, and the synchronous core "
        "reproduces a batch from the engine seed)", choices=("auto", "pause", "step"),
    )
    weight_transfer: str = field_(
        "auto", "how new weights reach PipelineRL generators: shm = host shared-memory slots "
        "(CPU, HF engine, the fixed schedule); ipc = CUDA IPC from the pushing rank's device "
        "(a generator sharing it); nccl = vLLM's NCCL weight transfer (generators on devices "
        "of their own); auto picks by placement (scalerl.rollout.weight_transfer)",
        choices=("auto", "shm", "ipc", "nccl"),
    )
    sleep_during_update: bool = field_(
        False, "a generator sharing a trainer rank's CUDA device sleeps during each optimizer "
        "step (vLLM sleep level 1: KV cache freed, weights to host memory; in-flight requests "
        "kept and their KV recomputed after waking) so the step can use that memory; "
        "ignored elsewhere",
    )
    start_timeout_s: int = field_(
        0, "seconds one PipelineRL generator may take to start its engine (model load, memory "
        "profiling, compilation, CUDA-graph capture) and load the first weights, counted from "
        "when the previous generator became ready; 0: 600, or 1,200 with CUDA graphs "
        "(enforce_eager false)", ge=0,
    )
    seed: int | None = field_(
        None, "the engine's sampling seed; null: the run seed + the generator's index", ge=0,
    )
    seed_per_request: bool = field_(
        False, "seed every request from (seed, prompt_id, sample_idx): samples independent of "
        "batching, but vLLM's slower per-request sampler",
    )

    def for_blocking_use(self) -> VllmSettings:
        """These settings for an engine that only runs blocking `generate` calls (evaluation,
        on-policy, PPO): `inflight_updates: auto` becomes `step` (see the field); it never
        sleeps (it runs between optimizer steps) and gets weights as tensors."""
        mode = "step" if self.inflight_updates == "auto" else self.inflight_updates
        return dataclasses.replace(self, inflight_updates=mode, sleep_during_update=False,
                                   weight_transfer="shm")

    def start_timeout(self) -> float:
        """Seconds one generator's engine may take to start (`start_timeout_s`, 0: derived:
        vLLM's start with compilation and CUDA-graph capture takes minutes on a GPU, more
        when several engines start on one device and node)."""
        if self.start_timeout_s:
            return float(self.start_timeout_s)
        return 600.0 if self.enforce_eager else 1200.0

    def engine_seed(self, run_seed: int, engine_index: int = 0) -> int:
        """The seed engine `engine_index` (a generator's rank, 0 in-process) samples with."""
        return self.seed if self.seed is not None else run_seed + engine_index

    def engine_environment(self) -> dict[str, str]:
        """Environment variables the engine core must start with for these settings. The ipc
        transport sends CUDA IPC handle args (the tensor class, dtypes, storage types) through
        `AsyncLLM.update_weights`, whose msgpack serializer (`vllm.v1.serial_utils`,
        `MsgpackEncoder.enc_hook` / `MsgpackDecoder.ext_hook`) refuses such objects unless
        VLLM_ALLOW_INSECURE_SERIALIZATION=1 (pickle fallback, on the generator's and the engine
        core's side; the engine core inherits the generator process's environment). Only the
        ipc transport gets it: pickled payloads stay off elsewhere."""
        return {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"} if self.weight_transfer == "ipc" else {}

    def engine_kwargs(self) -> dict:
        """The `vllm.LLM(...)` keyword arguments these settings stand for (no max_model_len
        when 0: `resolve_max_model_len` must have set it, or vLLM takes the model's own)."""
        kwargs: dict = {
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "enforce_eager": self.enforce_eager,
            "tensor_parallel_size": self.tensor_parallel_size,
            "enable_prefix_caching": self.enable_prefix_caching,
        }
        if self.kv_cache_mb:
            kwargs["kv_cache_memory_bytes"] = self.kv_cache_mb << 20
        if self.sleep_during_update:
            kwargs["enable_sleep_mode"] = True
        if self.max_model_len:
            kwargs["max_model_len"] = self.max_model_len
        return kwargs


def resolve_max_model_len(settings: VllmSettings, generation_cap: int,
                          longest_prompt: int) -> VllmSettings:
    """Settings with `max_model_len` set: as given, else `longest_prompt + generation_cap`.

    A given length shorter than that raises ConfigError (vLLM would reject the longest
    request mid-run)."""
    need = int(longest_prompt) + int(generation_cap)
    if settings.max_model_len == 0:
        return dataclasses.replace(settings, max_model_len=need)
    if settings.max_model_len < need:
        raise ConfigError(
            f"vllm.max_model_len = {settings.max_model_len:,} is below the longest prompt "
            f"{longest_prompt:,} + the generation cap {generation_cap:,} = {need:,} tokens; "
            "raise it or set it to 0 (derived)")
    return settings


def longest_prompt_tokens(texts: Iterable[str], tokenize: Callable[[str], object]) -> int:
    """Token count of the longest formatted prompt (nothing cached: big prompt sets)."""
    return max((len(tokenize(t)) for t in texts), default=0)
