"""FNO tuning tables: the measured fastest way to run one layer signature on one device.

The built-in rules (:func:`fftmatvec.fno._plan.fno_chain`, :func:`._dft.choose_method`, the
CUDA graphs' size limits) were set from timings on one device (docs/benchmarks.md).
``fftmatvec tune-fno`` (or
:func:`tune`) times, on the device at hand, the built-in choice of a layer signature against the
alternatives (the FFT path, the DFT chain with each of its plan keys forced, with and without
CUDA graphs), checks each one's output against the built-in's, and writes the fastest to a
table. A layer whose call matches an entry exactly then runs the entry's choice where the
caller left ``method``, ``graphs`` and the plan keys to the rules::

    schema: 1
    kind: fno
    device: {vendor, arch, name, runtime, torch, fftmatvec}
    entries:
      - {batch, cin, cout, spatial: [...], modes: [...], dtype, compute_dtype, grad,
         repeat, choice: {method, graphs, plan: {...}}, time, builtin_time,
         candidates: [{method, graphs, plan, time, error[, builtin]} or
                      {method, graphs, plan, skipped}]}

``modes`` are the weight's mode extents (``weight.shape[2:]``: the last axis's count of
non-negative frequencies); ``grad`` whether the call records gradients (then ``time`` is a
forward and its backward), else a forward alone; the candidate that runs what the built-in
rules run is marked ``builtin`` (its time is ``builtin_time``). Tables are looked up in order: the file or
folder ``$FFTMATVEC_FNO_TUNING_PATH`` (``none``: no table at all), the user's cache folder
(``platformdirs.user_cache_dir("fftmatvec")/fno``, where ``tune-fno`` writes by default), the
tables shipped with the package (``tuning/fno``); the first entry of a table of the device's
architecture with the call's signature is taken. Loading is strict: a table that does not
follow the schema raises :class:`~fftmatvec.tuning.table.TableError` naming the file.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

import yaml

from .. import __version__
from .._errors import FFTMatvecError, FFTMatvecValueError
from .._typing import PathLike
from .._writes import atomic_file
from ..gpu.plan import ENV as PLAN_ENV
from ..gpu.plan import _env_reader, parse_overrides
from ..tuning.table import TableError, read_yaml
from ._modes import kept_modes

__all__ = ["SCHEMA_VERSION", "ENV", "MARGIN", "Choice", "table_paths", "cache_table",
           "load_table", "save_table", "reload_tables", "lookup", "builtin_rules", "candidates",
           "tune", "parse_case", "describe"]

SCHEMA_VERSION = 1
KIND = "fno"
ENV = "FFTMATVEC_FNO_TUNING_PATH"
#: the plan keys of the FNO layer (:data:`fftmatvec.gpu.plan.PLAN_KEYS`)
FNO_KEYS = ("fno_rows", "fno_plane", "fno_split", "fno_warp", "fno_paired", "fno_product",
            "fno_fused", "fno_direct", "fno_ends")
DTYPES = ("float32", "float64", "bfloat16", "float16")
METHODS = ("dft", "fft")
GRAPHS = ("auto", True, False)
_DEVICE_KEYS = ("vendor", "arch", "name", "runtime", "torch", "fftmatvec")
#: a candidate is kept only where its output is this close to the built-in choice's (relative,
#: largest element over the largest), by the computing precision
AGREE = {"float64": 1e-10, "float32": 1e-4, "bfloat16": 5e-2, "float16": 1e-2}
#: a candidate replaces the built-in choice only where it is at least this fraction faster
MARGIN = 0.03

_env = _env_reader(ENV)
_state = {"generation": 0, "off": 0}


class Choice(tuple):
    """An entry's choice: ``(method, graphs, plan)``, ``plan`` as sorted ``(key, value)``
    pairs (what :func:`fftmatvec.fno._plan.fno_chain` takes as ``tuned``), and ``source``,
    the table file."""

    __slots__ = ()

    def __new__(cls, method, graphs, plan, source=""):
        return super().__new__(cls, (method, graphs, tuple(sorted(plan)), source))

    method = property(lambda self: self[0])
    graphs = property(lambda self: self[1])
    plan = property(lambda self: self[2])
    source = property(lambda self: self[3])


# --- the schema ------------------------------------------------------------------------------

def entry_key(entry) -> tuple:
    """``(batch, cin, cout, spatial, modes, dtype, compute_dtype, grad)`` of an entry, as
    :func:`lookup` matches a call."""
    return (int(entry["batch"]), int(entry["cin"]), int(entry["cout"]),
            tuple(int(n) for n in entry["spatial"]), tuple(int(m) for m in entry["modes"]),
            entry["dtype"], entry["compute_dtype"], bool(entry["grad"]))


def _fail(path, where, problem):
    raise TableError(f"FNO tuning table {path}: {where}: {problem}")


def _need(path, where, obj, key, types):
    if not isinstance(obj, dict) or key not in obj:
        _fail(path, where, f"missing key {key!r}")
    value = obj[key]
    ok = isinstance(value, types) and (bool in types or not isinstance(value, bool))
    if not ok:
        names = "/".join(t.__name__ for t in types)
        _fail(path, f"{where}.{key}", f"expected {names}, got {type(value).__name__} {value!r}")
    return value


def _positive(path, where, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        _fail(path, where, f"expected a positive integer, got {value!r}")


def _time_value(path, where, obj, key):
    value = float(_need(path, where, obj, key, (int, float)))
    if not (math.isfinite(value) and value > 0):
        _fail(path, f"{where}.{key}",
              f"expected a finite positive number of seconds, got {value!r}")


def _check_choice(path, where, c, cd):
    method = _need(path, where, c, "method", (str,))
    if method not in METHODS:
        _fail(path, f"{where}.method", f"expected one of {', '.join(METHODS)}, got {method!r}")
    graphs = _need(path, where, c, "graphs", (str, bool))
    if graphs not in GRAPHS:
        _fail(path, f"{where}.graphs", f"expected auto, true or false, got {graphs!r}")
    if method == "fft" and (graphs is True or cd in ("bfloat16", "float16")):
        _fail(path, where, "the fft path replays no CUDA graph and computes in float32 or "
                           f"float64 (graphs={graphs!r}, compute_dtype={cd})")
    plan = _need(path, where, c, "plan", (dict,))
    try:
        parsed = parse_overrides(plan, "plan")
    except FFTMatvecValueError as exc:
        _fail(path, f"{where}.plan", str(exc))
    other = sorted(set(parsed) - set(FNO_KEYS))
    if other:
        _fail(path, f"{where}.plan", f"only the FNO keys {', '.join(FNO_KEYS)} belong here, "
                                     f"got {', '.join(other)}")
    return Choice(method, graphs, parsed.items(), path)


def validate(table, path="<table>") -> dict:
    """Check ``table`` (the parsed YAML) against the schema; return it. Raise
    :class:`~fftmatvec.tuning.table.TableError` naming ``path`` and the problem otherwise."""
    if not isinstance(table, dict):
        _fail(path, "top level", f"expected a mapping, got {type(table).__name__}")
    version = _need(path, "top level", table, "schema", (int,))
    if version > SCHEMA_VERSION:
        _fail(path, "schema", f"version {version} is newer than this fftmatvec reads "
                              f"({SCHEMA_VERSION}); upgrade fftmatvec")
    if version < 1:
        _fail(path, "schema", f"expected a version >= 1, got {version}")
    if _need(path, "top level", table, "kind", (str,)) != KIND:
        _fail(path, "kind", f"expected {KIND!r} (an FNO table), got {table['kind']!r}")
    device = _need(path, "top level", table, "device", (dict,))
    for key in _DEVICE_KEYS:
        _need(path, "device", device, key, (str,))
    seen = set()
    for n, e in enumerate(_need(path, "top level", table, "entries", (list,))):
        where = f"entries[{n}]"
        if not isinstance(e, dict):
            _fail(path, where, f"expected a mapping, got {type(e).__name__}")
        for key in ("batch", "cin", "cout", "repeat"):
            _positive(path, f"{where}.{key}", _need(path, where, e, key, (int,)))
        spatial = _need(path, where, e, "spatial", (list,))
        modes = _need(path, where, e, "modes", (list,))
        if not 1 <= len(spatial) <= 3 or len(modes) != len(spatial):
            _fail(path, where, f"expected 1 to 3 axes and a mode count each, got spatial "
                               f"{spatial}, modes {modes}")
        for k, v in enumerate(spatial + modes):
            _positive(path, f"{where}.{'spatial' if k < len(spatial) else 'modes'}", v)
        for key in ("dtype", "compute_dtype"):
            if _need(path, where, e, key, (str,)) not in DTYPES:
                _fail(path, f"{where}.{key}", f"expected one of {', '.join(DTYPES)}, "
                                              f"got {e[key]!r}")
        _need(path, where, e, "grad", (bool,))
        key = entry_key(e)
        if key in seen:
            _fail(path, where, f"a second entry for {key}")
        seen.add(key)
        _check_choice(path, f"{where}.choice", _need(path, where, e, "choice", (dict,)),
                      e["compute_dtype"])
        _time_value(path, where, e, "time")
        _time_value(path, where, e, "builtin_time")
        for m, c in enumerate(e.get("candidates", [])):
            cw = f"{where}.candidates[{m}]"
            _check_choice(path, cw, c, e["compute_dtype"])
            if "skipped" not in c:
                _time_value(path, cw, c, "time")
            if "builtin" in c and not isinstance(c["builtin"], bool):
                _fail(path, f"{cw}.builtin", f"expected bool, got {c['builtin']!r}")
    return table


def new_table(device: dict) -> dict:
    """An empty table for ``device`` (a mapping with the device keys)."""
    return {"schema": SCHEMA_VERSION, "kind": KIND, "device": dict(device), "entries": []}


def load_table(path) -> dict:
    """Read and validate the FNO table at ``path``; errors name the file and the problem."""
    path = os.fspath(path)
    return validate(read_yaml(path, "FNO tuning table"), path)


def save_table(table, path) -> None:
    """Validate ``table`` and write it to ``path`` atomically (a temporary file renamed); the
    tables this process reads are then read again."""
    path = os.fspath(path)
    validate(table, path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    text = yaml.safe_dump(table, sort_keys=False, default_flow_style=None, width=100)
    with atomic_file(path, len(text)) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    reload_tables()


# --- the lookup ------------------------------------------------------------------------------

def _cache_folder() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("fftmatvec")) / "fno"


def _shipped_folder() -> Path:
    here = Path(__file__).resolve()
    shipped = here.parents[1] / "tuning_tables" / "fno"
    return shipped if shipped.is_dir() else here.parents[2] / "tuning" / "fno"


def table_paths() -> list[Path]:
    """The FNO table files, in lookup order (none where ``$FFTMATVEC_FNO_TUNING_PATH`` is
    ``none``)."""
    raw = os.environ.get(ENV)
    if raw is not None and raw.strip().lower() == "none":
        return []
    out = []
    if raw:
        p = Path(raw)
        if p.is_dir():
            out += sorted(p.glob("*.yaml"))
        elif p.is_file():
            out.append(p)
        else:
            raise FFTMatvecValueError(f"{ENV}={raw!r} is neither a file nor a folder (nor 'none')")
    for folder in (_cache_folder(), _shipped_folder()):
        if folder.is_dir():
            out += sorted(folder.glob("*.yaml"))
    return out


def cache_table(arch: str) -> Path:
    """The user's cache file for the tables of ``arch``, where ``tune-fno`` writes by default."""
    return _cache_folder() / f"{arch}.yaml"


