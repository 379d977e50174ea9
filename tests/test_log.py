"""Progress output (scalerl.utils.log): one updating line on a terminal, plain lines in logs."""

import io
import re

from scalerl.utils.log import ProgressLine, progress

STAMP = r"\[scalerl \d\d:\d\d:\d\d\] "


class FakeStream(io.StringIO):
    """A text stream that says whether it is a terminal."""

    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _two_steps(stream, width=200):
    clock = FakeClock()
    line = ProgressLine("train steps 1..4:", 4, stream=stream, clock=clock, width=width)
    clock.now += 2.0  # 1 step in 2 s: 0.50 step/s, 3 left -> 6 s
    line.update(1, "step 1 loss +0.1000")
    clock.now += 6.0  # 3 steps in 8 s: 0.375 step/s, 1 left -> 2.67 s
    line.update(3, "step 3 loss +0.0500")
    return line


def test_log_stream_gets_one_plain_line_per_update():
    stream = FakeStream(tty=False)
    _two_steps(stream).close()
    lines = stream.getvalue().split("\n")
    assert lines[-1] == "" and len(lines) == 3  # two lines, each ended; close adds nothing
    assert re.fullmatch(STAMP + r"train steps 1\.\.4: 1/4 steps, 0\.50 step/s, eta 0:06, "
                        r"step 1 loss \+0\.1000", lines[0])
    assert re.fullmatch(STAMP + r"train steps 1\.\.4: 3/4 steps, 0\.38 step/s, eta 0:03, "
                        r"step 3 loss \+0\.0500", lines[1])
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()


def test_terminal_gets_one_line_rewritten_in_place():
    stream = FakeStream(tty=True)
    line = _two_steps(stream)
    text = stream.getvalue()
    assert "\n" not in text  # still one line on screen
    frames = text.split("\r")[1:]  # each update: carriage return, text, clear-to-end-of-line
    assert len(frames) == 2 and all(f.endswith("\x1b[K") for f in frames)
    assert re.fullmatch(STAMP + r"train steps 1\.\.4: 3/4 steps, 0\.38 step/s, eta 0:03, "
                        r"step 3 loss \+0\.0500\x1b\[K", frames[1])
    line.close()
    assert stream.getvalue() == text + "\n"  # close ends the line once
    line.close()
    assert stream.getvalue() == text + "\n"


def test_terminal_line_is_cut_to_the_width():
    stream = FakeStream(tty=True)
    _two_steps(stream, width=40).close()
    frames = stream.getvalue().rstrip("\n").split("\r")[1:]
    assert [len(f.removesuffix("\x1b[K")) for f in frames] == [39, 39]


def test_progress_message_ends_a_live_terminal_line_first():
    stream = FakeStream(tty=True)
    line = _two_steps(stream)
    progress("a warning", stream=stream)
    text = stream.getvalue()
    assert re.search(r"step 3 loss \+0\.0500\x1b\[K\n" + STAMP + r"a warning\n$", text)
    n_lines = text.count("\n")
    line.update(4)  # the next update starts a fresh line below the message
    assert stream.getvalue().count("\n") == n_lines
    assert stream.getvalue().endswith("4/4 steps, 0.50 step/s, eta 0:00\x1b[K")


def test_stream_without_isatty_counts_as_a_log():
    class Bare:  # e.g. a wrapper object with write/flush only
        def __init__(self):
            self.parts = []

        def write(self, s):
            self.parts.append(s)

        def flush(self):
            pass

    stream = Bare()
    ProgressLine("eval:", 2, "sample", stream=stream, clock=FakeClock()).update(0)
    assert "".join(stream.parts).endswith("eval: 0/2 samples, ? sample/s, eta ?\n")
