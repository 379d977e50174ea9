"""Rollout sources: where each optimizer step's completions come from, per off-policy mode.

All three share `RequestFactory`, which turns drawn prompts into G `Request`s each: the group
number (unique per issued prompt instance) goes into the tag, `sample_idx = group·G + j` is
unique over the run (the engines seed every sample from (seed, prompt_id, sample_idx), so a
prompt seen in a later epoch gets fresh randomness, and a resumed run draws the same samples),
and with interruption length control each sample's thinking budget is drawn uniformly from the
recipe's range (paper §4: "a random position between 10k and 12k").

- `OnPolicyRollouts` (off_policy = on-policy): generate B×G samples with the current policy in
  the trainer process, train once, repeat. Staleness is 0.
- `PPORollouts` (off_policy = ppo, PPO-off-policy-k, paper §3.1): generate k·B prompts × G with
  the current policy, then k optimizer steps on mini-batches of B prompts; the j-th mini-batch
  of a round is j versions stale.
- `PipelineRollouts` (off_policy = pipeline, PipelineRL-k): generator processes stream
  (`scalerl.rl.pipeline.Pipeline`), on every node of a multi-node world; batch v is issued up
  to k steps early and weights are pushed after every step.

With several trainer ranks every rank holds a source and calls it at the same step: the
pipeline source exchanges requests, completions and statistics between the nodes (`World`
collectives); the in-process modes generate on the main rank and the other ranks hold a
`Follower`. The completions of a step exist on the main rank only. `fixed_lag` = d (`RunConfig.pipeline_fixed_lag`) puts the
  generators on the fixed schedule (batch v generated whole by version max(v − d, the chunk's
  first version): reproducible runs); None is the free-running pipeline. Either way a batch's
  completions come back in issue order (by sample index), not in the order they finished.

Every source keeps what it has drawn but not yet trained on in its `state_dict()`: on-policy
nothing; PPO the remaining mini-batches of the round (completions); pipeline the requests of
the batches already issued (re-issued on resume, re-generated with the resumed weights).

Deliberately left out: grading (`scalerl.rl.grading`: in the trainer for the in-process
modes, in the generator processes for PipelineRL) and weighting of mini-batches.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import torch

from scalerl.parallel.world import SINGLE, World
from scalerl.rl.pipeline import EngineSpec, Pipeline
from scalerl.rl.prompts import PromptSource
from scalerl.rollout.base import Completion, Engine, Request
from scalerl.rollout.budget import GenerationBudget
from scalerl.rollout.config import draw_think_budget
from scalerl.rollout.weight_transfer import WeightStream

__all__ = ["Follower", "OnPolicyRollouts", "PPORollouts", "PipelineRollouts", "RequestFactory"]


class RequestFactory:
    """Prompts → Requests with group tags, unique sample indices and thinking budgets.

    `budget` is the run's `scalerl.rollout.budget.GenerationBudget` (the one computation the
    trainer, eval and the planner share): its cap, and with forced interruption the thinking
    range each sample's budget is drawn from and the answer budget after it."""

    def __init__(self, source: PromptSource, generations_per_prompt: int,
                 budget: GenerationBudget, seed: int):
        self.source = source
        self.generations_per_prompt = generations_per_prompt
        self.budget = budget
        self.rng = random.Random(seed * 1_000_003 + 17)
        self.next_group = 0

    @property
    def max_new_tokens(self) -> int:
        return self.budget.max_new_tokens

    def make(self, n_prompts: int) -> list[Request]:
        g, budget = self.generations_per_prompt, self.budget
        out = []
        for pid in self.source.draw(n_prompts):
            group = self.next_group
            self.next_group += 1
            for j in range(g):
                out.append(Request(
                    prompt_id=pid,
                    prompt_ids=self.source.prompt_tokens(pid),
                    sample_idx=group * g + j,
                    max_new_tokens=budget.max_new_tokens,
                    think_budget=(draw_think_budget(self.rng, *budget.think_budget)
                                  if budget.think_budget else None),
                    answer_budget=budget.answer_budget,
                    tag=group,
                ))
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.getstate(), "next_group": self.next_group}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.rng.setstate(state["rng"])
        self.next_group = int(state["next_group"])


