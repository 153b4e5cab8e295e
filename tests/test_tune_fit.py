"""The split-K model fit of scripts/tune_sbgemv.py (CPU only: synthetic sweeps)."""

import math

import pytest
from conftest import load_script

from fftmatvec.gpu import pipe_split_count, pipe_split_time
from fftmatvec.gpu.stage3 import _split_k

pytest.importorskip("scipy")


def _points(model, const, cases, counts):
    pts = []
    for size, base, n_red, partial in cases:
        max_splits = n_red // 32
        for want in counts:
            splits, chunk = _split_k(min(want, max_splits), n_red, 4)
            us = pipe_split_time(splits, chunk, base, 132, partial, model) + const
            pts.append({"case": (size, "h", False), "store": "c32h", "adjoint": False,
                        "ms": us / 1e3, "splits": splits, "chunk": chunk, "base": base,
                        "resident": 132, "partial_bytes": partial, "n_red": n_red, "step": 4,
                        "max_splits": max_splits, "model_choice": 1})
    return pts


def test_fit_recovers_the_model(capsys):
    """Times made by a known (a, w, b) and constant give those constants back, and the fitted
    model's choice is the fastest count of each case."""
    model, const = (0.24, 5.0, 2.1), 60.0
    cases = [("5000x100x1000", 126, 5000, 16 * 100 * 1001 * 8),
             ("20000x50x500", 32, 20000, 16 * 50 * 501 * 8),
             ("100000x10x100", 7, 100000, 16 * 10 * 101 * 8)]
    pts = _points(model, const, cases, (1, 2, 3, 4, 5, 6, 8, 9, 12, 16, 17, 24, 33, 48, 66))
    fits = load_script("tune_sbgemv").fit_split_model(pts)
    got = fits[("c32h", False)]
    assert got == pytest.approx(model, rel=1e-6, abs=1e-6)
    for size, base, n_red, partial in cases:
        choice = pipe_split_count(base, 132, n_red, 4, n_red // 32, partial, got)
        timed = [p for p in pts if p["case"][0] == size]
        best = min(timed, key=lambda p: p["ms"])
        _, chunk = _split_k(choice, n_red, 4)
        # the model's choice over every count is at least as fast as the best one timed
        assert pipe_split_time(choice, chunk, base, 132, partial, model) <= \
            best["ms"] * 1e3 - const + 1e-6
    out = capsys.readouterr().out
    assert "split model c32h fwd" in out and "constant 60.0 us" in out
    assert out.count("model error up to 0.0 %") == len(cases)


def test_fit_is_not_fooled_by_one_count():
    """A single count per case cannot separate the rows from the rounds: the fit still returns
    non-negative constants, and the model built from them gives a valid count."""
    pts = _points((0.3, 0.0, 1.0), 0.0, [("1000x100x1000", 126, 1000, 10**6)], (1,))
    got = load_script("tune_sbgemv").fit_split_model(pts)[("c32h", False)]
    assert all(c >= 0 and math.isfinite(c) for c in got)
    assert 1 <= pipe_split_count(126, 132, 1000, 4, 31, 10**6, got) <= 31


def test_sweep_times_each_launch_both_ways():
    """A device that runs the first launches of a sweep slower (its clocks still ramping up)
    favours the launches timed later; the two passes in opposite orders give every launch its
    faster time, so equal launches come out equal, and a faster one still comes out faster."""
    tune = load_script("tune_sbgemv")
    calls = []

    def warming_up(plan):  # the first three calls 5 % slow
        calls.append(plan)
        return plan * (1.05 if len(calls) <= 3 else 1.0)

    plans = [1.0, 1.0, 1.0, 1.0, 0.9]
    one_pass = [warming_up(p) for p in plans]
    assert one_pass[0] > one_pass[3]  # the bias a single pass has
    calls.clear()
    best = tune.time_both_ways(plans, warming_up)
    assert calls == plans + plans[::-1]  # in order, then reversed: each twice
    assert best == plans