def reload_tables() -> None:
    """Read the tables again at the next call (after a table was written or removed)."""
    _state["generation"] += 1


@functools.lru_cache(maxsize=8)
def _index(raw, generation) -> dict:
    """``{arch: {entry key: Choice}}`` over every table, the first entry of a key winning."""
    index: dict = {}
    for path in table_paths():
        table = load_table(path)
        entries = index.setdefault(table["device"]["arch"], {})
        for e in table["entries"]:
            entries.setdefault(entry_key(e), _check_choice(str(path), "choice", e["choice"],
                                                           e["compute_dtype"]))
    return index


@functools.lru_cache(maxsize=16)
def device_arch(device_type: str, index) -> str:
    """``sm_90``, ``gfx90a``, ... of a torch device; ``cpu`` for the host."""
    if device_type != "cuda":
        return device_type
    import torch

    props = torch.cuda.get_device_properties(index)
    if getattr(torch.version, "hip", None):
        return props.gcnArchName.split(":")[0]
    return f"sm_{props.major}{props.minor}"


def lookup(device, batch, cin, cout, spatial, modes, dtype, compute_dtype, grad):
    """The :class:`Choice` of the first table entry for this call on ``device`` (a torch
    device), or None: one dictionary lookup a call once the tables are read."""
    if _state["off"]:
        return None
    index = _index(_env(), _state["generation"])
    if not index:
        return None
    entries = index.get(device_arch(device.type, device.index))
    if not entries:
        return None
    return entries.get((batch, cin, cout, spatial, modes, dtype, compute_dtype, grad))