class _InProcess:
    """Shared by on-policy and PPO: one engine in the trainer process."""

    def __init__(self, engine: Engine, factory: RequestFactory):
        self.engine = engine
        self.factory = factory
        self.gen_tokens, self.gen_seconds = 0, 0.0

    def _generate(self, n_prompts: int) -> list[Completion]:
        t0 = time.perf_counter()
        out = self.engine.generate(self.factory.make(n_prompts))
        self.gen_seconds += time.perf_counter() - t0
        self.gen_tokens += sum(c.n_tokens for c in out)
        return out

    def after_step(self, weights: Callable[[], Mapping[str, torch.Tensor]], version: int) -> None:
        """The newest weights, loaded into the engine when the next batch is generated (an
        engine that shares the trainer's model copies them onto themselves: nothing)."""
        self._weights = weights

    def pause_for_update(self) -> None:
        """Nothing: the engine generates only between optimizer steps."""

    def gen_stats(self) -> tuple[int, float]:
        return self.gen_tokens, self.gen_seconds

    def close(self) -> None:
        self.engine.close()


class OnPolicyRollouts(_InProcess):
    """Generate with the current weights, train once (the engine may share the model)."""

    def __init__(self, engine: Engine, factory: RequestFactory, batch_prompts: int, version: int,
                 weights: Callable[[], Mapping[str, torch.Tensor]]):
        super().__init__(engine, factory)
        self.batch_prompts = batch_prompts
        self._weights = weights
        self.engine.update_weights(weights(), version)

    def next_batch(self, version: int) -> list[Completion]:
        if self.engine.version != version:
            self.engine.update_weights(self._weights(), version)
        return self._generate(self.batch_prompts)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass


