"""`AsyncVLLMEngine`: the engine contract on vLLM's `AsyncLLM`, with weights updated in flight
through vLLM's weight-transfer API.

vLLM's asynchronous engine runs its engine core in its own process and keeps decoding while
this process does other work (the PipelineRL generator loop, grading). An in-flight weight
update is vLLM's RL round trip:

    await llm.pause_generation(mode="keep", clear_cache=False)  # requests frozen, KV kept
    await llm.start_weight_update()                              # vLLM's layerwise reload
    await llm.update_weights(WeightTransferUpdateRequest(...))   # the bytes, per backend
    await llm.finish_weight_update(str(version))                 # reload done, version set
    await llm.resume_generation()

Running requests keep their KV cache and continue with the new weights (PipelineRL); a request
submitted later never reuses prompt KV of older weights (prefix caching is salted per version,
`scalerl.rollout.vllm_engine.vllm_prompt`). The engine is built with a weight-transfer backend (`VllmSettings.weight_transfer`, resolved by
the trainer: `scalerl.rollout.weight_transfer.choose_transport`):

- `shm` (backend `scalerl_shm`, `scalerl.rollout.vllm_worker`): the engine core maps the host
  weight slots once (`init_weight_transfer_engine` with their paths) and an update names the
  slot to load. `update_weights` takes the slot of a `SlotWeights` (what PipelineRL generators
  pass) as it is, and copies any other mapping into a staging slot of its own first; either
  way the tensors reach the model without passing through vLLM's RPC serializer.
- `nccl` / `ipc` (vLLM's own engines, `scalerl_nccl` / `scalerl_ipc`): the trainer drives the
  round trip (`scalerl.rollout.vllm_transfer`); `transfer_rpc` runs each call it forwards here.

Every backend re-ties tied weights on the worker (`scalerl.rollout.vllm_worker`).

`sleep()` / `wake_up()`: vLLM's sleep level 1 keeping requests (their KV is recomputed after
waking), for a generator that shares the trainer's device (`VllmSettings.sleep_during_update`).

Per-token policy versions: the engine core labels every step's output with its weight version
and a finished request reports `weight_versions` spans (`WeightVersionSpan(version, start,
end)`), so no token is mislabelled by the asynchrony. A vLLM without spans
(`scalerl.rollout.vllm_contract`, `contract.exact_versions` False) gets each phase's tokens
labelled with the version at the phase's start: staleness is then an upper bound. At start the
engine checks the contract (version, the FP32 head in the loaded model, pause keeping
requests).

Everything else is `scalerl.rollout.vllm_engine.VLLMEngine`'s: processed logprobs, the FP32
head switch, the two-phase forced interruption, `VllmSettings`. Seeds: with one seed per
engine the samples depend on when each request reached the scheduler (requests arrive from
concurrent tasks, steps overlap this process), so a rerun draws other samples from the same
distribution; `seed_per_request: true` makes every sample reproducible. That is why
`inflight_updates: auto` picks this engine only for PipelineRL generators (whose samples
depend on the timing of weight pushes anyway) and the synchronous one for evaluation and the
in-process modes. An asyncio loop runs in a daemon thread; `submit` schedules one task per
sample, `step()` waits (at most `poll_s`) for finished ones.

Deliberately left out: streaming partial completions, and the `wait`/`abort` pause modes
(PipelineRL keeps its in-flight samples).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import queue
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from scalerl.rollout.base import Completion, Engine, Request, finished_completion
from scalerl.rollout.config import (
    THINK_END_TEXT,
    EngineConfig,
    check_request,
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
from scalerl.rollout.vllm_engine import _Sample, settings_of, vllm_prompt
from scalerl.rollout.vllm_worker import BACKENDS
from scalerl.rollout.weight_transfer import HostSlots, MappingStream, SlotWeights


class AsyncVLLMEngine(Engine):
    """The `Engine` contract on vLLM's `AsyncLLM`. See the module docstring."""

    def __init__(self, model_path: str | Path, cfg: EngineConfig, *, dtype: str = "float32",
                 fp32_lm_head: bool = True, trust_remote_code: bool = False,
                 version: int = 0, poll_s: float = 0.05) -> None:
        check_version(vllm_version())  # a clear refusal before vLLM builds anything
        if cfg.threads:
            os.environ.setdefault("OMP_NUM_THREADS", str(cfg.threads))
        self.cfg = cfg
        self.settings = settings_of(cfg)
        self.seed = self.settings.engine_seed(cfg.seed)
        self.fp32_lm_head = fp32_lm_head
        self.poll_s = poll_s
        kwargs = dict(
            model=str(model_path), dtype=dtype, seed=self.seed,
            logprobs_mode="processed_logprobs", generation_config="vllm",
            max_num_seqs=cfg.max_batch, trust_remote_code=trust_remote_code,
            worker_extension_cls=WORKER_EXTENSION, **self.settings.engine_kwargs(),
            weight_transfer_config={"backend": BACKENDS[
                "shm" if self.settings.weight_transfer == "auto" else self.settings.weight_transfer]},
        )
        if fp32_lm_head:
            kwargs["hf_overrides"] = {"head_dtype": "float32"}
        # before the engine core starts: it inherits this process's environment
        os.environ.update(self.settings.engine_environment())
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="scalerl-vllm-async")
        self._thread.start()
        try:
            self.llm = self._call(self._start(kwargs))
        except BaseException:  # no engine: stop the loop thread, keep the error
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            raise
        model_config = self.llm.model_config
        self.contract = check_engine(
            model_config, lambda: self._call(self.llm.collective_rpc("scalerl_head_dtype")),
            fp32_lm_head, needs_pause=True)
        self.version = version
        self._call(self.llm.update_weight_version(str(version)))
        self.tokenizer = self.llm.get_tokenizer()
        self.max_context = model_config.max_model_len
        self.eos_ids = eos_token_ids(self.tokenizer, model_config.hf_config)
        self.think_end_ids = encode_text(self.tokenizer, THINK_END_TEXT)
        self.interrupt_ids = encode_text(self.tokenizer, cfg.interruption_text)
        self._ids = itertools.count()
        self._done: queue.Queue = queue.Queue()  # Completion, or an exception of a task
        self._n_in_flight = 0
        self._tasks: set = set()
        self._attached: tuple | None = None  # paths of the host slots the engine core maps
        self._staging: HostSlots | None = None  # for update_weights of plain mappings

    @classmethod
    def from_pretrained(cls, path: str | Path, model_cfg, engine_cfg: EngineConfig
                        ) -> AsyncVLLMEngine:
        return cls(path, engine_cfg, dtype=model_cfg.dtype, fp32_lm_head=model_cfg.fp32_lm_head,
                   trust_remote_code=model_cfg.trust_remote_code)

    @staticmethod
    async def _start(kwargs: dict):
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))

    def _call(self, coro, timeout: float | None = None):
        """Run a coroutine on the engine's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    # -- contract ----------------------------------------------------------------------------
    def submit(self, requests: Sequence[Request]) -> None:
        for req in requests:
            check_request(req, len(self.interrupt_ids), self.max_context)
        for req in requests:
            self._n_in_flight += 1
            self._tasks.add(asyncio.run_coroutine_threadsafe(self._run(_Sample(req)),
                                                             self._loop))

    def num_in_flight(self) -> int:
        return self._n_in_flight

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """In-flight update from host slots (module docstring): a `SlotWeights` as it is, any
        other mapping through this engine's staging slot."""
        if self.settings.weight_transfer not in ("auto", "shm"):
            raise RuntimeError(
                f"this engine receives weights through vLLM's {self.settings.weight_transfer} "
                "transfer, driven by the trainer (scalerl.rollout.vllm_transfer); "
                "update_weights with tensors needs vllm.weight_transfer: shm")
        if isinstance(state_dict, SlotWeights):
            slots, slot = state_dict.slots, state_dict.slot
        else:
            slots, slot = self._stage(state_dict), 0
        if self._attached != tuple(slots.paths):
            self._call(self.llm.init_weight_transfer_engine(
                _init_request(slots.attach_info())))
            self._attached = tuple(slots.paths)
        self.transfer_rpc("start_weight_update", None, version)
        try:
            self.transfer_rpc("update_weights", {"slot": slot}, version)
        except BaseException:
            self._call(self.llm.resume_generation())
            raise
        self.transfer_rpc("finish_weight_update", None, version)

    def _stage(self, state_dict: Mapping[str, torch.Tensor]) -> HostSlots:
        """A one-slot host buffer holding `state_dict` (re-created when its tensors change)."""
        import multiprocessing

        stream = MappingStream(state_dict)
        if self._staging is None or self._staging.layout != stream.layout:
            if self._staging is not None:
                self._staging.unlink()
            self._staging = HostSlots.create(stream.layout, 1, multiprocessing.get_context())
        self._staging.write(0 if self._staging.newest < 0 else self._staging.newest + 1, stream)
        return self._staging

    def transfer_rpc(self, method: str, payload, version: int):
        """One call of vLLM's weight-transfer round trip, in this engine: start_weight_update
        pauses (keeping requests), finish_weight_update sets `version` and resumes; also
        init_weight_transfer_engine, update_weights, sleep and wake_up."""
        return self._call(self._transfer(method, payload, version))

    async def _transfer(self, method: str, payload, version: int):
        from vllm.distributed.weight_transfer.base import WeightTransferUpdateRequest

        llm = self.llm
        if method == "init_weight_transfer_engine":
            await llm.init_weight_transfer_engine(_init_request(payload))
        elif method == "start_weight_update":
            await llm.pause_generation(mode="keep", clear_cache=False)
            await llm.start_weight_update()
        elif method == "update_weights":
            await llm.update_weights(WeightTransferUpdateRequest(update_info=payload))
        elif method == "finish_weight_update":
            try:
                await llm.finish_weight_update(str(version))
                self.version = version  # later requests: another cache salt (`vllm_prompt`)
            finally:
                await llm.resume_generation()
        elif method == "sleep":
            await llm.sleep(level=1, mode="keep")
        elif method == "wake_up":
            await llm.wake_up()
        else:
            raise ValueError(f"unknown weight-transfer call {method!r}")

    def step(self) -> list[Completion]:
        if not self._n_in_flight:
            return []
        done: list[Completion] = []
        try:
            done.append(self._done.get(timeout=self.poll_s))
            while True:
                done.append(self._done.get_nowait())
        except queue.Empty:
            pass
        for item in done:
            if isinstance(item, BaseException):
                raise RuntimeError("a vLLM request failed") from item
        self._n_in_flight -= len(done)
        self._tasks = {t for t in self._tasks if not t.done()}
        return done

    def close(self) -> None:
        if getattr(self, "_staging", None) is not None:
            self._staging.unlink()
        if getattr(self, "llm", None) is None:
            return
        for task in self._tasks:
            task.cancel()
        self.llm.shutdown()
        try:
            self._call(_cancel_pending(), timeout=10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            if not self._thread.is_alive():
                self._loop.close()
            self.llm = None

    # -- internals ---------------------------------------------------------------------------
    async def _run(self, sample: _Sample) -> None:
        try:
            self._done.put(await self._complete(sample))
        except asyncio.CancelledError:
            raise
        except BaseException as err:  # surfaced by step()
            self._done.put(err)

    async def _complete(self, sample: _Sample) -> Completion:
        req = sample.request
        budget = req.max_new_tokens if req.think_budget is None else req.think_budget
        await self._phase(sample, list(req.prompt_ids), budget)
        n = len(sample.token_ids)
        stopped = bool(sample.token_ids) and sample.token_ids[-1] in self.eos_ids
        if not (stopped or req.think_budget is None or n >= req.max_new_tokens):
            budget = sample.start_answer(self.think_end_ids, self.interrupt_ids, self.version)
            if budget > 0:
                await self._phase(sample, list(req.prompt_ids) + sample.token_ids, budget)
                stopped = bool(sample.token_ids) and sample.token_ids[-1] in self.eos_ids
        return finished_completion(req, sample.token_ids, sample.logprobs, sample.loss_mask,
                                   sample.versions, self.tokenizer, stopped, sample.interrupted)

    async def _phase(self, sample: _Sample, context: list[int], max_tokens: int) -> None:
        """One vLLM request; appends its tokens, logprobs and per-token weight versions."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        req = sample.request
        seed = None
        if self.settings.seed_per_request:
            seed = sample_seed(self.seed, req.prompt_id, req.sample_idx) + sample.phase - 1
        params = SamplingParams(temperature=self.cfg.temperature, max_tokens=max_tokens,
                                logprobs=0, seed=seed, detokenize=False,
                                output_kind=RequestOutputKind.DELTA)
        tokens: list[int] = []
        logprobs: list[float] = []
        start_version = self.version  # the label of every token when vLLM gives no spans
        final = None
        async for out in self.llm.generate(vllm_prompt(context, self.version, self.settings),
                                           params,
                                           f"a{next(self._ids)}"):
            piece = out.outputs[0]
            if len(piece.token_ids) != len(piece.logprobs or []):
                raise RuntimeError(f"vLLM returned {len(piece.token_ids)} tokens but "
                                   f"{len(piece.logprobs or [])} logprobs")
            for tok, entry in zip(piece.token_ids, piece.logprobs or []):
                tokens.append(int(tok))
                logprobs.append(float(entry[tok].logprob))
            final = piece
        versions = _expand_spans(getattr(final, "weight_versions", None), len(tokens),
                                 start_version)
        sample.token_ids.extend(tokens)
        sample.logprobs.extend(logprobs)
        sample.loss_mask.extend([True] * len(tokens))
        sample.versions.extend(versions)


async def _cancel_pending() -> None:
    """Cancel the loop's other tasks (vLLM's output handlers) and let them finish."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _init_request(init_info: dict):
    from vllm.distributed.weight_transfer.base import WeightTransferInitRequest

    return WeightTransferInitRequest(init_info=init_info)


def _expand_spans(spans, n_tokens: int, fallback: int) -> list[int]:
    """Per-token versions from vLLM's `WeightVersionSpan`s (labels are our str(version));
    without spans every token gets `fallback` (the version at the phase's start)."""
    if not spans:
        return [fallback] * n_tokens
    out = [fallback] * n_tokens
    for span in spans:
        for i in range(span.start, min(span.end, n_tokens)):
            out[i] = int(span.version)
    return out
