"""The target check of scripts/bench_matvec.py (CPU only: synthetic results)."""

import numpy as np
from conftest import load_script


def _mv(precision, direction, seconds, floor, bound, size=(5000, 100, 1000)):
    nm, nd, nt = size
    return dict(nm=nm, nd=nd, nt=nt, precision=precision, direction=direction, seconds=seconds,
                floor=floor, bound=bound)


def test_single_vector_targets_and_bounds():
    bench = load_script("bench_matvec")
    results = {"matvec": [
        _mv("ddddd", "fwd", 2.0, 1.9, 1.0),            # 0.95: met
        _mv("ddddd", "adj", 2.5, 1.9, 0.99),           # 0.76: short, the bound leaves room
        _mv("ddhdd", "fwd", 0.6, 0.48, 0.85),          # 0.80: short, bound below the target
        _mv("ddhdd", "adj", 0.7, 0.48, None),          # no bound measured
    ]}
    lines = bench.target_summary(results)
    assert lines[0] == "single vector at >= 0.90 of the floor: 1 of 4"
    assert any("ddddd adj 0.76; bound 0.99" in ln and "no room" not in ln for ln in lines)
    assert any("ddhdd fwd 0.80; bound 0.85, below the target" in ln for ln in lines)
    assert any(ln.endswith("ddhdd adj 0.69") for ln in lines)
    # speed-up: 2.0 / 0.6 = 3.33x met forward, 2.5 / 0.7 = 3.57x met adjoint; forward, both
    # bounds known: at them 1.9 / (0.48 / 0.85) = 3.36x, reached to 0.95 and 0.94
    assert ("ddhdd against ddddd on (5000, 100, 1000) fwd: 3.33x (target 3.3x): met; at their "
            "bounds 3.36x (ddddd at 0.95 of its bound's speed, ddhdd at 0.94)") in lines
    results["matvec"][1]["seconds"] = 2.2
    lines = bench.target_summary(results)
    assert "ddhdd against ddddd on (5000, 100, 1000) adj: 3.14x (target 3.3x): short" in lines
    # with back-to-back times the line gives their ratio too: 1.96 / 0.59 = 3.32x
    results["matvec"][1]["b2b_seconds"], results["matvec"][3]["b2b_seconds"] = 1.96e-3, 0.59e-3
    lines = bench.target_summary(results)
    assert ("ddhdd against ddddd on (5000, 100, 1000) adj: 3.14x (target 3.3x): short; back to "
            "back 3.32x (1.960 / 0.590 ms)") in lines


def test_batch_targets():
    bench = load_script("bench_matvec")
    row = dict(nm=1000, nd=100, nt=1000, k=16)
    results = {"batches": [
        {**row, "precision": "ddddd", "direction": "fwd", "t1": 1.0, "tk": 1.5, "matmul_tk": 1.6},
        {**row, "precision": "ddhdd", "direction": "adj", "t1": 1.0, "tk": 2.0, "matmul_tk": 1.6},
    ]}
    lines = bench.target_summary(results)
    assert lines[0] == ("batches at <= 0.10 per right-hand side: 1 of 2; "
                        "no slower than cuBLAS: 1 of 2")
    assert lines[1] == "  per right-hand side: (1000, 100, 1000) h adj 0.125"
    assert lines[2] == "  slower than cuBLAS: (1000, 100, 1000) h adj 1.25x"
    # a short batch whose bytes alone take more than a tenth of k products, and one with room
    results["batches"][1]["bound"] = 0.12
    assert bench.target_summary(results)[1] == (
        "  per right-hand side: (1000, 100, 1000) h adj 0.125; bound 0.120, above the target: "
        "the batch's bytes leave no room")
    results["batches"][1]["bound"] = 0.05
    assert bench.target_summary(results)[1] == "  per right-hand side: (1000, 100, 1000) h adj 0.125; bound 0.050"
    assert bench.target_summary({}) == []


