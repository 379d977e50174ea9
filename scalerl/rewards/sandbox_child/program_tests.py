"""Program tests in the sandbox harness: run the solution, then its test program, and prove
that every test ran to its end (scalerl.rewards.sandbox;
docs/design.md, "Code tasks graded by test programs").

This source is put before `harness.py`'s in the one `python -I -S -c` program (standard
library only; `_PYTEST_SHIM`, the source of `pytest_shim.py`, is defined before it). The
harness calls `make_program_runner()` after confinement and before any untrusted code. The
tests run in the solution's process (as in every upstream harness), so the runner binds now
all it uses later; nothing the solution does to shared state (builtins, module attributes,
the harness's globals) reaches it:

1. snapshot: the modules tests and solutions commonly use are imported (`PRELOAD`), then the
   builtins are copied, every class that exists is recorded ("known" classes) and so are the
   special methods of the known classes that can be changed in the modules tests rely on
   (`WATCHED_MODULES`: `collections.Counter`, `fractions.Fraction`, ...) and every
   attribute of the test machinery (the pytest stand-in, unittest's TestCase,
   TestSuite, TestLoader, TestResult); the runner's functions are rebuilt over private
   globals, the guard and the audit hook hold what they use in immutable default arguments;
2. an audit hook (`sys.addaudithook`, permanent) closes the routes to the runner's memory
   (the nonce) and to the tests: frames (`sys._getframe` raises ValueError, which the
   standard library's callers expect; traceback, generator and coroutine frames; tracing and
   profiling; `sys._current_frames`), Python signal handlers (they receive the current
   frame), `gc` object walks, `ctypes`, `/proc/*/mem`, and replacing a function's code or
   defaults;
3. the setup and the solution run as module `solution` with the real builtins module (a patch
   there reaches only the solution: the tests get the snapshot); then `sys.modules` is put
   back as it was: a module the solution put there (a fake `math` or `random`) is gone, and
   a module name in the solution's namespace gives the tests the real module;
4. the tests' namespace: the builtins snapshot, the solution's names with every function (and
   callable object, and for the entry point also a class) replaced by a guard, `candidate`
   (the guarded entry point), and in `sys.modules` a module `solution` of the guarded names
   and `pytest` (a fresh `pytest_shim` module). The guard (`_guard_call`, `_check_value`)
   checks what a solution function returns and its arguments after the call: plain data, or
   instances of known classes, or of new classes whose special methods (other than
   `ALLOWED_SPECIAL`) are C-level; anything else (an object that claims to equal
   everything, an int subclass with its own `__eq__`) raises TypeError in the test;
5. the test code runs, then each test it defines, in order: pytest-style `test*` functions
   (parametrize, fixtures, marks of the stand-in), `Test*` classes, `unittest.TestCase`
   classes (through unittest itself). The first failure is written to the result channel as
   `fail LABEL: ExceptionName: message` and the run exits 1;
6. when every test returned, the runner compares the snapshot of step 1 with the classes and
   the test machinery as they are now: a change (`collections.Counter.__eq__` or
   `unittest.TestCase.assertEqual` patched by the solution) fails the run. Otherwise, in the
   original process (a forked copy never reports), it writes `done NONCE N` (N: tests run)
   and exits 0 at once (`os._exit`: no atexit handler or thread of the solution runs after).

The parent (scalerl.rewards.code_verifier) passes a run only on that exact line, last, with
exit code 0: an early exit (os._exit, sys.exit, a signal), a crash, a timeout, or a forged
or guessed line is a fail with its reason.

Not closed (in-process tests cannot close these): while the tests call it, a solution
function can patch a module the tests use (`math.isclose`), patch a library class outside
`WATCHED_MODULES`, or patch one and restore it before the tests end; a thread of
the solution can change a returned list after the check; generators and other lazily
computed values are not checked; objects the tests create from solution classes (other than
the entry point) are not guarded; test callables passed to the solution expose the test
module's code objects.
"""

import builtins as _builtins
import sys as _sys
import types as _types

PRELOAD = ("collections", "collections.abc", "fractions", "decimal", "datetime", "enum",
           "functools", "itertools", "heapq", "bisect", "math", "string", "re", "typing",
           "unittest", "io", "copy", "operator", "pathlib", "contextlib")
