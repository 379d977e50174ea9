"""Program tests (HumanEval / MBPP / AceCode / KodCode style) in the sandbox: a run passes only
when the harness proves that every test ran to its end (the run's nonce, written last), and
every reward-hacking attempt below fails with its reason recorded.

Each attack is "attack + a wrong or a correct solution": where the attack is the only way a
wrong solution could pass, it is paired with a wrong one; where the attack could stop the
tests early, with a correct one (so only the attack can explain the fail). The control test
shows the harness passes the honest correct solution.
"""

import json
import os

import pytest

from scalerl.rewards import SandboxLimits, check_code, isolation, run_python, sandbox
from scalerl.rewards.code_verifier import program_verdict
from scalerl.rewards.sandbox import RunResult

LIMITS = SandboxLimits(wall_s=5.0, cpu_s=3, memory_mb=512, fsize_mb=1, nproc=8)
ROOT = os.geteuid() == 0
VIEW = isolation() == "uid+namespaces+view"
# HumanEval style: setup = the prompt, check(candidate) appended
HUMANEVAL = json.dumps({
    "type": "program", "entry_point": "add",
    "setup": "def add(a, b):\n    \"\"\"Add two integers. >>> add(2, 3)\n    5\n    \"\"\"\n",
    "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n"
            "    assert candidate(-1, 1) == 0\n    assert candidate(10, 32) == 42\n\n"
            "check(candidate)\n"})
# MBPP style: bare asserts calling the function by name, a setup import
MBPP = json.dumps({"type": "program", "setup": "import math", "entry_point": "area",
                   "test": "assert math.isclose(area(1), 3.14159, rel_tol=1e-5)\n"
                           "assert area(0) == 0\n"})
GOOD = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a * b\n"
GOOD_AREA = "def area(r):\n    return 3.14159 * r * r\n"
WRONG_AREA = "def area(r):\n    return 3 * r * r\n"


def graded(code: str, tests: str = HUMANEVAL) -> tuple[bool, str]:
    return check_code(code, tests, LIMITS)


def test_control_correct_passes_wrong_fails():
    assert graded(GOOD) == (True, "passed: the test program ran to the end")
    ok, detail = graded(WRONG)
    assert not ok and detail.startswith("test failed: test program: AssertionError"), detail
    assert graded(GOOD_AREA, MBPP)[0] and not graded(WRONG_AREA, MBPP)[0]


@pytest.mark.parametrize("attack,solution,reason", [
    # exits before the tests: the correct solution cannot have been checked
    ("import os\nos._exit(0)\n", GOOD, "exited before the tests finished (exit code 0)"),
    ("import sys\nsys.exit(0)\n", GOOD, "test failed: solution: SystemExit: 0"),
    ("raise SystemExit(0)\n", GOOD, "test failed: solution: SystemExit: 0"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", GOOD,
     "exited before the tests finished (killed by signal 9"),
    # inside the entry point
    ("", "def add(a, b):\n    import os\n    os._exit(0)\n",
     "exited before the tests finished (exit code 0)"),
    ("", "def add(a, b):\n    import sys\n    sys.exit(0)\n",
     "test failed: test program: SystemExit: 0"),
    # SystemExit from a patched function the tests call
    ("import math\ndef _bye(*a, **k):\n    raise SystemExit(0)\nmath.isclose = _bye\n",
     WRONG_AREA, "test failed: test program: SystemExit: 0"),
    # patched builtins reach only the solution: the tests use their own copy
    ("import builtins\nbuiltins.print = lambda *a, **k: None\n"
     "builtins.AssertionError = type('Quiet', (Exception,), {})\n"
     "builtins.isinstance = lambda *a: True\n", WRONG,
     "test failed: test program: AssertionError"),
])
def test_early_exits_and_patches_fail_with_their_reason(attack, solution, reason):
    tests = MBPP if "area" in solution else HUMANEVAL
    ok, detail = graded(attack + solution, tests)
    assert not ok and detail.startswith(reason), detail


def test_printed_or_forged_success_lines_fail():
    guess = "done " + "0" * 32 + " 1\n"
    ok, detail = graded(f"print({guess!r})\nimport os\nos._exit(0)\n" + GOOD)
    assert not ok and detail.startswith("exited before the tests finished"), detail
    forge = ("import os\nfor fd in range(3, 64):\n    try:\n"
             f"        os.write(fd, {guess.encode()!r})\n    except OSError:\n        pass\n"
             "os._exit(0)\n")
    ok, detail = graded(forge + WRONG)
    assert not ok and detail == ("forged completion report: a 'done' line without this "
                                 "run's nonce"), detail
    # a forged line after a real run (e.g. from an atexit handler) also fails: the report
    # must be last, and the runner exits at once so no handler of the program runs
    ok, detail = graded("import atexit, os\natexit.register(lambda: os.write(3, b'x'))\n" + GOOD)
    assert ok, detail


def test_the_verdict_needs_the_exact_nonce_line_last():
    def res(results: bytes, rc: int = 0) -> RunResult:
        return RunResult(returncode=rc, timed_out=False, stdout=b"", stderr=b"",
                         results=results, wall_s=0.1, nonce="ab" * 16)

    nonce = "ab" * 16
    assert program_verdict(res(f"done {nonce} 2\n".encode()), 5)[0]
    assert not program_verdict(res(f"done {nonce} 2\n".encode(), rc=1), 5)[0]
    assert "after the completion report" in program_verdict(
        res(f"done {nonce} 2\nextra\n".encode()), 5)[1]
    assert "forged" in program_verdict(res(b"done 1234 2\n"), 5)[1]
    assert not program_verdict(res(f"done {nonce} 2\ndone {nonce} 2\n".encode()), 5)[0]
    assert program_verdict(RunResult(None, True, b"", b"", b"", 5.0, nonce), 5) == (
        False, "timeout after 5 s")


def test_a_child_that_outlives_the_parent_cannot_report():
    # the run's process exits at once; its forked copy would run the real tests, but only the
    # original process may report, and the copy is killed with the run
    ok, detail = graded("import os\nif os.fork() != 0:\n    os._exit(0)\n" + GOOD)
    assert not ok and detail.startswith("exited before the tests finished"), detail
    # a detached child that tries to forge the report after the parent is gone; it prints
    # its pid first, so we can see that it did not outlive the run
    late = ("import os, time\nr, w = os.pipe()\nif os.fork() == 0:\n    os.setsid()\n"
            "    print(os.getpid(), flush=True)\n    os.write(w, b'x')\n    time.sleep(0.5)\n"
            "    for fd in range(3, 64):\n        try:\n"
            "            os.write(fd, b'done ' + b'0' * 32 + b' 1\\n')\n"
            "        except OSError:\n            pass\n    os._exit(0)\n"
            "os.read(r, 1)  # the parent goes on once its child is detached\n")
    spec = json.loads(HUMANEVAL)
    res = run_python(late + WRONG, mode="program", limits=LIMITS, program=spec)
    ok, detail = program_verdict(res, LIMITS.wall_s)
    assert not ok, detail
    pid = int(res.stdout.split()[0])
    if ROOT:  # killed with the run's uid (its /proc entry is gone, or a zombie not yet reaped)
        try:
            state = open(f"/proc/{pid}/stat", "rb").read().rsplit(b")", 1)[1].split()[0]
        except FileNotFoundError:
            state = b"gone"
        assert state in (b"gone", b"Z", b"X"), state


ALWAYS_EQUAL = "class A:\n    def __eq__(self, other):\n        return True\n"


