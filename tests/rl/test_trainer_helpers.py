"""Helpers of the trainer tests (no tests here): a micro base model that solves 1-digit additions
about half the time, and its prompt set; `OneRankStep`, the trainer's optimizer step at one rank.
The trainer tests need real rewards with variance inside groups, i.e. a policy that is right
sometimes. Building the project's tiny SFT base takes minutes, so this builds an 89k-parameter
Llama (hidden 64, 2 layers) and teaches it `a+b=` -> `<think>a+b+0=s</think>\\boxed{s}` with 120
full-batch teacher-forcing steps (pass rate ~0.3-0.6 at temperature 1). The result is cached in
pytest's cache directory (a session tmpdir under `-p no:cacheprovider`), keyed by `VERSION`,
so only the first session pays for it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import torch

from scalerl.utils.io import atomic_path

VERSION = "micro-add1-v1"
SFT_STEPS = 120


def _build(out: Path) -> None:
    from transformers import AutoModelForCausalLM, LlamaConfig

    from scalerl.models.loading import new_tiny_tokenizer, save_model_dir
    from scalerl.models.tokenizer import VOCAB_SIZE
    from scalerl.tasks.synthetic import generate_code, generate_math

    tok = new_tiny_tokenizer()
    examples = generate_math(100, 3, difficulties=(1,), families=("add",))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=VOCAB_SIZE, hidden_size=64, num_hidden_layers=2,
                          num_attention_heads=2, num_key_value_heads=2, intermediate_size=128,
                          max_position_embeddings=128, tie_word_embeddings=True,
                          bos_token_id=1, eos_token_id=2, pad_token_id=0)
        model = AutoModelForCausalLM.from_config(cfg)
        pairs = [([1] + tok.encode(e.prompt, add_special_tokens=False),
                  tok.encode(e.solution, add_special_tokens=False) + [2]) for e in examples]
        width = max(len(p) + len(t) for p, t in pairs)
        ids = torch.zeros(len(pairs), width, dtype=torch.long)  # [N, L]
        mask = torch.zeros(len(pairs), width, dtype=torch.long)  # [N, L]
        labels = torch.full((len(pairs), width), -100)  # [N, L]
        for i, (p, t) in enumerate(pairs):
            ids[i, :len(p) + len(t)] = torch.tensor(p + t)
            mask[i, :len(p) + len(t)] = 1
            labels[i, len(p):len(p) + len(t)] = torch.tensor(t)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        model.train()
        for _ in range(SFT_STEPS):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    save_model_dir(model.eval(), tok, out / "base")
    rows = []
    for i, ex in enumerate(examples):
        rows.append({**ex.to_row(), "split": "train" if i < 80 else "val"})
    for i, ex in enumerate(generate_code(8, 3, difficulties=(1,))):
        rows.append({**ex.to_row(), "split": "train" if i < 6 else "val"})
    frame = pd.DataFrame(rows)[["prompt_id", "task", "source", "split", "prompt", "answer",
                                "tests", "difficulty"]]
    frame.to_parquet(out / "prompts.parquet")


def cache_dir(request, tmp_path_factory) -> Path:
    """pytest's cache directory (kept across sessions), or a session tmpdir without it."""
    cache = getattr(request.config, "cache", None)  # None under `-p no:cacheprovider`
    if cache is not None:
        return Path(cache.mkdir("scalerl-rl-trainer"))
    return tmp_path_factory.getbasetemp() / "scalerl-rl-trainer"


def micro_base(cache_root: Path) -> Path:
    """Directory with `base/` (HF model dir) and `prompts.parquet`, built once and cached."""
    out = Path(cache_root) / VERSION
    if not (out / "base" / "model.safetensors").is_file():
        shutil.rmtree(out, ignore_errors=True)
        with atomic_path(out, directory=True) as tmp:
            _build(tmp)
    return out


MICRO_RECIPE = {  # 4 prompts x 4 samples, budgets for 1-digit additions
    "prompts_per_step": 4, "generations_per_prompt": 4, "think_budget": [12, 16],
    "answer_budget": 6, "interruption_text": "</think>", "max_lag": 2,
    "ppo_minibatches": 2, "length_penalty": {"max_len": 23, "cache_len": 8},
    "optimizer": {"lr": 1e-4, "warmup_steps": 1},
}


def micro_recipe(preset: str = "scalerl", **overrides) -> dict:
    """The RunConfig `recipe` mapping of `preset` at the micro base's sizes, with `overrides`."""
    from scalerl.rl.recipe import recipe_from_preset

    return recipe_from_preset(preset, MICRO_RECIPE, overrides).to_dict()


def run_config_dict(**recipe_overrides) -> dict:
    """A RunConfig mapping for the micro base (`micro_recipe` with `recipe_overrides`)."""
    return {"run": "t", "seed": 0, "model": "micro", "steps_per_chunk": 2, "save_every": 0,
            "threads": 1, "recipe": micro_recipe(**recipe_overrides)}