# special methods a returned object's new class may define in Python
ALLOWED_SPECIAL = frozenset({
    "__init__", "__new__", "__init_subclass__", "__class_getitem__", "__set_name__",
    "__post_init__", "__del__", "__getstate__", "__setstate__", "__reduce__", "__reduce_ex__",
    "__copy__", "__deepcopy__", "__sizeof__", "__dir__", "__repr__", "__hash__", "__module__",
    "__getnewargs__", "__getnewargs_ex__",
    "__qualname__", "__doc__", "__slots__", "__annotations__", "__match_args__",
    "__dataclass_fields__", "__dataclass_params__", "__firstlineno__", "__static_attributes__",
    "__orig_bases__", "__parameters__", "__abstractmethods__", "__classcell__"})
_FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
_DENIED_EVENTS = frozenset({
    "sys._current_frames", "sys._current_exceptions", "sys.settrace", "sys.setprofile",
    "sys.monitoring.register_callback", "gc.get_objects", "gc.get_referrers",
    "gc.get_referents", "sys._getframemodulename"})
_CODE_ATTRS = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
_SHIM_CODE = []  # the compiled stand-in, once per process (forked children inherit it)
_RUNNER = []  # the runner, made once per process: the fork server makes it before any fork
_IMMUTABLE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE
# modules whose classes tests compare and use; their special methods are snapshotted (all
# ~500 changeable classes would cost ~10 ms a run: each read copies a page after the fork)
WATCHED_MODULES = frozenset({
    "abc", "collections", "collections.abc", "_collections_abc", "numbers", "fractions",
    "decimal", "_pydecimal", "datetime", "enum", "functools", "pathlib", "io", "re", "string",
    "typing", "copy", "operator", "types", "contextlib", "dataclasses"})


def _known_types():
    """Every class that exists now: `object` and its subclasses, transitively."""
    seen, stack = {object}, [object]
    while stack:
        cls = stack.pop()
        try:
            subclasses = type.__subclasses__(cls)
        except TypeError:
            continue
        for sub in subclasses:
            if sub not in seen:
                seen.add(sub)
                stack.append(sub)
    return frozenset(seen)


def _snapshot(known, machinery):
    """((owner name, mapping, ((name, value), ...)), ...): the special methods of every known
    class of `WATCHED_MODULES` that can be changed, and every attribute of the `machinery`
    classes and modules."""
    dict_of = type.__dict__["__dict__"].__get__
    saved = []
    for cls in known:
        if not cls.__flags__ & _IMMUTABLE and cls.__module__ in WATCHED_MODULES:
            attrs = dict_of(cls)
            saved.append((cls.__qualname__, attrs, tuple(
                (k, v) for k, v in attrs.items() if type(k) is str and k[:2] == "__")))
    for owner in machinery:
        attrs = dict_of(owner) if isinstance(owner, type) else owner.__dict__
        saved.append((owner.__qualname__ if isinstance(owner, type) else owner.__name__,
                      attrs, tuple(attrs.items())))
    return tuple(saved)


def _changed(saved):
    """"Owner.name" of an attribute that differs from the snapshot (`_snapshot`), else None."""
    missing = object()
    for owner, attrs, items in saved:
        for name, value in items:
            if attrs.get(name, missing) is not value:
                return f"{owner}.{name}"
    return None


