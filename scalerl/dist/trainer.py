"""One training chunk with FSDP2 data-parallel trainer ranks (`trainer_ranks > 1`).

`scalerl.rl.trainer.train_chunk` hands over to `train_chunk_distributed` when the process is a
rank of a multi-rank torchrun (`scalerl train` relaunches itself so, `scalerl.rl.cli`). The
chunk is the single-process one (same rollouts, rows, saves and resume; docs/design.md) with
the optimizer step spread over the ranks:

- rank 0 owns everything outside the update: the rollout source (on an unsharded copy of the
  policy, refreshed from the gathered weights after every step, or the PipelineRL generator
  processes), grading, the No-Positive-Resampling history (updated once per step, from the
  global batch), the step statistics, the steps rows and the progress lines;
- each step rank 0 broadcasts the completions and verdicts; every rank takes its prompt groups
  (`scalerl.dist.batch.rank_share`), builds its rows with all-reduced zero-variance decision
  and advantage statistics, and runs `scalerl.dist.step.distributed_optimizer_step`;
- saves are `scalerl.dist.checkpoint.write_sharded_checkpoint` (model + AdamW sharded by DCP,
  the full HF model dir and the rest of the state on rank 0), at the same steps and in the same
  places (OUT.partial, OUT) as the single-process trainer; a rerun resumes from OUT.partial.

On CUDA each rank trains on cuda:LOCAL_RANK; PipelineRL generators take devices after the
trainer ranks when there are enough, else share them.

Deliberately left out: the PPO-off-policy mode (its mini-batch rounds live in the rollout
source; use on-policy or pipeline) and resuming a single-process checkpoint's optimizer state
(refused with a message by `scalerl.dist.checkpoint.load_sharded_state`).
"""

from __future__ import annotations

import copy
import shutil
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from scalerl.config import ConfigError
from scalerl.dist.batch import assemble_local_batch, rank_share
from scalerl.dist.checkpoint import full_state_dict, load_sharded_state, write_sharded_checkpoint
from scalerl.dist.env import DistEnv, init_distributed
from scalerl.dist.shard import shard_policy
from scalerl.dist.step import distributed_optimizer_step
from scalerl.rl.batch import assemble_batch
from scalerl.rl.compute import ComputeCounter, count_flop_params
from scalerl.rl.run_config import RunConfig
from scalerl.rl.update import make_optimizer
from scalerl.utils.log import eta_seconds, format_seconds, progress

__all__ = ["train_chunk_distributed"]


def _broadcast(obj: Any) -> Any:
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def train_chunk_distributed(cfg: RunConfig, *, chunk: int, init: str | Path, prompts: str | Path,
                            out: str | Path, model_cfg: Any = None):
    """`train_chunk` with the update over the torchrun ranks (module docstring)."""
    from transformers.utils import logging as hf_logging

    from scalerl.models.loading import (
        format_prompt,
        load_model,
        load_model_config,
        load_tokenizer,
    )
    from scalerl.rl import trainer as single
    from scalerl.rl.prompts import PromptSource, load_prompt_table
    from scalerl.rl.rollouts import RequestFactory
    from scalerl.rollout.config import encode_text

    hf_logging.disable_progress_bar()
    env = init_distributed(cfg.device)
    out, init, partial = Path(out), Path(init), single._partial_dir(Path(out))
    recipe = cfg.recipe.build()
    if recipe.off_policy == "ppo":
        raise ConfigError("trainer_ranks > 1 supports off_policy on-policy and pipeline, not "
                          "ppo; set trainer_ranks 1 for PPO-off-policy runs")
    steps = cfg.steps_in_chunk(chunk)
    pipeline = recipe.off_policy == "pipeline"
    load_from, state = single._init_state(cfg, chunk, init, partial)
    resumed = state is not None and state["chunk"] == chunk
    n_gen = cfg.generators if pipeline else 0
    gen_envs, n_devices = _generator_devices(env, n_gen)
    threads = single.plan_threads(cfg, env.world_size + n_gen)
    torch.set_num_threads(threads)
    model_cfg = (model_cfg or load_model_config(None, load_from)).replace(
        name=str(load_from.resolve()), fp32_lm_head=recipe.fp32_lm_head)
    tokenizer = load_tokenizer(load_from)
    model = load_model(load_from, model_cfg, "cpu")
    n_params = count_flop_params(model)
    gen_model = copy.deepcopy(model).to(env.device) if env.is_main else None
    policy = shard_policy(model, env)
    optimizer, scheduler = make_optimizer(policy, recipe)
    cap = single.generation_budget(
        cfg, len(encode_text(tokenizer, recipe.interruption_text))).max_new_tokens
    source = PromptSource(
        load_prompt_table(prompts, "train"), cfg.task_weights.as_dict(),
        lambda text: format_prompt(tokenizer, text, model_cfg),
        npr_threshold=recipe.npr_threshold, npr_min_samples=recipe.npr_min_samples,
        seed=cfg.seed)
    run = single._Chunk(cfg, chunk, str(init.resolve()), 0, 0, gen_model, tokenizer, optimizer,
                        scheduler, source, RequestFactory(source, recipe, cap, cfg.seed),
                        ComputeCounter(n_params=n_params, n_devices=n_devices),
                        [])
    if state is None:
        single._seed_everything(cfg.seed)
        rollout_state: dict[str, Any] = {}
    else:
        if "optimizer" not in state:
            state = {**state, "optimizer": optimizer.state_dict()}  # the shards come from DCP
        rollout_state = run.load(state, resumed)
        load_sharded_state(load_from, policy, optimizer)
    if env.is_main:  # rollouts.parquet: rank 0 sees every sample
        run.open_rollout_log(partial if resumed else None)
        run.rollouts = single._make_rollouts(cfg, recipe, run, model_cfg, load_from, prompts,
                                             str(env.device), gen_envs, threads, rollout_state)
        origin = "resuming a partial save" if resumed else f"from {load_from}"
        progress(f"train {cfg.run} chunk {chunk}: steps {run.step + 1}.."
                 f"{run.chunk_start + steps} ({origin}), {env.world_size} FSDP trainer ranks, "
                 f"{threads} thread(s)/process, device {env.device}")
    first_step = run.step
    try:
        _loop(run, env, policy, recipe, run.chunk_start + steps, threads, partial)
    finally:
        if env.is_main:
            run.rollouts.close()
    _save(run, env, policy, out, partial=False)
    if env.is_main:
        shutil.rmtree(partial, ignore_errors=True)
        progress(f"train {cfg.run} chunk {chunk}: wrote {out} (step {run.step})")
    dist.barrier()
    return single.ChunkResult(out=out, rows=run.rows,
                              resumed_at_step=first_step if resumed else None)


