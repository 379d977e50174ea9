"""Worker of the tests/parallel step and checkpoint tests, run as a torchrun rank (or alone):

    python -m torch.distributed.run --standalone --nproc-per-node 2 \
        tests/parallel/step_worker.py step OUT_DIR [VARIANT]

`step`: one optimizer step of the `scalerl` preset on `step_batch()` (unequal lengths, two
zero-variance groups); the ranks split micro-batches as VARIANT says (`groups`: 1 group per
micro-batch; `tokens`: a 16-token budget and a chunked head of 5 positions), so they run
different numbers of micro-batches (dummy forwards) and the reference yet another (2 groups);
rank 0 writes loss, metrics, gradients and weights (full tensors) to OUT_DIR/step_wWORLD.pt,
with each rank's count of gradient reduce-scatters and of the gradient clipping's
all-reduces and host reads (`counted_step`).
Without torchrun the same code at one rank (`scalerl.rl.update.optimizer_step` of the
`shard_policy` of the `SINGLE` world on the whole batch) writes step_w1.pt. Both go through the trainer's own path: the main
rank scores the batch (`score_batch`), splits it (`split_shares`) and scatters the shares.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

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


def _share(world, rec):
    """This rank's share of `step_batch()`, decided on the main rank and scattered (as the
    trainer does)."""
    from scalerl.rl.batch import score_batch, split_shares

    shares = None
    if world.is_main:
        shares = split_shares(score_batch(*step_batch(), rec, 0), world.size)
    return world.scatter_object(shares)


def _reference(out: Path) -> None:
    from scalerl.parallel.shard import shard_policy
    from scalerl.parallel.world import SINGLE
    from scalerl.rl.numerics import StepNumerics
    from scalerl.rl.update import make_optimizer, optimizer_step

    model, rec = tiny_model(), recipe()
    policy = shard_policy(model, SINGLE)
    optimizer, scheduler = make_optimizer(policy, rec)
    share = _share(SINGLE, rec)
    metrics = optimizer_step(policy, optimizer, scheduler, share.pad(0), rec, temperature=0.9,
                             micro_groups=MICRO_GROUPS, step=1,
                             numerics=StepNumerics(compute_dtype="float32"),
                             normalizer=share.normalizer, world=SINGLE)
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    torch.save({"metrics": metrics, "grads": grads, "weights": weights}, out / "step_w1.pt")


VARIANTS = {"groups": (1, {}),
            "tokens": (0, {"micro_batch_tokens": 16, "logprob_chunk_tokens": 5}),
            "groups_sync_each": (1, {"gradient_sync": "micro_batch"})}


def full_gradients(policy) -> dict[str, torch.Tensor]:
    """Every parameter's full (gathered) gradient by name: a collective."""
    return {name.removeprefix("model."): (p.grad.full_tensor() if hasattr(p.grad, "full_tensor")
                                          else p.grad).detach().clone()
            for name, p in policy.named_parameters()}


# calls that read a tensor's value on the host: on CUDA each waits for the device
HOST_READS = {"cpu", "item", "tolist", "numpy", "__float__", "__int__", "__bool__"}