@pytest.mark.parametrize("code", [
    ALWAYS_EQUAL + "def add(a, b):\n    return A()\n",
    ALWAYS_EQUAL + "def add(a, b):\n    return [A()][0:1][0]\n",
    "class I(int):\n    def __eq__(self, other):\n        return True\n"
    "def add(a, b):\n    return I(0)\n",
    "class T:\n    def __bool__(self):\n        return True\n    __eq__ = lambda s, o: True\n"
    "def add(a, b):\n    return T()\n",
    # the entry point replaced by a class whose instances equal everything
    ALWAYS_EQUAL.replace("class A", "class add") + "    def __init__(self, a, b):\n        pass\n",
    # a callable object as the entry point
    ALWAYS_EQUAL + "class F:\n    def __call__(self, a, b):\n        return A()\nadd = F()\n",
    # an object that hides the always-equal value in an attribute or a slot
    ALWAYS_EQUAL + "class Box:\n    __slots__ = ('v',)\n    def __init__(self):\n"
    "        self.v = A()\ndef add(a, b):\n    return [Box()]\n",
    ALWAYS_EQUAL + "import types\ndef add(a, b):\n    return types.SimpleNamespace(v=A())\n",
])
def test_objects_that_claim_equality_are_refused(code):
    ok, detail = graded(code)
    assert not ok and "TypeError: the solution returned or left" in detail, detail


def test_arguments_changed_in_place_are_checked():
    tests = json.dumps({"type": "program", "entry_point": "fill",
                        "test": "xs = [0, 0]\ncandidate(xs)\nassert xs == [1, 2]\n"})
    ok, detail = graded(ALWAYS_EQUAL + "def fill(xs):\n    xs[:] = [A(), A()]\n", tests)
    assert not ok and "TypeError: the solution returned or left" in detail, detail
    assert graded("def fill(xs):\n    xs[:] = [1, 2]\n", tests)[0]


def test_honest_results_of_many_kinds_pass():
    """Plain data, library objects and the solution's own simple classes are not refused."""
    solution = ("import collections, fractions, decimal, datetime\n"
                "class Node:\n    def __init__(self, v):\n        self.v, self.next = v, None\n"
                "    def __repr__(self):\n        return f'Node({self.v})'\n"
                "Point = collections.namedtuple('Point', 'x y')\n"
                "def f(kind):\n    return {'node': Node(3), 'point': Point(1, 2),\n"
                "            'counter': collections.Counter('aab'),\n"
                "            'frac': fractions.Fraction(1, 3), 'dec': decimal.Decimal('1.5'),\n"
                "            'date': datetime.date(2024, 1, 2), 'deque': collections.deque([1]),\n"
                "            'set': {(1, 2)}, 'gen': (i for i in range(2))}[kind]\n")
    test = ("assert f('node').v == 3 and f('node').next is None\n"
            "assert f('point') == (1, 2) and f('point').x == 1\n"
            "assert f('counter') == {'a': 2, 'b': 1}\n"
            "from fractions import Fraction\nassert f('frac') == Fraction(1, 3)\n"
            "assert str(f('dec')) == '1.5'\nassert f('date').year == 2024\n"
            "assert list(f('deque')) == [1] and f('set') == {(1, 2)}\n"
            "assert list(f('gen')) == [0, 1]\n")
    verdict = graded(solution, json.dumps({"type": "program", "test": test}))
    assert verdict == (True, "passed: the test program ran to the end"), verdict


def test_fake_modules_do_not_reach_the_tests():
    # the setup imports math, the solution rebinds the name and sys.modules to a fake
    fake = ("import sys, types\nmath = types.ModuleType('math')\n"
            "math.isclose = lambda *a, **k: True\nsys.modules['math'] = math\n"
            "sys.modules['random'] = math\n")
    ok, detail = graded(fake + WRONG_AREA, MBPP)
    assert not ok and detail.startswith("test failed: test program: AssertionError"), detail
    tests = json.dumps({"type": "program", "test": "import random\nassert random.random() < 1\n"
                                                   "assert f() == 2\n"})
    ok, detail = graded(fake + "def f():\n    return 1\n", tests)
    assert not ok and "AssertionError" in detail, detail


def test_patching_library_classes_is_refused():
    patch = ("import collections\ncollections.Counter.__eq__ = lambda s, o: True\n"
             "def word_count(s):\n    return collections.Counter()\n")
    tests = json.dumps({"type": "program", "test": "assert word_count('a a') == {'a': 2}\n"})
    ok, detail = graded(patch, tests)
    assert not ok and "the solution changed Counter.__eq__" in detail, detail
    # an honest Counter result passes (a library class, compared as a dict)
    honest = "import collections\ndef word_count(s):\n    return collections.Counter(s.split())\n"
    assert graded(honest, tests)[0]


