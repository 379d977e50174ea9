"""Plumbing of PipelineRL-k (`scalerl.rl.pipeline`) with a trivial counting engine.

The engine below is deliberately fake: these tests check the process plumbing (weights
reaching the generator through the host slots, lag control, error propagation, the control
calls a colocated generator sleeps and wakes by), not generation. The real engines run through
the same `Pipeline` in tests/rl/test_pipeline_weights.py and tests/rl/test_trainer*.py.
"""

import time

import pytest
import torch

from scalerl.rl.pipeline import EngineSpec, GeneratorError, Pipeline, staleness
from scalerl.rollout.base import Completion, Engine, Request


class CountingEngine(Engine):
    """Emits one token per `step()` per sequence; its logprob is the weight w it was made with.

    Sequences have `n_tokens` tokens, or `max_new_tokens` of their request when n_tokens is 0.
    """

    def __init__(self, n_tokens: int = 4, step_sleep_s: float = 0.0, fail: bool = False,
                 hold_after: int = 0):
        if fail:
            raise RuntimeError("engine construction failed on purpose")
        self.n_tokens = n_tokens
        self.step_sleep_s = step_sleep_s
        self.hold_after = hold_after  # > 0: a sequence pauses after this many tokens until the
        # weights change (a sample still decoding when the push lands, on any machine)
        self.w = float("nan")
        self.version = -1
        self.live: list[tuple[Request, list[float], list[int]]] = []
        self.cohorts: list[int] = []  # size of every submit() call so far
        self.asleep = False
        self.calls: list[str] = []  # transfer_rpc calls so far

    def submit(self, requests):
        self.cohorts.append(len(requests))
        self.live.extend((r, [], []) for r in requests)

    def step(self):
        if self.asleep:
            raise RuntimeError("stepped while asleep")
        time.sleep(self.step_sleep_s)
        done, keep = [], []
        for req, logps, versions in self.live:
            if self.hold_after and len(logps) >= self.hold_after and versions[0] == self.version:
                keep.append((req, logps, versions))
                continue
            logps.append(self.w)
            versions.append(self.version)
            n = self.n_tokens or req.max_new_tokens
            if len(logps) == n:
                # text: the admission cohorts so far (read by the admission test) and the
                # control calls (read by the sleep test)
                text = ",".join(map(str, self.cohorts)) + "|" + ",".join(self.calls)
                done.append(Completion(req, [1] * n, logps, [True] * n, versions,
                                       text, "stop", False, False))
            else:
                keep.append((req, logps, versions))
        self.live = keep
        return done

    def num_in_flight(self):
        return len(self.live)

    def update_weights(self, state_dict, version):
        if self.asleep:
            raise RuntimeError("weights loaded while asleep")
        self.w = float(state_dict["w"][0])
        self.version = version

    def transfer_rpc(self, method, payload, version):
        self.calls.append(method)
        self.asleep = {"sleep": True, "wake_up": False}[method]


def make_engine(**kwargs):
    return CountingEngine(**kwargs)


def make_grader(mark: str):
    """A grader built inside the generator process: a verdict naming what it graded."""
    return lambda completions: [f"{mark}:{c.request.prompt_id}:{c.n_tokens}"
                                for c in completions]


def _requests(batch: int, n_prompts: int = 2, g: int = 2) -> list[Request]:
    return [Request(prompt_id=f"p{batch}_{i}", prompt_ids=(1, 2), sample_idx=j, tag=("mine", i))
            for i in range(n_prompts) for j in range(g)]


def _wait_buffered(pipe: Pipeline, batch: int, n: int) -> None:
    """Block until the generators finished `n` samples of `batch` (left in the buffer)."""
    deadline = time.monotonic() + 600  # a guard against a hang, not a speed assertion
    while len(pipe._buffer[batch]) < n:
        pipe._drain(deadline)