def test_write_json_replaces_whole_files(tmp_path):
    """The scripts' JSON is written under a temporary name and renamed over the old file: the
    result is whole, NumPy values become strings, and no temporary file is left."""
    bench = load_script("bench_matvec")
    path = tmp_path / "out.json"
    path.write_text('{"old": 1}')
    bench.write_json(str(path), {"rows": [{"ms": 0.5, "tile": (4, 4, 2, 3, 2)}], "dtype": np.float32})
    import json

    got = json.loads(path.read_text())
    assert got == {"rows": [{"ms": 0.5, "tile": [4, 4, 2, 3, 2]}], "dtype": str(np.float32)}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_host_times_three_ways(monkeypatch):
    """bench_host times a call synchronised (events), back to back and on the host alone, from
    the same callable; with a fake device whose events report 2 ms, the synchronised time is
    that, and the host-side times are what the clock saw."""
    from types import SimpleNamespace

    bench = load_script("bench_host")
    calls = []

    class Event:
        def record(self):
            pass

        def synchronize(self):
            pass

    cuda = SimpleNamespace(Event=Event, Device=lambda: SimpleNamespace(synchronize=lambda: None),
                           get_elapsed_time=lambda a, b: 2.0)
    synced, b2b, host = bench.host_times(SimpleNamespace(cuda=cuda), lambda: calls.append(1), 7)
    assert synced == 0.002
    assert 0 <= b2b < 0.01 and 0 <= host < 0.01
    assert len(calls) == 10 + 7 + 5 + 7 + 7  # warm-up and events, queued (after 5), host


def test_against_takes_a_switch_setting():
    """--against KEY=VALUE: one plan override and its value, anything else refused."""
    import argparse

    import pytest

    bench = load_script("bench_matvec")
    assert bench._plan_setting("fused_adjoint=0") == ("fused_adjoint", "0")
    for bad in ("fused_adjoint", "PATH=/tmp", "=1", "row_fft=0,mma=1", "mma=2"):
        with pytest.raises(argparse.ArgumentTypeError, match="one plan KEY=VALUE"):
            bench._plan_setting(bad)


def test_plan_with_plans_with_the_switch_alone():
    """The batch table's --against launches are stage3_launches with the switch in place of
    the operator's overrides, on the engine's device and rules; the operator is left as it
    was."""
    from types import SimpleNamespace

    import numpy as np

    from fftmatvec.gpu.planning import DeviceInfo, Overrides, Problem, stage3_launches
    from fftmatvec.gpu.rules import rules_for
    from fftmatvec.precision import PrecisionConfig

    bench = load_script("bench_matvec")
    dev = DeviceInfo.from_properties({"multiProcessorCount": 132,
                                      "sharedMemPerMultiprocessor": 228 * 1024,
                                      "sharedMemPerBlockOptin": 227 * 1024}, "sm_90")
    eng = SimpleNamespace(device=dev, rules=rules_for("sm_90"))
    own = Overrides.resolve({"graphs": "0"})
    F = SimpleNamespace(nd=10, nm=300, nt=40, fft_len=80, precision=PrecisionConfig("ddddd"),
                        _engine=eng, _overrides=own)
    problem = Problem(10, 300, 40, 80, 16, True)
    for value in ("0", "1"):
        got = bench.plan_with(F, ("xreg", value), True, 16, np.complex128, np.complex128)
        assert got == stage3_launches(problem, dev, eng.rules,
                                      Overrides.resolve({"xreg": value}), np.complex128,
                                      np.complex128)
        assert got[0].name.startswith("sbgemvx_") is (value == "1")
    assert F._overrides is own and F._engine is eng


def test_interleaved_alternates_and_keeps_the_best():
    """--against's timers run in turn, own first, and each keeps its fastest median."""
    bench = load_script("bench_matvec")
    calls = []
    own = iter([3.0, 1.0, 2.0])
    other = iter([5.0, 6.0, 4.0])
    got = bench.interleaved(lambda: calls.append("own") or next(own),
                            lambda: calls.append("other") or next(other))
    assert got == (1.0, 4.0)
    assert calls == ["own", "other"] * 3
