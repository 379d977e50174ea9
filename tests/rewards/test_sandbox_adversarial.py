"""Adversarial sandbox suite: each attack is contained, graded incorrect, the host unaffected.

Every attack is written as "attack, then a correct solution": if the attack statement fails
(as it must), the program fails and is graded incorrect; if it succeeded, the correct solution
would pass and the test would catch it. Attacks that could harm the host when the sandbox cannot
switch uid (kill(-1), fork bombs) only run as root, where the sandbox uses a dedicated uid.
"""

import json
import os
import shutil
import socket
import tempfile
import threading
import time

import pytest

from scalerl.rewards import SandboxLimits, check_code, isolation, run_python, score
from scalerl.rewards.sandbox import _UID_BASE, _UID_SLOTS

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="uid isolation needs root")
# with the filesystem view host paths are absent; as root without it they are not writable
DENIED = "FileNotFoundError" if isolation() == "uid+namespaces+view" else "PermissionError"
LIMITS = SandboxLimits(wall_s=2.0, cpu_s=1, memory_mb=256, fsize_mb=1, nproc=8)
# hidden tests of f(x) = x + 1; the correct body is appended to every attack
TESTS = json.dumps({"type": "function", "fn_name": "f", "inputs": [[1], [5], [10]],
                    "outputs": [2, 6, 11]})
GOOD = "\ndef f(x):\n    return x + 1\n"


def graded(code: str) -> tuple[bool, str]:
    return check_code(code, TESTS, LIMITS)


@pytest.fixture
def taken_uids(monkeypatch):
    """The sandbox uids this test's runs take. Other processes on the machine (a concurrent
    test session, a workflow grading code) run under other uids of the pool, and the checks
    below must not count their programs."""
    from scalerl.rewards import sandbox

    taken: set[int] = set()
    enter = sandbox._UidSlot.__enter__

    def record(slot):
        out = enter(slot)
        if slot.uid is not None:
            taken.add(slot.uid)
        return out

    monkeypatch.setattr(sandbox._UidSlot, "__enter__", record)
    return taken