def _run(max_lag: int, trainer_sleep_s: float, gen_sleep_s: float, steps: int = 8, start=3,
         wait_for_lead: bool = False):
    """Trainer loop of PipelineRL-k: collect batch v, 'train', push w = v + 1, issue v + k + 1.

    `wait_for_lead`: the trainer is slow in the strongest sense: before each push it waits until
    the generator finished batch v + k, as far ahead as the bound lets it run."""
    spec = EngineSpec(make_engine, {"n_tokens": 4, "step_sleep_s": gen_sleep_s}, threads=1)
    lags, mismatches = [], 0
    with Pipeline([spec], {"w": torch.tensor([float(start)])}, version=start, max_lag=max_lag,
                  max_concurrent=64) as pipe:
        for b in range(start, start + max_lag + 1):
            pipe.submit(b, _requests(b))
        for v in range(start, start + steps):
            batch = pipe.collect(v, n=4)
            assert {c.request.tag[0] for c in batch} == {"mine"}  # caller's tag restored
            for c in batch:
                lags.append(staleness(v, c))
                # weights and version travel together: the logprob (= w) equals the version
                mismatches += sum(lp != ver for lp, ver in zip(c.logprobs, c.versions))
            time.sleep(trainer_sleep_s)
            if wait_for_lead:
                _wait_buffered(pipe, v + max_lag, n=4)
            pipe.push_weights({"w": torch.tensor([float(v + 1)])}, v + 1)
            pipe.submit(v + max_lag + 1, _requests(v + max_lag + 1))
        tokens, busy = pipe.generator_stats()
    return lags, mismatches, tokens, busy


def test_slow_trainer_lets_generator_run_k_ahead_but_never_further():
    lags, mismatches, tokens, busy = _run(max_lag=2, trainer_sleep_s=0.0, gen_sleep_s=0.001,
                                          wait_for_lead=True)
    assert mismatches == 0
    assert max(lags) == 2  # the generator ran ahead exactly as far as allowed
    assert min(lags) >= 0
    assert tokens >= 8 * 4 * 4 and busy > 0


def test_slow_generator_keeps_samples_fresh_and_lag_zero_is_on_policy():
    lags, mismatches, _, _ = _run(max_lag=0, trainer_sleep_s=0.0, gen_sleep_s=0.002, steps=5)
    assert mismatches == 0
    assert lags == [0] * (5 * 4)  # k = 0: every token comes from the current policy


def test_in_flight_sequences_switch_weights_mid_sequence():
    # A long sequence straddles a weight push: its tokens carry more than one version. It holds
    # after 5 tokens until the push lands, so the overlap does not depend on the machine's speed.
    spec = EngineSpec(make_engine, {"n_tokens": 0, "step_sleep_s": 0.001, "hold_after": 5},
                      threads=1)
    with Pipeline([spec], {"w": torch.tensor([0.0])}, version=0, max_lag=1,
                  max_concurrent=8) as pipe:
        pipe.submit(0, [Request("short", (1,), max_new_tokens=3)])
        pipe.submit(1, [Request("long", (1,), max_new_tokens=60)])
        first = pipe.collect(0, n=1)[0]
        pipe.push_weights({"w": torch.tensor([1.0])}, 1)
        second = pipe.collect(1, n=1)[0]
    assert set(first.versions) == {0}
    assert set(second.versions) == {0, 1}  # started under v0, finished under v1
    assert second.logprobs == [float(v) for v in second.versions]


def test_generator_failure_is_reported_with_its_traceback():
    spec = EngineSpec(make_engine, {"fail": True}, threads=1)
    with pytest.raises(GeneratorError, match="construction failed on purpose"):
        Pipeline([spec], {"w": torch.zeros(1)}, version=0, max_lag=1, max_concurrent=4)


def make_stuck_engine(seconds: float):
    """An engine whose start takes `seconds` (a vLLM engine compiling, or hung)."""
    time.sleep(seconds)
    return CountingEngine()


def test_a_generator_slower_than_its_start_allowance_is_named():
    """The start deadline follows the specs being started (EngineSpec.start_timeout_s, e.g.
    vLLM's 1,200 s with CUDA graphs), not a fixed 300 s: a 1 s allowance on an engine that
    needs 120 s fails after about that second, naming the generator and the knob."""
    fast = EngineSpec(make_engine, {}, threads=1)
    stuck = EngineSpec(make_stuck_engine, {"seconds": 120}, threads=1, start_timeout_s=1.0)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"scalerl-generator-1 not ready 1 s after the last "
                       r"progress.*vllm\.start_timeout_s"):
        Pipeline([fast, stuck], {"w": torch.zeros(1)}, version=0, max_lag=1,
                 max_concurrent=4, start_timeout_s=None)
    assert time.monotonic() - start < 100  # not the stuck engine's 120 s


