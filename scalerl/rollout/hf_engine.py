"""`HFEngine`: continuous-batching sampling with a KV cache on a transformers model (CPU/CUDA).

Each in-flight sequence is one row of a batched `DynamicCache` ([rows, kv_heads, T, head_dim]
per layer) plus a 2-D attention mask [rows, T] that marks which cache columns belong to it.
`step()`:
1. admits queued requests into free rows (up to `max_batch`): one batched prefill of their
   left-padded prompts, the first token sampled from its last position, and the new rows'
   cache merged into the running one (both left-padded to the same length: keys already carry
   their rotary position, so a sequence's columns may sit anywhere in the cache);
2. runs one decode step for every row: input = the row's next token, position = the row's own
   next position, mask = its columns + the new one;
3. returns finished sequences and drops their rows (and cache columns nobody uses any more).

Sampling: logits from `scalerl.models.logprobs.lm_head_logits` (FP32 head switch), divided by
the temperature; the token is drawn by inverse-CDF from a uniform of the request's own
`torch.Generator` (seeded from (seed, prompt_id, sample_idx)), so a sample does not depend on
what else is in the batch. The logprob recorded is log softmax(logits / T) of the drawn token.

Forced interruption: when a row has generated `think_budget` tokens without `</think>`, the
interruption text is appended (loss_mask False, logprob 0.0) and fed through the model one token
per decode step (teacher forcing); then at most `answer_budget` more tokens are sampled.

`update_weights(state_dict, version)` copies tensors into the parameters in place between
steps; the KV cache is kept, so in-flight rows continue with new weights (PipelineRL) and
their per-token `versions` record the switch. Deliberately left out: paged attention, prefix
sharing between the G samples of a prompt, and speculative decoding.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from scalerl.models.logprobs import lm_head_logits, model_body, positions_from_mask
from scalerl.rollout.base import Completion, Engine, Request, finished_completion
from scalerl.rollout.config import (
    THINK_END_TEXT,
    EngineConfig,
    check_request,
    encode_text,
    ends_with,
    eos_token_ids,
    sample_seed,
)


@dataclasses.dataclass
class _Row:
    """One in-flight sequence."""

    request: Request
    generator: torch.Generator
    pending: list[int]  # tokens still to feed; pending[0] is fed by the next decode step
    position: int  # position id of pending[0]
    token_ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    loss_mask: list[bool] = dataclasses.field(default_factory=list)
    versions: list[int] = dataclasses.field(default_factory=list)
    think_done: bool = False  # `</think>` produced or inserted
    interrupted: bool = False
    answer_start: int = 0  # index of the first answer token after an interruption
    finish: str | None = None  # "stop" | "length" once finished


class HFEngine(Engine):
    """Continuous-batching sampler over a transformers causal LM. See the module docstring."""

    def __init__(self, model, tokenizer, cfg: EngineConfig, *, fp32_lm_head: bool = True,
                 version: int = 0) -> None:
        self.model = model  # used as given (the trainer may share it); no dropout at rest
        self.body = model_body(model)
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.fp32_lm_head = fp32_lm_head
        self.version = version
        self.device = next(model.parameters()).device
        self.eos_ids = eos_token_ids(tokenizer, model.config,
                                     getattr(model, "generation_config", None))
        self.think_end_ids = encode_text(tokenizer, THINK_END_TEXT)
        self.interrupt_ids = encode_text(tokenizer, cfg.interruption_text)
        self.max_context = getattr(model.config, "max_position_embeddings", None)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self._queue: collections.deque[Request] = collections.deque()
        self._rows: list[_Row] = []
        self._cache = None  # DynamicCache with one row per entry of self._rows
        self._mask = torch.zeros(0, 0, dtype=torch.long, device=self.device)  # [rows, T]

    @classmethod
    def from_pretrained(cls, path: str | Path, model_cfg, engine_cfg: EngineConfig) -> HFEngine:
        from scalerl.models.loading import load_model, load_tokenizer

        if engine_cfg.threads:
            torch.set_num_threads(engine_cfg.threads)
        model = load_model(path, model_cfg, engine_cfg.resolved_device())
        return cls(model, load_tokenizer(path), engine_cfg, fp32_lm_head=model_cfg.fp32_lm_head)

    # -- contract ----------------------------------------------------------------------------
    def submit(self, requests: Sequence[Request]) -> None:
        for req in requests:
            check_request(req, len(self.interrupt_ids), self.max_context)
        self._queue.extend(requests)

    def num_in_flight(self) -> int:
        return len(self._queue) + len(self._rows)

    @torch.no_grad()
    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        own = self.model.state_dict()
        unknown = sorted(set(state_dict) - set(own))
        if unknown:
            raise ValueError(f"update_weights: unknown parameter names {unknown[:5]} (send the "
                             "policy's own state_dict)")
        missing = [n for n, _ in self.model.named_parameters() if n not in state_dict]
        if missing:
            raise ValueError(f"update_weights: state_dict lacks parameters {missing[:5]}")
        for name, tensor in state_dict.items():
            own[name].copy_(tensor.to(device=own[name].device, dtype=own[name].dtype))
        self.version = version

    @torch.no_grad()
    def step(self) -> list[Completion]:
        self._admit()
        if any(row.finish is None for row in self._rows):
            self._decode()
        return self._collect()

    def close(self) -> None:
        self._queue.clear()
        self._rows, self._cache = [], None

    # -- internals ---------------------------------------------------------------------------
    def _admit(self) -> None:
        n_free = self.cfg.max_batch - len(self._rows)
        if n_free <= 0 or not self._queue:
            return
        new = [self._queue.popleft() for _ in range(min(n_free, len(self._queue)))]
        length = max(len(r.prompt_ids) for r in new)
        ids = torch.full((len(new), length), self.pad_id, dtype=torch.long)  # [N, L]
        mask = torch.zeros(len(new), length, dtype=torch.long)  # [N, L]
        for i, req in enumerate(new):
            ids[i, length - len(req.prompt_ids):] = torch.tensor(req.prompt_ids)
            mask[i, length - len(req.prompt_ids):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        from transformers import DynamicCache

        cache = DynamicCache()
        out = self.body(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask),
                        past_key_values=cache, use_cache=True)
        rows = []
        for req in new:
            gen = torch.Generator().manual_seed(sample_seed(self.cfg.seed, req.prompt_id,
                                                            req.sample_idx))
            rows.append(_Row(request=req, generator=gen, pending=[],
                             position=len(req.prompt_ids)))
        self._sample_into(rows, out.last_hidden_state[:, -1])  # [N, H]
        self._merge(rows, out.past_key_values, mask)

    def _decode(self) -> None:
        ids = torch.tensor([[row.pending[0] if row.pending else self.pad_id]
                            for row in self._rows], device=self.device)  # [B, 1]
        pos = torch.tensor([[row.position] for row in self._rows], device=self.device)  # [B, 1]
        live = torch.tensor([[int(row.finish is None)] for row in self._rows],
                            device=self.device)  # [B, 1]
        self._mask = torch.cat([self._mask, live], dim=1)  # [B, T+1]
        out = self.body(input_ids=ids, attention_mask=self._mask, position_ids=pos,
                        past_key_values=self._cache, use_cache=True)
        self._cache = out.past_key_values
        to_sample, hidden_rows = [], []
        for i, row in enumerate(self._rows):
            if row.finish is not None:
                continue
            row.pending.pop(0)
            row.position += 1
            if not row.pending:  # nothing forced left to feed: sample the next token
                to_sample.append(row)
                hidden_rows.append(i)
        if to_sample:
            self._sample_into(to_sample, out.last_hidden_state[hidden_rows, -1])  # [n, H]

    def _sample_into(self, rows: list[_Row], hidden: torch.Tensor) -> None:
        """Draw one token per row from hidden [n, H]; append it and apply the stop rules."""
        logits = lm_head_logits(self.model, hidden, self.fp32_lm_head) / self.cfg.temperature
        logp = torch.log_softmax(logits, dim=-1)  # [n, V] float32
        cdf = logp.exp().cumsum(-1)  # [n, V]
        u = torch.stack([torch.rand((), generator=r.generator) for r in rows])  # [n]
        target = u.to(cdf.device).unsqueeze(-1) * cdf[:, -1:]  # [n, 1]
        tokens = torch.searchsorted(cdf, target, right=True).clamp(max=cdf.shape[-1] - 1)  # [n, 1]
        token_logp = logp.gather(-1, tokens).squeeze(-1).tolist()  # [n]
        for row, tok, lp in zip(rows, tokens.squeeze(-1).tolist(), token_logp):
            self._append(row, tok, lp)

    def _append(self, row: _Row, tok: int, logprob: float) -> None:
        req = row.request
        row.token_ids.append(tok)
        row.logprobs.append(logprob)
        row.loss_mask.append(True)
        row.versions.append(self.version)
        row.pending.append(tok)
        n = len(row.token_ids)
        if tok in self.eos_ids:
            row.finish = "stop"
            return
        if not row.think_done and ends_with(row.token_ids, self.think_end_ids):
            row.think_done = True
        if row.interrupted and n - row.answer_start >= req.answer_budget:
            row.finish = "length"
        elif n >= req.max_new_tokens:
            row.finish = "length"
        elif (not row.think_done and req.think_budget is not None and n >= req.think_budget):
            self._interrupt(row)

    def _interrupt(self, row: _Row) -> None:
        k = len(self.interrupt_ids)
        row.token_ids.extend(self.interrupt_ids)
        row.logprobs.extend([0.0] * k)
        row.loss_mask.extend([False] * k)
        row.versions.extend([self.version] * k)
        row.pending.extend(self.interrupt_ids)
        row.think_done = row.interrupted = True
        row.answer_start = len(row.token_ids)
        if row.request.answer_budget == 0:
            row.finish = "length"

    def _merge(self, rows: list[_Row], cache, mask: torch.Tensor) -> None:
        """Append new rows (their cache and mask [N, L]) to the running batch."""
        if self._cache is None or not self._rows:
            self._rows, self._cache, self._mask = rows, cache, mask
            return
        t_old, t_new = self._mask.shape[1], mask.shape[1]
        width = max(t_old, t_new)
        for old_layer, new_layer in zip(_layers(self._cache), _layers(cache)):
            for attr in ("keys", "values"):
                a = _left_pad(getattr(old_layer, attr), width - t_old)
                b = _left_pad(getattr(new_layer, attr), width - t_new)
                setattr(old_layer, attr, torch.cat([a, b], dim=0))  # [B+N, H, T, D]
        self._mask = torch.cat([F.pad(self._mask, (width - t_old, 0)),
                                F.pad(mask, (width - t_new, 0))], dim=0)  # [B+N, T]
        self._rows.extend(rows)

    def _collect(self) -> list[Completion]:
        done = [row for row in self._rows if row.finish is not None]
        if not done:
            return []
        keep = [i for i, row in enumerate(self._rows) if row.finish is None]
        self._rows = [self._rows[i] for i in keep]
        if keep:
            index = torch.tensor(keep, device=self.device)
            mask = self._mask[index]  # [B', T]
            first = int(mask.any(0).nonzero()[0]) if mask.any() else mask.shape[1]
            self._mask = mask[:, first:]
            for layer in _layers(self._cache):
                layer.keys = layer.keys[index, :, first:]
                layer.values = layer.values[index, :, first:]
        else:
            self._cache, self._mask = None, self._mask[:0, :0]
        return [self._completion(row) for row in done]

    def _completion(self, row: _Row) -> Completion:
        return finished_completion(row.request, row.token_ids, row.logprobs, row.loss_mask,
                                   row.versions, self.tokenizer, row.finish == "stop",
                                   row.interrupted)


def _layers(cache) -> list:
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise RuntimeError("HFEngine needs transformers' DynamicCache with .layers (>= 4.56)")
    for layer in layers:
        if type(layer).__name__ != "DynamicLayer":
            raise NotImplementedError(
                f"HFEngine supports full-attention caches only, got {type(layer).__name__} "
                "(sliding-window / hybrid models): use the vLLM engine for this model"
            )
    return layers


def _left_pad(x: torch.Tensor, n: int) -> torch.Tensor:
    """Zero columns on the left of the sequence axis of [B, H, T, D]."""
    return F.pad(x, (0, 0, n, 0)) if n else x
