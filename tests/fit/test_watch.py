"""`scalerl watch`: follows logs while a writer appends to them, stops by itself, Ctrl-C.

The writer is a thread writing TensorBoard event files with torch's SummaryWriter. It is
driven by the watch's own wait between polls (the test's `wait` lets the writer append the
next batch and returns once it is flushed), so what each poll sees does not depend on the
machine's speed; the event waits' timeouts only turn a hang into a failure.
"""

import argparse
import io
import threading

import numpy as np
import pandas as pd
import pytest

from scalerl.cli import main
from scalerl.fit.commands.watch import add_arguments, watch
from scalerl.fit.curves.sigmoid import sigmoid
from scalerl.utils.log import LiveBlock

RUNS = {"lr_1e-6": 0.70, "lr_3e-6": 0.52}
BATCHES = [range(0, 101, 20), range(120, 201, 20), range(220, 301, 20), range(320, 401, 20)]
GUARD_S = 120  # only a hang reaches it


def value(run, step):
    noise = np.random.default_rng([step, len(run)]).normal(0, 0.008)
    return 0.2 if step == 0 else float(sigmoid(step, RUNS[run], 2.0, 120.0, 0.2) + noise)


def write_batch(writers, steps):
    for step in steps:
        for run, w in writers.items():
            w.add_scalar("val/acc", value(run, step), step)
    for w in writers.values():
        w.flush()


def parse(argv):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


class Writer:
    """A thread that appends the next batch each time the watch waits."""

    def __init__(self, root, batches):
        self.root, self.batches = root, list(batches)
        self.go, self.flushed = threading.Event(), threading.Event()
        self.waits = 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        from torch.utils.tensorboard import SummaryWriter

        writers = None
        for batch in self.batches:
            if not self.go.wait(GUARD_S):
                return
            self.go.clear()
            writers = writers or {r: SummaryWriter(str(self.root / r)) for r in RUNS}
            write_batch(writers, batch)
            self.flushed.set()
        for w in writers.values():
            w.close()

    def wait(self, seconds):
        """The watch's wait between polls: one more batch, flushed, then return."""
        assert seconds == 5.0
        self.waits += 1
        self.go.set()
        assert self.flushed.wait(GUARD_S), "the writer thread did not write"
        self.flushed.clear()


def test_watch_picks_up_appended_points_and_stops_at_the_final_step(tmp_path):
    root, out = tmp_path / "tb", tmp_path / "watch"
    writer = Writer(root, BATCHES)  # nothing written yet: the first poll finds no input
    stream = io.StringIO()
    args = parse([str(root), "--metric", "val/acc", "--final-step", "400", "--interval", "5",
                  "--bootstrap", "20", "--out", str(out)])
    assert watch(args, wait=writer.wait, block=LiveBlock(stream=stream)) == 0
    writer.thread.join(GUARD_S)
    assert writer.waits == 4  # poll 1: no input yet; polls 2-5: one batch more each
    df = pd.read_parquet(out / "predictions.parquet")
    sig = df[df["form"] == "sigmoid"]
    for run in RUNS:
        rows = sig[sig["run"] == run].sort_values("chunk")
        assert rows["chunk"].tolist() == [5, 10, 15, 20]  # 6, 11, 16, 21 points seen
        assert rows["compute_fraction"].tolist() == pytest.approx([0.25, 0.5, 0.75, 1.0])
        assert rows["latest_reward"].iloc[-1] == pytest.approx(value(run, 400), abs=1e-6)
        assert abs(rows["predicted_final"].iloc[-1] - value(run, 400)) < 0.03
    assert (out / "forecast.png").read_bytes()[:4] == b"\x89PNG"
    text = stream.getvalue()  # not a terminal: one table per change
    assert text.count("run      progress") == 4 and "400/400" in text
    last = text.rsplit("val/acc against step", 1)[1]
    assert "2 finished" in last and last.count("finished") == 3


def test_watch_stops_on_ctrl_c_with_its_files_whole(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    root, out = tmp_path / "tb", tmp_path / "watch"
    writers = {r: SummaryWriter(str(root / r)) for r in RUNS}
    write_batch(writers, BATCHES[0])
    calls = []

    def wait(seconds):
        calls.append(seconds)
        if len(calls) == 2:
            raise KeyboardInterrupt
        write_batch(writers, BATCHES[len(calls)])

    args = parse([str(root), "--metric", "val/acc", "--final-step", "400", "--interval", "5",
                  "--bootstrap", "0", "--out", str(out)])
    assert watch(args, wait=wait, block=LiveBlock(stream=io.StringIO())) == 130
    df = pd.read_parquet(out / "predictions.parquet")  # whole: the last refit's
    assert sorted(set(df["chunk"])) == [5, 10]
    assert (out / "forecast.png").read_bytes()[:4] == b"\x89PNG"
    # --max-polls: a run that never finishes is left after that many polls
    calls.clear()
    args = parse([str(root), "--metric", "val/acc", "--final-step", "1000", "--interval", "5",
                  "--bootstrap", "0", "--out", str(out), "--max-polls", "2"])
    assert watch(args, wait=lambda s: calls.append(s), block=LiveBlock(stream=io.StringIO())) \
        == 0
    assert calls == [5.0]
    for w in writers.values():
        w.close()


def test_watch_cli_on_finished_logs_and_bad_options(tmp_path, capsys):
    from torch.utils.tensorboard import SummaryWriter

    root = tmp_path / "tb"
    writers = {r: SummaryWriter(str(root / r)) for r in RUNS}
    for batch in BATCHES:
        write_batch(writers, batch)
    out = tmp_path / "watch"
    # every run is at its final step: one poll, no wait
    assert main(["watch", str(root), "--metric", "val/acc", "--final-step", "400",
                 "--bootstrap", "0", "--out", str(out)]) == 0
    assert "1 poll(s)" in capsys.readouterr().err
    assert len(pd.read_parquet(out / "predictions.parquet")) == 4  # 2 runs x 2 forms
    assert main(["watch", str(root), "--metric", "val/acc", "--final-step", "400",
                 "--interval", "0"]) == 2
    assert "--interval must be at least 0.1 s" in capsys.readouterr().err


def test_live_block_redraws_in_place_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    stream = Tty()
    block = LiveBlock(stream=stream, width=40)
    block.show(["title", "row a", "row b"], "poll 1")
    assert stream.getvalue() == "".join(f"\r{x}\x1b[K\n" for x in
                                        ["title", "row a", "row b", "poll 1"])
    stream.seek(0)
    stream.truncate()
    block.show(["title", "row a"], "poll 2")  # one line fewer: the old last line is blanked
    assert stream.getvalue() == ("\x1b[4A" + "".join(f"\r{x}\x1b[K\n" for x in
                                                    ["title", "row a", "poll 2"])
                                 + "\x1b[K\n\x1b[1A")
    stream.seek(0)
    stream.truncate()
    block.show(["title", "x" * 60], "")
    assert "\x1b[3A" in stream.getvalue() and "x" * 39 + "\x1b[K" in stream.getvalue()
    plain = io.StringIO()  # not a terminal: printed when the lines change, status ignored
    log = LiveBlock(stream=plain)
    log.show(["title", "row"], "poll 1")
    log.show(["title", "row"], "poll 2")
    log.show(["title", "row 2"], "poll 3")
    lines = plain.getvalue().splitlines()
    assert len(lines) == 4 and lines[0].endswith("title") and lines[3] == "row 2"
