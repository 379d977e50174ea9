"""SFT warm start of a tiny model on synthetic worked solutions, stopped inside a pass-rate band.

RL needs a base model that is sometimes right: at pass rate 0 every group of G samples has
zero reward variance and nothing is learned, near 1 there is no headroom. Pass rates of tiny
models jump between nearby checkpoints (FEASIBILITY.md: 3 % -> 16 % -> 55 % in 400 steps), so
the warm start *measures* instead of guessing a step count:

    train on (prompt, solution) pairs, loss = mean -log p(target token) over target tokens only
    every `eval_every` steps: sample one completion per val prompt (HF engine, temperature 1,
        FP32 head) and grade it with the real verifier (`scalerl.rewards.score_many`)
    pass rate inside [band_lo, band_hi] -> confirm on `final_eval_prompts` fresh val prompts
        (the small sample is noisy, +-4 points at 64 prompts); confirmed inside -> keep, stop;
        otherwise the confirmed rate decides as below
    pass rate above the band (overshoot) -> restore the last checkpoint below the band and
        evaluate twice as often from there (up to `refinements` times)
    budget exhausted -> keep the evaluated checkpoint closest to the band (`in_band: false`)

`band_scope: per_task` (the default) applies the band to every task's pass rate: the tasks
learn at very different speeds (code rules are picked up in a few hundred steps, column
arithmetic much later), and a mixed rate inside the band can hide a task at 0 % that RL then
cannot learn. After each measurement the batch mix shifts toward the tasks still below the
band: a task below it is drawn with its configured share, one inside it with `in_band_weight`
times that share (so it is not forgotten), one above it not at all; an overshoot (rewind) is
only declared when no task is below the band any more. `band_scope: overall` uses the mixed
rate and the configured shares throughout.

Batches are all-math or all-code (chosen by the current task weights), which keeps padding
low; targets are `solution + eos`; prompts are raw (bos + prompt text). Val prompts are drawn
first and removed from the training examples (small difficulty-1 spaces would otherwise be
covered by the training set). The kept model is then measured on `final_eval_prompts` fresh
val prompts (the confirmation measurement when there was one); that figure goes into
base_info.json.

`stop: budget` instead trains exactly `max_steps` steps and measures once at the end: every
model size sees the same examples in the same order, as after pretraining to a fixed token
budget, so a larger model comes out at least as good (issue 37: the band erased model size,
tiny-m 0.33 vs tiny-s 0.42 on math at step 0). `decay: cosine` anneals the lr to 0 at
`max_steps`; `length_buckets > 1` cuts that many batches at a time from consecutive examples
sorted by length (less padding, the same examples, another order).

Deliberately left out: gradient accumulation and packing (a few thousand small steps are
enough at this scale).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import random
import time

import torch

from scalerl.config import Config, ConfigError, field_
from scalerl.models.logprobs import sequence_logprobs
from scalerl.utils.log import progress


@dataclasses.dataclass(frozen=True)
class SFTConfig(Config):
    """Budget and data of the SFT warm start (tiny models only)."""

    stop: str = field_("band", "'band': stop when the sampled pass rate is inside [band_lo, "
                       "band_hi] (measured every eval_every steps; max_steps at most); "
                       "'budget': train exactly max_steps steps, the same examples in the same "
                       "order for every model size, and measure once at the end",
                       choices=("band", "budget"))
    max_steps: int = field_(3000, "optimizer steps at most ('budget': exactly)", ge=1)
    batch_size: int = field_(64, "sequences per step", ge=1)
    lr: float = field_(3e-3, "AdamW learning rate (constant after warmup); 3e-3 reaches the band "
                              "in ~2.4x fewer steps than 1e-3 on tiny-s", gt=0)
    warmup_steps: int = field_(20, "linear warmup steps", ge=0)
    decay: str = field_("none", "learning-rate decay after warmup: 'none' (constant) or "
                        "'cosine' (to 0 at max_steps; for stop: budget, where the end is known)",
                        choices=("none", "cosine"))
    weight_decay: float = field_(0.0, "AdamW weight decay", ge=0)
    grad_clip: float = field_(1.0, "max global gradient norm (0: off)", ge=0)
    math_fraction: float = field_(0.5, "share of math batches (the rest are code)", ge=0, le=1)
    band_scope: str = field_("per_task", "'per_task': every task's pass rate must reach the "
                             "band, batches shift toward the tasks below it; 'overall': the "
                             "mixed pass rate", choices=("per_task", "overall"))
    in_band_weight: float = field_(0.25, "per_task: batch weight of a task already inside the "
                                         "band, relative to its share", ge=0, le=1)
    math_difficulties: tuple[int, ...] = field_((1, 2, 3, 4), "synthetic math difficulties")
    math_families: tuple[str, ...] = field_(
        ("add", "sub", "mul", "lin"), "synthetic math families (scalerl.tasks.synthetic); "
        "the RL prompt set's families, so the base learns what RL trains on")
    family_difficulties: dict[str, tuple[int, ...]] = field_(
        default_factory=dict, doc="difficulties of one math family instead of "
        "math_difficulties, e.g. {add: [1, 2, 3]} beside chain 1-8")
    code_difficulties: tuple[int, ...] = field_((1, 2, 3, 4), "synthetic code difficulties")
    code_variant: str = field_("ranged", "synthetic code variant, the RL prompt set's "
                               "(scalerl.tasks.synthetic.CODE_VARIANTS)",
                               choices=("ranged", "binary"))
    length_buckets: int = field_(1, "batches formed at a time from consecutive examples "
                                 "sorted by length (less padding, the same examples); 1: in "
                                 "order", ge=1)
    n_train: int = field_(20000, "training examples generated per task (cycled)", ge=1)
    data_seed: int = field_(7919, "seed of the SFT/val examples (keep it apart from the RL "
                                  "prompt set's seed)", ge=0)
    eval_every: int = field_(50, "steps between pass-rate measurements", ge=1)
    eval_prompts: int = field_(64, "val prompts per measurement (one sample each; per_task: "
                                   "split evenly between the tasks)", ge=1)
    band_lo: float = field_(0.10, "lowest acceptable base pass rate", ge=0, le=1)
    band_hi: float = field_(0.40, "highest acceptable base pass rate", ge=0, le=1)
    refinements: int = field_(3, "times an overshoot restarts from the last checkpoint below "
                                 "the band with halved eval_every", ge=0)
    final_eval_prompts: int = field_(200, "val prompts measuring the kept model", ge=1)
    max_new_tokens: int = field_(0, "generation cap when measuring (0: longest target + 16)",
                                 ge=0)
    temperature: float = field_(1.0, "sampling temperature when measuring", gt=0)
    threads: int = field_(1, "torch threads (0: leave as is); 1 is fastest when jobs share "
                                 "the cores (oversubscribed OpenMP threads spin)", ge=0)

    def validate(self) -> None:
        super().validate()
        if self.band_lo > self.band_hi:
            raise ConfigError(f"band_lo {self.band_lo} > band_hi {self.band_hi}")
        extra = sorted(set(self.family_difficulties) - set(self.math_families))
        if extra:
            raise ConfigError(f"family_difficulties names {extra}, which math_families "
                              f"{list(self.math_families)} does not hold; add them there or "
                              "drop them")


@dataclasses.dataclass
class SFTResult:
    model: torch.nn.Module
    steps: int  # optimizer steps of the kept checkpoint
    final_loss: float  # mean training loss over the last eval interval before it
    pass_rate: float  # on final_eval_prompts fresh val prompts
    pass_rate_by_task: dict[str, float]
    in_band: bool
    history: list[dict]  # every measurement: step, pass_rate, loss
    seconds: float
    train_tokens: int


def lr_factor(cfg: SFTConfig, step: int) -> float:
    """Multiplier of cfg.lr at optimizer step `step` (0-based): linear warmup over
    warmup_steps, then constant or a cosine from 1 to 0 at max_steps."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.decay == "none":
        return 1.0
    span = max(1, cfg.max_steps - cfg.warmup_steps)
    done = min(1.0, (step - cfg.warmup_steps) / span)
    return 0.5 * (1.0 + math.cos(math.pi * done))