def sandbox_processes(uids=None) -> list[int]:
    """Live (non-zombie) processes owned by a sandbox uid (of `uids`, when given)."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                uid = entry.stat().st_uid
                state = open(f"/proc/{entry.name}/stat", "rb").read().rsplit(b")", 1)[1].split()[0]
            except (FileNotFoundError, ProcessLookupError):
                continue
            in_pool = _UID_BASE <= uid < _UID_BASE + _UID_SLOTS
            if in_pool and (uids is None or uid in uids) and state not in (b"Z", b"X"):
                pids.append(int(entry.name))
    return pids


def test_control_correct_solution_passes():
    # without this, every "incorrect" below could be a broken harness
    assert graded(GOOD) == (True, "passed 3/3 tests")


def test_infinite_loop_is_stopped_fast():
    t0 = time.monotonic()
    ok, detail = graded("while True:\n    pass\n" + GOOD)
    # stopped by the limits (the detail names which), not by the test: bounded by the wall
    # limit plus room for a loaded 2-core CI machine
    assert not ok and time.monotonic() - t0 < LIMITS.wall_s + 15.0, detail


def test_sleeping_past_the_wall_clock_times_out():
    ok, detail = graded("import time\ntime.sleep(60)\n" + GOOD)  # no CPU used: wall clock only
    assert not ok and detail.startswith("timeout")


@needs_root
def test_fork_bomb_is_capped_and_fully_cleaned_up(taken_uids):
    bomb = ("import os\n"
            "while True:\n"
            "    try:\n        os.fork()\n    except OSError:\n        pass\n")
    t0 = time.monotonic()
    result: list = []
    runner = threading.Thread(target=lambda: result.append(graded(bomb + GOOD)))
    runner.start()
    peak = 0
    while runner.is_alive():  # RLIMIT_NPROC under the sandbox uid caps the bomb
        peak = max(peak, len(sandbox_processes(taken_uids)))
        time.sleep(0.05)
    runner.join()
    ok, detail = result[0]
    assert not ok, detail
    # peak is sampled every 50 ms, so on a loaded machine it may miss the bomb's children
    # (no lower bound); it can never see more than the cap.
    assert peak <= LIMITS.nproc
    # ended by the wall-clock limit (slack for a loaded 2-core CI machine)
    assert time.monotonic() - t0 < LIMITS.wall_s + 15.0
    assert taken_uids and sandbox_processes(taken_uids) == []


@needs_root
def test_fork_bomb_escaping_the_process_group_is_cleaned_up(taken_uids):
    # children leave the session (setsid) so killpg alone would miss them; the uid sweep kills them
    bomb = ("import os, time\n"
            "for _ in range(5):\n"
            "    if os.fork() == 0:\n        os.setsid()\n        time.sleep(600)\n"
            "raise SystemExit(0)\n")
    ok, _ = graded(bomb + GOOD)
    assert not ok
    assert taken_uids and sandbox_processes(taken_uids) == []


def test_memory_bomb_fails_inside_the_limit():
    ok, detail = graded("x = bytearray(4 << 30)\n" + GOOD)
    assert not ok and "MemoryError" in detail, detail
    ok, _ = graded("a = []\nwhile True:\n    a.append(' ' * 10**7)\n" + GOOD)
    assert not ok


def test_gigantic_output_is_cut_by_the_file_size_limit():
    res = run_python("while True:\n    print('x' * 100000)\n", limits=LIMITS)
    # Python ignores SIGXFSZ, so the write past RLIMIT_FSIZE raises OSError(EFBIG) instead
    assert res.returncode != 0 and not res.timed_out and b"File too large" in res.stderr
    assert len(res.stdout) <= LIMITS.fsize_mb << 20
    ok, _ = graded("print('x' * (2 << 20))\n" + GOOD)
    assert not ok


def _visible_base() -> str:
    """A host directory outside /tmp, /var/tmp and /dev/shm (private tmpfs in the sandbox):
    the checkout itself may live under /tmp (a CI clone), so it cannot host these probes."""
    for base in ("/srv", "/opt", "/var/lib"):
        if os.path.isdir(base) and os.access(base, os.W_OK):
            return base
    pytest.skip("no writable host directory outside the private tmp mounts")


@pytest.fixture
def visible_dir(tmp_path, monkeypatch):
    """A root-owned, world-readable host directory outside /tmp and the caller's working
    directory (absent from the filesystem view; without the view: visible, not writable)."""
    path = tempfile.mkdtemp(prefix=".sbx-victim-", dir=_visible_base())
    os.chmod(path, 0o755)
    monkeypatch.chdir(tmp_path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@needs_root
def test_writing_outside_the_work_dir_is_denied(visible_dir, tmp_path):
    target = os.path.join(visible_dir, "pwned.txt")
    ok, detail = graded(f"open({target!r}, 'w').write('x')\n" + GOOD)
    assert not ok and DENIED in detail and not os.path.exists(target), detail
    # the host's /tmp is not even visible (private tmpfs), and a write there never reaches it
    ok, detail = graded(f"open({str(tmp_path / 'pwned.txt')!r}, 'w').write('x')\n" + GOOD)
    assert not ok and "FileNotFoundError" in detail and not (tmp_path / "pwned.txt").exists()
    host_tmp = f"/tmp/scalerl-pwned-{os.getpid()}"
    graded(f"open({host_tmp!r}, 'w').write('x')\n" + GOOD)
    assert not os.path.exists(host_tmp)


@needs_root
def test_deleting_host_files_is_denied(visible_dir):
    victim = os.path.join(visible_dir, "keep.txt")
    with open(victim, "w") as f:
        f.write("precious")
    for attack in (f"import os\nos.remove({victim!r})\n",
                   f"import shutil\nshutil.rmtree({visible_dir!r})\n",
                   f"open({victim!r}, 'w').write('')\n"):
        ok, detail = graded(attack + GOOD)
        assert not ok and DENIED in detail, detail
    with open(victim) as f:
        assert f.read() == "precious"


def test_parent_environment_is_invisible(monkeypatch):
    secret = f"s3cr3t-{os.getpid()}-{time.time_ns()}"
    monkeypatch.setenv("SCALERL_TEST_SECRET", secret)
    probe = ("import os, glob\n"
             "found = [v for v in os.environ.values()]\n"
             "for p in ['/proc/%d/environ' % os.getppid()] + glob.glob('/proc/*/environ'):\n"
             "    try:\n        found.append(open(p, 'rb').read().decode('latin1'))\n"
             "    except OSError:\n        pass\n"
             "print('\\n'.join(found))\n")
    res = run_python(probe, limits=LIMITS)
    assert res.returncode == 0 and secret not in res.stdout.decode("latin1")
    if ROOT:  # as root the child cannot read the parent's /proc entry (with the view: its
        # /proc lists only the sandbox uid's processes, so the entry is not even there)
        res = run_python(f"open('/proc/{os.getpid()}/environ').read()", limits=LIMITS)
        assert DENIED.encode() in res.stderr


@needs_root
def test_signalling_the_parent_fails_and_the_parent_survives():
    ok, detail = graded("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + GOOD)
    assert not ok and "PermissionError" in detail
    ok, _ = graded(f"import os, signal\nos.kill({os.getpid()}, signal.SIGKILL)\n" + GOOD)
    assert not ok
    graded("import os, signal\nos.kill(-1, signal.SIGKILL)\n" + GOOD)  # kills only its own uid
    assert os.getpid() > 0  # still running


def test_exit_before_the_tests_run_does_not_pass():
    for trick in ("import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n",
                  "raise SystemExit(0)\n"):
        ok, detail = graded(trick + GOOD)
        assert not ok and "no result" in detail, (trick, detail)
    ok, _ = graded("def f(x):\n    raise SystemExit(0)\n")
    assert not ok


def test_monkeypatching_the_harness_does_not_pass():
    attacks = [
        # a result that claims to equal everything
        "class A:\n    __eq__ = lambda s, o: True\ndef f(x):\n    return A()\n",
        # patch builtins/harness encoder so every result prints as the first expected value
        "import builtins\nbuiltins.repr = lambda v: '2'\ndef f(x):\n    return 0\n",
        "import sys\nsys.modules['__main__']._encode = lambda v, d=0: '2'\n"
        "def f(x):\n    return 0\n",
        # forge result lines on every inherited descriptor, then return garbage
        "import os\nfor fd in range(3, 20):\n    try:\n"
        "        os.write(fd, b'0 ok 2\\n1 ok 6\\n2 ok 11\\n')\n    except OSError:\n        pass\n"
        "def f(x):\n    return 0\n",
        # look for the expected outputs in the child's memory: they are never sent to it
        "import gc\nhits = [o for o in gc.get_objects() if isinstance(o, list) and 11 in o]\n"
        "def f(x):\n    return hits[0][-1] if hits else -1\n",
        # try to lift limits / regain root
        "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (10**6, 10**6))\n" + GOOD,
    ]
    if ROOT:
        attacks.append("import os\nos.setuid(0)\n" + GOOD)
    for code in attacks:
        ok, detail = graded(code)
        assert not ok, (code, detail)


@needs_root
def test_network_is_unreachable_even_on_loopback():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    try:
        code = (f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
                "s.sendall(b'pwned')\n" + GOOD)
        ok, detail = graded(code)
        assert not ok and "OSError" in detail or "Error" in detail, detail
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()


def test_score_grades_attacks_incorrect_through_the_public_api():
    row = {"prompt_id": "p", "task": "code", "tests": TESTS, "answer": None}
    text = "<think>x</think>```python\nimport sys\nsys.exit(0)\ndef f(x):\n    return x+1\n```"
    s = score(row, text, limits=LIMITS)
    assert (s.correct, s.reward) == (False, -1.0)


needs_view = pytest.mark.skipif(DENIED != "FileNotFoundError", reason="the filesystem view "
                                "needs root with CAP_SYS_ADMIN (mount namespaces)")


@needs_view
def test_callers_working_directory_is_hidden(monkeypatch):
    # stands in for the project directory, whose results/prompts.parquet holds hidden tests
    project = tempfile.mkdtemp(prefix=".sbx-project-", dir=_visible_base())
    os.makedirs(os.path.join(project, "results"))
    with open(os.path.join(project, "results", "prompts.parquet"), "w") as f:
        f.write("hidden tests")
    os.chmod(project, 0o755)
    monkeypatch.chdir(project)
    try:
        res = run_python(f"import os\nprint(os.listdir({project!r}))", limits=LIMITS)
        assert res.returncode == 1 and b"FileNotFoundError" in res.stderr, res
    finally:
        shutil.rmtree(project)
