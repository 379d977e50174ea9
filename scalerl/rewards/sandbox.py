"""Run untrusted (model-written) Python in a confined child process.

Every run gets a fresh child process in its own session, a scrubbed environment (PATH, LANG,
HOME=workdir only), its own temporary working directory, stdout/stderr/results captured in
unnamed files of bounded size (RLIMIT_FSIZE), and a wall-clock timeout. The child is forked by
a fork server ("zygote": `python -I -S -c <harness.py> --serve`, one per concurrent caller
thread, started on first use and kept): a whole run then takes ~10 ms instead of ~30 ms with a
fresh interpreter (benchmarks/bench_rewards.py, BENCHMARKS.md). Where a fork server cannot run
(no pidfd, no fd passing) or dies, the run starts a fresh `python -I -S -c <harness.py>`
instead. Both children are confined the same way: the harness applies
RLIMIT_CPU/AS/FSIZE/NPROC/NOFILE and CORE before the code runs. After the run the whole process
group is killed (`os.killpg`).

Running as root (the usual container case) root ignores RLIMIT_NPROC and could signal or
overwrite anything, so the harness drops to a dedicated unprivileged uid/gid taken from a pool
(60000 + slot, one slot per concurrent run, held with an flock under the lock directory so
concurrent processes never share one). Under that uid RLIMIT_NPROC counts only this run's
processes (a fork bomb stops at `nproc`), the parent's files, environment (/proc/PID/environ)
and signals are out of reach, and after the run every process still owned by that uid is
killed, including ones that escaped the process group with setsid. As root the harness also
enters new network and mount namespaces: no network interfaces are up, and the program sees
the minimal filesystem view (docs/design.md, "Sandbox"): a pivot_root into a fresh tmpfs with,
read-only, only what the interpreter needs (`VIEW_PATHS`: the standard library, the system
shared-library directories and loader cache, time zones), a private /tmp and working
directory, a few devices, and a /proc that lists only the run's own processes. Everything
else (the project, a results directory on scratch storage with its prompts.parquet, datasets,
home directories) is absent, whatever its permissions. The child runs `python -I -S`: the
standard library only, no site-packages.

Modes: "script" (stdin -> stdout), "function" (return values compared by the caller), and
"program" (test programs: the run must end with `done NONCE N` on the result channel, where
NONCE is a fresh secret of this run, `RunResult.nonce`; see `program_tests.py`).

Not root: no uid switch, no namespaces and no filesystem view (they need privileges);
RLIMIT_NPROC is set to the user's current process count + `nproc`, cleanup covers the process
group only, the network is reachable, and the code runs with the caller's file permissions:
it can read every file the caller can (prompts.parquet with every hidden test included).
The first run in a process says so once (a RuntimeWarning, `NOT_ROOT_WARNING`); run as root
(e.g. in a container) for isolation. `isolation()` reports which mode is in effect.

Deliberately left out: seccomp system-call filtering (no stdlib binding) and cgroups.
"""

from __future__ import annotations

import atexit
import dataclasses
import fcntl
import marshal
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import warnings
from pathlib import Path

__all__ = ["SandboxLimits", "RunResult", "run_python", "isolation", "VIEW_PATHS",
           "NOT_ROOT_WARNING"]

_CHILD = Path(__file__).parent / "sandbox_child"
# one `python -I -S -c` program: the pytest stand-in's source, the program-test runner, the
# harness (~52 KB; one argument may hold 128 KiB on Linux, MAX_ARG_STRLEN)
_HARNESS = "\n".join([f"_PYTEST_SHIM = {(_CHILD / 'pytest_shim.py').read_text()!r}",
                       (_CHILD / "program_tests.py").read_text(),
                       (_CHILD / "harness.py").read_text()])
_UID_BASE = 60000
_UID_SLOTS = 512
_LOCK_DIR = Path(tempfile.gettempdir()) / "scalerl-sandbox-slots"
_slot_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run."""

    wall_s: float = 10.0  # wall-clock timeout of the child, seconds
    cpu_s: int = 5  # RLIMIT_CPU, seconds of CPU time
    memory_mb: int = 1024  # RLIMIT_AS, address space in MiB
    fsize_mb: int = 8  # RLIMIT_FSIZE: largest file (and captured stdout) in MiB
    nproc: int = 8  # RLIMIT_NPROC: processes/threads the run may hold at once
    output_bytes: int = 1 << 20  # at most this much stdout/stderr/results is read back
    isolate_network: bool = True  # new network namespace (root only)

    def __post_init__(self) -> None:
        for name in ("wall_s", "cpu_s", "memory_mb", "fsize_mb", "nproc", "output_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)}")


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What one sandboxed run produced."""

    returncode: int | None  # None when killed for the wall-clock timeout
    timed_out: bool
    stdout: bytes
    stderr: bytes
    results: bytes  # the harness's result channel (function and program modes)
    wall_s: float
    nonce: str = ""  # program mode: the secret only a finished test run writes back