def _check_value(value, _c=None):
    """None when `value` is safe to hand to the tests (module docstring, step 4), else why.

    Uses only its arguments and `_c` (bound by make_program_runner), never a global name.
    """
    (type_, id_, issubclass_, str_, attribute_error, atoms, sequences, dict_, known, c_level,
     allowed, member, mro_of, dict_of, obj_getattr, dict_keys, dict_values, mapping_items,
     type_name, deque, limit) = _c
    stack, seen, n = [value], {}, 0
    while stack:
        v = stack.pop()
        n += 1
        if n > limit:
            return f"a result with more than {limit} parts"
        t = type_(v)
        if t in atoms:
            continue
        if t in sequences or t is dict_:
            if id_(v) not in seen:
                seen[id_(v)] = v
                stack.extend((*dict_keys(v), *dict_values(v)) if t is dict_ else v)
            continue
        if id_(v) in seen:
            continue
        seen[id_(v)] = v
        if t in known:  # a library class (a change to it fails the run: `_changed`)
            for base in sequences:
                if issubclass_(t, base):
                    stack.extend(base.__iter__(v))
            if issubclass_(t, dict_):
                stack.extend((*dict_keys(v), *dict_values(v)))
            elif issubclass_(t, deque):
                stack.extend(deque.__iter__(v))
        else:  # a class made after the snapshot: by the solution, or a module it imported
            for cls in mro_of(t):
                if cls in known:
                    continue
                for name, attr in mapping_items(dict_of(cls)):
                    kind = type_(attr)
                    if kind is member:  # a __slots__ value
                        try:
                            stack.append(attr.__get__(v, cls))
                        except attribute_error:
                            pass
                    elif (type_(name) is str_ and name[:2] == "__" and name not in allowed
                          and kind not in c_level and attr is not None):
                        return f"a {type_name(t)} object, whose class defines {name}"
        try:  # instance attributes (types.SimpleNamespace, plain objects)
            attrs = obj_getattr(v, "__dict__")
        except attribute_error:
            continue
        if type_(attrs) is dict_:
            stack.extend(dict_values(attrs))
    return None


def _guard_call(target, *args, **kwargs):
    """A solution function as the tests see it: bound by types.MethodType to the immutable
    `target` = (function, _check_value, TypeError); uses no global name."""
    fn, check, type_error = target
    result = fn(*args, **kwargs)
    problem = check(result)
    if problem is None:
        problem = check((args, kwargs) if kwargs else args)
    if problem is not None:
        raise type_error(f"the solution returned or left {problem}; program tests accept "
                         "plain data and objects without their own comparison, truth, "
                         "container or arithmetic methods")
    return result


def _audit(event, args, _c=None):
    """The permanent audit hook (module docstring, step 2); uses only `_c`, no globals."""
    (frame_attrs, denied, code_attrs, type_, str_, bytes_, value_error, runtime_error,
     attribute_error, permission_error) = _c
    if event == "object.__getattr__":
        if args[1] in frame_attrs:
            raise attribute_error(f"{args[1]} is not accessible in program tests")
        return
    if event == "object.__setattr__" or event == "object.__delattr__":
        if args[1] in code_attrs:  # (class attributes raise no audit event: see `_changed`)
            raise permission_error(f"program tests cannot change a function's {args[1]}")
        return
    if event == "sys._getframe":
        raise value_error("the call stack is not accessible in program tests")
    if event in denied or event[:7] == "ctypes.":
        raise runtime_error(f"{event} is not allowed in program tests")
    if event == "import" and args[0] == "_signal":
        raise runtime_error("signal handlers are not allowed in program tests")
    if event == "open":
        path = args[0]
        if type_(path) is bytes_:
            path = path.decode("utf-8", "replace")
        if type_(path) is str_ and path[:6] == "/proc/" and path.rstrip("/").endswith(
                ("/mem", "/pagemap")):
            raise permission_error("process memory is not readable in program tests")


def _no_signal_handlers(*args, **kwargs):
    raise RuntimeError("signal handlers are not allowed in program tests")


def _rebuilt(fn, globals_, defaults=None):
    return _types.FunctionType(fn.__code__, globals_, fn.__name__,
                               fn.__defaults__ if defaults is None else defaults)