class PPORollouts(_InProcess):
    """PPO-off-policy-k: one generation round of k·B prompts feeds k optimizer steps."""

    def __init__(self, engine: Engine, factory: RequestFactory, batch_prompts: int, k: int,
                 version: int, weights: Callable[[], Mapping[str, torch.Tensor]]):
        super().__init__(engine, factory)
        self.batch_prompts, self.k = batch_prompts, k
        self._weights = weights
        self.queue: deque[list[Completion]] = deque()
        self.engine.update_weights(weights(), version)

    def next_batch(self, version: int) -> list[Completion]:
        if not self.queue:
            if self.engine.version != version:
                self.engine.update_weights(self._weights(), version)
            round_ = self._generate(self.batch_prompts * self.k)
            by_group: dict[int, list[Completion]] = {}
            for c in round_:
                by_group.setdefault(int(c.request.tag), []).append(c)
            groups = list(by_group.values())  # issue order
            for i in range(self.k):
                chunk = groups[i * self.batch_prompts:(i + 1) * self.batch_prompts]
                self.queue.append([c for g in chunk for c in g])
        return self.queue.popleft()

    def state_dict(self) -> dict[str, Any]:
        return {"queue": list(self.queue)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.queue = deque(state.get("queue", []))


class PipelineRollouts:
    """PipelineRL-k through generator processes (see `scalerl.rl.pipeline`) on every node.

    Every trainer rank holds one and calls each method at the same step (they are collectives
    of `world`; at one rank nothing is exchanged). The main rank draws each batch's requests
    (`factory`) and keeps them until trained on (`state_dict`); each node's leader runs a
    `Pipeline` of that node's generators (`specs`). A batch's prompt groups go to the nodes in
    turn (group g to node g mod nodes), each node generates its part, and `next_batch` gathers
    the parts to the main rank in issue order (sample index), so the batch is the same whatever
    node generated what (every sample is seeded from its prompt and sample index). Weights go
    to every node leader (`after_step`: the trainer gathers them there) and into its pipeline.
    """

    def __init__(self, specs: list[EngineSpec], factory: RequestFactory, batch_prompts: int,
                 max_lag: int, max_concurrent: int, version: int,
                 weights: Mapping[str, torch.Tensor] | WeightStream,
                 issued: list[tuple[int, list[Request]]] | None = None,
                 fixed_lag: int | None = None, world: World = SINGLE,
                 pipeline_options: Mapping[str, Any] | None = None):
        """`pipeline_options`: keyword arguments of every node's `Pipeline` (dtype,
        transport, workers_per_generator, sleep_during_update)."""
        self.world = world
        self.factory = factory
        self.batch_prompts = batch_prompts
        self.max_lag = max_lag
        self.pipe = None
        if world.is_node_leader:
            self.pipe = Pipeline(specs, weights, version, max_lag, max_concurrent,
                                 fixed_lag=fixed_lag, **dict(pipeline_options or {}))
        else:
            _drain(weights)
        self.issued: dict[int, list[Request]] = {}  # main rank: every request of a batch
        self.parts: dict[int, list[Request]] = {}  # node leaders: this node's share
        resumed = dict(issued or [])  # the same on every rank (the trainer state's)
        for b in range(version, version + max_lag + 1):  # resumed: re-issue what was drawn
            self._issue(b, resumed.get(b))

    def _issue(self, batch_index: int, reqs: list[Request] | None) -> None:
        """Issue batch `batch_index` (`reqs`, or drawn now on the main rank): each node leader
        submits its node's groups (a collective)."""
        world = self.world
        per_rank = None
        if world.is_main:
            reqs = reqs if reqs is not None else self.factory.make(self.batch_prompts)
            self.issued[batch_index] = reqs
            per_rank = [None] * world.size
            for node, leader in enumerate(world.node_leaders()):
                per_rank[leader] = [r for r in reqs if int(r.tag) % world.nodes == node]
        part = world.scatter_object(per_rank)
        if self.pipe is not None:
            self.parts[batch_index] = part
            self.pipe.submit(batch_index, part)

    def next_batch(self, version: int) -> list[Completion] | None:
        """Batch `version`'s completions on the main rank (None on the others)."""
        part = self.parts.pop(version, None)
        mine = self.pipe.collect(version, len(part)) if self.pipe is not None else []
        gathered = self.world.gather_object(mine)
        if not self.world.is_main:
            return None
        del self.issued[version]
        # issue order, not finishing order: the batch's rows (and the loss's summation order)
        # do not depend on which generator, node or sequence finished first
        return sorted((c for got in gathered for c in got), key=lambda c: c.request.sample_idx)

    def after_step(self, weights: Callable[[], Mapping[str, torch.Tensor] | WeightStream],
                   version: int) -> None:
        """Push the new weights on every node (the other ranks drain the stream's gathers),
        then issue batch version + max_lag."""
        if self.pipe is not None:
            self.pipe.push_weights(weights(), version)
        else:
            _drain(weights())
        nxt = version + self.max_lag
        if self.world.broadcast_object(nxt not in self.issued if self.world.is_main else None):
            self._issue(nxt, None)

    def pause_for_update(self) -> None:
        """Before the optimizer step: generators sharing a trainer device may sleep
        (`Pipeline.pause_for_update`; the next push wakes them)."""
        if self.pipe is not None:
            self.pipe.pause_for_update()

    def gen_stats(self) -> tuple[int, float]:
        """(tokens generated, seconds decoding) over every node's generators."""
        tokens, busy = self.pipe.generator_stats() if self.pipe is not None else (0, 0.0)
        total = self.world.all_reduce(torch.tensor([float(tokens), busy], dtype=torch.float64))
        return int(total[0]), float(total[1])

    def state_dict(self) -> dict[str, Any]:
        return {"issued": sorted(self.issued.items())}

    def close(self) -> None:
        if self.pipe is not None:
            self.pipe.close()


def _drain(weights: Mapping[str, torch.Tensor] | WeightStream) -> None:
    """A rank that pushes nothing still takes part in a stream's gathers."""
    if not isinstance(weights, Mapping):
        for _ in weights:
            pass


class Follower:
    """A rank other than the main one in the in-process modes: the main rank generates, this
    rank trains on its share (every method returns nothing and exchanges nothing)."""

    def next_batch(self, version: int) -> None:
        return None

    def after_step(self, weights: Callable[[], Mapping[str, torch.Tensor]], version: int) -> None:
        pass

    def pause_for_update(self) -> None:
        pass

    def gen_stats(self) -> tuple[int, float]:
        return 0, 0.0

    def state_dict(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass
