"""Worker of the tests/dist tests, run as a torchrun rank (or alone for the reference):

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/dist/dist_worker.py \
        step OUT_DIR [VARIANT]

`step`: one optimizer step of the `scalerl` preset on `step_batch()` (unequal lengths, two
zero-variance groups); the ranks split micro-batches as VARIANT says (`groups`: 1 group per
micro-batch; `tokens`: a 16-token budget and a chunked head of 5 positions), so they run
different numbers of micro-batches (dummy forwards) and the reference yet another (2 groups);
rank 0 writes loss, metrics, gradients and weights (full tensors) to OUT_DIR/step_wWORLD.pt.
Without torchrun the unsharded `scalerl.rl.update.optimizer_step` writes step_w1.pt.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import torch

from scalerl.models.config import ModelConfig
from scalerl.models.loading import build_tiny_model
from scalerl.rl.recipe import recipe_from_preset
from scalerl.rollout.base import Completion, Request

# group -> verdicts of its samples; groups 1 and 3 are zero-variance (dropped by the filter)
VERDICTS = {0: [True, False, False], 1: [True, True, True], 2: [False, True, True, True],
            3: [False, False], 4: [True, False, True], 5: [False, True]}
MICRO_GROUPS = 2


def recipe():
    return recipe_from_preset("scalerl", {"optimizer": {"lr": 1e-3, "warmup_steps": 1}})


def step_batch() -> tuple[list[Completion], list[bool]]:
    """Completions of 6 prompts with prompt lengths 2..4 and completion lengths 1..11."""
    rng = random.Random(0)
    comps, correct = [], []
    for group, verdicts in VERDICTS.items():
        prompt = tuple(rng.randrange(6, 103) for _ in range(2 + group % 3))
        for i, ok in enumerate(verdicts):
            n = rng.randrange(1, 12)
            tokens = [rng.randrange(6, 103) for _ in range(n)]
            logps = [-4.6 + rng.uniform(-0.5, 0.5) for _ in range(n)]
            mask = [not (n > 4 and t == 2) for t in range(n)]  # an inserted token in long ones
            comps.append(Completion(Request(f"p{group}", prompt, sample_idx=i, tag=group),
                                    tokens, logps, mask, [0] * n, "", "stop", False, False))
            correct.append(ok)
    return comps, correct


def tiny_model():
    return build_tiny_model(ModelConfig(name="tiny-s", seed=3))


def _reference(out: Path) -> None:
    from scalerl.rl.batch import assemble_batch
    from scalerl.rl.update import make_optimizer, optimizer_step

    model, rec = tiny_model(), recipe()
    optimizer, scheduler = make_optimizer(model, rec)
    comps, correct = step_batch()
    batch, _ = assemble_batch(comps, correct, rec, 0, pad_id=0)
    metrics = optimizer_step(model, optimizer, scheduler, batch, rec, temperature=0.9,
                             micro_groups=MICRO_GROUPS, step=1)
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    torch.save({"metrics": metrics, "grads": grads, "weights": weights}, out / "step_w1.pt")


VARIANTS = {"groups": (1, {}),
            "tokens": (0, {"micro_batch_tokens": 16, "logprob_chunk_tokens": 5})}


def _distributed(out: Path, variant: str) -> None:
    from scalerl.dist.batch import assemble_local_batch, rank_share
    from scalerl.dist.env import init_distributed, shutdown
    from scalerl.dist.shard import shard_policy
    from scalerl.dist.step import distributed_optimizer_step, full_gradients
    from scalerl.rl.update import StepNumerics, make_optimizer

    micro_groups, numerics = VARIANTS[variant]
    env = init_distributed("cpu")
    rec = recipe()
    policy = shard_policy(tiny_model(), env)
    optimizer, scheduler = make_optimizer(policy, rec)
    comps, correct = rank_share(*step_batch(), env.rank, env.world_size)
    batch, n_kept = assemble_local_batch(comps, correct, rec, 0, pad_id=0)
    metrics = distributed_optimizer_step(policy, optimizer, scheduler, batch, n_kept, rec,
                                         temperature=0.9, micro_groups=micro_groups, step=1,
                                         numerics=StepNumerics(compute_dtype="float32",
                                                               **numerics))
    grads = {n.removeprefix("model."): g for n, g in full_gradients(policy).items()}
    weights = {n.removeprefix("model."): p.full_tensor().detach().clone()
               for n, p in policy.named_parameters()}
    if env.is_main:
        torch.save({"metrics": metrics, "grads": grads, "weights": weights,
                    "rows": None if batch is None else batch.n_sequences},
                   out / f"step_w{env.world_size}.pt")
    shutdown()


def _setup(env):
    from scalerl.dist.shard import shard_policy
    from scalerl.rl.update import make_optimizer

    rec = recipe()
    policy = shard_policy(tiny_model(), env)
    optimizer, scheduler = make_optimizer(policy, rec)
    return rec, policy, optimizer, scheduler


def _one_step(env, rec, policy, optimizer, scheduler, step: int) -> None:
    from scalerl.dist.batch import assemble_local_batch, rank_share
    from scalerl.dist.step import distributed_optimizer_step

    comps, correct = rank_share(*step_batch(), env.rank, env.world_size)
    batch, n_kept = assemble_local_batch(comps, correct, rec, 0, pad_id=0)
    distributed_optimizer_step(policy, optimizer, scheduler, batch, n_kept, rec,
                               temperature=0.9, micro_groups=1, step=step)


def _full_weights(policy) -> dict[str, torch.Tensor]:
    return {n.removeprefix("model."): (p.full_tensor() if hasattr(p, "full_tensor") else p)
            .detach().clone() for n, p in policy.named_parameters()}


def _checkpoint(out: Path) -> None:
    """Step 1, save OUT/ckpt, step 2 (weights A); a fresh policy loads OUT/ckpt and takes
    step 2 again (weights B); rank 0 writes A, B and the weights after step 1."""
    from scalerl.dist.checkpoint import load_sharded_state, write_sharded_checkpoint
    from scalerl.dist.env import init_distributed, shutdown
    from scalerl.models.loading import new_tiny_tokenizer
    from scalerl.rl.checkpoint import load_trainer_state

    env = init_distributed("cpu")
    rec, policy, optimizer, scheduler = _setup(env)
    _one_step(env, rec, policy, optimizer, scheduler, 1)
    after_1 = _full_weights(policy)
    write_sharded_checkpoint(out / "ckpt", policy=policy, optimizer=optimizer,
                             tokenizer=new_tiny_tokenizer(),
                             state={"scheduler": scheduler.state_dict(), "step": 1},
                             summary={"step": 1})
    _one_step(env, rec, policy, optimizer, scheduler, 2)
    weights_a = _full_weights(policy)
    rec, policy, optimizer, scheduler = _setup(env)
    load_sharded_state(out / "ckpt", policy, optimizer)
    scheduler.load_state_dict(load_trainer_state(out / "ckpt")["scheduler"])
    _one_step(env, rec, policy, optimizer, scheduler, 2)
    weights_b = _full_weights(policy)
    if env.is_main:
        torch.save({"after_1": after_1, "a": weights_a, "b": weights_b},
                   out / f"ckpt_w{env.world_size}.pt")
    shutdown()


def _resume_alone(out: Path) -> None:
    """One process loads the 2-rank OUT/ckpt (resharded) and takes step 2."""
    from scalerl.dist.checkpoint import load_sharded_state
    from scalerl.dist.env import init_distributed
    from scalerl.rl.checkpoint import load_trainer_state

    env = init_distributed("cpu")
    rec, policy, optimizer, scheduler = _setup(env)
    load_sharded_state(out / "ckpt", policy, optimizer)
    scheduler.load_state_dict(load_trainer_state(out / "ckpt")["scheduler"])
    _one_step(env, rec, policy, optimizer, scheduler, 2)
    torch.save({"b": _full_weights(policy)}, out / "resume_w1.pt")


if __name__ == "__main__":
    torch.set_num_threads(1)
    mode, out_dir = sys.argv[1], Path(sys.argv[2])
    if mode == "step" and "WORLD_SIZE" in os.environ:
        _distributed(out_dir, sys.argv[3] if len(sys.argv) > 3 else "groups")
    elif mode == "step":
        _reference(out_dir)
    elif mode == "checkpoint":
        _checkpoint(out_dir)
    elif mode == "resume-alone":
        _resume_alone(out_dir)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