@contextlib.contextmanager
def builtin_rules():
    """No table is read inside: the layers take the built-in rules (how :func:`tune` times
    them)."""
    _state["off"] += 1
    try:
        yield
    finally:
        _state["off"] -= 1


# --- measuring -------------------------------------------------------------------------------

def parse_case(text: str):
    """``(batch, cin, cout, spatial, n_modes)`` from ``"B,C,GRID,MODES"`` or
    ``"B,CIN,COUT,GRID,MODES"``, GRID and MODES as ``64x64`` (MODES one number: every axis)."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        if len(parts) == 4:
            b, c, grid, m = parts
            cin = cout = int(c)
        elif len(parts) == 5:
            b, cin, cout, grid, m = parts
            cin, cout = int(cin), int(cout)
        else:
            raise ValueError("expected 4 or 5 fields")
        spatial = tuple(int(n) for n in grid.lower().split("x"))
        n_modes = tuple(int(n) for n in m.lower().split("x"))
        batch = int(b)
    except ValueError as exc:
        raise FFTMatvecValueError(
            f"case {text!r}: expected B,C,GRID,MODES or B,CIN,COUT,GRID,MODES with GRID and "
            f"MODES like 64x64 ({exc})") from None
    if len(n_modes) == 1:
        n_modes = n_modes * len(spatial)
    if len(n_modes) != len(spatial) or not 1 <= len(spatial) <= 3:
        raise FFTMatvecValueError(f"case {text!r}: 1 to 3 axes and a mode count for each")
    if min((batch, cin, cout) + spatial + n_modes) < 1:
        raise FFTMatvecValueError(f"case {text!r}: every size must be positive")
    return batch, cin, cout, spatial, n_modes


def candidates(device, batch, cin, cout, spatial, modes, dtype, compute_dtype):
    """The choices worth timing for a layer: ``[(method, graphs, plan dict) or, for a plan the
    planner refuses, (method, graphs, plan dict, its error), ...]``, the built-in first; each
    DFT chain once (plans the planner resolves to one chain are timed once), on a GPU without
    CUDA graphs and with graphs that hold the whole chains or only their middles
    (``fno_ends``)."""
    from ._plan import fno_chain

    sixteen = compute_dtype in ("bfloat16", "float16")
    cuda = device.type == "cuda"
    kernels = cuda and compute_dtype == "float32"
    chain_keys = FNO_KEYS[:-1]  # (fno_ends: the graphs, below)
    if kernels:
        plans = [{}] + [{k: v} for k in chain_keys for v in ("0", "1")] + [
            {"fno_plane": "1", "fno_warp": "1"}, {"fno_rows": "1", "fno_warp": "1"},
            {"fno_rows": "1", "fno_split": "1"},
            {"fno_rows": "1", "fno_split": "1", "fno_warp": "1"}]
    else:
        plans = [{}, {"fno_split": "0"}, {"fno_split": "1"}]
    out, chains = [("auto", "auto", {})], set()
    for plan in plans:
        try:
            with _plan_env(plan):
                chain = fno_chain(batch, cin, cout, spatial, modes, compute_dtype,
                                  device.index if cuda else -1, kernels, ())
        except FFTMatvecValueError as exc:
            out.append(("dft", "auto", plan, str(exc)))
            continue
        if chain in chains:
            continue
        chains.add(chain)
        if not cuda:
            out.append(("dft", False, plan))
            continue
        # on a GPU: without graphs, and with them holding the whole chains or their middles
        out.append(("dft", False, plan))
        for ends in ("0", "1"):
            out.append(("dft", True, {**plan, "fno_ends": ends}))
    if not sixteen:
        out.append(("fft", False, {}))
    return out


@contextlib.contextmanager
def _plan_env(plan):
    """``FFTMATVEC_PLAN`` with the FNO keys of ``plan`` alone (the caller's others kept)."""
    old = os.environ.get(PLAN_ENV)
    keep = {k: v for k, v in parse_overrides(old or "", PLAN_ENV).items() if k not in FNO_KEYS}
    keep.update(plan)
    try:
        if keep:
            os.environ[PLAN_ENV] = ",".join(f"{k}={v}" for k, v in keep.items())
        else:
            os.environ.pop(PLAN_ENV, None)
        yield
    finally:
        if old is None:
            os.environ.pop(PLAN_ENV, None)
        else:
            os.environ[PLAN_ENV] = old


def device_info(torch, device) -> dict:
    """The table's ``device`` mapping for a torch device."""
    if device.type == "cuda":
        hip = getattr(torch.version, "hip", None)
        return {"vendor": "amd" if hip else "nvidia",
                "arch": device_arch("cuda", device.index),
                "name": torch.cuda.get_device_name(device),
                "runtime": f"hip {hip}" if hip else f"cuda {torch.version.cuda}",
                "torch": str(torch.__version__), "fftmatvec": __version__}
    import platform

    return {"vendor": "cpu", "arch": "cpu", "name": platform.processor() or platform.machine(),
            "runtime": f"{os.cpu_count()} cores", "torch": str(torch.__version__),
            "fftmatvec": __version__}


def _timer(torch, device, fn, repeat):
    """A call's mean time over ``repeat`` calls back to back, in seconds, after two calls
    (compiles, captures)."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    fn()
    fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    sync()
    return (time.perf_counter() - t0) / repeat


def _measure(torch, case, device, dtype, compute_dtype, grad, repeat, rounds, seed):
    """One entry of the table for ``case`` (:func:`parse_case`'s tuple): every candidate's
    output checked against the built-in choice's, then the candidates timed in turn,
    ``rounds`` times, each round starting one candidate later (each time's graphs captured
    anew and released after it, so that one candidate's graphs hold memory at a time); a
    candidate's time is its median."""
    from ._graphs import clear_graphs
    from ._torch import spectral_conv_torch

    batch, cin, cout, spatial, n_modes = case
    modes = kept_modes(n_modes)
    real = getattr(torch, dtype)
    cd = None if compute_dtype == dtype else getattr(torch, compute_dtype)
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def rand(shape, dt=real):
        return torch.randn(shape, generator=gen, dtype=dt).to(device)

    x = rand((batch, cin) + spatial).requires_grad_(grad)
    cplx = torch.complex128 if dtype == "float64" else torch.complex64
    # the weight modes-major in memory, as SpectralConv keeps it (no copy a call)
    w = rand((math.prod(modes), cin, cout), cplx) / math.sqrt(cin)
    w = w.permute(1, 2, 0).reshape((cin, cout) + modes).requires_grad_(grad)
    bias = rand((cout,) + (1,) * len(spatial)).requires_grad_(grad)
    g = rand((batch, cout) + spatial)

    def step(method, graphs):
        def call():
            return spectral_conv_torch(x, w, n_modes, bias, method=method, compute_dtype=cd,
                                       graphs=graphs)
        if not grad:
            with torch.no_grad():
                return call()
        x.grad = w.grad = bias.grad = None
        y = call()
        y.backward(g)
        return y

    tol = AGREE[compute_dtype]
    same = _builtin_twin(torch, x, w, bias, batch, cin, cout, spatial, modes, compute_dtype,
                         grad)
    ref, rows, runs, builtin = None, [], [], None
    with builtin_rules():
        for cand in candidates(device, batch, cin, cout, spatial, modes, dtype, compute_dtype):
            method, graphs, plan = cand[:3]
            row = {"method": method, "graphs": graphs, "plan": dict(plan)}
            if len(cand) == 4:
                rows.append({**row, "skipped": cand[3]})
                continue
            twin = ref is not None and (method, graphs, row["plan"]) == same
            try:
                with _plan_env(plan):
                    y = step(method, graphs).detach()
                ref = y if ref is None else ref  # the built-in choice's output, first
                error = float((y - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
                if not error <= tol:
                    raise FFTMatvecError(f"its output differs from the built-in choice's by "
                                         f"{error:.2e} (relative; at most {tol:.0e})")
            except (FFTMatvecError, RuntimeError) as exc:  # a choice this device cannot run
                if ref is None:  # the built-in rules' own failure is the caller's
                    raise
                rows.append({**row, "skipped": str(exc).splitlines()[0]})
                continue
            finally:
                clear_graphs()
            if method == "auto":  # timed as its twin below, where the candidates have one
                builtin = row
                continue
            row["error"] = error
            if twin:  # what the rules run, spelled out: its time is theirs
                row["builtin"] = True
                builtin = row
            rows.append(row)
            runs.append((row, [], lambda m=method, gr=graphs: step(m, gr)))
        if builtin is not None and "error" not in builtin:  # no twin: the rules timed alone
            runs.append((builtin, [], lambda: step("auto", "auto")))
        for r in range(rounds):  # each round in another order: no candidate always first
            for row, times, fn in runs[r % len(runs):] + runs[:r % len(runs)]:
                try:
                    with _plan_env(row["plan"]):
                        times.append(_timer(torch, device, fn, repeat))
                finally:
                    clear_graphs()
    for row, times, _ in runs:
        row["time"] = statistics.median(times)
    others = [r for r in rows if "time" in r and not r.get("builtin")]
    best = min(others, key=lambda r: r["time"], default=None)
    if best is None or best["time"] > (1 - MARGIN) * builtin["time"]:
        best = {"method": same[0], "graphs": "auto", "plan": {}, "time": builtin["time"]}
    return {"batch": batch, "cin": cin, "cout": cout, "spatial": list(spatial),
            "modes": list(modes), "dtype": dtype, "compute_dtype": compute_dtype, "grad": grad,
            "repeat": repeat,
            "choice": {"method": best["method"], "graphs": best["graphs"],
                       "plan": dict(best["plan"])},
            "time": best["time"], "builtin_time": builtin["time"], "candidates": rows}


def _builtin_twin(torch, x, w, bias, batch, cin, cout, spatial, modes, compute_dtype, grad):
    """The candidate of :func:`candidates` that runs what the built-in rules run for this
    call, ``(method, graphs, plan)``: timed once, as both."""
    from ._plan import fno_ends
    from ._graphs import wanted
    from ._reference import resolve_method
    from ._torch_dft import chain_for, kernel_ends

    if compute_dtype in ("bfloat16", "float16"):
        method = "dft"
    else:
        method = resolve_method("auto", batch, cin, cout, spatial, modes)
    if method == "fft":
        return "fft", False, {}
    with torch.set_grad_enabled(grad), _plan_env({}):
        if not wanted(torch, "auto", x, w, bias):
            return "dft", False, {}
        cd = getattr(torch, compute_dtype)
        bound = kernel_ends(torch, chain_for(x, cd, modes, cout), x.dtype, cd, bias, grad)
        ends = fno_ends(tuple(x.shape), x.element_size(), cout, training=grad,
                        kernel_ends=bound)
    return "dft", True, {"fno_ends": "1" if ends else "0"}


def tune(cases: Iterable[tuple | str], device: Any = None,
         dtype: Literal["float32", "float64"] = "float32",
         compute_dtype: Literal["float32", "float64", "bfloat16", "float16"] | None = None,
         grad: bool = True, repeat: int = 20, rounds: int = 3, out: PathLike | None = None,
         force: bool = False, seed: int = 0,
         progress: Callable[[dict], object] | None = None) -> dict:
    """Time the choices of each layer signature in ``cases`` on ``device`` and write the
    fastest to the FNO table ``out`` (default: the user's cache file of the device's
    architecture, :func:`cache_table`), atomically after each entry; return the table.

    ``cases``: tuples ``(batch, cin, cout, spatial, n_modes)`` or strings for
    :func:`parse_case`; ``device`` a torch device (default: the current CUDA device where
    there is one, else the CPU); ``dtype`` the input's and ``compute_dtype`` (default
    ``dtype``) the GEMMs' precision; ``grad``: time a forward and its backward (a training
    step), else a forward under ``torch.no_grad``. An entry already in ``out`` is kept unless
    ``force``. ``progress(entry)`` is called after each entry."""
    from ._torch import _torch

    torch = _torch()
    if device is None:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    compute_dtype = compute_dtype or dtype
    for name, value, allowed in (("dtype", dtype, ("float32", "float64")),
                                 ("compute_dtype", compute_dtype, DTYPES)):
        if value not in allowed:
            raise FFTMatvecValueError(f"{name}: expected one of {', '.join(allowed)}, "
                                      f"got {value!r}")
    if compute_dtype in ("float32", "float64") and compute_dtype != dtype:
        raise FFTMatvecValueError(f"compute_dtype: {compute_dtype} for {dtype} inputs (the "
                                  "layer computes in the input's precision or in 16 bits)")
    cases = [parse_case(c) if isinstance(c, str) else tuple(c) for c in cases]
    info = device_info(torch, device)
    out = Path(out) if out is not None else cache_table(info["arch"])
    if out.exists():
        table = load_table(out)
        if table["device"]["arch"] != info["arch"]:
            raise FFTMatvecValueError(f"{out}: a table of {table['device']['arch']}, this "
                                      f"device is {info['arch']}")
    else:
        table = new_table(info)
    for case in cases:
        batch, cin, cout, spatial, n_modes = case
        key = (batch, cin, cout, tuple(spatial), kept_modes(n_modes), dtype, compute_dtype,
               bool(grad))
        old = [e for e in table["entries"] if entry_key(e) == key]
        if old and not force:
            if progress:
                progress(old[0])
            continue
        with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
            entry = _measure(torch, (batch, cin, cout, tuple(spatial), tuple(n_modes)), device,
                             dtype, compute_dtype, bool(grad), int(repeat), int(rounds), seed)
        table["entries"] = [e for e in table["entries"] if entry_key(e) != key] + [entry]
        save_table(table, out)
        if progress:
            progress(entry)
    return table


def describe(entry) -> str:
    """One line for an entry: the signature, the choice and its time against the built-in."""
    c = entry["choice"]
    plan = ",".join(f"{k}={v}" for k, v in c["plan"].items()) or "rules"
    return (f"({entry['batch']}, {entry['cin']}, {entry['cout']}, "
            f"{tuple(entry['spatial'])}, modes {tuple(entry['modes'])}) {entry['dtype']}"
            f"{'' if entry['compute_dtype'] == entry['dtype'] else '/' + entry['compute_dtype']}"
            f" {'fwd+bwd' if entry['grad'] else 'fwd'}: {c['method']}, graphs={c['graphs']}, "
            f"plan {plan}: {entry['time'] * 1e6:.1f} us, built-in {entry['builtin_time'] * 1e6:.1f}"
            f" us ({entry['builtin_time'] / entry['time']:.2f}x)")