def make_program_runner():
    """The runner (`_run_program`), with everything it uses bound now (module docstring).

    Made once per process: the fork server makes it at start, so each forked child gets its
    own copy of the snapshot and the stand-in (~5 ms each to make) without paying for them.
    """
    if _RUNNER:
        return _RUNNER[0]
    import collections
    import os
    import unittest

    for name in PRELOAD:
        __import__(name)
    if not _SHIM_CODE:
        _SHIM_CODE.append(compile(_PYTEST_SHIM, "pytest", "exec", dont_inherit=True))
    bare = {"__builtins__": {}}
    safe = dict(vars(_builtins))
    shim = _types.ModuleType("pytest")  # made now: its classes are known and snapshotted
    shim.__dict__["__builtins__"] = dict(safe)
    exec(_SHIM_CODE[0], shim.__dict__)
    result_type = _rebuilt(_unittest_result, {"__builtins__": dict(safe)})(unittest.TestResult)
    known = _known_types()
    machinery = [shim, *(v for v in vars(shim).values() if isinstance(v, type)),
                 *unittest.TestCase.__mro__[:-1], unittest.TestSuite, unittest.TestLoader,
                 *unittest.TestResult.__mro__[:-1]]
    saved = _snapshot(known, machinery)
    c_level = frozenset({_types.WrapperDescriptorType, _types.MethodWrapperType,
                         _types.MethodDescriptorType, _types.BuiltinFunctionType,
                         _types.ClassMethodDescriptorType, _types.GetSetDescriptorType,
                         _types.MemberDescriptorType})
    check = _rebuilt(_check_value, bare, ((
        type, id, issubclass, str, AttributeError,
        frozenset({type(None), bool, int, float, complex, str, bytes, range, type(Ellipsis),
                   type(NotImplemented)}),
        (list, tuple, set, frozenset), dict, known, c_level, ALLOWED_SPECIAL,
        _types.MemberDescriptorType, type.__dict__["__mro__"].__get__,
        type.__dict__["__dict__"].__get__, object.__getattribute__, dict.keys, dict.values,
        type(type.__dict__).items, type.__dict__["__qualname__"].__get__, collections.deque,
        1_000_000),))
    audit = _rebuilt(_audit, bare, ((
        _FRAME_ATTRS, _DENIED_EVENTS, _CODE_ATTRS, type, str, bytes, ValueError, RuntimeError,
        AttributeError, PermissionError),))
    private = {"__builtins__": safe}
    private.update(
        _write=os.write, _exit=os._exit, _getpid=os.getpid, _addaudithook=_sys.addaudithook,
        _modules=_sys.modules, _real_builtins=_builtins, _ModuleType=_types.ModuleType,
        _MethodType=_types.MethodType, _FunctionType=_types.FunctionType, _audit_hook=audit,
        _check=check, _guard=_rebuilt(_guard_call, bare), _shim=shim, _Skipped=shim.Skipped,
        _fixture_types=dict(shim.BUILTIN_FIXTURES), _TestCase=unittest.TestCase,
        _Loader=unittest.TestLoader, _Result=result_type,
        _no_signal=_rebuilt(_no_signal_handlers, {"__builtins__": dict(safe)}),
        _name_of=type.__dict__["__name__"].__get__, _saved=saved,
        _saved_modules=tuple(_sys.modules.items()),
        _module_dict=_types.ModuleType.__dict__["__dict__"].__get__)
    for fn in (_run_program, _test_namespace, _wrap, _collect, _function_cases, _call_test,
               _fixture_value, _class_cases, _unittest_cases, _report, _block_signals,
               _changed, _restore_modules):
        private[fn.__name__] = _rebuilt(fn, private)
    _RUNNER.append(private["_run_program"])
    return _RUNNER[0]


def take_program_runner():
    """The runner, no longer kept in `_RUNNER` (a module global the program could reach: its
    private globals must stay out of reach); for the one run of this process."""
    runner = make_program_runner()
    _RUNNER.clear()
    return runner


def _unittest_result(base):
    """A unittest result that records (label, exception) without formatting tracebacks (the
    audit hook denies traceback frames)."""

    class _RecordingResult(base):
        def __init__(self):
            super().__init__()
            self.problems = []

        def _record(self, test, err):
            label = getattr(test, "_testMethodName", None) or str(test)
            self.problems.append((f"{type(test).__name__}.{label}", err[1]))

        def addError(self, test, err):  # noqa: N802 - unittest's names
            self._record(test, err)

        def addFailure(self, test, err):  # noqa: N802
            self._record(test, err)

        def addSubTest(self, test, subtest, err):  # noqa: N802
            if err is not None:
                self._record(test, err)

        def addUnexpectedSuccess(self, test):  # noqa: N802
            self.problems.append((str(test), AssertionError("unexpected success")))

        def addExpectedFailure(self, test, err):  # noqa: N802
            pass

    return _RecordingResult


# ---- the functions below run over private globals (make_program_runner) --------------------

