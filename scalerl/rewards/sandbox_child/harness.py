"""Sandbox child program: confine itself, then run untrusted code (see scalerl.rewards.sandbox).

Two ways to start it:
- `python -I -S -c <this source> CONFIG_FD RESULT_FD` in a fresh session: one run;
- `python -I -S -c <this source> --serve SOCKET_FD`: a fork server ("zygote"). For every
  request on the Unix socket (a marshal-encoded {cwd, env} plus five file descriptors: config,
  result, stdin, stdout, stderr) it forks a child, reports the child's pid, and reaps it when
  the parent says so, reporting its exit code. The child closes the socket first (the control
  channel never reaches untrusted code), starts its own session, takes the descriptors as
  0/1/2, changes to the run's directory and environment, then does exactly what a one-run
  harness does. Forking skips the interpreter start-up (~15 ms of a ~30 ms run). The server never
  reads a config itself, so its memory holds no program, input or expected output. It makes
  the program-test runner once (`make_program_runner` of `program_tests.py`, which precedes
  this source: the modules tests use, the snapshots), so its children start with it.

A run reads its marshal-encoded config from CONFIG_FD (an unnamed file the parent wrote; closed
before the untrusted code runs), then, in this order:
1. when started as root: new network namespace (no interfaces up: sockets cannot reach
   anything) and new mount namespace with the minimal filesystem view (`_enter_view`): a
   pivot_root into a fresh tmpfs holding, read-only, only what the interpreter needs (the
   paths in the config's `view`: the standard library, the shared-library directories, the
   loader cache, time zones), a private /tmp, the run's working directory (an empty private
   tmpfs at the same path), /dev/{null,zero,full,random,urandom}, /dev/shm and a /proc that
   shows only the run's own processes (hidepid=invisible); everything else, whatever the
   caller's paths (the project, results directories, datasets, home directories), is absent.
   Both best effort: a failure is reported on stderr ("sandbox: ... unavailable") and the run
   continues with the other protections;
2. resource limits, hard = soft: RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC,
   RLIMIT_NOFILE, RLIMIT_CORE=0;
3. when started as root: drop all groups and switch to the sandbox uid/gid (unprivileged, so
   the limits cannot be raised, the parent cannot be signalled, and RLIMIT_NPROC applies);
   then no-new-privileges and a parent-death SIGKILL;
4. run the code: mode "function" executes it as module `solution`, calls `fn_name` (or
   `Solution().fn_name`) on every input and writes one line per call to RESULT_FD:
   `INDEX ok LITERAL` (a Python literal of plain data, parsed by the parent with
   ast.literal_eval) or `INDEX err ExceptionName`; mode "script" executes
   it as `__main__` with the test's stdin (the parent compares stdout); mode "program" runs
   the solution and then its test program (`program_tests.py`), which ends with
   `done NONCE N` on RESULT_FD only when every test returned (the nonce is taken out of the
   config before anything runs and lives only in the runner's locals).

In modes "function" and "script" the expected outputs never enter this process: whatever the
untrusted code does to this harness (patching its encoder or builtins, writing to RESULT_FD,
exiting early), the parent compares the produced values with the hidden expected ones, and a
missing or duplicated result fails. Mode "program" must run the tests here; how it keeps
them and the nonce out of the program's reach is in `program_tests.py`.
This file must only use the standard library; it is never imported by scalerl itself.
"""

import marshal
import os
import resource
import sys

_LIBC = []


def _libc_call(name, *args):
    import ctypes  # only when root: ctypes costs milliseconds of start-up

    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    if getattr(_LIBC[0], name)(*args) != 0:
        raise OSError(ctypes.get_errno(), f"{name} failed")


_PLAIN = (int, float, str, bool, type(None))


def _encode(value, depth=0):
    """repr() of a value made only of plain built-in types, else TypeError."""
    kind = type(value)
    if depth > 100:
        raise TypeError("nested too deeply")
    if kind in _PLAIN:
        return repr(value)
    if kind in (list, tuple):
        return "[" + ",".join(_encode(v, depth + 1) for v in value) + "]"
    if kind is dict:
        return "{" + ",".join(_encode(k, depth + 1) + ":" + _encode(v, depth + 1)
                              for k, v in value.items()) + "}"
    if kind in (set, frozenset):
        items = sorted(_encode(v, depth + 1) for v in value)
        return "{" + ",".join(items) + "}" if items else "set()"
    raise TypeError(f"result of type {kind.__name__} is not plain data")


MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 8, 32, 4096, 16384
MS_PRIVATE = 1 << 18
_DEVICES = ("null", "zero", "full", "random", "urandom")
_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # merged-/usr symlinks


def _mount(source, target, fstype, flags, data=None):
    _libc_call("mount", source and source.encode(), target.encode(),
               fstype and fstype.encode(), flags, data and data.encode())


def _enter_view(cfg):
    """pivot_root into the minimal filesystem view (module docstring, step 1)."""
    _libc_call("unshare", 0x00020000)  # CLONE_NEWNS
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here reaches the host
    # open the sources first: the new root is mounted over /tmp, which may hold some of them
    sources = []
    for path in cfg["view"]:
        try:
            sources.append((path, os.open(path, os.O_PATH | os.O_CLOEXEC)))
        except FileNotFoundError:
            continue
    links = [(p, os.readlink(p)) for p in _LINKS if os.path.islink(p)]
    new_root, size, uid = "/tmp", cfg["fsize_bytes"], cfg["uid"]
    _mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    try:
        for path, fd in sources:
            target = new_root + path
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(target, 0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
                os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
            _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
            _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    finally:
        for _, fd in sources:
            os.close(fd)
    for path in cfg["view_hide"]:  # e.g. the site-packages inside the standard library
        if os.path.isdir(new_root + path):
            _mount("tmpfs", new_root + path, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY,
                   "size=4k,mode=0755")
    for path, dest in links:  # /lib -> usr/lib, ... where the target is in the view
        target = os.path.join(os.path.dirname(path), dest)
        if os.path.exists(new_root + target) and not os.path.lexists(new_root + path):
            os.symlink(dest, new_root + path)
    os.makedirs(new_root + "/dev/shm", 0o755)
    for name in _DEVICES:
        os.close(os.open(f"{new_root}/dev/{name}", os.O_CREAT | os.O_WRONLY, 0o666))
        _mount(f"/dev/{name}", f"{new_root}/dev/{name}", None, MS_BIND)
    for name, dest in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                       ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(dest, f"{new_root}/dev/{name}")
    private = MS_NOSUID | MS_NODEV | MS_NOEXEC
    _mount("tmpfs", new_root + "/dev/shm", "tmpfs", private, f"mode=1777,size={size}")
    os.makedirs(new_root + "/proc", 0o555)
    try:  # a /proc of our own that lists only the sandbox uid's processes
        _mount("proc", new_root + "/proc", "proc", private, "hidepid=invisible")
    except OSError:
        _mount("/proc", new_root + "/proc", None, MS_BIND | MS_REC)
    os.makedirs(new_root + "/tmp", 0o755)
    _mount("tmpfs", new_root + "/tmp", "tmpfs", private, f"mode=1777,size={size}")
    workdir = new_root + cfg["workdir"]
    os.makedirs(workdir, 0o755, exist_ok=True)
    owner = f",uid={uid},gid={uid}" if uid is not None else ""
    _mount("tmpfs", workdir, "tmpfs", private, f"mode=0700,size={size}{owner}")
    os.makedirs(new_root + "/.old", 0o700)
    os.chdir(new_root)
    _libc_call("pivot_root", b".", b".old")
    _libc_call("umount2", b"/.old", 2)  # MNT_DETACH: the host's tree is gone from here
    os.rmdir("/.old")
    _mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(cfg["workdir"])


def _confine(cfg):
    root = os.geteuid() == 0
    if root and cfg["isolate_network"]:
        try:
            _libc_call("unshare", 0x40000000)  # CLONE_NEWNET
        except OSError as err:
            sys.stderr.write(f"sandbox: network isolation unavailable: {err}\n")
    if root:
        try:
            _enter_view(cfg)
        except OSError as err:
            sys.stderr.write(f"sandbox: filesystem view unavailable: {err}\n")
    limits = {
        resource.RLIMIT_CPU: cfg["cpu_s"],
        resource.RLIMIT_AS: cfg["memory_bytes"],
        resource.RLIMIT_FSIZE: cfg["fsize_bytes"],
        resource.RLIMIT_NPROC: cfg["nproc"],
        resource.RLIMIT_NOFILE: 64,
        resource.RLIMIT_CORE: 0,
    }
    for which, value in limits.items():
        resource.setrlimit(which, (value, value))
    if root and cfg["uid"] is not None:
        os.setgroups([])
        os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
        os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
        try:
            _libc_call("prctl", 38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
            _libc_call("prctl", 1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG = SIGKILL
        except OSError as err:
            sys.stderr.write(f"sandbox: prctl unavailable: {err}\n")


def run(config_fd, result_fd):
    """Confine this process, then run the configured program (see the module docstring)."""
    with os.fdopen(config_fd, "rb") as f:
        cfg = marshal.loads(f.read())
    nonce = cfg.pop("nonce", None)
    _confine(cfg)
    if cfg["mode"] == "program":
        take_program_runner()(cfg, nonce, result_fd)  # defined by program_tests.py; exits
    code = compile(cfg["code"], "solution.py", "exec")
    write, encode = os.write, _encode  # bound before untrusted code runs
    if cfg["mode"] == "script":
        os.close(result_fd)
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
        return
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    exec(code, namespace)
    fn = namespace.get(cfg["fn_name"])
    if fn is None and "Solution" in namespace:
        fn = getattr(namespace["Solution"](), cfg["fn_name"], None)
    if not callable(fn):
        write(result_fd, b"missing\n")
        return
    for i, args in enumerate(cfg["inputs"]):
        try:
            line = f"{i} ok {encode(fn(*args))}"
        except BaseException as err:  # noqa: B036 - any failure of untrusted code is a result
            if isinstance(err, SystemExit | KeyboardInterrupt):
                raise
            line = f"{i} err {type(err).__name__}"
        write(result_fd, line.encode() + b"\n")


def _forked_run(job, fds):
    """The child of the fork server: become a one-run harness; returns the exit code that
    the interpreter would have exited with."""
    config_fd, result_fd, stdin_fd, stdout_fd, stderr_fd = fds
    os.setsid()
    for src, dst in ((stdin_fd, 0), (stdout_fd, 1), (stderr_fd, 2)):
        os.dup2(src, dst)
        os.close(src)
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["env"])
    try:
        run(config_fd, result_fd)
        status = 0
    except SystemExit as exc:  # what the interpreter does with SystemExit
        status = exc.code
        if status is None:
            status = 0
        elif not isinstance(status, int):
            sys.stderr.write(f"{status}\n")
            status = 1
    except BaseException:  # noqa: B036 - an uncaught exception: traceback, exit code 1
        import traceback

        traceback.print_exc()
        status = 1
    try:  # the interpreter's shutdown: non-daemon threads, atexit functions, buffers
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: B036 - the program's own doing; its exit code stands
        pass
    return status & 0xFF


def serve(sock_fd):
    """The fork server loop; returns when the parent closes the socket."""
    import socket

    if os.geteuid() == 0:  # load libc once here instead of in every child (~5 ms each)
        import ctypes

        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    make_program_runner()  # program_tests.py: its imports and snapshot, once
    sock = socket.socket(fileno=sock_fd)
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 16, 5)
        except OSError:
            return
        if not msg:
            return
        if len(fds) != 5:
            for fd in fds:
                os.close(fd)
            return
        job = marshal.loads(msg)
        pid = os.fork()
        if pid == 0:
            status, exit_now = 1, os._exit  # bound before untrusted code could replace it
            try:
                sock.close()
                status = _forked_run(job, fds)
            finally:
                exit_now(status)
        for fd in fds:
            os.close(fd)
        sock.send(str(pid).encode())
        try:
            reap = sock.recv(16)
        except OSError:
            reap = b""
        if reap != b"reap":  # the parent is gone: take the run down with it
            import signal

            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            os.waitpid(pid, 0)
            return
        _, wait_status = os.waitpid(pid, 0)  # exited, or killed by the parent
        sock.send(str(os.waitstatus_to_exitcode(wait_status)).encode())


if sys.argv[1] == "--serve":
    serve(int(sys.argv[2]))
else:
    run(int(sys.argv[1]), int(sys.argv[2]))
    sys.stdout.flush()