def sft_data(cfg: SFTConfig, tokenizer, n: int, seed_offset: int) -> dict[str, list]:
    """task -> list of (TaskExample, prompt_ids, target_ids)."""
    from scalerl.tasks.synthetic import generate_code, generate_math

    seed = cfg.data_seed + seed_offset
    out: dict[str, list] = {}
    if cfg.math_fraction > 0:
        if cfg.family_difficulties:  # one generator per family; family i at i, i + F, ...
            per_family = [generate_math(n, seed, families=(fam,), difficulties=tuple(
                cfg.family_difficulties.get(fam, cfg.math_difficulties)))
                for fam in cfg.math_families]
            out["math"] = [ex for group in zip(*per_family) for ex in group][:n]
        else:
            out["math"] = generate_math(n, seed, difficulties=cfg.math_difficulties,
                                        families=cfg.math_families)
    if cfg.math_fraction < 1:
        out["code"] = generate_code(n, seed, difficulties=cfg.code_difficulties,
                                    variant=cfg.code_variant)
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    for task, examples in out.items():
        enc = []
        for ex in examples:
            prompt = [bos] + tokenizer.encode(ex.prompt, add_special_tokens=False)
            target = tokenizer.encode(ex.solution, add_special_tokens=False) + [eos]
            enc.append((ex, prompt, target))
        out[task] = enc
    return out