def _run_program(cfg, nonce, result_fd):
    """Run the configured program tests (module docstring); never returns."""
    pid, label, count, status = _getpid(), "setup", 0, 1
    setup, code, test = cfg.pop("setup"), cfg.pop("code"), cfg.pop("test")
    entry_point = cfg.pop("entry_point")
    try:
        _addaudithook(_audit_hook)
        _block_signals()
        module = _ModuleType("solution")
        module.__dict__["__builtins__"] = _real_builtins  # - never the snapshot
        if setup:
            exec(compile(setup, "<setup>", "exec", 0, True, 0), module.__dict__)
        label = "solution"
        exec(compile(code, "solution.py", "exec", 0, True, 0), module.__dict__)
        label = "test program"
        _restore_modules()
        namespace = _test_namespace(module.__dict__, entry_point)
        exec(compile(test, "<tests>", "exec", 0, True, 0), namespace)
        del setup, code, test
        for label, call in _collect(namespace):  # noqa: B007
            count += call()
        label = "after the tests"
        changed = _changed(_saved)
        if changed is not None:
            raise RuntimeError(f"the solution changed {changed} (a library class or the test "
                               "machinery) while the tests ran")
        if _getpid() == pid:
            _write(result_fd, f"done {nonce} {count}\n".encode())
            status = 0
    except BaseException as err:  # noqa: B036 - every failure of the program is a result
        _report(result_fd, label, err)
    finally:
        _exit(status)


def _report(result_fd, label, err):
    try:
        name = _name_of(type(err))
        try:
            message = str(err)
        except BaseException:  # noqa: B036 - a broken __str__ of the program's exception
            message = "(message unavailable)"
        line = f"fail {label}: {name}: {message}"[:400].replace("\n", " ")
        _write(result_fd, line.encode("utf-8", "replace") + b"\n")
    except BaseException:  # noqa: B036, S110 - the exit code still says it failed
        pass


def _restore_modules():
    """`sys.modules` as it was before the solution ran (module docstring, step 3)."""
    saved = dict(_saved_modules)
    for name in [n for n in _modules if n not in saved]:
        del _modules[name]
    _modules.update(saved)


def _block_signals():
    """Python signal handlers receive the current frame: replace the functions that set them."""
    for name in ("_signal", "signal"):
        module = _modules.get(name)
        if module is not None:
            module.__dict__["signal"] = _no_signal


def _wrap(value, strict):
    """What the tests see of a solution name (module docstring, step 4); None to leave out."""
    kind = type(value)
    if issubclass(kind, _ModuleType):  # - the real module of that name, if any
        return dict(_saved_modules).get(_module_dict(value).get("__name__"), value)
    if issubclass(kind, type) and not strict:
        return value
    if callable(value):
        return _MethodType(_guard, (value, _check, TypeError))
    return value if _check(value) is None else None


def _test_namespace(solution, entry_point):
    """The tests' globals (module docstring, step 4)."""
    safe_builtins = dict(__builtins__)
    namespace = {"__builtins__": safe_builtins, "__name__": "test_solution"}
    guarded = _ModuleType("solution")
    for name, value in list(solution.items()):
        if type(name) is not str or name[:2] == "__":
            continue
        wrapped = _wrap(value, name == entry_point)
        if wrapped is not None:
            namespace[name] = guarded.__dict__[name] = wrapped
    names = solution.get("__all__")
    if type(names) in (list, tuple) and all(type(n) is str for n in names):
        guarded.__dict__["__all__"] = [n for n in names if n in guarded.__dict__]
    if entry_point is not None:
        if entry_point not in solution:
            raise NameError(f"the solution does not define {entry_point!r} (the entry point)")
        namespace["candidate"] = _wrap(solution[entry_point], True)
    _modules["solution"], _modules["pytest"] = guarded, _shim
    return namespace


def _collect(namespace):
    """(label, call) of every test the test code defines, in order; call() runs it and
    returns how many tests ran (0 when skipped)."""
    fixtures = {}
    for value in list(namespace.values()):
        name = getattr(value, "_scalerl_fixture", None) if type(value) is _FunctionType else None  # noqa: E501
        if type(name) is str:
            fixtures[name] = value
    autouse = [n for n, f in fixtures.items() if getattr(f, "_scalerl_autouse", False) is True]
    tests = []
    for name, value in list(namespace.items()):
        if type(value) is _FunctionType:
            if (name[:4] == "test" and value.__code__.co_filename == "<tests>"
                    and getattr(value, "_scalerl_fixture", None) is None):
                tests += _function_cases(name, value, None, fixtures, autouse)
        elif isinstance(value, type) and value.__module__ == "test_solution":
            if issubclass(value, _TestCase):
                tests.append(_unittest_cases(value))
            elif name[:4] == "Test":
                tests += _class_cases(value, fixtures, autouse)
    return tests


