"""Tuning tables: the versioned YAML schema, strict loading and atomic writing.

A table holds one device and, per op and shape, every measured point, the Pareto front and the
tuned plan::

    schema: 1
    device: {vendor: nvidia, arch: sm_90, name: ..., driver: ..., runtime: ...,
             cupy: ..., fftmatvec: ...}
    entries:
      - {op: matvec, nm: 5000, nd: 100, nt: 1000, nrhs: 1, inputs: 3, repeat: 20,
         points: [{precision: ddddd, time: 1.9e-3, error_median: 0.0, error_max: 0.0}, ...],
         front: [ddddd, ...], plan: {...}, plan_time: ..., builtin_plan_time: ...,
         plans: {ddsdd: {...}, ...}}

``plan`` is the plan tuned for the front's fastest point (``plan_time`` against the built-in
rules' ``builtin_plan_time``); ``plans`` (optional; ``fftmatvec tune`` does not write it yet)
the plan tuned for other points of the front. ``precision="auto"`` runs the chosen point's plan
from ``plans`` where there is one, else ``plan``.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import time

import yaml

from .. import _writes
from .._errors import FFTMatvecTypeError, FFTMatvecValueError
from ..gpu.plan import parse_overrides
from ..precision import PrecisionConfig

__all__ = ["SCHEMA_VERSION", "OPS", "TableError", "load_table", "save_table", "new_table",
           "entry_key", "find_entry"]

SCHEMA_VERSION = 1
OPS = ("matvec", "rmatvec", "normal")
_DEVICE_KEYS = {"vendor": str, "arch": str, "name": str, "driver": str, "runtime": str,
                "cupy": str, "fftmatvec": str}
_SHAPE_KEYS = ("nm", "nd", "nt", "nrhs")
_SHAPE_MAX = 2**63 - 1  # largest size a shape key may hold (an int64 count of elements)
# The temporaries of versions that wrote tables through tempfile.mkstemp (no writer in the name)
_OLD_TMP_RE = re.compile(r"^\.tune-[A-Za-z0-9_]{8}\.yaml$")
_OLD_TMP_AGE = 3600.0  # seconds since its last change after which such a temporary is stale


class TableError(FFTMatvecValueError):
    """A tuning table that does not follow the schema; the message names the file."""


def new_table(device: dict) -> dict:
    """An empty table for ``device`` (a mapping with the device keys)."""
    return {"schema": SCHEMA_VERSION, "device": dict(device), "entries": []}


def entry_key(entry) -> tuple:
    """``(op, nm, nd, nt, nrhs)`` of an entry."""
    return (entry["op"],) + tuple(int(entry[k]) for k in _SHAPE_KEYS)


def find_entry(table, key):
    """The entry of ``table`` with :func:`entry_key` ``key``, or None."""
    for e in table["entries"]:
        if entry_key(e) == tuple(key):
            return e
    return None


def _fail(path, where, problem):
    raise TableError(f"tuning table {path}: {where}: {problem}")


def _need(path, where, obj, key, types):
    if not isinstance(obj, dict) or key not in obj:
        _fail(path, where, f"missing key {key!r}")
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, types):
        names = "/".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))
        _fail(path, f"{where}.{key}", f"expected {names}, got {type(v).__name__} {v!r}")
    return v


def _number(path, where, obj, key, positive=False):
    raw = _need(path, where, obj, key, (int, float))
    try:
        v = float(raw)
    except OverflowError:  # an integer beyond float64's range
        v = math.inf
    if not math.isfinite(v) or v < 0 or (positive and v <= 0):
        text = repr(raw) if len(repr(raw)) <= 40 else f"an integer of {len(str(abs(raw)))} digits"
        _fail(path, f"{where}.{key}", f"expected a finite {'positive' if positive else 'non-negative'} "
                                      f"number, got {text}")
    return v


def _size(path, where, obj, key):
    """A shape key: an integer from 1 to :data:`_SHAPE_MAX`."""
    v = _need(path, where, obj, key, int)
    if not 1 <= v <= _SHAPE_MAX:
        text = repr(v) if len(repr(v)) <= 40 else f"an integer of {len(str(abs(v)))} digits"
        _fail(path, f"{where}.{key}", f"expected an integer from 1 to 2**63 - 1, got {text}")
    return v


def _precision(path, where, text):
    try:
        return PrecisionConfig(text).letters
    except (FFTMatvecValueError, FFTMatvecTypeError, TypeError, AttributeError) as exc:
        _fail(path, where, f"bad precision {text!r} ({exc})")


def validate(table, path="<table>") -> dict:
    """Check ``table`` (the parsed YAML) against the schema; return it. Raise :class:`TableError`
    naming ``path`` and the problem otherwise."""
    if not isinstance(table, dict):
        _fail(path, "top level", f"expected a mapping, got {type(table).__name__}")
    version = _need(path, "top level", table, "schema", int)
    if version > SCHEMA_VERSION:
        _fail(path, "schema", f"version {version} is newer than this fftmatvec reads "
                              f"({SCHEMA_VERSION}); upgrade fftmatvec")
    if version < 1:
        _fail(path, "schema", f"expected a version >= 1, got {version}")
    dev = _need(path, "top level", table, "device", dict)
    for k, t in _DEVICE_KEYS.items():
        _need(path, "device", dev, k, t)
    entries = _need(path, "top level", table, "entries", list)
    seen = set()
    for n, e in enumerate(entries):
        where = f"entries[{n}]"
        if not isinstance(e, dict):
            _fail(path, where, f"expected a mapping, got {type(e).__name__}")
        op = _need(path, where, e, "op", str)
        if op not in OPS:
            _fail(path, f"{where}.op", f"expected one of {', '.join(OPS)}, got {op!r}")
        for k in _SHAPE_KEYS:
            _size(path, where, e, k)
        key = entry_key(e)
        if key in seen:
            _fail(path, where, f"duplicate entry for {key}")
        seen.add(key)
        pts = _need(path, where, e, "points", list)
        if not pts:
            _fail(path, f"{where}.points", "expected at least one point")
        names = set()
        for m, p in enumerate(pts):
            pw = f"{where}.points[{m}]"
            if not isinstance(p, dict):
                _fail(path, pw, f"expected a mapping, got {type(p).__name__}")
            names.add(_precision(path, pw, _need(path, pw, p, "precision", str)))
            _number(path, pw, p, "time", positive=True)
            lo = _number(path, pw, p, "error_median")
            hi = _number(path, pw, p, "error_max")
            if lo > hi:
                _fail(path, pw, f"error_median {lo} exceeds error_max {hi}")
        front = _need(path, where, e, "front", list)
        if not front:
            _fail(path, f"{where}.front", "expected at least one precision")
        for m, f in enumerate(front):
            if not isinstance(f, str):
                _fail(path, f"{where}.front[{m}]", f"expected str, got {type(f).__name__}")
            if _precision(path, f"{where}.front[{m}]", f) not in names:
                _fail(path, f"{where}.front[{m}]", f"{f!r} is not among the entry's points")
        if "plan" in e and not isinstance(e["plan"], dict):
            _fail(path, f"{where}.plan", f"expected a mapping, got {type(e['plan']).__name__}")
        if "plan" in e:
            try:
                parse_overrides(e["plan"], "plan")
            except FFTMatvecValueError as exc:
                _fail(path, f"{where}.plan", str(exc))
        if "plans" in e:  # per front point: precision -> plan
            if not isinstance(e["plans"], dict):
                _fail(path, f"{where}.plans", f"expected a mapping, got {type(e['plans']).__name__}")
            for prec, plan in e["plans"].items():
                if prec not in names:
                    _fail(path, f"{where}.plans", f"{prec!r} is not among the entry's points")
                if not isinstance(plan, dict):
                    _fail(path, f"{where}.plans[{prec}]",
                          f"expected a mapping, got {type(plan).__name__}")
                try:
                    parse_overrides(plan, "plan")
                except FFTMatvecValueError as exc:
                    _fail(path, f"{where}.plans[{prec}]", str(exc))
    return table


def read_yaml(path, what: str = "tuning table"):
    """The parsed YAML of ``path``; a :class:`TableError` naming ``what`` and the file where it
    cannot be read or parsed."""
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    except yaml.YAMLError as exc:
        raise TableError(f"{what} {path}: not valid YAML: {exc}") from None
    except UnicodeDecodeError:
        raise TableError(f"{what} {path}: not a YAML file (not UTF-8 text)") from None
    except OSError as exc:
        raise TableError(f"{what} {path}: cannot read it: {exc}") from None


def load_table(path: str | os.PathLike[str]) -> dict:
    """Read and validate the table at ``path``; errors name the file and the problem."""
    path = os.fspath(path)
    return validate(read_yaml(path), path)


def _remove_old_temporaries(folder: str) -> None:
    """Remove the ``.tune-<8 characters>.yaml`` temporaries that earlier versions left when
    interrupted. Their names carry no writer, so only those older than :data:`_OLD_TMP_AGE`
    go: a table's write takes a fraction of a second."""
    now = time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if _OLD_TMP_RE.match(entry.name) is None:
            continue
        with contextlib.suppress(OSError):
            if entry.is_file(follow_symlinks=False) and now - entry.stat().st_mtime > _OLD_TMP_AGE:
                os.remove(entry.path)


def save_table(table: dict, path: str | os.PathLike[str]) -> None:
    """Validate ``table`` and write it to ``path`` atomically: a temporary beside it that
    carries this process's id, renamed onto it (:func:`fftmatvec._writes.atomic_file`), so
    that a signal handler removes it and a later write removes those of dead writers (and
    the old temporaries of earlier versions)."""
    path = os.fspath(path)
    validate(table, path)
    data = yaml.safe_dump(table, sort_keys=False, default_flow_style=None, width=100).encode()
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    _remove_old_temporaries(folder)
    with _writes.atomic_file(path, len(data)) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
