"""Synthetic math and code tasks for the embedded CPU default (no download, seeded).

Every example carries a compact, regular worked solution `<think>...</think>answer` that a
~1M-parameter character-level model can learn by SFT in a few hundred steps. Difficulty sets
how many reasoning steps the solution needs, so a longer thinking budget really raises the
reachable pass rate. All text is printable ASCII (plus newline); prompts are raw (no template).

Math families (answer in `\\boxed{}`; thinking 8-53 characters):
- `add`  `47+385=`  -> `<think>7+5+0=12 4+8+1=13 0+3+1=4</think>\\boxed{432}`: one column
  `x+y+carry=sum` per digit, least significant first; difficulty = digits of the longer number.
- `sub`  `432-47=`  -> `<think>12-7-0=5 13-4-1=8 4-0-1=3</think>\\boxed{385}`: one column
  `top-bottom-borrow=digit` per digit, the top digit written +10 when it borrows.
- `mul`  `47*6=`    -> `<think>7*6+0=42 4*6+4=28</think>\\boxed{282}`: d-digit times one digit.
- `lin`  linear equations with a positive integer solution, difficulty = number of steps:
  1 `x+5=20 x=` -> `20-5=15`; 2 `3x+5=20 x=` -> `20-5=15 15/3=5`;
  3 `5x+5=2x+17 x=` -> `5x-2x=3x 17-5=12 12/3=4`; 4 `3(x+2)+4=25 x=` -> `25-4=21 21/3=7 7-2=5`.
- `chain` a running value of one-digit additions and subtractions that stays in 0-9,
  difficulty = number of steps (1-12): `5+3-6+2=` -> `<think>5+3=8 8-6=2 2+2=4</think>\\boxed{4}`.
  Every step is the same one-digit fact, so the pass rate falls steadily with the number of
  steps (errors compound) and the thinking grows by 6 tokens per step (7 to 73 tokens with
  the tags): difficulty is length, and a longer generation budget really opens the longer
  chains.
- `wchain` the same chain with a two-digit running value (0-99; the operands stay 1-9),
  difficulty = number of steps (1-6): `47+8-6=` -> `<think>47+8=55 55-6=49</think>\\boxed{49}`.
  A step is a fact of a 2-digit and a 1-digit number with a carry or borrow about half the
  time (~1,800 facts against chain's 90) in 8 characters instead of 6: difficulty per token
  rather than length, meant to need a larger model's capacity at a length every budget fits
  (issue 37's size effect; levels 1-4 stay under 35 thinking tokens).

Code families (write `f` from input/output examples; the answer is a fenced Python block; the
think names the inferred rule; hidden tests are 5 inputs different from the shown ones):
difficulty 1 = one fixed operation (reverse, sorted, sum, max, len, upper), 2 examples shown;
2 = one operation with a parameter to infer (map v*k+c, filter v>k, filter evens, x*k+c),
3 examples; 3 = two composed operations; 4 = three composed operations, 3 examples each.
Two variants of these rule types (`generate_code(variant=...)`):
- `ranged` (the default): parameters drawn from ranges (k 2-3, c 1-5, m 2-6), a `def` answer.
  Prompts are at most ~65 characters (lists of 2-3 digits), solutions at most ~94, e.g.
  `f([3,1,2])=[1,2,3] f([6,0])=[0,6]` -> `<think>sort</think>` + a fenced
  `def f(x):\n    return sorted(x)`.
- `binary`: every parameter takes one of two values (k 2|3, c 1|2, m 3|5; the level-2 map is
  v*k without +c; a five-way parameter stayed at pass rate 0 under RL while two-way ones
  rose, BENCHMARKS.md issue 37),
  the answer is one lambda (`f=lambda x:sorted(x)` in a ```py fence, the shortest program),
  and the inputs are redrawn (up to _MAX_TRIES times) while another rule of any difficulty
  fits the shown examples but fails a hidden test, so the examples determine the program.

Deliberately left out: natural-language word problems and multi-function programs; those come
from real datasets through `scalerl.tasks.loaders`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence

from scalerl.tasks.base import BOXED_OPEN, THINK_CLOSE, THINK_OPEN, TaskExample, make_prompt_id

__all__ = ["MATH_FAMILIES", "CODE_DIFFICULTIES", "CODE_VARIANTS", "generate_math", "generate_code",
           "math_example", "code_example"]

# family -> allowed difficulties
MATH_FAMILIES: dict[str, tuple[int, ...]] = {
    "add": (1, 2, 3, 4, 5, 6),
    "sub": (1, 2, 3, 4, 5, 6),
    "mul": (1, 2, 3, 4, 5, 6),
    "lin": (1, 2, 3, 4),
    "chain": tuple(range(1, 13)),
    "wchain": (1, 2, 3, 4, 5, 6),
}
CODE_DIFFICULTIES: tuple[int, ...] = (1, 2, 3, 4)
CODE_VARIANTS: tuple[str, ...] = ("ranged", "binary")
_MAX_TRIES = 50  # redraws to avoid a duplicate prompt before accepting one


def _solution(think: str, answer: str) -> str:
    return f"{THINK_OPEN}{think}{THINK_CLOSE}{answer}"


def _number(rng: random.Random, digits: int) -> int:
    if digits == 1:
        return rng.randint(0, 9)
    return rng.randint(10 ** (digits - 1), 10**digits - 1)


def _digits(n: int, width: int) -> list[int]:
    """Least significant first, zero-padded to `width`."""
    return [(n // 10**i) % 10 for i in range(width)]


# ---- math -------------------------------------------------------------------------------------
def _add(rng: random.Random, d: int) -> tuple[str, str, str]:
    a, b = _number(rng, d), _number(rng, rng.randint(1, d))
    if rng.random() < 0.5:
        a, b = b, a
    cols, carry = [], 0
    for x, y in zip(_digits(a, d), _digits(b, d)):
        s = x + y + carry
        cols.append(f"{x}+{y}+{carry}={s}")
        carry = s // 10
    return f"{a}+{b}=", " ".join(cols), str(a + b)


def _sub(rng: random.Random, d: int) -> tuple[str, str, str]:
    a = _number(rng, d)
    b = rng.randint(0, a)
    cols, borrow = [], 0
    for x, y in zip(_digits(a, d), _digits(b, d)):
        if x - y - borrow < 0:
            cols.append(f"{x + 10}-{y}-{borrow}={x + 10 - y - borrow}")
            borrow = 1
        else:
            cols.append(f"{x}-{y}-{borrow}={x - y - borrow}")
            borrow = 0
    return f"{a}-{b}=", " ".join(cols), str(a - b)


def _mul(rng: random.Random, d: int) -> tuple[str, str, str]:
    a, m = _number(rng, d), rng.randint(2, 9)
    cols, carry = [], 0
    for x in _digits(a, d):
        p = x * m + carry
        cols.append(f"{x}*{m}+{carry}={p}")
        carry = p // 10
    return f"{a}*{m}=", " ".join(cols), str(a * m)


def _lin(rng: random.Random, d: int) -> tuple[str, str, str]:
    x = rng.randint(1, 12)
    if d == 1:
        b = rng.randint(1, 30)
        return f"x+{b}={x + b} x=", f"{x + b}-{b}={x}", str(x)
    if d == 2:
        a, b = rng.randint(2, 9), rng.randint(1, 20)
        c = a * x + b
        return f"{a}x+{b}={c} x=", f"{c}-{b}={a * x} {a * x}/{a}={x}", str(x)
    if d == 3:
        c = rng.randint(1, 5)
        a, b = c + rng.randint(1, 5), rng.randint(1, 20)
        e = a - c
        dd = b + e * x
        return (f"{a}x+{b}={c}x+{dd} x=",
                f"{a}x-{c}x={e}x {dd}-{b}={e * x} {e * x}/{e}={x}", str(x))
    if d == 4:
        a, b, c = rng.randint(2, 9), rng.randint(1, 9), rng.randint(1, 20)
        r = a * (x + b)
        return (f"{a}(x+{b})+{c}={r + c} x=",
                f"{r + c}-{c}={r} {r}/{a}={x + b} {x + b}-{b}={x}", str(x))
    raise ValueError(f"lin: difficulty {d} is not supported; choose from {MATH_FAMILIES['lin']}")


def _chain(rng: random.Random, d: int, top: int = 9) -> tuple[str, str, str]:
    value = rng.randint(0, top)
    prompt, steps = str(value), []
    for _ in range(d):  # each step adds or subtracts 1-9, the running value stays 0..top
        if value == top or (value > 0 and rng.random() < 0.5):
            t = rng.randint(1, min(9, value))
            steps.append(f"{value}-{t}={value - t}")
            prompt, value = prompt + f"-{t}", value - t
        else:
            t = rng.randint(1, min(9, top - value))
            steps.append(f"{value}+{t}={value + t}")
            prompt, value = prompt + f"+{t}", value + t
    return prompt + "=", " ".join(steps), str(value)


def _wchain(rng: random.Random, d: int) -> tuple[str, str, str]:
    return _chain(rng, d, top=99)


_MATH: dict[str, Callable[[random.Random, int], tuple[str, str, str]]] = {
    "add": _add, "sub": _sub, "mul": _mul, "lin": _lin, "chain": _chain, "wchain": _wchain,
}


def math_example(family: str, difficulty: int, rng: random.Random) -> TaskExample:
    """One math example of `family` at `difficulty` drawn from `rng`."""
    prompt, think, answer = _MATH[family](rng, difficulty)
    source = f"synth-{family}"
    return TaskExample(prompt_id=make_prompt_id(source, prompt), task="math", source=source,
                       prompt=prompt, answer=answer, tests=None, difficulty=difficulty,
                       solution=_solution(think, f"{BOXED_OPEN}{answer}}}"))


# ---- code -------------------------------------------------------------------------------------
# A rule: (think text, return expression, python function, input kind).
Rule = tuple[str, str, Callable, str]
_K, _C, _M = (2, 3), (1, 2), (3, 5)  # the values a rule's parameter may take (two each)


def _ranged_rule(rng: random.Random, d: int) -> Rule:
    """variant `ranged`: a rule of difficulty `d` with its parameters drawn from ranges."""
    k, c, m = rng.randint(2, 3), rng.randint(1, 5), rng.randint(2, 6)
    if d == 1:
        return rng.choice([r for [r] in _binary_rules(1)])
    if d == 2:
        return rng.choice([
            (f"v*{k}+{c}", f"[v*{k}+{c} for v in x]", lambda x: [v * k + c for v in x], "list"),
            (f"v>{m}", f"[v for v in x if v>{m}]", lambda x: [v for v in x if v > m], "list"),
            ("even", "[v for v in x if v%2==0]", lambda x: [v for v in x if v % 2 == 0],
             "list"),
            (f"x*{k}+{c}", f"x*{k}+{c}", lambda x: x * k + c, "int"),
        ])
    if d == 3:
        return rng.choice([
            (f"even v*{k}", f"[v*{k} for v in x if v%2==0]",
             lambda x: [v * k for v in x if v % 2 == 0], "list"),
            (f"rev v+{c}", f"[v+{c} for v in x[::-1]]",
             lambda x: [v + c for v in x[::-1]], "list"),
            ("sort rev", "sorted(x)[::-1]", lambda x: sorted(x)[::-1], "list"),
            (f"sum v*{k}", f"sum(v*{k} for v in x)", lambda x: sum(v * k for v in x), "list"),
            ("rev upper", "x[::-1].upper()", lambda x: x[::-1].upper(), "str"),
        ])
    if d == 4:
        return rng.choice([
            (f"v>{m} sort v*{k}", f"[v*{k} for v in sorted(x) if v>{m}]",
             lambda x: [v * k for v in sorted(x) if v > m], "list"),
            (f"even rev v+{c}", f"[v+{c} for v in x[::-1] if v%2==0]",
             lambda x: [v + c for v in x[::-1] if v % 2 == 0], "list"),
            (f"sum v*{k} +{c}", f"sum(v*{k} for v in x)+{c}",
             lambda x: sum(v * k for v in x) + c, "list"),
        ])
    raise ValueError(f"code: difficulty {d} is not supported; choose from {CODE_DIFFICULTIES}")


def _binary_rules(d: int) -> list[list[Rule]]:
    """variant `binary`: the rules of difficulty `d`, one list per rule type (one rule per
    parameter value)."""
    if d == 1:
        return [[r] for r in (
            ("reverse", "x[::-1]", lambda x: x[::-1], "list"),
            ("sort", "sorted(x)", sorted, "list"),
            ("sum", "sum(x)", sum, "list"),
            ("max", "max(x)", max, "list"),
            ("len", "len(x)", len, "list"),
            ("upper", "x.upper()", str.upper, "str"),
        )]
    if d == 2:
        return [
            [(f"v*{k}", f"[v*{k} for v in x]", lambda x, k=k: [v * k for v in x], "list")
             for k in _K],
            [(f"v>{m}", f"[v for v in x if v>{m}]", lambda x, m=m: [v for v in x if v > m],
              "list") for m in _M],
            [("even", "[v for v in x if v%2==0]", lambda x: [v for v in x if v % 2 == 0],
              "list")],
            [(f"x*{k}+{c}", f"x*{k}+{c}", lambda x, k=k, c=c: x * k + c, "int")
             for k in _K for c in _C],
        ]
    if d == 3:
        return [
            [(f"even v*{k}", f"[v*{k} for v in x if v%2==0]",
              lambda x, k=k: [v * k for v in x if v % 2 == 0], "list") for k in _K],
            [(f"rev v+{c}", f"[v+{c} for v in x[::-1]]",
              lambda x, c=c: [v + c for v in x[::-1]], "list") for c in _C],
            [("sort rev", "sorted(x)[::-1]", lambda x: sorted(x)[::-1], "list")],
            [(f"sum v*{k}", f"sum(v*{k} for v in x)", lambda x, k=k: sum(v * k for v in x),
              "list") for k in _K],
            [("rev upper", "x[::-1].upper()", lambda x: x[::-1].upper(), "str")],
        ]
    if d == 4:
        return [
            [(f"v>{m} sort v*{k}", f"[v*{k} for v in sorted(x) if v>{m}]",
              lambda x, m=m, k=k: [v * k for v in sorted(x) if v > m], "list")
             for m in _M for k in _K],
            [(f"even rev v+{c}", f"[v+{c} for v in x[::-1] if v%2==0]",
              lambda x, c=c: [v + c for v in x[::-1] if v % 2 == 0], "list") for c in _C],
            [(f"sum v*{k} +{c}", f"sum(v*{k} for v in x)+{c}",
              lambda x, k=k, c=c: sum(v * k for v in x) + c, "list") for k in _K for c in _C],
        ]
    raise ValueError(f"code: difficulty {d} is not supported; choose from {CODE_DIFFICULTIES}")


# Every rule of every difficulty: the programs an ambiguous prompt could also mean.
_ALL_RULES: tuple[Rule, ...] = tuple(r for d in CODE_DIFFICULTIES for rules in _binary_rules(d)
                                     for r in rules)


def _code_input(rng: random.Random, kind: str) -> object:
    if kind == "int":
        return rng.randint(0, 20)
    if kind == "str":
        return "".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 4)))
    return [rng.randint(0, 9) for _ in range(rng.randint(2, 3))]


def _fmt(v: object) -> str:
    return repr(v).replace(", ", ",")


def _ambiguous(rule: Rule, shown: list, hidden: list) -> bool:
    """Whether another rule fits every shown example but fails a hidden test."""
    fn, kind = rule[2], rule[3]
    for other in _ALL_RULES:
        if other[3] != kind or other is rule:
            continue
        if all(other[2](x) == fn(x) for x in shown) and any(other[2](x) != fn(x)
                                                            for x in hidden):
            return True
    return False


def _distinct_inputs(rng: random.Random, kind: str, n: int) -> list[object]:
    inputs: list[object] = []
    while len(inputs) < n:
        x = _code_input(rng, kind)
        if x not in inputs:
            inputs.append(x)
    return inputs


def code_example(difficulty: int, rng: random.Random, variant: str = "ranged") -> TaskExample:
    """One program-synthesis example at `difficulty` of `variant` (CODE_VARIANTS) drawn from
    `rng`: a rule, then distinct inputs (the shown examples first, then 5 hidden tests); variant
    `binary` draws a rule type then its parameter value, and redraws the inputs (up to
    _MAX_TRIES times) while another rule fits the shown examples but not the tests."""
    if variant not in CODE_VARIANTS:
        raise ValueError(f"code: variant {variant!r} is not supported; choose from "
                         f"{CODE_VARIANTS}")
    n_shown = 2 if difficulty == 1 else 3
    if variant == "ranged":
        rule = _ranged_rule(rng, difficulty)
        inputs = _distinct_inputs(rng, rule[3], n_shown + 5)
    else:
        rule = rng.choice(rng.choice(_binary_rules(difficulty)))
        for _ in range(_MAX_TRIES):
            inputs = _distinct_inputs(rng, rule[3], n_shown + 5)
            if not _ambiguous(rule, inputs[:n_shown], inputs[n_shown:]):
                break
    think, expr, fn, _ = rule
    shown, hidden = inputs[:n_shown], inputs[n_shown:]
    prompt = " ".join(f"f({_fmt(x)})={_fmt(fn(x))}" for x in shown) + "\n"
    tests = json.dumps({"type": "function", "fn_name": "f", "inputs": [[x] for x in hidden],
                        "outputs": [fn(x) for x in hidden]}, separators=(",", ":"))
    code = (f"```python\ndef f(x):\n    return {expr}\n```" if variant == "ranged"
            else f"```py\nf=lambda x:{expr}\n```")
    source = "synth-code"
    return TaskExample(prompt_id=make_prompt_id(source, prompt), task="code", source=source,
                       prompt=prompt, answer=None, tests=tests, difficulty=difficulty,
                       solution=_solution(think, code))


# ---- batch generators -------------------------------------------------------------------------
def _check(difficulties: Sequence[int], allowed: Sequence[int], what: str) -> None:
    if not difficulties:
        raise ValueError(f"{what}: difficulties is empty; give at least one of {tuple(allowed)}")
    bad = [d for d in difficulties if d not in allowed]
    if bad:
        raise ValueError(f"{what}: difficulties {bad} are not supported; choose from "
                         f"{tuple(allowed)}")


def _unique(n: int, draw: Callable[[int], TaskExample]) -> list[TaskExample]:
    """n examples; example i redraws up to _MAX_TRIES times to avoid repeating a prompt."""
    seen: set[str] = set()
    out = []
    for i in range(n):
        for _ in range(_MAX_TRIES):
            ex = draw(i)
            if ex.prompt not in seen:
                break
        seen.add(ex.prompt)
        out.append(ex)
    return out


def generate_math(n: int, seed: int, difficulties: Sequence[int] = (1, 2, 3, 4),
                  families: Sequence[str] = ("add", "sub", "mul", "lin")) -> list[TaskExample]:
    """`n` math examples, families and difficulties interleaved evenly, deterministic in `seed`.

    Example i has family `families[i % F]` and difficulty `difficulties[(i // F) % D]`.
    Prompts are distinct unless the (family, difficulty) space is exhausted (e.g. 1-digit `add`
    has 100 prompts); the dataset builder drops the remaining duplicates.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not families:
        raise ValueError(f"families is empty; choose from {sorted(MATH_FAMILIES)}")
    for fam in families:
        if fam not in MATH_FAMILIES:
            raise ValueError(f"unknown math family {fam!r}; choose from {sorted(MATH_FAMILIES)}")
        _check(difficulties, MATH_FAMILIES[fam], f"math family {fam!r}")
    rng = random.Random(f"math-{seed}")
    n_fam = len(families)
    return _unique(n, lambda i: math_example(
        families[i % n_fam], difficulties[(i // n_fam) % len(difficulties)], rng))


def generate_code(n: int, seed: int, difficulties: Sequence[int] = (1, 2, 3, 4),
                  variant: str = "ranged") -> list[TaskExample]:
    """`n` code examples of `variant` (CODE_VARIANTS), difficulties interleaved evenly,
    deterministic in `seed`."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    _check(difficulties, CODE_DIFFICULTIES, "code")
    if variant not in CODE_VARIANTS:
        raise ValueError(f"code: variant {variant!r} is not supported; choose from "
                         f"{CODE_VARIANTS}")
    rng = random.Random(f"code-{seed}")
    return _unique(n, lambda i: code_example(difficulties[i % len(difficulties)], rng, variant))
