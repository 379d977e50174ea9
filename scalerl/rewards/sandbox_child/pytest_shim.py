"""A minimal `pytest` for program tests in the sandbox (KodCode-style tests `import pytest`).

The sandbox child runs `python -I -S` (standard library only), so the real pytest is absent.
The program-test runner (`program_tests.py`) executes this source into a fresh module named
`pytest` after the solution ran, and collects and calls the tests itself. Provided:
- `raises(Exc, match=None)` (context manager, or `raises(Exc, fn, *args)`), `approx(expected,
  rel=None, abs=None)` for numbers and (nested) lists, tuples and dicts of numbers with
  pytest's default tolerance (rel 1e-6, abs 1e-12), `fail`, `skip`, `param`;
- `mark.parametrize(names, values)` (stacked: the cross product), `mark.skip`,
  `mark.skipif(condition)`, `mark.xfail` (a failure is tolerated) and any other mark (no-op);
- `fixture` (function scope, plain or generator fixtures, `autouse`), `mark.usefixtures`, and
  the built-in fixtures `capsys`, `tmp_path` and `monkeypatch` (`BUILTIN_FIXTURES`: classes
  the runner instantiates per test; `value()` is what the test gets, `close()` undoes it).

Deliberately left out: fixture scopes other than function, fixture `params`, `request`,
plugins, assertion rewriting (a failing assert reports its own message only) and warnings
capture. A test that needs a missing fixture fails with a message naming it.
"""

import contextlib as _contextlib
import io as _io
import itertools as _itertools
import math as _math
import os as _os
import re as _re
import sys as _sys


class _Outcome(BaseException):  # noqa: N818 - pytest's names
    """Base of skip / fail outcomes (BaseException, like pytest's, so `except Exception` in a
    test does not swallow them)."""


class Skipped(_Outcome):
    pass


class Failed(_Outcome):
    pass


def fail(reason="", pytrace=True):
    raise Failed(reason)


def skip(reason="", allow_module_level=False):
    raise Skipped(reason)


class _Raises:
    def __init__(self, expected, match):
        self.expected, self.match, self.value = expected, match, None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            raise Failed(f"DID NOT RAISE {self.expected!r}")
        if not issubclass(exc_type, self.expected):
            return False
        if self.match is not None and not _re.search(self.match, str(exc)):
            raise AssertionError(f"regex {self.match!r} does not match {str(exc)!r}")
        self.value, self.type = exc, exc_type
        return True


def raises(expected_exception, *args, match=None, **kwargs):
    context = _Raises(expected_exception, match)
    if not args:
        return context
    with context:
        args[0](*args[1:], **kwargs)
    return context


class approx:  # noqa: N801 - pytest's name
    def __init__(self, expected, rel=None, abs=None, nan_ok=False):  # noqa: A002
        self.expected, self.rel, self.abs, self.nan_ok = expected, rel, abs, nan_ok

    def _close(self, got, want):
        if isinstance(want, dict):
            return (isinstance(got, dict) and got.keys() == want.keys()
                    and all(self._close(got[k], want[k]) for k in want))
        if isinstance(want, list | tuple):
            return (isinstance(got, list | tuple) and len(got) == len(want)
                    and all(self._close(g, w) for g, w in zip(got, want)))
        if isinstance(want, bool) or not isinstance(want, int | float | complex):
            return got == want
        if isinstance(got, bool) or not isinstance(got, int | float | complex):
            return False
        if _math.isnan(abs(want)) or _math.isnan(abs(got)):
            return self.nan_ok and _math.isnan(abs(want)) and _math.isnan(abs(got))
        if got == want:
            return True
        rel = 1e-6 if self.rel is None else self.rel
        tol_abs = 1e-12 if self.abs is None else self.abs
        return abs(got - want) <= max(rel * abs(want), tol_abs)

    def __eq__(self, other):
        return self._close(other, self.expected)

    __hash__ = None

    def __repr__(self):
        return f"approx({self.expected!r})"


class _Param:
    def __init__(self, values, marks, id):  # noqa: A002
        self.values, self.marks, self.id = values, marks, id


def param(*values, marks=(), id=None):  # noqa: A002
    return _Param(values, marks, id)


def _add(fn, key, value):
    setattr(fn, key, (*getattr(fn, key, ()), value))
    return fn


class _Mark:
    def __init__(self, name, args, kwargs):
        self.name, self.args, self.kwargs = name, args, kwargs

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:  # applied to a test
            return _add(args[0], "_scalerl_marks", self)
        return _Mark(self.name, args, kwargs)


