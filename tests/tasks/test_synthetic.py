"""Synthetic generators: determinism, worked solutions that verify, lengths, difficulty."""

import json
import random
import re
import string

import pytest

from scalerl.rewards import score_many
from scalerl.tasks import TaskExample, generate_code, generate_math
from scalerl.tasks.synthetic import math_example

PRINTABLE = set(string.printable) - set("\t\r\x0b\x0c")


def think(solution: str) -> str:
    return solution[len("<think>"):solution.index("</think>")]


def test_addition_matches_the_feasibility_format():
    # 47+385: columns 7+5+0=12 (carry 1), 4+8+1=13 (carry 1), 0+3+1=4 -> 432
    rng = random.Random(0)
    for _ in range(200):
        ex = math_example("add", 3, rng)
        if ex.prompt == "47+385=":
            break
    a, b = map(int, ex.prompt[:-1].split("+"))
    assert int(ex.answer) == a + b
    ex = math_example("add", 2, random.Random(3))
    a, b = map(int, ex.prompt[:-1].split("+"))
    cols = think(ex.solution).split(" ")
    assert len(cols) == 2 and ex.solution.endswith(f"</think>\\boxed{{{a + b}}}")


@pytest.mark.parametrize("family", ["add", "sub", "mul", "lin", "chain"])
def test_scratchpad_arithmetic_is_right(family):
    for ex in generate_math(60, 1, families=(family,)):
        for step in think(ex.solution).split(" "):
            lhs, rhs = step.split("=")
            if "x" in lhs:  # "5x-2x=3x"
                a, c = (int(t[:-1]) for t in lhs.split("-"))
                assert f"{a - c}x" == rhs
            else:
                assert eval(lhs.replace("/", "//")) == int(rhs), step  # noqa: S307
        assert ex.solution.endswith(f"\\boxed{{{ex.answer}}}")


def test_known_subtraction_and_linear_solutions():
    # 432-47: 12-7-0=5 (borrow), 13-4-1=8 (borrow), 4-0-1=3 -> 385
    rng = random.Random(0)
    seen = {}
    for d in (1, 2, 3, 4):
        ex = math_example("lin", d, rng)
        seen[d] = len(think(ex.solution).split(" "))
        x = int(ex.answer)
        lhs, rhs = ex.prompt[:-3].split("=")
        env = {"x": x}
        py = lambda s: re.sub(r"(\d)(x|\()", r"\1*\2", s)  # noqa: E731
        assert eval(py(lhs), env) == eval(py(rhs), env)  # noqa: S307
    assert seen == {1: 1, 2: 2, 3: 3, 4: 3}


def test_chain_is_a_running_value_one_step_per_operation():
    for d in (1, 4, 12):
        for ex in generate_math(30, d, difficulties=(d,), families=("chain",)):
            ops = re.findall(r"[+-]\d", ex.prompt[:-1])
            steps = think(ex.solution).split(" ")
            assert len(ops) == len(steps) == d  # difficulty = number of steps
            value = int(ex.prompt[0])
            for op, step in zip(ops, steps):
                assert step == f"{value}{op}={value + int(op)}"
                value += int(op)
                assert 0 <= value <= 9  # every intermediate is one digit
            assert ex.answer == str(value)
    # the thinking grows by one step (5 characters and a space) per difficulty level
    means = [sum(len(think(e.solution)) for e in exs) / len(exs) for exs in (
        generate_math(40, 0, difficulties=(d,), families=("chain",)) for d in range(1, 13))]
    assert means == [6 * d - 1 for d in range(1, 13)]


def test_wchain_is_a_chain_of_two_digit_facts_at_chain_lengths():
    assert math_example("wchain", 2, random.Random(3)).prompt.count("=") == 1
    facts = set()
    for d in (1, 4, 6):
        for ex in generate_math(40, d, difficulties=(d,), families=("wchain",)):
            start, ops = re.fullmatch(r"(\d+)((?:[+-]\d)+)=", ex.prompt).groups()
            ops, steps, value = re.findall(r"[+-]\d", ops), think(ex.solution).split(" "), int(start)
            assert len(ops) == len(steps) == d and 0 <= value <= 99
            for op, step in zip(ops, steps):
                assert step == f"{value}{op}={value + int(op)}"  # operand 1-9 (one digit)
                value += int(op)
                assert 0 <= value <= 99
                facts.add(step.split("=")[0])
            assert ex.answer == str(value)
    assert len(facts) > 300  # two-digit facts, where chain has 90 in all
    # 8 characters a step when the value has two digits: under chain's 6 d - 1 + 2 d
    assert all(len(think(e.solution)) <= 8 * 4 - 1
               for e in generate_math(100, 0, difficulties=(4,), families=("wchain",)))


def test_generators_are_deterministic_and_seed_dependent():
    assert generate_math(50, 7) == generate_math(50, 7)
    assert generate_code(50, 7) == generate_code(50, 7)
    assert generate_math(50, 7) != generate_math(50, 8)
    assert [e.prompt for e in generate_code(20, 1)] != [e.prompt for e in generate_code(20, 2)]


