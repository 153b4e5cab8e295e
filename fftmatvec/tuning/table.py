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

import math
import os
import tempfile

import yaml

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
    v = float(_need(path, where, obj, key, (int, float)))
    if not math.isfinite(v) or v < 0 or (positive and v <= 0):
        _fail(path, f"{where}.{key}", f"expected a finite {'positive' if positive else 'non-negative'} "
                                      f"number, got {v!r}")
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
            if _need(path, where, e, k, int) < 1:
                _fail(path, f"{where}.{k}", f"expected a positive integer, got {e[k]}")
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
    except OSError as exc:
        raise TableError(f"{what} {path}: cannot read it: {exc}") from None


def load_table(path: str | os.PathLike[str]) -> dict:
    """Read and validate the table at ``path``; errors name the file and the problem."""
    path = os.fspath(path)
    return validate(read_yaml(path), path)


def save_table(table: dict, path: str | os.PathLike[str]) -> None:
    """Validate ``table`` and write it to ``path`` atomically (a temporary file renamed)."""
    path = os.fspath(path)
    validate(table, path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tune-", suffix=".yaml", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yaml.safe_dump(table, f, sort_keys=False, default_flow_style=None, width=100)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