class _MarkGenerator:
    def parametrize(self, argnames, argvalues, indirect=False, ids=None, scope=None):
        names = ([n.strip() for n in argnames.split(",") if n.strip()]
                 if isinstance(argnames, str) else list(argnames))
        cases = []
        for value in argvalues:
            if isinstance(value, _Param):
                value = value.values if len(names) > 1 else value.values[0]
            cases.append(tuple(value) if len(names) > 1 else (value,))

        def decorate(fn):
            return _add(fn, "_scalerl_parametrize", (names, cases))
        return decorate

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Mark(name, (), {})


mark = _MarkGenerator()


def fixture(fn=None, *, scope="function", params=None, autouse=False, name=None, ids=None):
    if params is not None:
        raise NotImplementedError("pytest stand-in: fixture params are not supported")

    def decorate(f):
        f._scalerl_fixture = name or f.__name__
        f._scalerl_autouse = autouse
        return f
    return decorate(fn) if fn is not None else decorate


class _CaptureResult(tuple):
    out = property(lambda self: self[0])
    err = property(lambda self: self[1])


class CaptureFixture:
    """`capsys`: sys.stdout / sys.stderr go to buffers until the test ends."""

    def __init__(self):
        self._saved = (_sys.stdout, _sys.stderr)
        _sys.stdout, _sys.stderr = _io.StringIO(), _io.StringIO()

    def value(self):
        return self

    def readouterr(self):
        out, err = _sys.stdout.getvalue(), _sys.stderr.getvalue()
        _sys.stdout.seek(0), _sys.stdout.truncate(), _sys.stderr.seek(0), _sys.stderr.truncate()
        return _CaptureResult((out, err))

    @_contextlib.contextmanager
    def disabled(self):
        current = (_sys.stdout, _sys.stderr)
        _sys.stdout, _sys.stderr = self._saved
        try:
            yield
        finally:
            _sys.stdout, _sys.stderr = current

    def close(self):
        _sys.stdout, _sys.stderr = self._saved


_TMP_COUNT = _itertools.count(1)


class TmpPath:
    """`tmp_path`: a fresh directory under the run's working directory."""

    def __init__(self):
        import pathlib

        self.path = pathlib.Path(_os.getcwd(), f"pytest-tmp-{next(_TMP_COUNT)}")
        self.path.mkdir()

    def value(self):
        return self.path

    def close(self):
        pass


class MonkeyPatch:
    """`monkeypatch`: setattr / delattr / setitem / delitem / setenv / delenv, undone after."""

    _missing = object()

    def __init__(self):
        self._undo = []

    def value(self):
        return self

    def setattr(self, target, name, value=_missing, raising=True):
        if value is self._missing:  # setattr("module.attr", value)
            module, _, attr = target.rpartition(".")
            target, name, value = __import__(module, fromlist=[attr]), attr, name
        old = getattr(target, name, self._missing)
        if old is self._missing and raising:
            raise AttributeError(f"{target!r} has no attribute {name!r}")
        self._undo.append(lambda: (delattr(target, name) if old is self._missing
                                   else setattr(target, name, old)))
        setattr(target, name, value)

    def delattr(self, target, name, raising=True):
        if not hasattr(target, name):
            if raising:
                raise AttributeError(name)
            return
        old = getattr(target, name)
        self._undo.append(lambda: setattr(target, name, old))
        delattr(target, name)

    def setitem(self, mapping, key, value):
        old = mapping.get(key, self._missing)
        self._undo.append(lambda: (mapping.pop(key, None) if old is self._missing
                                   else mapping.__setitem__(key, old)))
        mapping[key] = value

    def delitem(self, mapping, key, raising=True):
        if key not in mapping:
            if raising:
                raise KeyError(key)
            return
        old = mapping[key]
        self._undo.append(lambda: mapping.__setitem__(key, old))
        del mapping[key]

    def setenv(self, name, value, prepend=None):
        self.setitem(_os.environ, name, str(value))

    def delenv(self, name, raising=True):
        self.delitem(_os.environ, name, raising)

    def chdir(self, path):
        old = _os.getcwd()
        self._undo.append(lambda: _os.chdir(old))
        _os.chdir(path)

    def close(self):
        while self._undo:
            self._undo.pop()()


BUILTIN_FIXTURES = {"capsys": CaptureFixture, "tmp_path": TmpPath, "monkeypatch": MonkeyPatch}