def test_text_is_printable_ascii_and_short():
    for ex in generate_math(400, 0) + generate_code(400, 0):
        assert set(ex.prompt + ex.solution) <= PRINTABLE
        assert isinstance(ex, TaskExample) and ex.prompt_id.startswith(ex.source)
    for ex in generate_code(400, 0):
        assert len(ex.prompt) <= 66 and len(ex.solution) <= 96


def test_think_length_grows_with_difficulty_within_budget():
    for fam in ("add", "sub", "mul"):
        means = []
        for d in (1, 2, 3, 4):
            exs = generate_math(40, 0, difficulties=(d,), families=(fam,))
            lengths = [len(think(e.solution)) for e in exs]
            assert all(7 <= n <= 60 for n in lengths)
            means.append(sum(lengths) / len(lengths))
        assert means == sorted(means) and means[-1] > 3 * means[0]


def test_interleaving_and_difficulty_validation():
    exs = generate_math(8, 0, difficulties=(1, 2), families=("add", "sub"))
    assert [(e.source, e.difficulty) for e in exs[:4]] == [
        ("synth-add", 1), ("synth-sub", 1), ("synth-add", 2), ("synth-sub", 2)]
    with pytest.raises(ValueError, match="not supported"):
        generate_math(4, 0, difficulties=(5,), families=("lin",))
    with pytest.raises(ValueError, match="unknown math family"):
        generate_math(4, 0, families=("div",))
    with pytest.raises(ValueError, match="not supported"):
        generate_code(4, 0, difficulties=(9,))


def test_hidden_tests_differ_from_shown_examples():
    for ex in generate_code(200, 3):
        spec = json.loads(ex.tests)
        shown = re.findall(r"f\((.*?)\)=", ex.prompt)
        hidden = [repr(args[0]).replace(", ", ",") for args in spec["inputs"]]
        assert len(hidden) == 5 and not set(shown) & set(hidden)


def test_reference_solutions_score_correct_and_wrong_ones_do_not():
    exs = generate_math(40, 5) + generate_code(12, 5)
    rows = [e.to_row() for e in exs]
    assert all(s.correct for s in score_many(rows, [e.solution for e in exs], workers=2))
    wrong = [e.solution.replace("return ", "return 'no'\n    return ") if e.task == "code"
             else e.solution.replace("\\boxed{", "\\boxed{1") for e in exs]
    assert not any(s.correct for s in score_many(rows, wrong, workers=2))


def _program(solution: str):
    """The reference program of a synthetic code solution (our own text, not a model's)."""
    body = solution[solution.index("```"):].split("\n", 1)[1].rsplit("```", 1)[0]
    scope: dict = {}
    exec(body, scope)  # noqa: S102 - a generator's reference solution
    return scope["f"]


def test_code_variants_answer_formats_and_parameter_values():
    ranged, binary = generate_code(200, 0), generate_code(200, 0, variant="binary")
    assert all("```python\ndef f(x):\n    return " in e.solution for e in ranged)
    assert all("```py\nf=lambda x:" in e.solution for e in binary)
    # binary: k in {2, 3}, c in {1, 2}, m in {3, 5}; ranged draws c up to 5 and m down to 2
    numbers = {int(n) for e in binary for n in re.findall(r"\d+", think(e.solution))}
    assert numbers == {1, 2, 3, 5}
    d2 = {think(e.solution) for e in generate_code(200, 0, difficulties=(2,), variant="binary")}
    assert d2 == {"v*2", "v*3", "v>3", "v>5", "even", "x*2+1", "x*2+2", "x*3+1", "x*3+2"}
    assert {int(n) for e in ranged for n in re.findall(r"\d+", think(e.solution))} & {4, 6}
    with pytest.raises(ValueError, match="variant 'big' is not supported"):
        generate_code(4, 0, variant="big")


def test_binary_examples_determine_the_program():
    """Every reference program of the pool that reproduces an example's shown outputs also
    passes its hidden tests (ranged prompts do not have this: v>2 and v>3 both fit [1,5])."""
    def ambiguous(exs):
        programs = {e.solution[e.solution.index("```"):]: _program(e.solution) for e in exs}
        count = 0
        for e in exs:
            spec = json.loads(e.tests)
            shown = [(eval(x), eval(y)) for x, y in re.findall(r"f\((.*?)\)=(\S+)", e.prompt)]
            for f in programs.values():
                try:
                    fits = all(f(x) == y for x, y in shown)
                    passes = all(f(*a) == o for a, o in zip(spec["inputs"], spec["outputs"]))
                except (TypeError, ValueError, AttributeError):
                    continue
                count += fits and not passes
        return count

    assert ambiguous(generate_code(120, 1, variant="binary")) == 0
    assert ambiguous(generate_code(120, 1)) > 0


def test_binary_variant_reference_solutions_score_correct():
    exs = generate_code(24, 5, variant="binary")
    rows = [e.to_row() for e in exs]
    assert all(s.correct for s in score_many(rows, [e.solution for e in exs], workers=2))
    wrong = [e.solution.replace("lambda x:", "lambda x:'no' or ") for e in exs]
    assert not any(s.correct for s in score_many(rows, wrong, workers=2))