SECRET = "71523"  # appears only in the test code


@pytest.mark.parametrize("probe", [
    # the harness's memory: gc, frames, tracebacks, generators, tracing, signal handlers
    "import gc\nfound = str(gc.get_objects())\n",
    "import sys\nfound = str(sys._getframe(1).f_locals)\n",
    "import inspect\nfound = str([f.frame.f_locals for f in inspect.stack()])\n",
    "try:\n    raise ValueError\nexcept ValueError as e:\n"
    "    found = str(e.__traceback__.tb_frame.f_back.f_locals)\n",
    "import sys\nsys.settrace(lambda *a: None)\nfound = ''\n",
    "import signal\nsignal.signal(signal.SIGALRM, lambda s, f: None)\nfound = ''\n",
    "import ctypes\nfound = str(ctypes.string_at(id(1), 8))\n",
    "found = open('/proc/self/mem', 'rb').read(1)\n",
    # the disk: the test is never written to a file, the config descriptor is closed
    "import os, sys\nfound = ''\nskip = ('/proc', '/sys', '/usr', '/dev', sys.base_prefix)\n"
    "for root, dirs, files in os.walk('/'):\n"
    "    dirs[:] = [d for d in dirs if not os.path.join(root, d).startswith(skip)]\n"
    "    for f in files:\n        try:\n"
    "            found += open(os.path.join(root, f), 'rb').read(1 << 16).decode('latin1')\n"
    "        except OSError:\n            pass\n",
    "import os\nfound = ''\nfor fd in os.listdir('/proc/self/fd'):\n    try:\n"
    "        found += os.pread(int(fd), 1 << 16, 0).decode('latin1')\n"
    "    except OSError:\n        pass\n",
])
def test_the_tests_and_the_nonce_cannot_be_read(probe):
    """A solution that finds the test's expected value would answer it; it must fail, either
    because the route is closed (the error is the reason) or because nothing was found."""
    tests = json.dumps({"type": "program", "test": f"assert f() == {SECRET}\n"})
    cheat = probe + f"def f():\n    return {SECRET} if {SECRET!r} in found else -1\n"
    ok, detail = graded(cheat, tests)
    assert not ok, detail


def test_pytest_style_tests_with_the_stand_in():
    solution = ("def div(a, b):\n    if b == 0:\n        raise ZeroDivisionError('b is 0')\n"
                "    return a / b\n\ndef show(x):\n    print(f'value={x}')\n")
    test = (
        "import pytest\nfrom solution import div, show\n\n"
        "@pytest.fixture\ndef pair():\n    yield (1, 3)\n\n"
        "@pytest.mark.parametrize('a,b,q', [(6, 3, 2), (1, 4, 0.25), pytest.param(9, 3, 3)])\n"
        "def test_div(a, b, q):\n    assert div(a, b) == pytest.approx(q)\n\n"
        "def test_fixture(pair):\n    assert div(*pair) == pytest.approx(0.3333333, rel=1e-5)\n\n"
        "def test_raises():\n    with pytest.raises(ZeroDivisionError, match='is 0'):\n"
        "        div(1, 0)\n\n"
        "def test_print(capsys):\n    show(3)\n    assert capsys.readouterr().out == 'value=3\\n'\n\n"
        "def test_tmp(tmp_path, monkeypatch):\n    (tmp_path / 'x').write_text('hi')\n"
        "    monkeypatch.setenv('K', 'v')\n    import os\n    assert os.environ['K'] == 'v'\n"
        "    assert (tmp_path / 'x').read_text() == 'hi'\n\n"
        "@pytest.mark.skip(reason='not run')\ndef test_skipped():\n    assert False\n\n"
        "@pytest.mark.xfail\ndef test_expected_failure():\n    assert div(1, 1) == 2\n\n"
        "class TestDiv:\n    def setup_method(self, method):\n        self.n = 8\n\n"
        "    def test_method(self):\n        assert div(self.n, 2) == 4\n")
    tests = json.dumps({"type": "program", "test": test})
    verdict = graded(solution, tests)
    assert verdict == (True, "passed: the test program ran to the end, then 9 tests"), verdict
    ok, detail = graded(solution.replace("a / b", "a // b"), tests)
    assert not ok and detail.startswith("test failed: test_div[1]: AssertionError"), detail
    ok, detail = graded(solution.replace("value=", "v="), tests)
    assert not ok and "test_print" in detail, detail