def _generator_devices(env: DistEnv, n_gen: int) -> tuple[list[dict[str, str]], int]:
    """Per-generator environment and devices held (trainer ranks + own generator devices)."""
    if env.device.type != "cuda":
        return [{} for _ in range(n_gen)], env.world_size
    if n_gen and torch.cuda.device_count() >= env.world_size + n_gen:
        return ([{"CUDA_VISIBLE_DEVICES": str(env.world_size + i)} for i in range(n_gen)],
                env.world_size + n_gen)
    return [{} for _ in range(n_gen)], env.world_size


def _save(run, env: DistEnv, policy, path: Path, *, partial: bool) -> None:
    state: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    extra = None
    if env.is_main:  # the optimizer state goes into DCP, sharded
        state, summary = run.state_and_summary(partial=partial)
        summary["trainer_ranks"] = env.world_size

        def extra(tmp: Path) -> None:
            run.write_outputs(tmp, partial=partial)
    write_sharded_checkpoint(path, policy=policy, optimizer=run.optimizer,
                             tokenizer=run.tokenizer, state=state, summary=summary, extra=extra)


def _loop(run, env: DistEnv, policy, recipe: Any, chunk_end: int, threads: int,
          partial: Path) -> None:
    """Steps until `chunk_end`: rank 0 rollouts → broadcast → sharded update → rank 0 row."""
    from scalerl.rl import trainer as single
    from scalerl.rl.grading import grade

    cfg, source = run.cfg, run.source
    started_at = last_end = time.perf_counter()
    first_step = run.step
    gen_prev = run.rollouts.gen_stats() if env.is_main else (0, 0.0)
    pad_id = run.tokenizer.pad_token_id or 0
    while run.step < chunk_end:
        payload = None
        if env.is_main:
            completions = run.rollouts.next_batch(run.step)
            verdicts = [s.correct for s in grade(completions, source, workers=threads)]
            retired = source.update([c.request.prompt_id for c in completions], verdicts)
            _, stats = assemble_batch(completions, verdicts, recipe, run.step, pad_id)
            run.log_samples(completions, verdicts, stats, retired)
            payload = (completions, verdicts)
        completions, verdicts = _broadcast(payload)
        mine, my_verdicts = rank_share(completions, verdicts, env.rank, env.world_size)
        batch, n_kept = assemble_local_batch(mine, my_verdicts, recipe, run.step, pad_id)
        t_train = time.perf_counter()
        metrics = distributed_optimizer_step(
            policy, run.optimizer, run.scheduler, batch, n_kept, recipe,
            temperature=cfg.temperature, micro_groups=cfg.train_micro_batch, step=run.step + 1)
        train_s = time.perf_counter() - t_train
        run.step += 1
        full = full_state_dict(policy)  # a collective: every rank, rank 0 receives the weights
        if env.is_main:
            run.model.load_state_dict(full)  # the generation copy (HF engine shares it)
            run.rollouts.after_step(lambda: run.model.state_dict(), run.step)
            now = time.perf_counter()
            run.compute.add_step(wall_seconds=now - last_end, prompt_tokens=stats.prompt_tokens,
                                 completion_tokens=stats.completion_tokens,
                                 trained_tokens=metrics["trained_tokens"])
            last_end = now
            gen_now = run.rollouts.gen_stats()
            busy = gen_now[1] - gen_prev[1]
            gen_tps = (gen_now[0] - gen_prev[0]) / busy if busy > 0 else float("nan")
            gen_prev = gen_now
            row = single._row(run, stats, metrics, gen_tps,
                              metrics["trained_tokens"] / max(train_s, 1e-9))
            run.rows.append(row)
            eta = eta_seconds(run.step - first_step, chunk_end - first_step, now - started_at)
            progress(f"step {run.step}/{chunk_end} reward {stats.reward_mean:+.3f} kept "
                     f"{stats.n_kept}/{stats.n_samples} loss {metrics['loss']:+.4f} train "
                     f"{row['train_tokens_per_s']:.0f} tok/s ({env.world_size} ranks) eta "
                     f"{format_seconds(eta)}")
        done_in_chunk = run.step - run.chunk_start
        if cfg.save_every and done_in_chunk % cfg.save_every == 0 and run.step < chunk_end:
            _save(run, env, policy, partial, partial=True)
