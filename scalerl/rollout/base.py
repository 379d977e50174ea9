"""The generation-engine contract shared by the HF/torch and vLLM engines.

An engine turns `Request`s (one prompt, one sample) into `Completion`s that carry everything
the trainer needs: sampled token ids, the generator's log-probability of each sampled token,
a loss mask (False for tokens the engine inserted itself, e.g. the interruption text), the
policy version that produced each token, and the finish flags.

Two ways to drive an engine:
- blocking: `generate(requests)` returns all completions (evaluation, on-policy, PPO mode);
- streaming (PipelineRL): `submit(requests)` queues work, each `step()` advances every
  in-flight sequence by (at least) one decode step and returns the completions that finished;
  `update_weights(state_dict, version)` between steps makes the *next* decode step use the new
  weights while in-flight sequences keep their KV cache, so their `versions` record the switch.

Deliberately left out: top-p/top-k (they bias the importance ratio; training samples at plain
temperature) and beam search.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Literal

import torch

from scalerl.text import INTERRUPTION_TEXT

FinishReason = Literal["stop", "length"]

DEFAULT_INTERRUPTION_TEXT = INTERRUPTION_TEXT  # the paper's text (scalerl.text)


@dataclasses.dataclass(frozen=True)
class Request:
    """One sample to generate for one prompt."""

    prompt_id: str  # the prompt's id (prompts.parquet `prompt_id`)
    prompt_ids: tuple[int, ...]  # tokenized, formatted prompt
    sample_idx: int = 0  # which of the G samples of this prompt
    max_new_tokens: int = 64  # hard cap on generated tokens (thinking + inserted + answer)
    # Forced interruption: when `think_budget` tokens were generated without the end-of-thinking
    # token, the engine appends the interruption text (loss-masked) and allows `answer_budget`
    # more tokens. None disables interruption for this request.
    think_budget: int | None = None
    answer_budget: int = 0
    tag: object = None  # opaque payload the caller gets back on the Completion


@dataclasses.dataclass
class Completion:
    """A finished sample. All per-token lists have the same length (generated tokens)."""

    request: Request
    token_ids: list[int]  # generated + inserted tokens, in order
    logprobs: list[float]  # generator log π_gen(token) of each token; 0.0 for inserted ones
    loss_mask: list[bool]  # False for inserted (interruption) tokens
    versions: list[int]  # policy version that produced each token (inserted: current version)
    text: str  # decoded generated text (special tokens kept, e.g. </think>)
    finish_reason: FinishReason  # "stop": eos produced; "length": ran out of tokens
    truncated: bool  # hit max_new_tokens (or the answer budget) without eos
    interrupted: bool  # the interruption text was inserted
    # the verifier's verdict (a scalerl.rewards.Score) when the generator graded the sample
    # itself (PipelineRL generators do, see scalerl.rl.grading); None: the trainer grades it
    score: object = None

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def min_version(self) -> int:
        return min(self.versions) if self.versions else -1


def finished_completion(request: Request, token_ids: list[int], logprobs: list[float],
                        loss_mask: list[bool], versions: list[int], tokenizer,
                        stopped: bool, interrupted: bool) -> Completion:
    """The Completion both engines return: decoded text, finish reason and truncation flag."""
    return Completion(
        request=request,
        token_ids=token_ids,
        logprobs=logprobs,
        loss_mask=loss_mask,
        versions=versions,
        text=tokenizer.decode(token_ids, skip_special_tokens=True),
        finish_reason="stop" if stopped else "length",
        truncated=not stopped,
        interrupted=interrupted,
    )


class Engine(abc.ABC):
    """A text generator with in-place weight updates. See the module docstring."""

    version: int = 0

    @abc.abstractmethod
    def submit(self, requests: Sequence[Request]) -> None:
        """Queue requests for streaming generation."""

    @abc.abstractmethod
    def step(self) -> list[Completion]:
        """Advance in-flight sequences; return those that finished (possibly none)."""

    @abc.abstractmethod
    def num_in_flight(self) -> int:
        """Requests submitted but not yet returned by `step`."""

    @abc.abstractmethod
    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Load new policy weights; applies from the next decode step on, KV cache kept."""

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        """Blocking generation; completions come back in the order of `requests`."""
        order = {id(r): i for i, r in enumerate(requests)}
        self.submit(requests)
        done: list[Completion] = []
        while len(done) < len(requests):
            done.extend(self.step())
        done.sort(key=lambda c: order[id(c.request)])
        return done

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (processes, memory)."""