def test_dead_generator_is_detected():
    spec = EngineSpec(make_engine, {"n_tokens": 4, "step_sleep_s": 0.0}, threads=1)
    pipe = Pipeline([spec], {"w": torch.zeros(1)}, version=0, max_lag=1, max_concurrent=4)
    pipe._procs[0].kill()
    pipe._procs[0].join()
    with pytest.raises(GeneratorError, match="exited"):
        pipe.collect(0, n=1, timeout_s=30)


def test_push_weights_rejects_non_increasing_versions():
    spec = EngineSpec(make_engine, {}, threads=1)
    with Pipeline([spec], {"w": torch.zeros(1)}, version=5, max_lag=1, max_concurrent=4) as pipe:
        with pytest.raises(ValueError, match="must increase"):
            pipe.push_weights({"w": torch.ones(1)}, 5)


def test_generator_grades_the_samples_it_finishes():
    spec = EngineSpec(make_engine, {"n_tokens": 3}, threads=1, grader=make_grader,
                      grader_kwargs={"mark": "gen"})
    with Pipeline([spec], {"w": torch.zeros(1)}, version=0, max_lag=1, max_concurrent=8) as pipe:
        pipe.submit(0, _requests(0))
        batch = pipe.collect(0, n=4)
    assert sorted(c.score for c in batch) == ["gen:p0_0:3"] * 2 + ["gen:p0_1:3"] * 2


@pytest.mark.parametrize(("admit_min", "cohorts"), [(1, "8,1,1,1,1"), (4, "8,4"), (None, "8,4")])
def test_generator_admits_new_sequences_in_cohorts(admit_min, cohorts):
    # 12 sequences of lengths 1..12, 8 rows: after the first 8 are admitted one sequence ends
    # per step; with admit_min 4 (None: half of max_concurrent) the generator waits for 4 free
    # rows and admits them together, with admit_min 1 it tops the batch up every step.
    spec = EngineSpec(make_engine, {"n_tokens": 0}, threads=1)
    reqs = [Request(f"p{n}", (1,), max_new_tokens=n) for n in range(1, 13)]
    with Pipeline([spec], {"w": torch.zeros(1)}, version=0, max_lag=0, max_concurrent=8,
                  admit_min=admit_min) as pipe:
        pipe.submit(0, reqs)
        batch = pipe.collect(0, n=12)
    assert max((c.text.split("|")[0] for c in batch), key=len) == cohorts


# -- fixed schedule (fixed_lag = d) ------------------------------------------------------------
def _run_fixed(fixed_lag: int, max_lag: int, trainer_sleep_s: float, gen_sleep_s: float,
               steps: int = 7, start: int = 3):
    """The trainer loop of `_run` on the fixed schedule; per batch, the set of token versions
    and the cohort sizes the engine saw when it finished the batch."""
    spec = EngineSpec(make_engine, {"n_tokens": 3, "step_sleep_s": gen_sleep_s}, threads=1)
    versions, cohorts, mismatches = {}, {}, 0
    with Pipeline([spec], {"w": torch.tensor([float(start)])}, version=start, max_lag=max_lag,
                  max_concurrent=64, fixed_lag=fixed_lag) as pipe:
        for b in range(start, start + max_lag + 1):
            pipe.submit(b, _requests(b))
        for v in range(start, start + steps):
            batch = pipe.collect(v, n=4)
            versions[v] = {ver for c in batch for ver in c.versions}
            cohorts[v] = {c.text.split("|")[0] for c in batch}
            mismatches += sum(lp != ver for c in batch for lp, ver in zip(c.logprobs, c.versions))
            time.sleep(trainer_sleep_s)
            pipe.push_weights({"w": torch.tensor([float(v + 1)])}, v + 1)
            pipe.submit(v + max_lag + 1, _requests(v + max_lag + 1))
    return versions, cohorts, mismatches