def _proc_stats() -> dict[int, tuple[str, int]]:
    """{pid: (state, ppid)} of every process (Linux /proc)."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # ended meanwhile
            continue
        fields = text[text.rindex(")") + 2:].split()  # state ppid pgrp ...
        out[int(text.split(" ", 1)[0])] = (fields[0], int(fields[1]))
    return out


def descendants(pid: int, stats: dict[int, tuple[str, int]] | None = None) -> set[int]:
    """Every live process below `pid` (torchrun's ranks sit in sessions of their own, so a
    process group does not reach them)."""
    stats = _proc_stats() if stats is None else stats
    children: dict[int, list[int]] = {}
    for child, (_, ppid) in stats.items():
        children.setdefault(ppid, []).append(child)
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


def stopped_below(pid: int) -> list[int]:
    """`pid` and its descendants that are stopped (state T)."""
    stats = _proc_stats()
    return sorted(p for p in {pid} | descendants(pid, stats) if stats.get(p, ("",))[0] == "T")


def freeze_at_save(cmd: list[str], partial: Path, save_at: int, env: dict | None = None,
                   timeout_s: float = 600.0):
    """Start `cmd` (a `scalerl train` chunk) in its own session with the failpoint that freezes
    the trainer (SIGSTOP, `scalerl.utils.failpoints`) in the middle of its `save_at`-th write of
    `partial`, when the save before it is complete; wait until it froze. Returns (the Popen,
    whose stderr is a pipe, the frozen trainer's pid: `cmd` itself, or a rank below it). The
    caller SIGKILLs (a frozen process ignores everything else) or SIGCONTs.

    Nothing here races the machine's speed: a stopped process stays stopped, so the state at the
    kill is always "save `save_at` - 1 complete, save `save_at` half-written"."""
    import os
    import subprocess
    import time

    from scalerl.utils import failpoints

    env = {**(os.environ if env is None else env),
           failpoints.ENV: f"checkpoint_write:{partial.name}@{save_at}=stop"}
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout_s  # a guard against a hang, not a speed assertion
    while not (stopped := stopped_below(proc.pid)):
        if proc.poll() is not None:
            raise AssertionError(f"the chunk ended before its save {save_at}:\n"
                                 f"{proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"save {save_at} of {partial} not reached in {timeout_s} s")
        time.sleep(0.05)
    return proc, stopped[0]


class OneRankStep:
    """The trainer's optimizer step at one rank, set up as `scalerl.rl.trainer` sets it up:
    the model wrapped by `shard_policy` (on `device`), `make_optimizer` of that policy, and
    `optimizer_step` with the world, the run's numerics (the RunConfig default unless given)
    and the whole batch's loss denominators (`LossNormalizer.from_batch` of a hand-made
    batch, or a `RankShare`'s normalizer from `score_batch`)."""

    def __init__(self, model, recipe, device: str = "cpu"):
        from scalerl.parallel.shard import shard_policy
        from scalerl.parallel.world import World
        from scalerl.rl.update import make_optimizer

        self.world = World(device=torch.device(device))
        self.model, self.recipe = model, recipe
        self.policy = shard_policy(model, self.world)
        self.optimizer, self.scheduler = make_optimizer(self.policy, recipe)

    def step(self, batch, *, step: int = 1, numerics=None, micro_groups: int = 0,
             temperature: float = 1.0, normalizer=None) -> dict:
        from scalerl.rl.losses import LossNormalizer
        from scalerl.rl.update import StepNumerics, optimizer_step

        if normalizer is None:
            normalizer = LossNormalizer.from_batch(batch.loss_mask, batch.group_ids)
        return optimizer_step(self.policy, self.optimizer, self.scheduler, batch, self.recipe,
                              temperature=temperature, micro_groups=micro_groups, step=step,
                              numerics=numerics or StepNumerics(), normalizer=normalizer,
                              world=self.world)


def saved_optimizer_state(checkpoint: Path) -> dict:
    """The AdamW state dict a checkpoint resumes with, read back by the trainer's loader
    (`load_checkpoint_state` into the checkpoint's own model at one rank)."""
    from scalerl.models.config import ModelConfig
    from scalerl.models.loading import load_model
    from scalerl.parallel.checkpoint import load_checkpoint_state
    from scalerl.parallel.shard import shard_policy
    from scalerl.parallel.world import SINGLE

    policy = shard_policy(load_model(checkpoint, ModelConfig(name=str(checkpoint)), "cpu"),
                          SINGLE)
    optimizer = torch.optim.AdamW(policy.parameters())
    load_checkpoint_state(checkpoint, policy, optimizer)
    return optimizer.state_dict()