def length_batches(pool: list, batch_size: int, rng: random.Random) -> list[list]:
    """`pool` (a multiple of batch_size examples) cut into batches of similar total length,
    in random order (popped from the end); one bucket: the pool as it is."""
    if len(pool) == batch_size:
        return [pool]
    ordered = sorted(pool, key=lambda item: len(item[1]) + len(item[2]))
    batches = [ordered[i:i + batch_size] for i in range(0, len(ordered), batch_size)]
    rng.shuffle(batches)
    return batches


def _batch(items: list, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids [B, T], attention mask [B, T], target mask [B, T]."""
    length = max(len(p) + len(t) for _, p, t in items)
    ids = torch.full((len(items), length), pad_id, dtype=torch.long)
    attn = torch.zeros(len(items), length, dtype=torch.long)
    target = torch.zeros(len(items), length, dtype=torch.bool)
    for i, (_, p, t) in enumerate(items):
        seq = p + t
        ids[i, : len(seq)] = torch.tensor(seq)
        attn[i, : len(seq)] = 1
        target[i, len(p) : len(seq)] = True
    return ids, attn, target


def measure_pass_rate(model, tokenizer, val: dict[str, list], n_prompts: int, *,
                      max_new_tokens: int, temperature: float, seed: int,
                      fp32_lm_head: bool = True) -> tuple[float, dict[str, float]]:
    """Pass rate (one sample per prompt) over the first n_prompts val prompts, tasks mixed."""
    from scalerl.rewards.score import score_many
    from scalerl.rollout.base import Request
    from scalerl.rollout.config import EngineConfig
    from scalerl.rollout.hf_engine import HFEngine

    picked = _mix(val, n_prompts)
    engine = HFEngine(model, tokenizer, EngineConfig(temperature=temperature, seed=seed,
                                                     max_batch=min(64, len(picked))),
                      fp32_lm_head=fp32_lm_head)
    requests = [Request(prompt_id=ex.prompt_id, prompt_ids=tuple(p), max_new_tokens=max_new_tokens)
                for ex, p, _ in picked]
    was_training = model.training
    model.eval()
    completions = engine.generate(requests)
    model.train(was_training)
    scores = score_many([ex.to_row() for ex, _, _ in picked], [c.text for c in completions])
    by_task: dict[str, list[bool]] = {}
    for (ex, _, _), s in zip(picked, scores):
        by_task.setdefault(ex.task, []).append(s.correct)
    overall = sum(s.correct for s in scores) / len(scores)
    return overall, {k: sum(v) / len(v) for k, v in by_task.items()}


def _mix(val: dict[str, list], n: int) -> list:
    """Interleave tasks so any prefix has roughly the configured mix."""
    tasks = sorted(val)
    out, i = [], 0
    while len(out) < n and i < max(len(v) for v in val.values()):
        for t in tasks:
            if i < len(val[t]) and len(out) < n:
                out.append(val[t][i])
        i += 1
    return out


Rates = float | dict[str, float]


def _as_rates(rates: Rates) -> dict[str, float]:
    return dict(rates) if isinstance(rates, dict) else {"all": float(rates)}


@dataclasses.dataclass
class BandSearch:
    """The checkpoint-selection rule of the warm start, as a pure state machine.

    `observe(step, rates)` after each measurement (one rate, or one per task: then every task
    must be inside the band) returns one of
    - "keep":   every rate is inside [lo, hi]: keep this checkpoint and stop;
    - "below":  some rate is under the band: continue (the checkpoint becomes the rewind
                point when no rate is above the band);
    - "rewind": no rate under the band, some over it, with a rewind point and refinements
                left: go back to `rewind_step`, measure every `eval_every` steps (halved);
    - "stop":   over the band and no way back: keep the best checkpoint seen.
    `is_best` says whether the last observation is the closest to the band so far (distance:
    the largest distance of any rate).
    """

    lo: float
    hi: float
    eval_every: int
    refinements: int
    rewind_step: int | None = None
    best_distance: float = math.inf
    is_best: bool = False

    def distance(self, rates: Rates) -> float:
        return max(max(self.lo - r, r - self.hi, 0.0) for r in _as_rates(rates).values())

    def observe(self, step: int, rates: Rates) -> str:
        values = _as_rates(rates).values()
        d = self.distance(rates)
        self.is_best = d < self.best_distance
        self.best_distance = min(self.best_distance, d)
        if d == 0.0:
            return "keep"
        if any(r < self.lo for r in values):
            if all(r <= self.hi for r in values):
                self.rewind_step = step
            return "below"
        if self.refinements > 0 and self.rewind_step is not None and self.eval_every > 1:
            self.refinements -= 1
            self.eval_every = max(1, self.eval_every // 2)
            return "rewind"
        return "stop"


def task_weights(rates: dict[str, float], shares: dict[str, float], lo: float, hi: float,
                 in_band_weight: float) -> dict[str, float]:
    """Batch weights after a per-task measurement: below the band -> share, inside ->
    share * in_band_weight, above -> 0. Falls back to the shares if that leaves nothing."""
    weights = {t: share * (1.0 if rates.get(t, 0.0) < lo else
                           in_band_weight if rates.get(t, 0.0) <= hi else 0.0)
               for t, share in shares.items()}
    return weights if sum(weights.values()) > 0 else dict(shares)


def _split_val(cfg: SFTConfig, tokenizer) -> tuple[dict, dict, dict]:
    """(train, val_select, val_final): val prompts drawn first, then removed from train."""
    n_val = cfg.eval_prompts + cfg.final_eval_prompts
    val_all = sft_data(cfg, tokenizer, n_val, 1)
    val_all = {t: list({ex.prompt: (ex, p, tg) for ex, p, tg in items}.values())
               for t, items in val_all.items()}  # unique prompts
    train = sft_data(cfg, tokenizer, cfg.n_train, 0)
    for task, items in train.items():
        held = {ex.prompt for ex, _, _ in val_all[task]}
        train[task] = [x for x in items if x[0].prompt not in held]
        if not train[task]:
            raise ConfigError(
                f"sft: every {task} training example is also a val prompt (the difficulties "
                f"{cfg.math_difficulties if task == 'math' else cfg.code_difficulties} have too "
                f"few distinct prompts); add harder difficulties or lower eval_prompts/"
                f"final_eval_prompts")
    per_task = cfg.band_scope == "per_task"
    fraction = 0.5 if per_task else cfg.math_fraction
    val_select = _by_fraction({t: v[: cfg.eval_prompts] for t, v in val_all.items()},
                              fraction, cfg.eval_prompts)
    val_final = _by_fraction({t: v[cfg.eval_prompts:] for t, v in val_all.items()},
                             fraction, cfg.final_eval_prompts)
    for name, val in (("val", val_select), ("final val", val_final)):
        for task, items in val.items():
            if not items:
                raise ConfigError(f"sft: no {name} prompts left for {task} (too few distinct "
                                  f"prompts at difficulties of that task); add harder "
                                  f"difficulties or lower eval_prompts/final_eval_prompts")
    return train, val_select, val_final


def train_sft(model, tokenizer, cfg: SFTConfig, *, fp32_lm_head: bool = True) -> SFTResult:
    """Run the band-selected warm start (see module docstring); returns the kept model."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    start = time.time()
    train, val_select, val_final = _split_val(cfg, tokenizer)
    max_new = cfg.max_new_tokens or 16 + max(
        len(t) for items in train.values() for _, _, t in items)
    per_task = cfg.band_scope == "per_task"
    shares = {t: cfg.math_fraction if t == "math" else 1 - cfg.math_fraction for t in train}
    weights = dict(shares)

    torch.manual_seed(cfg.data_seed)
    rng = random.Random(cfg.data_seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(cfg, s))
    cursor = {t: 0 for t in train}
    queued: dict[str, list] = {t: [] for t in train}
    pad = tokenizer.pad_token_id
    search = BandSearch(cfg.band_lo, cfg.band_hi, cfg.eval_every, cfg.refinements)
    history: list[dict] = []
    below = None  # snapshot at search.rewind_step: (model, optimizer, lr state, weights)
    best = None  # (step, model state, loss, final) closest to the band so far
    losses: list[float] = []
    train_tokens, step = 0, 0

    def measure(val: dict, n: int, seed: int) -> tuple[float, dict[str, float]]:
        return measure_pass_rate(model, tokenizer, val, n, max_new_tokens=max_new,
                                 temperature=cfg.temperature, seed=seed,
                                 fp32_lm_head=fp32_lm_head)

    while step < cfg.max_steps:
        tasks = sorted(t for t in weights if weights[t] > 0)
        task = rng.choices(tasks, [weights[t] for t in tasks])[0]
        if not queued[task]:  # the next length_buckets batches of this task, by length
            n = cfg.batch_size * cfg.length_buckets
            pool = [train[task][(cursor[task] + i) % len(train[task])] for i in range(n)]
            cursor[task] += n
            queued[task] = length_batches(pool, cfg.batch_size, rng)
        items = queued[task].pop()
        ids, attn, target = _batch(items, pad)  # [B, T] each
        logp = sequence_logprobs(model, ids, attn, fp32_lm_head=fp32_lm_head)  # [B, T]
        loss = -(logp * target).sum() / target.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()
        step += 1
        train_tokens += int(target.sum())
        losses.append(float(loss.detach()))
        if not math.isfinite(losses[-1]):
            raise FloatingPointError(f"SFT loss became {losses[-1]} at step {step}; lower lr")
        if cfg.stop == "budget" and step % cfg.eval_every == 0 and step != cfg.max_steps:
            recent = losses[-cfg.eval_every:]
            progress(f"sft step {step}/{cfg.max_steps}: loss {sum(recent) / len(recent):.3f}, "
                     f"{time.time() - start:.0f}s")
        if step != cfg.max_steps and (cfg.stop == "budget" or step % search.eval_every):
            continue
        if cfg.stop == "budget":
            best = (step, copy.deepcopy(model.state_dict()), sum(losses[-50:]) / len(
                losses[-50:]), None)
            break
        rate, by_task = measure(val_select, cfg.eval_prompts, cfg.data_seed + step)
        mean_loss = sum(losses[-search.eval_every:]) / len(losses[-search.eval_every:])
        entry = {"step": step, "pass_rate": rate, "pass_rate_by_task": by_task,
                 "loss": mean_loss}
        final = None
        rates: Rates = by_task if per_task else rate
        if search.distance(rates) == 0.0:  # candidate: confirm on the larger fresh val set
            final = measure(val_final, cfg.final_eval_prompts, cfg.data_seed + 1)
            entry["confirmed_pass_rate"], entry["confirmed_by_task"] = final
            rates = final[1] if per_task else final[0]
        history.append(entry)
        shown = ", ".join(f"{t} {r:.2f}" for t, r in sorted(_as_rates(rates).items()))
        progress(f"sft step {step}: loss {mean_loss:.3f}, val pass rate {rate:.3f} ({shown}"
                 f"{', confirmed' if final else ''}; band {cfg.band_lo:.2f}-{cfg.band_hi:.2f}"
                 f"{' per task' if per_task else ''}), {time.time() - start:.0f}s")
        action = search.observe(step, rates)
        if search.is_best:
            best = (step, copy.deepcopy(model.state_dict()), mean_loss, final)
        if action in ("keep", "stop"):
            break
        if per_task:
            weights = task_weights(by_task, shares, cfg.band_lo, cfg.band_hi, cfg.in_band_weight)
        if action == "below" and search.rewind_step == step:
            below = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()),
                     copy.deepcopy(sched.state_dict()), dict(weights))
        elif action == "rewind":
            step = search.rewind_step
            model.load_state_dict(below[0])
            opt.load_state_dict(below[1])
            sched.load_state_dict(below[2])
            weights = dict(below[3])
            progress(f"sft: overshot the band; back to step {step}, "
                     f"measuring every {search.eval_every}")
    kept_step, state, kept_loss, final = best
    model.load_state_dict(state)
    model.eval()
    rate, by_task = final if final is not None else measure(
        val_final, cfg.final_eval_prompts, cfg.data_seed + 1)
    progress(f"sft: kept step {kept_step}; pass rate {rate:.3f} on {cfg.final_eval_prompts} "
             f"fresh val prompts {by_task}")
    return SFTResult(
        model=model, steps=kept_step, final_loss=kept_loss, pass_rate=rate,
        pass_rate_by_task=by_task,
        in_band=search.distance(by_task if per_task else rate) == 0.0,
        history=history, seconds=time.time() - start, train_tokens=train_tokens)


def _by_fraction(val: dict[str, list], math_fraction: float, n: int) -> dict[str, list]:
    if set(val) != {"math", "code"}:
        return {t: items[:n] for t, items in val.items()}
    n_math = round(n * math_fraction)
    return {"math": val["math"][:n_math], "code": val["code"][: n - n_math]}