@pytest.mark.parametrize(("fixed_lag", "trainer_sleep_s", "gen_sleep_s"),
                         [(1, 0.1, 0.0), (1, 0.0, 0.01), (2, 0.1, 0.0), (0, 0.0, 0.0)],
                         ids=["d1-slow-trainer", "d1-slow-generator", "d2-slow-trainer", "d0"])
def test_fixed_schedule_generates_batch_s_with_version_s_minus_d(fixed_lag, trainer_sleep_s,
                                                                 gen_sleep_s):
    # Whatever the timing, batch v is made by exactly version max(v − d, start): a slow trainer
    # does not let the generator use an older version (it waits), a slow generator does not
    # get a newer one (the version it needs stays in its slot after later pushes).
    start = 3
    versions, cohorts, mismatches = _run_fixed(fixed_lag, 2, trainer_sleep_s, gen_sleep_s,
                                               start=start)
    assert mismatches == 0  # the weights loaded are those of the recorded version
    assert versions == {v: {max(v - fixed_lag, start)} for v in versions}
    # one cohort per batch: the engine saw submits of exactly one batch (4 requests) each
    assert all(texts == {",".join(["4"] * (v - start + 1))} for v, texts in cohorts.items())


def test_fixed_lag_must_keep_the_lag_bound():
    spec = EngineSpec(make_engine, {}, threads=1)
    with pytest.raises(ValueError, match="fixed_lag = 3 must be in"):
        Pipeline([spec], {"w": torch.zeros(1)}, version=0, max_lag=2, max_concurrent=4,
                 fixed_lag=3)


def test_colocated_generators_sleep_during_the_update_and_wake_before_the_push():
    spec = EngineSpec(make_engine, {"n_tokens": 2}, threads=1)
    with Pipeline([spec, spec], {"w": torch.tensor([0.0])}, version=0, max_lag=0,
                  max_concurrent=8, sleep_during_update=True) as pipe:
        pipe.submit(0, _requests(0))
        assert {c.text for c in pipe.collect(0, n=4)} == {"2|"}  # a group per generator
        pipe.pause_for_update()  # both generators acknowledged: asleep now
        pipe.push_weights({"w": torch.tensor([1.0])}, 1)  # wakes them, then the new weights
        pipe.submit(1, _requests(1))
        batch = pipe.collect(1, n=4)
    assert {c.text.split("|")[1] for c in batch} == {"sleep,wake_up"}
    assert all(c.logprobs == [1.0, 1.0] for c in batch)


def test_a_push_writes_only_the_layout_bytes():
    spec = EngineSpec(make_engine, {}, threads=1)
    weights = {"w": torch.zeros(3), "tied": torch.zeros(4, 2)}
    weights["alias"] = weights["tied"]  # a second name of the same tensor is not sent again
    with Pipeline([spec], weights, version=0, max_lag=1, max_concurrent=4,
                  dtype="bfloat16") as pipe:
        assert pipe.bytes_pushed == (3 + 8) * 2
        assert dict(pipe.layout.aliases) == {"alias": "tied"}
        pipe.push_weights(weights, 1)
        assert pipe.bytes_pushed == (3 + 8) * 2
        with pytest.raises(ValueError, match="not a tensor of this pipeline's layout"):
            pipe.push_weights({"other": torch.zeros(1)}, 2)


def test_a_failed_start_leaves_no_weight_files():
    import os

    from scalerl.rollout.weight_transfer import _shm_dir, weight_layout

    class Mislabelled:  # a stream whose tensors are not its layout's
        layout = weight_layout([("w", torch.zeros(1))])

        def __iter__(self):
            yield "x", torch.zeros(1)

    mine = f"scalerl-weights-{os.getpid()}-"
    spec = EngineSpec(make_engine, {"fail": True}, threads=1)
    with pytest.raises(GeneratorError):  # the generator fails
        Pipeline([spec], {"w": torch.zeros(1)}, version=0, max_lag=1, max_concurrent=4)
    with pytest.raises(ValueError, match="'x' is not a tensor"):  # the first push fails
        Pipeline([spec], Mislabelled(), version=0, max_lag=1, max_concurrent=4)
    assert not [p for p in os.listdir(_shm_dir()) if p.startswith(mine)]