def _function_cases(label, fn, owner, fixtures, autouse):
    cases = [{}]
    for names, rows in getattr(fn, "_scalerl_parametrize", ()):
        cases = [{**case, **dict(zip(names, row))} for case in cases for row in rows]
    marks = {m.name: m for m in getattr(fn, "_scalerl_marks", ())}
    out = []
    for i, params in enumerate(cases):
        name = label if len(cases) == 1 else f"{label}[{i}]"
        out.append((name, lambda fn=fn, params=params: _call_test(
            fn, owner, params, marks, fixtures, autouse)))
    return out


def _call_test(fn, owner, params, marks, fixtures, autouse):
    skip, skipif = marks.get("skip"), marks.get("skipif")
    if skip is not None or (skipif is not None and skipif.args and skipif.args[0]):
        return 0
    code = fn.__code__
    positional = code.co_varnames[:code.co_argcount]
    positional = positional[:len(positional) - len(fn.__defaults__ or ())]
    keyword_only = [n for n in code.co_varnames[code.co_argcount:code.co_argcount
                                                 + code.co_kwonlyargcount]
                    if n not in (fn.__kwdefaults__ or {})]
    names = [*positional[1 if owner is not None else 0:], *keyword_only]
    names += [n for n in params if n not in names and n in code.co_varnames]
    usefixtures = marks.get("usefixtures")
    wanted = [*autouse, *(usefixtures.args if usefixtures is not None else ())]
    finalizers, cache = [], {}
    try:
        for name in wanted:
            _fixture_value(name, fixtures, cache, finalizers, 0)
        kwargs = {name: params[name] if name in params else
                  _fixture_value(name, fixtures, cache, finalizers, 0)
                  for name in names}
        try:
            (fn if owner is None else getattr(owner, fn.__name__))(**kwargs)
        except _Skipped:
            return 0
        except BaseException:  # noqa: B036
            if "xfail" in marks:
                return 1
            raise
    finally:
        for close in reversed(finalizers):
            close()
    return 1


def _fixture_value(name, fixtures, cache, finalizers, depth):
    if name in cache:
        return cache[name]
    if depth > 20:
        raise RecursionError(f"fixture {name!r}: fixtures depend on each other in a cycle")
    if name in fixtures:
        fn = fixtures[name]
        code = fn.__code__
        kwargs = {a: _fixture_value(a, fixtures, cache, finalizers, depth + 1)
                  for a in code.co_varnames[:code.co_argcount]}
        value = fn(**kwargs)
        if code.co_flags & 0x20:  # a generator fixture: code after its yield is the teardown
            generator, value = value, next(value)
            finalizers.append(lambda: next(generator, None))
    elif name in _fixture_types:
        fixture = _fixture_types[name]()
        finalizers.append(fixture.close)
        value = fixture.value()
    else:
        raise LookupError(f"fixture {name!r} not found (the sandbox's pytest stand-in has "
                          f"capsys, tmp_path, monkeypatch and the test file's own fixtures)")
    cache[name] = value
    return value


def _class_cases(cls, fixtures, autouse):
    """pytest-style `Test*` class: each `test*` method on a fresh instance."""
    cases = []
    for name, value in list(vars(cls).items()):
        if name[:4] == "test" and type(value) is _FunctionType:

            def run(value=value, name=name):
                instance = cls()
                setup, teardown = (getattr(instance, "setup_method", None),
                                   getattr(instance, "teardown_method", None))
                if setup is not None:
                    setup(getattr(instance, name))
                try:
                    return sum(call() for _, call in _function_cases(
                        name, value, instance, fixtures, autouse))
                finally:
                    if teardown is not None:
                        teardown(getattr(instance, name))
            cases.append((f"{cls.__name__}.{name}", run))
    return cases


def _unittest_cases(cls):
    """A unittest.TestCase class, run by unittest itself; its first problem is raised."""

    def run():
        result = _Result()
        _Loader().loadTestsFromTestCase(cls).run(result)
        if result.problems:
            label, error = result.problems[0]
            raise AssertionError(f"{label}: {type(error).__name__}: {error}")
        return result.testsRun - len(result.skipped)
    return (cls.__name__, run)