def test_unittest_style_tests():
    test = ("import unittest\nfrom solution import rev\n\n"
            "class TestRev(unittest.TestCase):\n"
            "    def setUp(self):\n        self.word = 'abc'\n\n"
            "    def test_rev(self):\n        self.assertEqual(rev(self.word), 'cba')\n\n"
            "    def test_empty(self):\n        self.assertEqual(rev(''), '')\n\n"
            "    @unittest.skip('later')\n    def test_later(self):\n        self.fail()\n\n"
            "if __name__ == '__main__':\n    unittest.main()\n")
    tests = json.dumps({"type": "program", "test": test})
    assert graded("def rev(s):\n    return s[::-1]\n", tests) == (
        True, "passed: the test program ran to the end, then 2 tests")
    ok, detail = graded("def rev(s):\n    return s\n", tests)
    assert not ok and "TestRev.test_rev: AssertionError" in detail, detail
    patch = "import unittest\nunittest.TestCase.assertEqual = lambda *a: None\n"
    ok, detail = graded(patch + "def rev(s):\n    return s\n", tests)
    assert not ok and "the solution changed TestCase.assertEqual" in detail, detail


def test_limits_hold_for_test_programs():
    # the CPU limit or the wall clock, whichever comes first on a loaded machine
    ok, detail = graded("while True:\n    pass\n" + GOOD)
    assert not ok and ("killed by signal 9" in detail or detail.startswith("timeout")), detail
    ok, detail = graded("import time\ntime.sleep(60)\n" + GOOD)
    assert not ok and detail.startswith("timeout"), detail
    ok, detail = graded("x = bytearray(4 << 30)\n" + GOOD)
    assert not ok and "MemoryError" in detail, detail
    ok, detail = graded("def add(a, b):\n    import socket\n"
                        "    socket.create_connection(('1.1.1.1', 53), timeout=1)\n    return a + b\n")
    assert not ok and ("OSError" in detail or "Error" in detail), detail
    # the test program itself runs under the limits too (a hanging test is a timeout)
    hang = json.dumps({"type": "program", "test": "import time\ntime.sleep(60)\nassert True\n"})
    ok, detail = graded(GOOD, hang)
    assert not ok and detail.startswith("timeout"), detail


@pytest.fixture(params=["forked", "spawned"])
def server(request, monkeypatch):
    if request.param == "spawned":
        monkeypatch.setattr(sandbox, "_zygotes_usable", False)
    elif not sandbox._zygotes_usable:
        pytest.skip("no fork server on this platform")
    return request.param


def test_program_runs_agree_with_and_without_the_fork_server(server):
    assert graded(GOOD) == (True, "passed: the test program ran to the end")
    assert not graded(WRONG)[0]
    assert not graded("import os\nos._exit(0)\n" + GOOD)[0]


needs_view = pytest.mark.skipif(not VIEW, reason="the filesystem view needs root with "
                                "CAP_SYS_ADMIN (mount namespaces)")


@pytest.mark.skipif(not os.environ.get("SCALERL_REQUIRE_SANDBOX_VIEW"),
                    reason="set by .ci/run as root, where the view's tests must not skip")
def test_the_filesystem_view_is_in_effect_where_required():
    assert isolation() == "uid+namespaces+view"


@needs_view
def test_a_world_readable_results_dir_outside_the_project_is_not_there(server, tmp_path):
    """The issue's probe: a results directory on scratch storage, world-readable, outside
    the project: its prompts.parquet (every hidden test) must not be readable."""
    base = next((b for b in ("/srv", "/opt", "/var/lib") if os.access(b, os.W_OK)), None)
    if base is None:
        pytest.skip("no writable host directory outside /tmp")
    import shutil
    import tempfile

    results = tempfile.mkdtemp(prefix=".sbx-results-", dir=base)
    try:
        os.makedirs(os.path.join(results, "data"))
        path = os.path.join(results, "data", "prompts.parquet")
        with open(path, "wb") as f:
            f.write(b"PAR1" + b"hidden tests" * 100)
        for p in (results, os.path.join(results, "data")):
            os.chmod(p, 0o755)
        os.chmod(path, 0o644)
        res = run_python(f"print(open({path!r}, 'rb').read(4))", limits=LIMITS)
        assert res.returncode == 1 and b"FileNotFoundError" in res.stderr, res
        assert b"PAR1" not in res.stdout
    finally:
        shutil.rmtree(results)


