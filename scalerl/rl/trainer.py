"""The trainer: one chunk of one run, at any number of trainer ranks, from a base model or the
previous chunk's checkpoint.

`train_chunk(cfg, chunk=K, init=DIR, prompts=FILE, out=OUT)` runs `cfg.steps_in_chunk(K)`
optimizer steps of training chunk K (numbered from 1 as the workflow's checkpoints chunk{K};
chunk 1 starts from the base model, chunk 0) and writes OUT (a checkpoint directory, see
`scalerl.rl.checkpoint`, with `steps.parquet` inside). Per step:

1. completions of B prompts × G samples from the off-policy mode's rollout source
   (`scalerl.rl.rollouts`: on-policy, PPO-off-policy-k, PipelineRL-k);
2. verdicts from the verifiers (`scalerl.rl.grading`: computed by the PipelineRL generator
   processes as samples finish, by the trainer in the in-process modes), recorded in the
   No-Positive-Resampling history (`scalerl.rl.prompts`);
3. rewards, zero-variance filter, advantages and loss denominators of the whole batch
   (`scalerl.rl.batch.score_batch`), each trainer rank's share of the kept samples
   (`split_shares`: whole prompt groups, token-balanced) and its padded tensors;
4. one optimizer step (`scalerl.rl.update`): trainer log-probabilities with the FP32 LM-head
   switch, the recipe's loss, backward by micro-batches (whole prompts, or a token budget),
   grad-norm clipping, AdamW with linear warmup then a constant LR, with the run's numerics
   (`RunConfig.numerics`: the trainer loads the model in `param_dtype`, fp32 master weights
   by default, and computes the body in `compute_dtype`, bf16 on CUDA by default);
5. new weights to the generators; a steps row (`scalerl.rl.steps`) with compute
   (`scalerl.rl.compute`), rates, loss statistics, staleness and throughput; progress on
   stderr; the sample rows (`scalerl.rl.rollout_log`, `rollouts.parquet`) and, with a
   `tracking` backend, the steps row to W&B/MLflow/TensorBoard (`scalerl.tracking`). The
   row's time_* columns split the step's wall-clock into its phases (`scalerl.rl.steps`).

World size (`trainer_ranks`, docs/design.md "Scale-out"): this loop is the trainer of every
world size. The ranks are a `scalerl.parallel.world.World` (the identity at one rank): the main
rank owns everything outside the update (requests, grading, prompt history, statistics, rows,
progress, tracker) and scatters the ranks' shares; every rank runs `optimizer_step` on its share
of the FSDP2-sharded policy (`scalerl.parallel.shard`). Only a few things depend on the world
size, each a seam in one place: the policy's sharding, where generation runs (PipelineRL
generators on every node, run by its first rank, `scalerl.rl.rollouts.PipelineRollouts`; the
in-process engine on the main rank), how the generators' weights are gathered
(`publish_weights`: PipelineRL generators get a stream of the policy's tensors in their own
dtype, each parameter once, gathered one at a time at several ranks and never as a full copy on
a GPU, `scalerl.rl.weights.PolicyWeights`, over the transport their placement allows,
`scalerl.rollout.weight_transfer.choose_transport`; the in-process engines get the model's own
state dict at one rank and at several its copy gathered into the main rank's CPU memory,
`scalerl.parallel.checkpoint.gathered_state_dict`) and how many DCP shards a checkpoint has
(`_Chunk.save`: one format at every world size, `scalerl.parallel.checkpoint`). Every
RunConfig field means
the same at every size: recipe resolution, gen_len budgets, numerics, devices, tracker,
timings, rollouts.parquet.

Threads and devices: on CPU the cores are split evenly between the ranks and the generator
processes of the node (`threads: 0`; 2 cores and PipelineRL → 1 thread each), in-process modes
take them all; on CUDA each rank trains on cuda:LOCAL_RANK and each node's generators (the
`generators` split evenly over the nodes) take their own device(s) after the node's trainer
ranks when there are enough (`CUDA_VISIBLE_DEVICES` per generator, naming the parent's visible
entries: `child_visible_devices`), else they share the node's first device. In-process
generation samples in the model's own dtype at every world size (`in_process_generator_model`):
from the trainer's model at one rank when its parameters are in that dtype, else from a copy on
the main rank's device. Device-hours count the distinct devices held.

Guards: non-finite log-probabilities, loss or gradients stop the chunk with `NonFiniteError`
naming the step (and the parameters with non-finite gradients) before any weight changes;
staleness above max_lag is impossible by construction and asserted (`scalerl.rl.pipeline`).

Resume: every `save_every` steps the full state goes atomically into `OUT.partial` (a sibling
directory). A rerun of the same chunk continues from there without recomputing earlier steps
and the finished chunk is promoted atomically to OUT; OUT never holds a half-written chunk.
A rerun first removes the temporary directories a killed save left beside OUT.
On-policy on CPU, a resumed chunk ends bit-identical to an uninterrupted one: model, optimizer,
scheduler, all RNGs, the sampler and the request counter are restored and every sample's
randomness depends only on (seed, prompt_id, sample_idx). A checkpoint written at any number of
trainer ranks resumes at any other (DCP reshards the model and AdamW state).

Deliberately left out: KL/entropy terms (not part of ScaleRL).
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from scalerl.config import ConfigError, config_hash
from scalerl.parallel.checkpoint import (
    gathered_state_dict,
    load_checkpoint_state,
    write_checkpoint,
)
from scalerl.parallel.shard import ScoringPolicy, shard_policy
from scalerl.parallel.world import World, init_world
from scalerl.rl import checkpoint as ckpt
from scalerl.rl.batch import RankShare, score_batch, split_shares
from scalerl.rl.compute import ComputeCounter, count_flop_params
from scalerl.rl.rollout_log import RolloutLog
from scalerl.rl.run_config import RunConfig
from scalerl.rl.steps import (
    MISMATCH_COLUMNS,
    STEP_COLUMNS,
    TIME_COLUMNS,
    with_time_columns,
    write_steps,
)
from scalerl.rl.update import NonFiniteError, make_optimizer, optimizer_step
from scalerl.rollout.budget import GenerationBudget
from scalerl.tracking import make_tracker
from scalerl.utils.io import remove_stale_temps
from scalerl.utils.log import ProgressLine, progress

__all__ = ["ChunkResult", "NonFiniteError", "STEP_COLUMNS", "optimizer_step", "train_chunk"]


@dataclasses.dataclass(frozen=True)
class ChunkResult:
    out: Path
    rows: list[dict[str, Any]]
    resumed_at_step: int | None  # global step a partial save was resumed from, else None


# -- setup helpers -------------------------------------------------------------------------------
def resolve_devices(cfg: RunConfig, pipeline: bool, world: World) -> tuple[list[dict], int]:
    """(environment of each of this node's generators, devices held by the run).

    The `generators` split evenly over the nodes; each node's leader runs its share. On CUDA
    each generator takes `tensor_parallel_size` devices (vLLM) or one (HF) after the node's
    `world.local_size` trainer ranks, named through this process's visible list
    (`child_visible_devices`); without enough devices a node's generators share its first
    rank's device. CPU runs count one device per rank."""
    if pipeline and cfg.generators % world.nodes:
        raise ConfigError(f"generators = {cfg.generators} cannot be split evenly over the "
                          f"{world.nodes} nodes of the job; make it a multiple of the nodes")
    n_gen = cfg.generators // world.nodes if pipeline else 0
    if world.device.type != "cuda":
        return [{} for _ in range(n_gen)], world.size
    per_gen = cfg.vllm.tensor_parallel_size if cfg.engine == "vllm" else 1
    first = world.local_size
    if n_gen and torch.cuda.device_count() >= first + n_gen * per_gen:
        parent = os.environ.get("CUDA_VISIBLE_DEVICES")
        envs = [{"CUDA_VISIBLE_DEVICES": child_visible_devices(
            parent, range(first + i * per_gen, first + (i + 1) * per_gen))}
            for i in range(n_gen)]
        return envs, world.size + world.nodes * n_gen * per_gen
    return [{} for _ in range(n_gen)], world.size


def child_visible_devices(parent_visible: str | None, indices: Sequence[int]) -> str:
    """CUDA_VISIBLE_DEVICES of a child process that should see the parent's devices `indices`.

    `indices` count the devices the parent sees (torch's cuda:i), so the child gets the
    parent's i-th visible entry (an index or a GPU UUID, as SLURM or the user set it), not
    the absolute device i; with no CUDA_VISIBLE_DEVICES the parent sees every device and the
    indices are absolute."""
    indices = list(indices)
    if parent_visible is None:
        return ",".join(str(i) for i in indices)
    visible = [d.strip() for d in parent_visible.split(",") if d.strip()]
    outside = [i for i in indices if not 0 <= i < len(visible)]
    if outside:
        raise ConfigError(
            f"device index {outside[0]} is outside the {len(visible)} device(s) this process "
            f"sees (CUDA_VISIBLE_DEVICES={parent_visible!r}); request more devices for the job "
            "or fewer generators")
    return ",".join(visible[i] for i in indices)


def plan_threads(cfg: RunConfig, n_processes: int) -> int:
    """Torch threads per process: the machine's cores split evenly (at least 1)."""
    if cfg.threads:
        return cfg.threads
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // n_processes)


def build_generator_engine(model_path: str, model_cfg: Any, engine_cfg: Any, env: dict):
    """EngineSpec factory run inside a generator process (module-level: picklable)."""
    os.environ.update(env)
    from transformers.utils import logging as hf_logging

    from scalerl.rollout.factory import make_engine

    hf_logging.disable_progress_bar()
    return make_engine(model_path, model_cfg, engine_cfg)


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _partial_dir(out: Path) -> Path:
    return out.with_name(out.name + ".partial")


def _init_state(cfg: RunConfig, chunk: int, init: Path, partial: Path) -> tuple[Path, dict | None]:
    """Where to load from (partial save, previous chunk, or base) and its trainer state."""
    if ckpt.is_trainer_checkpoint(partial):
        state = ckpt.load_trainer_state(partial)
        same = (state["chunk"], state["config_hash"], state.get("init")) == (
            chunk, config_hash(cfg), str(init.resolve()))
        if not same:
            raise ConfigError(
                f"{partial} holds a partial save of chunk {state['chunk']} (config hash "
                f"{state['config_hash']}, init {state.get('init')}), not of this chunk {chunk} "
                f"(config {config_hash(cfg)}, init {init.resolve()}); delete {partial} to start "
                "the chunk over")
        return partial, state
    if chunk == 1:
        if ckpt.is_trainer_checkpoint(init):
            raise ConfigError(f"--chunk 1 starts from the base model, but {init} is a trainer "
                              "checkpoint; pass the base model directory as --init")
        return init, None
    if not ckpt.is_trainer_checkpoint(init):
        raise ConfigError(f"--chunk {chunk} continues chunk {chunk - 1}, but {init} is not a "
                          "trainer checkpoint; pass the previous chunk's output as --init")
    state = ckpt.load_trainer_state(init)
    if state["chunk"] != chunk - 1 or state["run"] != cfg.run:
        raise ConfigError(f"--init {init} is chunk {state['chunk']} of run {state['run']!r}; "
                          f"chunk {chunk} of run {cfg.run!r} needs chunk {chunk - 1} of it")
    return init, state


# -- the chunk -----------------------------------------------------------------------------------
@dataclasses.dataclass
class _Chunk:
    """Everything a chunk mutates, saved together (intra-chunk saves and the final one)."""

    cfg: RunConfig
    world: World
    chunk: int
    init: str  # resolved --init, recorded so a partial save is only resumed from the same one
    chunk_start: int
    step: int
    policy: ScoringPolicy  # the HF model (`.model`), FSDP2-sharded at several ranks
    tokenizer: Any
    optimizer: Any
    scheduler: Any
    source: Any  # PromptSource
    factory: Any  # RequestFactory
    compute: ComputeCounter
    rows: list[dict[str, Any]]
    rollouts: Any = None  # main rank only
    rollout_log: Any = None  # scalerl.rl.rollout_log.RolloutLog: rollouts.parquet rows
    tracker: Any = None  # scalerl.tracking.Tracker: steps rows to W&B/MLflow/TensorBoard
    push_stream: Any = None  # PipelineRL: scalerl.rl.weights.PolicyWeights (the generators')

    @property
    def model(self) -> Any:
        return self.policy.model

    def load(self, load_from: Path, state: Mapping[str, Any], resumed: bool) -> dict[str, Any]:
        """Restore the checkpoint `load_from` with its trainer state `state`: the model and
        AdamW state from its dcp/ (resharded onto this world, whatever world wrote it) and the
        rest; returns the rollout source's state."""
        load_checkpoint_state(load_from, self.policy, self.optimizer)
        self.scheduler.load_state_dict(state["scheduler"])
        ckpt.restore_rng_state(state["rng"])
        self.source.load_state_dict(state["sampler"])
        self.factory.load_state_dict(state["requests"])
        self.compute.load_state_dict(state["compute"])
        self.step = int(state["step"])
        self.chunk_start = int(state["chunk_start"]) if resumed else self.step
        self.rows = [with_time_columns(r) for r in state["rows"]] if resumed else []
        return dict(state["rollouts"])

    def state_and_summary(self, *, partial: bool) -> tuple[dict[str, Any], dict[str, Any]]:
        """The trainer state to save (all but the model and AdamW state: dcp/) and the
        checkpoint's summary."""
        cfg, compute = self.cfg, self.compute
        state = {
            "run": cfg.run, "chunk": self.chunk, "chunk_start": self.chunk_start,
            "step": self.step, "version": self.step, "init": self.init,
            "config_hash": config_hash(cfg), "scheduler": self.scheduler.state_dict(),
            "rng": ckpt.capture_rng_state(), "sampler": self.source.state_dict(),
            "requests": self.factory.state_dict(), "rollouts": self.rollouts.state_dict(),
            "compute": compute.state_dict(), "rows": self.rows if partial else [],
        }
        summary = {"run": cfg.run, "chunk": self.chunk, "step": self.step, "version": self.step,
                   "compute_flops": compute.flops, "compute_device_hours": compute.device_hours,
                   "tokens": compute.tokens, "npr_retired": self.source.n_retired,
                   "config_hash": config_hash(cfg), "partial": partial,
                   "trainer_ranks": self.world.size}
        return state, summary

    def open_rollout_log(self, resumed_from: Path | None) -> None:
        """Start this chunk's rollouts.parquet rows; a resumed chunk keeps the rows of its
        partial save up to the saved step."""
        self.rollout_log = RolloutLog(self.cfg.rollouts, run=self.cfg.run, chunk=self.chunk,
                                      config_hash=config_hash(self.cfg))
        if resumed_from is not None:
            self.rollout_log.load(resumed_from, up_to_step=self.step)

    def log_samples(self, completions: Sequence[Any], verdicts: Sequence[bool], stats: Any,
                    retired: Any) -> None:
        """The step's rollouts.parquet rows (`stats`: the full batch's BatchStats)."""
        self.rollout_log.add(self.step, completions, rewards=stats.rewards, correct=verdicts,
                             kept=stats.kept, npr_retired=retired,
                             tasks=[self.source.row(c.request.prompt_id)["task"]
                                    for c in completions])

    def write_outputs(self, tmp: Path, *, partial: bool) -> None:
        """The files beside the weights and state: rollouts in partial saves too (a resumed
        chunk keeps them), steps.parquet in the final one."""
        self.rollout_log.write(tmp)
        if not partial:
            write_steps(self.rows, tmp / "steps.parquet", self.cfg)

    def save(self, path: Path, *, partial: bool) -> None:
        """Write a checkpoint, one format at every world size (`scalerl.parallel.checkpoint`):
        the model and AdamW state in dcp/ from every rank, the model dir, the trainer state
        and the outputs from the main rank (a collective)."""

        def write_main(tmp: Path) -> None:
            state, summary = self.state_and_summary(partial=partial)
            ckpt.write_state_files(tmp, state=state, summary=summary)
            self.write_outputs(tmp, partial=partial)

        write_checkpoint(path, policy=self.policy, optimizer=self.optimizer,
                         tokenizer=self.tokenizer, world=self.world, write_main=write_main)


def publish_weights(run: _Chunk, pipeline: bool) -> Any:
    """The policy's weights for the generators (module docstring): with PipelineRL the stream
    of its tensors in the generators' dtype (`run.push_stream`, consumed by the push: a
    collective at several ranks); in-process the HF model's own state dict at one rank, at
    several gathered into the main rank's CPU memory and {} elsewhere (a collective)."""
    world = run.world
    if pipeline:
        return run.push_stream
    if not world.distributed:
        return run.model.state_dict()
    return gathered_state_dict(run.policy, keep=world.is_main)


def train_chunk(cfg: RunConfig, *, chunk: int, init: str | Path, prompts: str | Path,
                out: str | Path, model_cfg: Any = None) -> ChunkResult:
    """Run one chunk (see the module docstring); returns the steps rows written to OUT.

    `model_cfg` (a ModelConfig: dtype, prompt format) defaults to the one the init directory's
    base_info.json records, else ModelConfig defaults; the FP32 head switch always comes from
    the recipe. Under torchrun every rank calls it."""
    from transformers.utils import logging as hf_logging

    from scalerl.models.loading import (
        format_prompt,
        load_model,
        load_model_config,
        load_tokenizer,
    )
    from scalerl.rl.prompts import PromptSource, load_prompt_table
    from scalerl.rl.rollouts import RequestFactory
    from scalerl.rollout.config import encode_text

    hf_logging.disable_progress_bar()  # per-save/load bars would drown the step lines
    world = init_world(cfg.device)
    out, init, partial = Path(out), Path(init), _partial_dir(Path(out))
    if world.is_main:
        for stale in (*remove_stale_temps(out), *remove_stale_temps(partial)):
            progress(f"train {cfg.run} chunk {chunk}: removed {stale.name} (left by a killed "
                     "save)")
    world.barrier()
    recipe = cfg.recipe
    steps = cfg.steps_in_chunk(chunk)  # before any loading: a chunk past chunk_steps fails here
    pipeline = recipe.off_policy == "pipeline"
    load_from, state = _init_state(cfg, chunk, init, partial)
    resumed = state is not None and state["chunk"] == chunk
    gen_envs, n_devices = resolve_devices(cfg, pipeline, world)
    threads = plan_threads(cfg, world.local_size + (cfg.generators if pipeline else 0))
    torch.set_num_threads(threads)

    model_cfg = (model_cfg or load_model_config(None, load_from)).replace(
        name=str(load_from.resolve()), fp32_lm_head=recipe.fp32_lm_head)
    tokenizer = load_tokenizer(load_from)
    # the trainer's copy in param_dtype (fp32 master weights); generators keep model_cfg.dtype
    model = load_model(load_from, model_cfg.replace(dtype=cfg.numerics.param_dtype),
                       "cpu" if world.distributed else world.device)
    n_params = count_flop_params(model)  # before sharding: the full model's
    policy = shard_policy(model, world)
    optimizer, scheduler = make_optimizer(policy, recipe)
    budget = generation_budget(cfg, len(encode_text(tokenizer, recipe.interruption_text)))
    source = PromptSource(
        load_prompt_table(prompts, "train"), cfg.task_weights.as_dict(),
        lambda text: format_prompt(tokenizer, text, model_cfg),
        npr_threshold=recipe.npr_threshold, npr_min_samples=recipe.npr_min_samples,
        seed=cfg.seed)
    run = _Chunk(cfg, world, chunk, str(init.resolve()), 0, 0, policy, tokenizer, optimizer,
                 scheduler, source,
                 RequestFactory(source, recipe.generations_per_prompt, budget, cfg.seed),
                 ComputeCounter(n_params=n_params, n_devices=n_devices), [])
    if state is None:
        _seed_everything(cfg.seed)
        rollout_state: dict[str, Any] = {}
    else:
        rollout_state = run.load(load_from, state, resumed)
    if pipeline:  # every parameter once, in the generators' dtype (tied head once)
        from scalerl.rl.weights import PolicyWeights

        run.push_stream = PolicyWeights(policy, model_cfg.dtype)
    weights = publish_weights(run, pipeline)  # a collective at several ranks
    run.rollouts = _make_rollouts(cfg, recipe, run, model_cfg, load_from, prompts, gen_envs,
                                  threads, rollout_state, weights)
    if world.is_main:
        run.open_rollout_log(partial if resumed else None)
        progress(f"train {cfg.run} chunk {chunk}: steps {run.step + 1}.."
                 f"{run.chunk_start + steps} "
                 f"({'resuming a partial save' if resumed else 'from ' + str(load_from)}), "
                 f"{recipe.off_policy}{'-' + str(recipe.max_lag) if pipeline else ''}, "
                 f"{recipe.prompts_per_step}x{recipe.generations_per_prompt} samples/step, "
                 f"cap {budget.max_new_tokens} tokens, {world.size} trainer rank(s), "
                 f"{threads} thread(s)/process, device {world.device}")
        run.tracker = make_tracker(cfg.tracking, run=cfg.run, config=cfg.to_dict())
    del weights
    first_step = run.step
    try:
        _loop(run, recipe, run.chunk_start + steps, threads, partial)
    finally:
        run.rollouts.close()
        if world.is_main:
            run.tracker.close()
    run.save(out, partial=False)
    if world.is_main:
        shutil.rmtree(partial, ignore_errors=True)
        progress(f"train {cfg.run} chunk {chunk}: wrote {out} (step {run.step}, "
                 f"{run.compute.flops:.3e} FLOPs, {run.compute.device_hours:.4f} device-hours)")
    world.barrier()
    return ChunkResult(out=out, rows=run.rows, resumed_at_step=first_step if resumed else None)


def _make_rollouts(cfg, recipe, run: _Chunk, model_cfg, load_from: Path, prompts: str | Path,
                   gen_envs: list[dict], threads: int, rollout_state: dict,
                   weights: Mapping[str, torch.Tensor]) -> Any:
    """This rank's rollout source: PipelineRL generator processes on every node (the node's
    leader runs them), or, in the in-process modes, the engine on the main rank and a
    `Follower` elsewhere."""
    from scalerl.rl.grading import make_generator_grader
    from scalerl.rl.pipeline import EngineSpec
    from scalerl.rl.rollouts import Follower, OnPolicyRollouts, PipelineRollouts, PPORollouts
    from scalerl.rollout.factory import make_engine
    from scalerl.rollout.hf_engine import HFEngine

    device = run.world.device
    engine_cfg = cfg.engine_config(vllm=_vllm_settings(cfg, run, model_cfg,
                                                       recipe.off_policy == "pipeline"))
    if recipe.off_policy == "pipeline":
        grader_kwargs = {"prompts": str(Path(prompts).resolve())}
        first = run.world.node * len(gen_envs)  # generator index over every node
        options = pipeline_options(cfg, model_cfg, colocated=not any(gen_envs),
                                   cuda=device.type == "cuda")
        if engine_cfg.vllm is not None:  # the generators' side of the transport
            engine_cfg = engine_cfg.replace(vllm={
                "weight_transfer": options["transport"],
                "sleep_during_update": options["sleep_during_update"]})
        start_s = (engine_cfg.vllm.start_timeout() if engine_cfg.vllm is not None
                   else EngineSpec.start_timeout_s)  # the HF engine: the default
        specs = [EngineSpec(build_generator_engine, {
            "model_path": model_cfg.name, "model_cfg": model_cfg,
            "engine_cfg": _nth_engine(engine_cfg, cfg, first + i), "env": env},
            threads=threads, grader=make_generator_grader, grader_kwargs=grader_kwargs,
            start_timeout_s=start_s) for i, env in enumerate(gen_envs)]
        return PipelineRollouts(specs, run.factory, recipe.prompts_per_step, recipe.max_lag,
                                engine_cfg.max_batch, run.step, weights,
                                rollout_state.get("issued"),
                                fixed_lag=cfg.pipeline_fixed_lag, world=run.world,
                                pipeline_options=options)
    if not run.world.is_main:
        return Follower()
    if cfg.engine != "hf":
        engine = make_engine(load_from, model_cfg, engine_cfg)
    else:
        engine = HFEngine(in_process_generator_model(run, model_cfg, load_from), run.tokenizer,
                          engine_cfg, fp32_lm_head=recipe.fp32_lm_head, version=run.step)
    first = dict(weights)
    if recipe.off_policy == "ppo":
        rollouts = PPORollouts(engine, run.factory, recipe.prompts_per_step,
                               recipe.ppo_minibatches, run.step, lambda: first)
        rollouts.load_state_dict(rollout_state)
        return rollouts
    return OnPolicyRollouts(engine, run.factory, recipe.prompts_per_step, run.step, lambda: first)


def in_process_generator_model(run: _Chunk, model_cfg: Any, load_from: Path) -> Any:
    """The model the in-process HF engine samples from, in the model's dtype at every world
    size (config/README.md, "Dtypes"): the trainer's own model at one rank when its parameters
    are in that dtype (the same numbers, no copy), else a copy in `model_cfg.dtype` on the
    main rank's device, loaded from `load_from` and given the policy's weights after every
    step (`publish_weights`)."""
    if not run.world.distributed and run.cfg.numerics.param_dtype == model_cfg.dtype:
        return run.model
    from scalerl.models.loading import load_model

    return load_model(load_from, model_cfg, run.world.device)


def pipeline_options(cfg: RunConfig, model_cfg: Any, *, colocated: bool, cuda: bool) -> dict:
    """Every node's `Pipeline` options: the generators' dtype, the weight transport of their
    placement (`choose_transport`: `colocated` = they share the node leader's device), vLLM
    workers per generator, and whether they sleep during the optimizer step."""
    from scalerl.rollout.factory import uses_async_vllm
    from scalerl.rollout.weight_transfer import choose_transport

    vllm = cfg.engine == "vllm"
    async_engine = vllm and uses_async_vllm(cfg.vllm)  # the rule the generators' factory uses
    transport = choose_transport(cfg.vllm.weight_transfer if vllm else "shm", engine=cfg.engine,
                                 async_engine=async_engine, cuda=cuda,
                                 fixed_lag=cfg.pipeline_fixed_lag, colocated=colocated)
    return {"dtype": model_cfg.dtype, "transport": transport,
            "workers_per_generator": cfg.vllm.tensor_parallel_size if vllm else 1,
            "sleep_during_update": bool(vllm and async_engine and cuda and colocated
                                        and cfg.vllm.sleep_during_update)}


def _loop(run: _Chunk, recipe: Any, chunk_end: int, threads: int, partial: Path) -> None:
    """Steps until `chunk_end`: rollouts → verdicts → shares → update → row, saves."""
    from scalerl.rl.grading import grade

    cfg, source, world = run.cfg, run.source, run.world
    last_end = time.perf_counter()
    first_step = run.step
    numerics = cfg.numerics
    pad_id = run.tokenizer.pad_token_id or 0
    pipeline = recipe.off_policy == "pipeline"
    gen_prev = run.rollouts.gen_stats()  # a collective with PipelineRL at several ranks
    line = None
    if world.is_main:
        line = ProgressLine(f"train {cfg.run} steps {first_step + 1}..{chunk_end}:",
                            chunk_end - first_step)  # one updating line on a terminal
    while run.step < chunk_end:
        t0 = time.perf_counter()
        shares: list[RankShare] | None = None
        completions = run.rollouts.next_batch(run.step)  # on the main rank; None elsewhere
        if world.is_main:
            t1 = time.perf_counter()
            scores = grade(completions, source, workers=threads)
            verdicts = [s.correct for s in scores]
            retired = source.update([c.request.prompt_id for c in completions], verdicts)
            t2 = time.perf_counter()
            scored = score_batch(completions, verdicts, recipe, run.step)
            stats = scored.stats
            run.log_samples(completions, verdicts, stats, retired)
            shares = split_shares(scored, world.size)
        share: RankShare = world.scatter_object(shares)
        batch = share.pad(pad_id)
        run.rollouts.pause_for_update()  # colocated generators may free their KV cache
        t_train = time.perf_counter()
        metrics = optimizer_step(run.policy, run.optimizer, run.scheduler, batch, recipe,
                                 temperature=cfg.temperature, micro_groups=cfg.train_micro_batch,
                                 step=run.step + 1, numerics=numerics,
                                 normalizer=share.normalizer, world=world)
        train_s = time.perf_counter() - t_train
        run.step += 1
        t_push = time.perf_counter()
        weights = publish_weights(run, pipeline)  # a collective at several ranks
        run.rollouts.after_step(lambda w=weights: w, run.step)
        gen_now = run.rollouts.gen_stats()
        if world.is_main:
            now = time.perf_counter()
            timing = {"generate_s": 0.0 if pipeline else t1 - t0,
                      "wait_s": t1 - t0 if pipeline else 0.0, "grade_s": t2 - t1,
                      "batch_s": t_train - t2, **metrics["timing"], "push_s": now - t_push}
            run.compute.add_step(wall_seconds=now - last_end, prompt_tokens=stats.prompt_tokens,
                                 completion_tokens=stats.completion_tokens,
                                 trained_tokens=metrics["trained_tokens"])
            last_end = now
            busy = gen_now[1] - gen_prev[1]  # no decoding since the last step (PPO): NaN
            gen_tps = (gen_now[0] - gen_prev[0]) / busy if busy > 0 else float("nan")
            row = _row(run, stats, metrics, gen_tps,
                       metrics["trained_tokens"] / max(train_s, 1e-9), timing)
            run.rows.append(row)
            run.tracker.log_step(row, step=run.step, flops=row["compute_flops"],
                                 device_hours=row["compute_device_hours"])
            line.update(run.step - first_step,
                        f"step {run.step} reward {stats.reward_mean:+.3f} pass "
                        f"{stats.pass_rate:.3f} kept {stats.n_kept}/{stats.n_samples} loss "
                        f"{metrics['loss']:+.4f} gen {gen_tps:.0f} tok/s train "
                        f"{row['train_tokens_per_s']:.0f} tok/s pad "
                        f"{metrics['padding_fraction']:.2f} staleness "
                        f"{stats.staleness_mean:.1f}/{stats.staleness_max}")
        del weights
        gen_prev = gen_now
        done_in_chunk = run.step - run.chunk_start
        if cfg.save_every and done_in_chunk % cfg.save_every == 0 and run.step < chunk_end:
            run.save(partial, partial=True)
    if line is not None:
        line.close()


def generation_budget(cfg: RunConfig, n_interrupt_tokens: int) -> GenerationBudget:
    """The per-sample limits the trainer's requests get (the same as `scalerl eval`'s)."""
    return GenerationBudget.from_recipe(cfg.recipe, n_interrupt_tokens,
                                        cfg.max_new_tokens)


def _vllm_settings(cfg: RunConfig, run: Any, model_cfg: Any, pipeline: bool) -> Any:
    """The run's VllmSettings with max_model_len resolved (longest train prompt + the cap)
    and, in-process, the synchronous engine for `inflight_updates: auto`; None for HF."""
    if cfg.engine != "vllm":
        return None
    from scalerl.models.loading import format_prompt
    from scalerl.rollout.vllm_settings import longest_prompt_tokens, resolve_max_model_len

    # tokenized once, not kept (53k prompts); a given max_model_len is checked against it
    longest = longest_prompt_tokens((row["prompt"] for row in run.source.rows.values()),
                                    lambda text: format_prompt(run.tokenizer, text, model_cfg))
    settings = resolve_max_model_len(cfg.vllm, run.factory.max_new_tokens, longest)
    return settings if pipeline else settings.for_blocking_use()


def _nth_engine(engine_cfg: Any, cfg: RunConfig, index: int) -> Any:
    """Generator `index`'s EngineConfig: vLLM engines each get their own seed."""
    if engine_cfg.vllm is None:
        return engine_cfg
    return engine_cfg.replace(vllm={"seed": cfg.vllm.engine_seed(cfg.seed, index)})


def _row(run: _Chunk, stats: Any, metrics: dict, gen_tps: float, train_tps: float,
         timing: Mapping[str, float] | None = None) -> dict:
    """The steps.parquet row; `timing` (phase → seconds, the time_* columns without their
    prefix and suffix) may be absent or partial: NaN for what it does not give."""
    compute = run.compute
    timing = timing or {}
    times = {col: float(timing.get(col[len("time_"):], float("nan"))) for col in TIME_COLUMNS}
    return {
        "run": run.cfg.run, "chunk": run.chunk, "step": run.step,
        "compute_flops": compute.flops, "compute_device_hours": compute.device_hours,
        "tokens": compute.tokens, "reward_mean": stats.reward_mean, "pass_rate": stats.pass_rate,
        "truncation_rate": stats.truncation_rate, "interruption_rate": stats.interruption_rate,
        "zero_variance_fraction": stats.zero_variance_fraction,
        "npr_retired": run.source.n_retired, "loss": metrics["loss"],
        "grad_norm": metrics["grad_norm"], "entropy": metrics["entropy"],
        "is_ratio_mean": metrics["is_ratio_mean"], "clip_fraction": metrics["clip_fraction"],
        **{col: metrics[col] for col in MISMATCH_COLUMNS},
        "staleness_mean": stats.staleness_mean, "staleness_max": stats.staleness_max,
        "gen_tokens_per_s": gen_tps, "train_tokens_per_s": train_tps, "lr": metrics["lr"],
        "padding_fraction": metrics["padding_fraction"], **times,
    }
