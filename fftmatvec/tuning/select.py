"""Run-time choice for ``precision="auto"``: the table lookup and the a-priori error model.

Lookup order: ``$FFTMATVEC_TUNING_PATH`` (a file or a folder of ``*.yaml``), the user's cache
folder (``platformdirs.user_cache_dir("fftmatvec")/tuning``), the tables shipped with the
package (``fftmatvec/tuning_tables``, from the top-level ``tuning/`` folder). The first table
whose device architecture matches is used; the entry of the same op whose shape is nearest on a
log scale; the fastest front point whose ``error_max`` times :data:`SAFETY` is within ``rtol``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from .. import _warnings
from .._errors import FFTMatvecValueError
from .table import load_table

__all__ = ["SAFETY", "UNIT_ROUNDOFF", "GROWTH", "GROWTH_H", "table_paths", "choose",
           "point_plan", "model_error"]

SAFETY = 4.0  # a front point is taken when 4 x its largest measured error is within rtol
UNIT_ROUNDOFF = {"d": 2.0**-53, "s": 2.0**-24, "h": 2.0**-11}
# Growth factor per stage (relative error of the product / unit roundoff of that stage),
# calibrated on the shipped table tuning/sm_90.yaml (docs/tuning.md): with stage 3's factor
# times sqrt(n) (n the sum's length: Nm forward, Nd adjoint) in `s` and a constant GROWTH_H in
# `h`, the model is at least every error_max measured there.
GROWTH = (0.7, 3.6, 0.5, 3.0, 0.7)
GROWTH_H = 0.6
_warned = set()


def table_paths() -> list[Path]:
    """The candidate table files, in lookup order."""
    out = []
    env = os.environ.get("FFTMATVEC_TUNING_PATH")
    if env:
        p = Path(env)
        if p.is_dir():
            out += sorted(p.glob("*.yaml"))
        elif p.is_file():
            out.append(p)
        else:
            raise FFTMatvecValueError(f"FFTMATVEC_TUNING_PATH={env!r} is neither a file nor a folder")
    import platformdirs

    cache = Path(platformdirs.user_cache_dir("fftmatvec")) / "tuning"
    if cache.is_dir():
        out += sorted(cache.glob("*.yaml"))
    shipped = Path(__file__).resolve().parent.parent / "tuning_tables"
    if not shipped.is_dir():  # a source checkout: the top-level tuning/ folder
        shipped = Path(__file__).resolve().parents[2] / "tuning"
    if shipped.is_dir():
        out += sorted(shipped.glob("*.yaml"))
    return out


def model_error(precision: str, n_sum: int) -> float:
    """A-priori relative error: sum over stages of unit roundoff x growth (:data:`GROWTH`;
    x sqrt(n_sum) in stage 3 in `s` or `d`, :data:`GROWTH_H` in `h`)."""
    tot = 0.0
    for i, (c, g) in enumerate(zip(precision, GROWTH)):
        if c == "h":
            tot += UNIT_ROUNDOFF[c] * GROWTH_H
        else:
            tot += UNIT_ROUNDOFF[c] * g * (math.sqrt(n_sum) if i == 2 else 1.0)
    return tot


def _model_choice(rtol, n_sum):
    # cheapest first: more single stages, stage 3 in h before s
    order = ["sshss", "ddhdd", "sssss", "ssssd", "dssdd", "ddsdd", "ddddd"]
    for p in order:
        if SAFETY * model_error(p, n_sum) <= rtol:
            return p
    return "ddddd"


def _nearest(entries, nm, nd, nt, nrhs):
    def dist(e):
        return sum(math.log(e[k] / v) ** 2 for k, v in (("nm", nm), ("nd", nd), ("nt", nt),
                                                       ("nrhs", nrhs)))
    return min(entries, key=dist)


def _lookup(arch, op, nm, nd, nt, nrhs):
    """``(path, entry)``: the nearest entry of the first table for ``arch``, or None."""
    for path in table_paths():
        table = load_table(path)
        if table["device"]["arch"] != arch:
            continue
        entries = [e for e in table["entries"] if e["op"] == op] or table["entries"]
        if entries:
            return path, _nearest(entries, nm, nd, nt, nrhs)
    return None


def point_plan(arch, op, nm, nd, nt, nrhs, precision):
    """The plan :func:`choose` gives for ``precision`` (a point of the nearest entry's front),
    or None (no table for ``arch``)."""
    found = _lookup(arch, op, nm, nd, nt, nrhs)
    return None if found is None else _plan_of(found[1], precision)


def _plan_of(entry, precision):
    """The plan tuned for ``precision``; a table without per-point plans has the fastest's."""
    return (entry.get("plans") or {}).get(precision, entry.get("plan"))


def choose(arch, op, nm, nd, nt, nrhs, rtol):
    """``(precision, source, plan, front)`` for ``rtol`` on a device of architecture ``arch``.

    ``front`` lists the entry's front points ``(precision, error_max)`` from fastest; the guard
    walks it towards accuracy. With no table for ``arch``: the model, ``plan`` None, one warning.
    """
    found = _lookup(arch, op, nm, nd, nt, nrhs)
    if found is not None:
        path, e = found
        errs = {p["precision"]: p["error_max"] for p in e["points"]}
        front = [(p, errs[p]) for p in e["front"]]
        pick = next((p for p, err in front if SAFETY * err <= rtol), None)
        if pick is None:
            pick = min(front, key=lambda t: t[1])[0]
        src = f"{path}: {e['op']} (nm={e['nm']}, nd={e['nd']}, nt={e['nt']}, nrhs={e['nrhs']})"
        return pick, src, _plan_of(e, pick), front
    if arch not in _warned:
        _warned.add(arch)
        _warnings.warn(f"no tuning table for device {arch!r}: precision='auto' uses the "
                       f"a-priori error model (run `fftmatvec tune` to measure this device)")
    p = _model_choice(rtol, nm)
    return p, "model", None, [(p, model_error(p, nm)), ("ddddd", model_error("ddddd", nm))]