class HostReads(TorchFunctionMode):
    """Counts the host reads of tensor values made inside it."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += getattr(func, "__name__", "") in HOST_READS
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def counted_step(counts: dict[str, int]):
    """Inside: counts["reduce_scatter"] += every FSDP2 gradient reduce-scatter, and per call of
    `scalerl.rl.update.clip_gradients` its all-reduces (counts["clip_all_reduce"]) and host
    reads of tensor values (counts["clip_host_reads"])."""
    import torch.distributed as dist

    import scalerl.rl.update as update

    real_rs, real_ar, real_clip = (dist.reduce_scatter_single, dist.all_reduce,
                                   update.clip_gradients)
    counts.update(reduce_scatter=0, clip_all_reduce=0, clip_host_reads=0, clip_calls=0)

    def reduce_scatter(*args, **kwargs):
        counts["reduce_scatter"] += 1
        return real_rs(*args, **kwargs)

    def clip(*args, **kwargs):
        def all_reduce(*a, **k):
            counts["clip_all_reduce"] += 1
            return real_ar(*a, **k)

        dist.all_reduce = all_reduce
        try:
            with HostReads() as reads:
                return real_clip(*args, **kwargs)
        finally:
            dist.all_reduce = real_ar
            counts["clip_host_reads"] += reads.count
            counts["clip_calls"] += 1

    dist.reduce_scatter_single, update.clip_gradients = reduce_scatter, clip
    try:
        yield counts
    finally:
        dist.reduce_scatter_single, update.clip_gradients = real_rs, real_clip


def _distributed(out: Path, variant: str) -> None:
    from scalerl.parallel.shard import decoder_layers, shard_policy
    from scalerl.parallel.world import init_world, shutdown
    from scalerl.rl.numerics import StepNumerics
    from scalerl.rl.update import make_optimizer, optimizer_step

    micro_groups, numerics = VARIANTS[variant]
    world = init_world("cpu")
    rec = recipe()
    model = tiny_model()
    layers = len(decoder_layers(model))
    policy = shard_policy(model, world)
    optimizer, scheduler = make_optimizer(policy, rec)
    share = _share(world, rec)
    batch = share.pad(0)
    with counted_step({}) as counts:
        metrics = optimizer_step(policy, optimizer, scheduler, batch, rec, temperature=0.9,
                                 micro_groups=micro_groups, step=1,
                                 numerics=StepNumerics(compute_dtype="float32", **numerics),
                                 normalizer=share.normalizer, world=world)
    grads = full_gradients(policy)
    weights = _full_weights(policy)
    counts = world.gather_object({**counts, "fsdp_groups": layers + 1,
                                  "parameters": len(list(policy.parameters()))})
    if world.is_main:
        torch.save({"metrics": metrics, "grads": grads, "weights": weights,
                    "rows": None if batch is None else batch.n_sequences, "counts": counts},
                   out / f"step_w{world.size}.pt")
    shutdown()


def _setup(world):
    from scalerl.parallel.shard import shard_policy
    from scalerl.rl.update import make_optimizer

    rec = recipe()
    policy = shard_policy(tiny_model(), world)
    optimizer, scheduler = make_optimizer(policy, rec)
    return rec, policy, optimizer, scheduler


def _one_step(world, rec, policy, optimizer, scheduler, step: int) -> None:
    from scalerl.rl.numerics import StepNumerics
    from scalerl.rl.update import optimizer_step

    share = _share(world, rec)
    optimizer_step(policy, optimizer, scheduler, share.pad(0), rec, temperature=0.9,
                   micro_groups=1, step=step, numerics=StepNumerics(),
                   normalizer=share.normalizer, world=world)


def _full_weights(policy) -> dict[str, torch.Tensor]:
    return {n.removeprefix("model."): (p.full_tensor() if hasattr(p, "full_tensor") else p)
            .detach().clone() for n, p in policy.named_parameters()}


def _checkpoint(out: Path) -> None:
    """Step 1, save OUT/ckpt, step 2 (weights A); a fresh policy loads OUT/ckpt and takes
    step 2 again (weights B); rank 0 writes A, B and the weights after step 1."""
    from scalerl.models.loading import new_tiny_tokenizer
    from scalerl.parallel.checkpoint import load_checkpoint_state, write_checkpoint
    from scalerl.parallel.world import init_world, shutdown
    from scalerl.rl.checkpoint import load_trainer_state, write_state_files

    world = init_world("cpu")
    rec, policy, optimizer, scheduler = _setup(world)
    _one_step(world, rec, policy, optimizer, scheduler, 1)
    after_1 = _full_weights(policy)
    state = {"scheduler": scheduler.state_dict(), "step": 1}
    write_checkpoint(
        out / "ckpt", policy=policy, optimizer=optimizer, tokenizer=new_tiny_tokenizer(),
        world=world, write_main=lambda tmp: write_state_files(tmp, state=state,
                                                              summary={"step": 1}))
    _one_step(world, rec, policy, optimizer, scheduler, 2)
    weights_a = _full_weights(policy)
    rec, policy, optimizer, scheduler = _setup(world)
    load_checkpoint_state(out / "ckpt", policy, optimizer)
    scheduler.load_state_dict(load_trainer_state(out / "ckpt")["scheduler"])
    _one_step(world, rec, policy, optimizer, scheduler, 2)
    weights_b = _full_weights(policy)
    if world.is_main:
        torch.save({"after_1": after_1, "a": weights_a, "b": weights_b},
                   out / f"ckpt_w{world.size}.pt")
    shutdown()


def _resume_alone(out: Path) -> None:
    """One process loads the 2-rank OUT/ckpt (resharded) and takes step 2."""
    from scalerl.parallel.checkpoint import load_checkpoint_state
    from scalerl.parallel.world import init_world
    from scalerl.rl.checkpoint import load_trainer_state

    world = init_world("cpu")
    rec, policy, optimizer, scheduler = _setup(world)
    load_checkpoint_state(out / "ckpt", policy, optimizer)
    scheduler.load_state_dict(load_trainer_state(out / "ckpt")["scheduler"])
    _one_step(world, rec, policy, optimizer, scheduler, 2)
    torch.save({"b": _full_weights(policy)}, out / "resume_w1.pt")


# -- per-rank memory against the planner --------------------------------------------------------
MEM_SHAPE = {"prompts": 4, "samples": 4, "prompt": 24, "completion": 40, "micro_tokens": 512,
             "chunk": 64}


def memory_model():
    """A Qwen3-shaped model whose terms are not all tiny (vocab 4096, GQA, q/k norm)."""
    from transformers import AutoModelForCausalLM, Qwen3Config

    cfg = Qwen3Config(vocab_size=4096, hidden_size=128, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                      intermediate_size=384, tie_word_embeddings=True,
                      max_position_embeddings=512)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="sdpa")


def memory_batch() -> tuple[list[Completion], list[bool]]:
    """Sequences of one length (the planner's upper bound): half of each group right."""
    shape, rng = MEM_SHAPE, random.Random(0)
    comps, correct = [], []
    for group in range(shape["prompts"]):
        prompt = tuple(rng.randrange(6, 4096) for _ in range(shape["prompt"]))
        for i in range(shape["samples"]):
            n = shape["completion"]
            comps.append(Completion(Request(f"p{group}", prompt, sample_idx=i, tag=group),
                                    [rng.randrange(6, 4096) for _ in range(n)], [-8.3] * n,
                                    [True] * n, [0] * n, "", "stop", False, False))
            correct.append(i % 2 == 0)
    return comps, correct


def _storage_bytes(tensors) -> int:
    def local(t):
        return t.to_local() if hasattr(t, "to_local") else t

    return sum(local(t).untyped_storage().nbytes() for t in tensors)


MEM_VARIANTS = {"fp32": {"compute_dtype": "float32"},
                "bf16_ckpt": {"compute_dtype": "bfloat16", "gradient_checkpointing": True},
                # 2 micro-batches per rank: gradients accumulate unsharded until the second
                "fp32_2_micro": {"compute_dtype": "float32",
                                 "micro_batch_tokens": MEM_SHAPE["micro_tokens"] // 2}}


def _memory(out: Path, variant: str) -> None:
    """Per-rank peak of the second optimizer step (AdamW state exists, as in a resumed or
    later step): live tensor bytes created during it (`LiveBytes`) + the sharded weights and
    AdamW state that exist before; rank 0 writes it with the model's config."""
    from scalerl.parallel.shard import shard_policy
    from scalerl.parallel.world import init_world, shutdown
    from scalerl.plan.measure import LiveBytes
    from scalerl.rl.batch import score_batch, split_shares
    from scalerl.rl.numerics import StepNumerics
    from scalerl.rl.update import make_optimizer, optimizer_step

    world = init_world("cpu")
    rec = recipe()
    model = memory_model()
    config = model.config.to_dict()
    policy = shard_policy(model, world)
    optimizer, scheduler = make_optimizer(policy, rec)
    shares = split_shares(score_batch(*memory_batch(), rec, 0), world.size) \
        if world.is_main else None
    share = world.scatter_object(shares)
    numerics = StepNumerics(**{"micro_batch_tokens": MEM_SHAPE["micro_tokens"],
                               "logprob_chunk_tokens": MEM_SHAPE["chunk"],
                               **MEM_VARIANTS[variant]})

    def step(n: int) -> None:
        optimizer_step(policy, optimizer, scheduler, share.pad(0), rec, temperature=1.0,
                       micro_groups=0, step=n, numerics=numerics, normalizer=share.normalizer,
                       world=world)

    step(1)
    state = [t for s in optimizer.state.values() for t in s.values()
             if isinstance(t, torch.Tensor) and t.numel() > 1]
    before = _storage_bytes(list(policy.parameters())) + _storage_bytes(state)
    exclude = [(t.to_local() if hasattr(t, "to_local") else t).untyped_storage()
               for t in (*policy.parameters(), *policy.buffers(), *state)]
    with LiveBytes(exclude) as mode:
        step(2)
    peaks = world.gather_object(before + mode.peak)
    if world.is_main:
        torch.save({"peaks": peaks, "config": config, "shape": MEM_SHAPE,
                    "numerics": numerics.to_dict()}, out / f"memory_{variant}_w{world.size}.pt")
    shutdown()


def _meta(out: Path) -> None:
    """`shard_policy` of a model on the meta device (no data): it must shard it where it is,
    never copy the whole model to the world's device first; rank 0 writes what it got."""
    import json

    from torch.distributed.tensor import DTensor

    from scalerl.parallel.shard import shard_policy
    from scalerl.parallel.world import init_world, shutdown

    world = init_world("cpu")
    with torch.device("meta"):
        model = build_tiny_model(ModelConfig(name="tiny-s", seed=0))
    full = {name: tuple(p.shape) for name, p in model.named_parameters()}
    policy = shard_policy(model, world)
    got = {name.removeprefix("model."): (isinstance(p, DTensor), p.device.type,
                                          tuple(p.to_local().shape), tuple(p.shape))
           for name, p in policy.named_parameters()}
    if world.is_main:
        (out / "meta.json").write_text(json.dumps({"full": full, "got": got}))
    shutdown()


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
    elif mode == "memory":
        _memory(out_dir, sys.argv[3])
    elif mode == "meta":
        _meta(out_dir)