def _view_paths() -> tuple[list[str], list[str]]:
    """(paths bound read-only into the filesystem view, directories hidden inside them).

    The standard library (with lib-dynload), the system shared-library directories its
    extension modules load from (multiarch and lib64 directories, the loader cache) and the
    time-zone database; a path inside another one is left out. Hidden: the site-packages
    inside the standard library (never on `python -I -S`'s path).
    """
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    base = {"installed_base": sys.base_prefix, "base": sys.base_prefix,  # not a venv's
            "installed_platbase": sys.base_exec_prefix, "platbase": sys.base_exec_prefix}
    wanted = [sysconfig.get_path("stdlib", vars=base), sysconfig.get_path("platstdlib", vars=base)]
    if multiarch:
        wanted += [f"/usr/lib/{multiarch}", f"/lib/{multiarch}"]
    wanted += ["/lib64", "/usr/lib64", "/etc/ld.so.cache"]
    wanted += (sysconfig.get_config_var("TZPATH") or "/usr/share/zoneinfo").split(os.pathsep)
    real = sorted({os.path.realpath(p) for p in wanted if p and os.path.exists(p)})
    paths = [p for p in real if not any(p.startswith(q.rstrip("/") + "/") for q in real)]
    hide = [os.path.join(p, "site-packages") for p in paths
            if os.path.isdir(os.path.join(p, "site-packages"))]
    return paths, hide


VIEW_PATHS, _VIEW_HIDE = _view_paths()
NOT_ROOT_WARNING = (
    "sandbox: not running as root, so untrusted code runs without a separate uid, network "
    "isolation or filesystem view: it can read every file this user can (prompts.parquet "
    "with the hidden tests included) and reach the network; run as root (e.g. in a "
    "container) for isolation (docs/design.md, 'Sandbox')")
_warned: list[bool] = []
_isolation: list[str] = []


def _warn_if_not_root() -> None:
    """`NOT_ROOT_WARNING`, once per process, when runs cannot be isolated."""
    if os.geteuid() != 0 and not _warned:
        _warned.append(True)
        warnings.warn(NOT_ROOT_WARNING, RuntimeWarning, stacklevel=3)


def isolation() -> str:
    """The isolation in effect: 'uid+namespaces+view' (root: own uid, network and mount
    namespaces, the minimal filesystem view), 'uid+namespaces' (root, but the view could not
    be set up, e.g. without CAP_SYS_ADMIN) or 'rlimits-only' (not root). Probed once with a
    sandboxed run."""
    if os.geteuid() != 0:
        return "rlimits-only"
    if not _isolation:
        res = run_python("print(1)", limits=SandboxLimits(wall_s=20.0))
        _isolation.append("uid+namespaces" if b"view unavailable" in res.stderr
                          else "uid+namespaces+view")
    return _isolation[0]


class _UidSlot:
    """An exclusive sandbox uid from the pool, held by an flock on its slot file."""

    def __init__(self) -> None:
        self.uid: int | None = None
        self._fd: int | None = None

    def __enter__(self) -> _UidSlot:
        if os.geteuid() != 0:
            return self
        _LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
        start = (os.getpid() * 7 + threading.get_ident()) % _UID_SLOTS
        with _slot_lock:
            for k in range(_UID_SLOTS):
                slot = (start + k) % _UID_SLOTS
                fd = os.open(_LOCK_DIR / f"{slot}.lock", os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                self.uid, self._fd = _UID_BASE + slot, fd
                _kill_uid(self.uid)  # leftovers of a crashed earlier holder
                return self
        raise RuntimeError(f"all {_UID_SLOTS} sandbox uid slots are busy; lower the pool size")

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)


def _kill_uid(uid: int, max_rounds: int = 200) -> None:
    """SIGKILL every live (non-zombie) process owned by `uid` until none remain."""
    for _ in range(max_rounds):
        found = False
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                if entry.stat().st_uid != uid:
                    continue
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
                if state in (b"Z", b"X"):
                    continue
                os.kill(int(entry.name), signal.SIGKILL)
                found = True
            except (FileNotFoundError, ProcessLookupError):
                continue
        if not found:
            return
        time.sleep(0.001)