@needs_view
def test_the_filesystem_view_holds_only_what_the_interpreter_needs(server):
    """Every file the program can list lies under the view's read-only paths, /dev, /tmp or
    its own working directory; the rest of the host (the project, /home, /srv, /work, ...)
    is absent."""
    allowed = [*sandbox.VIEW_PATHS, "/dev", "/tmp", "/proc"]
    probe = ("import os\nallowed = " + repr(allowed) + "\nbad = []\n"
             "for root, dirs, files in os.walk('/', followlinks=False):\n"
             "    if root == '/proc' or root.startswith('/proc/'):\n        dirs[:] = []\n"
             "        continue\n"
             "    for name in [n for n in files + dirs if not os.path.islink(os.path.join(root, n))]:\n"
             "        p = os.path.join(root, name)\n"
             "        if not any(p == a or p.startswith(a.rstrip('/') + '/') or a.startswith(p + '/')"
             " for a in allowed):\n            bad.append(p)\n"
             "print(len(bad), bad[:5])\n"
             "try:\n    open('/usr/x', 'w')\nexcept OSError as e:\n    print(type(e).__name__)\n"
             "print(sorted(os.listdir('/proc'))[0], os.getcwd() == os.environ['HOME'])\n")
    res = run_python(probe, limits=LIMITS)
    lines = res.stdout.decode().splitlines()
    assert res.returncode == 0 and lines[0] == "0 []", res
    assert lines[1] in ("OSError", "PermissionError")  # read-only (EROFS)
    pid, in_workdir = lines[2].split()
    assert pid.isdigit() and in_workdir == "True"  # /proc lists only the run's processes
    home = os.path.expanduser("~")
    res = run_python(f"import os\nprint(os.path.exists({os.getcwd()!r}), "
                     f"os.path.exists({home!r} + '/.cache'))", limits=LIMITS)
    assert res.stdout == b"False False\n", res


def test_not_running_as_root_says_what_it_cannot_hide(monkeypatch):
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(sandbox, "_warned", [])
    with pytest.warns(RuntimeWarning, match="not running as root.*prompts.parquet"):
        sandbox._warn_if_not_root()
    assert isolation() == "rlimits-only"


def test_the_runner_is_out_of_the_programs_reach():
    """The harness's module globals hold no reference to the runner (whose private globals
    bind what it calls after the solution): replacing its test collection is impossible."""
    probe = ("import sys\nmain = sys.modules['__main__']\n"
             "for r in list(vars(main).get('_RUNNER', [])):\n"
             "    r.__globals__['_collect'] = lambda namespace: []\n"
             "    r.__globals__['_changed'] = lambda saved: None\n")
    tests = json.dumps({"type": "program", "test": "from solution import f\n\n"
                                                   "def test_f():\n    assert f() == 1\n"})
    ok, detail = graded(probe + "def f():\n    return 0\n", tests)
    assert not ok and detail.startswith("test failed: test_f: AssertionError"), detail


def test_the_guard_cannot_be_replaced():
    """A solution that reaches its own guard (through the tests' `solution` module) cannot
    swap the function it checks with, nor its code or defaults."""
    probe = ("import sys\ndef f():\n    guarded = sys.modules['solution'].f\n"
             "    check = guarded.__self__[1]\n"
             "    check.__defaults__ = ((None,) * 21,)\n    return A()\n")
    tests = json.dumps({"type": "program", "test": "from solution import f\nassert f() == 1\n"})
    ok, detail = graded(ALWAYS_EQUAL + probe, tests)
    assert not ok and "PermissionError: program tests cannot change a function's __defaults__" \
        in detail, detail