def _user_nproc() -> int:
    uid = os.getuid()
    n = 0
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                with open(f"/proc/{entry.name}/status", "rb") as f:
                    n += next((int(x.split()[1]) for x in f if x.startswith(b"Threads:")), 1)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return n


def _env(workdir: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir,
            "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}


class _Zygote:
    """A fork server: `python -I -S -c <harness.py> --serve FD` on one end of a socket pair."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _HARNESS, "--serve", str(theirs.fileno())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                cwd="/", env=_env("/"), start_new_session=True, pass_fds=(theirs.fileno(),))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours
        self.owner = os.getpid()

    def start(self, fds: list[int], cwd: str, env: dict[str, str]) -> int:
        """Fork a child that runs the job on `fds` (config, result, stdin, stdout, stderr)."""
        socket.send_fds(self.sock, [marshal.dumps({"cwd": cwd, "env": env})], fds,
                        socket.MSG_NOSIGNAL)
        return int(self._reply())

    def reap(self) -> int:
        """The exit code of the last child (as Popen.returncode: -N for signal N)."""
        self.sock.send(b"reap", socket.MSG_NOSIGNAL)
        return int(self._reply())

    def _reply(self) -> bytes:
        reply = self.sock.recv(64)
        if not reply:
            raise OSError("the sandbox fork server exited")
        return reply

    def close(self) -> None:
        self.sock.close()  # the server exits on end-of-file
        if self.owner == os.getpid():
            try:
                self.proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


_idle_zygotes: list[_Zygote] = []
_zygote_lock = threading.Lock()


def _pidfd_works() -> bool:
    """pidfds (Linux >= 5.3): wait for a process's exit without polling, also for one that
    the caller did not fork (the fork server's children)."""
    try:
        os.close(os.pidfd_open(os.getpid()))
        return True
    except (AttributeError, OSError):
        return False


_pidfd_usable = _pidfd_works()
_zygotes_usable = hasattr(socket, "send_fds") and _pidfd_usable


def _take_zygote() -> _Zygote | None:
    """An idle fork server of this process, a new one, or None where none can run."""
    global _zygotes_usable
    if not _zygotes_usable:
        return None
    with _zygote_lock:
        while _idle_zygotes:
            z = _idle_zygotes.pop()
            if z.owner == os.getpid():
                return z
            z.sock.close()  # inherited through fork from a parent process: not ours to use
    try:
        return _Zygote()
    except OSError:
        _zygotes_usable = False
        return None


def _give_back_zygote(z: _Zygote) -> None:
    with _zygote_lock:
        _idle_zygotes.append(z)


@atexit.register
def _close_zygotes() -> None:
    with _zygote_lock:
        while _idle_zygotes:
            _idle_zygotes.pop().close()


def _read(f, limit: int) -> bytes:
    f.seek(0)
    return f.read(limit)


def run_python(code: str, *, mode: str = "script", stdin: bytes = b"",
               fn_name: str | None = None, inputs: list | None = None,
               program: dict | None = None,
               limits: SandboxLimits = SandboxLimits()) -> RunResult:
    """Run `code` in the sandbox.

    mode "script": as `__main__`, `stdin` on its standard input (stdin/stdout tests).
    mode "function": as a module, then `fn_name(*args)` for every `args` in `inputs`; each
    return value comes back as a JSON line in `RunResult.results` (function-call tests).
    mode "program": `program` = {"test", "setup", "entry_point"} of a program spec
    (scalerl.tasks.code_tests); `RunResult.results` holds the runner's report, which ends
    with `done {RunResult.nonce} N` only when every test returned.
    """
    if mode not in ("script", "function", "program"):
        raise ValueError(f"mode must be 'script', 'function' or 'program', got {mode!r}")
    if mode == "function" and not fn_name:
        raise ValueError("mode 'function' needs fn_name")
    if mode == "program" and (not program or not program.get("test")):
        raise ValueError("mode 'program' needs program={'test': ..., 'setup': ..., "
                         "'entry_point': ...}")
    _warn_if_not_root()
    fsize = limits.fsize_mb << 20
    nonce = secrets.token_hex(16) if mode == "program" else ""
    with _UidSlot() as slot, tempfile.TemporaryDirectory(
            prefix="scalerl-sbx-", ignore_cleanup_errors=True) as workdir:
        nproc = limits.nproc if slot.uid is not None else _user_nproc() + limits.nproc
        cfg = {"mode": mode, "code": code, "fn_name": fn_name, "inputs": inputs or [],
               "uid": slot.uid, "gid": slot.uid, "cpu_s": limits.cpu_s,
               "memory_bytes": limits.memory_mb << 20, "fsize_bytes": fsize, "nproc": nproc,
               "isolate_network": limits.isolate_network, "workdir": workdir,
               "view": VIEW_PATHS, "view_hide": _VIEW_HIDE}
        if mode == "program":
            cfg.update(nonce=nonce, test=program["test"], setup=program.get("setup") or "",
                       entry_point=program.get("entry_point"))
        if slot.uid is not None:
            os.chown(workdir, slot.uid, slot.uid)
        os.chmod(workdir, 0o700)
        with (tempfile.TemporaryFile() as cfg_f, tempfile.TemporaryFile() as out_f,
              tempfile.TemporaryFile() as err_f, tempfile.TemporaryFile() as res_f,
              tempfile.TemporaryFile() as in_f):
            cfg_f.write(marshal.dumps(cfg))
            cfg_f.seek(0)
            in_f.write(stdin)
            in_f.seek(0)
            t0 = time.perf_counter()
            fds = [f.fileno() for f in (cfg_f, res_f, in_f, out_f, err_f)]
            timed_out, returncode = _run_forked(fds, workdir, limits.wall_s, slot.uid)
            if returncode is _NO_SERVER:
                timed_out, returncode = _run_spawned(fds, workdir, limits.wall_s, slot.uid)
            wall = time.perf_counter() - t0
            n = limits.output_bytes
            result = RunResult(returncode=None if timed_out else returncode,
                               timed_out=timed_out, stdout=_read(out_f, n),
                               stderr=_read(err_f, n), results=_read(res_f, n), wall_s=wall,
                               nonce=nonce)
    return result


_NO_SERVER = object()


def _run_forked(fds: list[int], workdir: str, wall_s: float, uid: int | None):
    """(timed out, exit code) of a child forked by a fork server; exit code _NO_SERVER when
    no server could start the run (nothing ran: the caller spawns a fresh interpreter)."""
    zygote = _take_zygote()
    if zygote is None:
        return False, _NO_SERVER
    try:
        pid = zygote.start(fds, workdir, _env(workdir))
    except OSError:  # the server died (e.g. killed): spawn this run, a new server next time
        zygote.close()
        return False, _NO_SERVER
    try:
        timed_out = not _wait_pid(pid, wall_s)
    finally:
        _kill_run(pid, uid)
    try:
        returncode = zygote.reap()
    except OSError:  # the program killed its server (possible without a sandbox uid)
        zygote.close()
        return timed_out, -signal.SIGKILL
    _give_back_zygote(zygote)
    return timed_out, returncode


def _run_spawned(fds: list[int], workdir: str, wall_s: float, uid: int | None):
    """(timed out, exit code) of a fresh `python -I -S -c <harness.py>` child."""
    cfg_fd, res_fd, in_fd, out_fd, err_fd = fds
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _HARNESS, str(cfg_fd), str(res_fd)],
        stdin=in_fd, stdout=out_fd, stderr=err_fd, cwd=workdir, env=_env(workdir),
        start_new_session=True, pass_fds=(cfg_fd, res_fd))
    try:
        if _pidfd_usable:
            timed_out = not _wait_pid(proc.pid, wall_s)
        else:  # pidfd needs Linux >= 5.3: fall back to Popen's polling wait
            try:
                proc.wait(timeout=wall_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        _kill_run(proc.pid, uid)
        proc.wait()
    return timed_out, proc.returncode


def _wait_pid(pid: int, timeout_s: float) -> bool:
    """Wait for process `pid` (a child or not, not yet reaped) to exit without polling, on a
    pidfd; False on timeout."""
    pidfd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        return bool(poller.poll(timeout_s * 1000))
    finally:
        os.close(pidfd)


def _kill_run(pid: int, uid: int | None) -> None:
    """SIGKILL a run's child (own session: pgid = pid), its group and, with a sandbox uid,
    every process of that uid. The child is not reaped yet, so its pid cannot be reused."""
    for kill in (os.killpg, os.kill):  # kill: a child that has not called setsid yet
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if uid is not None:
        _kill_uid(uid)

