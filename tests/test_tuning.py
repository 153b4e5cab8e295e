"""Tuning tables: sweep, front, schema, lookup, model fallback, guard, the tune command."""

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import yaml

from fftmatvec import BlockToeplitz
from fftmatvec import operator as operator_module
from fftmatvec.cli import main
from fftmatvec.tuning import pareto_front, select, table as tb
from fftmatvec.tuning.sweep import device_info, sweep_shape

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def kernel():
    return np.random.default_rng(3).standard_normal((3, 5, 12))


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("FFTMATVEC_TUNING_PATH", raising=False)
    select._warned.clear()


def test_sweep_small(kernel):
    e = sweep_shape(kernel, "rmatvec", 2, ["ddddd", "ddsdd", "ddhdd"], 1, 2)
    errs = {p["precision"]: p["error_max"] for p in e["points"]}
    assert errs["ddddd"] == 0 and 0 < errs["ddsdd"] < 1e-5 < errs["ddhdd"] < 1e-1
    assert "ddddd" in e["front"] and e["inputs"] == 2


def test_front_brute_force():
    rng = np.random.default_rng(0)
    pts = [{"time": float(t), "error_max": float(e)} for t, e in rng.random((60, 2))]
    got = set(pareto_front(pts))
    want = {i for i, p in enumerate(pts) if not any(
        q["time"] <= p["time"] and q["error_max"] <= p["error_max"] and q != p for q in pts)}
    assert got == want


def _table(arch="cpu", front=("ddsdd", "ddddd"), errs=(1e-7, 0.0), nm=5, nd=3, nt=12):
    t = tb.new_table(device_info(np) | {"arch": arch})
    t["entries"].append({"op": "matvec", "nm": nm, "nd": nd, "nt": nt, "nrhs": 1, "points": [
        {"precision": p, "time": 1.0 + i, "error_median": e, "error_max": e}
        for i, (p, e) in enumerate(zip(front, errs))], "front": list(front), "plan": {"row_fft": 0}})
    return t


def test_round_trip(tmp_path):
    t = _table()
    tb.save_table(t, tmp_path / "a.yaml")
    assert tb.load_table(tmp_path / "a.yaml") == t


@pytest.mark.parametrize("edit,msg", [
    (lambda t: t.pop("device"), "missing key 'device'"),
    (lambda t: t.update(schema=99), "newer"),
    (lambda t: t["entries"][0].update(nm="5"), "expected int"),
    (lambda t: t["entries"][0].update(op="x"), "expected one of"),
    (lambda t: t["entries"][0]["points"][0].update(time=-1.0), "positive"),
    (lambda t: t["entries"][0].update(front=["sssss"]), "not among"),
    (lambda t: t["entries"][0]["points"][0].update(precision="zz"), "bad precision"),
    (lambda t: t["entries"].append(dict(t["entries"][0])), "duplicate"),
    (lambda t: t["entries"][0].update(plan=[1]), "expected a mapping"),
    (lambda t: t["entries"][0].update(plans={"sssss": {}}), "not among the entry's points"),
    (lambda t: t["entries"][0].update(plans={"ddddd": {"rowfft": 0}}), "unknown plan key"),
    (lambda t: t["entries"][0].update(nm=10**400), "entries\\[0\\]\\.nm: expected an integer from 1 to"),
    (lambda t: t["entries"][0].update(nrhs=2**63), "entries\\[0\\]\\.nrhs: expected an integer from 1 to"),
    (lambda t: t["entries"][0]["points"][0].update(time=10**400), "time: expected a finite positive"),
    (lambda t: t["entries"][0]["points"][1].update(error_max=-(10**400)), "error_max: expected a finite"),
])
def test_schema_errors(tmp_path, edit, msg):
    t = _table()
    edit(t)
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(t))
    with pytest.raises(tb.TableError, match=msg) as exc:
        tb.load_table(p)
    assert str(p) in str(exc.value)


def test_huge_shape_refused_before_auto(tmp_path, monkeypatch, kernel):
    # a hand-edited table: validation names the entry; auto never gets to compare shapes
    t = _table()
    t["entries"][0]["nm"] = 10**400
    (tmp_path / "huge.yaml").write_text(yaml.safe_dump(t))
    monkeypatch.setenv("FFTMATVEC_TUNING_PATH", str(tmp_path))
    with pytest.raises(tb.TableError, match=r"huge\.yaml: entries\[0\]\.nm"):
        BlockToeplitz(kernel, "auto", rtol=1e-5)


def test_not_yaml(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("a: [")
    with pytest.raises(tb.TableError, match="not valid YAML"):
        tb.load_table(p)


def test_lookup_order_and_nearest(tmp_path, monkeypatch, kernel):
    cache = tmp_path / "cache" / "fftmatvec" / "tuning"
    cache.mkdir(parents=True)
    tb.save_table(_table(front=("dssdd", "ddddd")), cache / "c.yaml")
    assert BlockToeplitz(kernel, "auto", rtol=1e-5).precision_source.startswith(str(cache))
    envt = _table(front=("ddsdd", "ddddd"))
    envt["entries"].append(_table(front=("sssss", "ddddd"), nm=5000, nd=300, nt=1000)["entries"][0])
    tb.save_table(envt, tmp_path / "e.yaml")
    monkeypatch.setenv("FFTMATVEC_TUNING_PATH", str(tmp_path / "e.yaml"))
    F = BlockToeplitz(kernel, "auto", rtol=1e-5)
    assert F.precision.letters == "ddsdd" and "nm=5," in F.precision_source
    assert BlockToeplitz(kernel, "auto", rtol=1e-8).precision.letters == "ddddd"
    big = np.zeros((200, 3000, 4)) + 1.0
    assert "nm=5000" in BlockToeplitz(big, "auto", rtol=1e-5).precision_source


def test_model_fallback_warns_once(kernel):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        F = BlockToeplitz(kernel, "auto", rtol=1e-3)
        G = BlockToeplitz(kernel, "auto", rtol=1e-12)
    assert sum("a-priori" in str(x.message) for x in w) == 1
    assert F.precision_source == "model" and G.precision.letters == "ddddd"
    assert select.model_error(F.precision.letters, 5) * select.SAFETY <= 1e-3


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_rtol_errors(kernel, bad):
    with pytest.raises(ValueError, match="rtol"):
        BlockToeplitz(kernel, "auto", rtol=bad)
    with pytest.raises(ValueError, match="rtol"):
        BlockToeplitz(kernel, "ddsdd", rtol=1e-3)


def test_guard_moves_on(tmp_path, monkeypatch, kernel):
    # a wrong table: it claims ddhdd is exact (and construction does not check it here)
    tb.save_table(_table(front=("ddhdd", "ddddd"), errs=(0.0, 0.0)), tmp_path / "w.yaml")
    monkeypatch.setenv("FFTMATVEC_TUNING_PATH", str(tmp_path))
    monkeypatch.setattr(operator_module, "_check_pick", lambda xp, kernel, pick, *a: (pick, a[-1], None, ""))
    F = BlockToeplitz(kernel, "auto", rtol=1e-6, check_every=2)
    assert F.precision.letters == "ddhdd"
    x = np.random.default_rng(5).standard_normal((5, 12))
    F @ x
    with pytest.warns(UserWarning, match="moving to 'ddddd'"):
        y = F @ x
    assert F.precision.letters == "ddddd" and "guard" in F.precision_source
    ref = BlockToeplitz(kernel) @ x
    np.testing.assert_allclose(y, ref, rtol=1e-12)


def test_tune_plot_and_rerun(tmp_path, capsys):
    out, png = tmp_path / "t.yaml", tmp_path / "p.png"
    args = ["tune", "--nm", "4", "--nd", "3", "--nt", "8", "--nrhs", "1", "--ops", "matvec",
            "--precisions", "ddddd,ddsdd,sssss", "--repeat", "1", "--out", str(out),
            "--plot", str(png), "--device", "cpu"]
    assert main(args) == 0
    assert png.stat().st_size > 1000
    assert len(tb.load_table(out)["entries"]) == 1
    assert main(args) == 0
    assert "1 already in" in capsys.readouterr().out


def test_interrupted_tune_keeps_shapes(tmp_path):
    out = tmp_path / "t.yaml"
    cmd = [sys.executable, "-m", "fftmatvec", "tune", "--nm", "4", "--nd", "3", "--nt", "8",
           "--nm", "1000", "--nd", "100", "--nt", "200", "--ops", "matvec",
           "--precisions", "ddddd,ddsdd", "--repeat", "1", "--out", str(out), "--device", "cpu"]
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import time

    for _ in range(600):
        if out.exists() or proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    entries = tb.load_table(out)["entries"]
    assert [(e["nm"], e["nd"], e["nt"]) for e in entries] == [(4, 3, 8)]


def test_auto_takes_the_plan_tuned_for_its_point(tmp_path, monkeypatch, kernel):
    """A table with per-point plans gives the chosen point's plan; one without, the entry's."""
    t = _table(front=("ddsdd", "ddddd"))
    tb.save_table(t, tmp_path / "old.yaml")
    monkeypatch.setenv("FFTMATVEC_TUNING_PATH", str(tmp_path / "old.yaml"))
    assert BlockToeplitz(kernel, "auto", rtol=1e-5).plan_overrides == {"row_fft": "0"}
    t["entries"][0]["plans"] = {"ddsdd": {"graphs": 1}, "ddddd": {"row_fft": 1}}
    tb.save_table(t, tmp_path / "new.yaml")
    monkeypatch.setenv("FFTMATVEC_TUNING_PATH", str(tmp_path / "new.yaml"))
    assert BlockToeplitz(kernel, "auto", rtol=1e-5).plan_overrides == {"graphs": "1"}
    assert BlockToeplitz(kernel, "auto", rtol=1e-9).plan_overrides == {"row_fft": "1"}


def _dense_product(kernel, x):
    from conftest import dense_btt

    return (dense_btt(kernel) @ x.ravel()).reshape(kernel.shape[0], -1)


def test_auto_checks_its_pick_on_the_users_kernel(tmp_path, monkeypatch, kernel):
    """A table measured on other kernels claims ddhdd within 1e-9: one product of the pick
    against ddddd at construction finds it above rtol, so auto takes the next front point and
    precision_source says so; its products are within rtol."""
    t = _table(front=("ddhdd", "ddsdd", "ddddd"), errs=(1e-9, 1e-8, 0.0))
    t["entries"][0]["plans"] = {"ddhdd": {"graphs": 1}, "ddsdd": {"row_fft": 1}}
    tb.save_table(t, tmp_path / "w.yaml")
    monkeypatch.setenv("FFTMATVEC_TUNING_PATH", str(tmp_path))
    F = BlockToeplitz(kernel, "auto", rtol=1e-5)
    assert F.precision.letters == "ddsdd"
    assert "ddhdd gave" in F.precision_source and "took ddsdd" in F.precision_source
    assert F.plan_overrides == {"row_fft": "1"}  # the plan tuned for the point taken
    x = np.random.default_rng(7).standard_normal((5, 12))
    y = F @ x
    ref = _dense_product(kernel, x)
    assert y.dtype == np.float64 and np.linalg.norm(y - ref) / np.linalg.norm(ref) < 1e-5
    # nothing on the front within rtol but ddddd: ddddd
    G = BlockToeplitz(kernel, "auto", rtol=1e-12)
    assert G.precision.letters == "ddddd"
    # a table that tells the truth: its pick kept, the source unchanged
    tb.save_table(_table(front=("ddsdd", "ddddd"), errs=(1e-7, 0.0)), tmp_path / "w.yaml")
    H = BlockToeplitz(kernel, "auto", rtol=1e-5)
    assert H.precision.letters == "ddsdd" and "gave" not in H.precision_source


def test_auto_check_on_a_sample_of_sensor_rows(tmp_path, monkeypatch):
    """The reference of the check is computed on a sample of sensor rows where a whole
    float64 Khat would be large: one row here, and the wrong pick is still caught."""
    monkeypatch.setattr(operator_module, "_PROBE_BYTES", 1)
    K = np.random.default_rng(4).standard_normal((40, 5, 12))
    t = _table(front=("ddhdd", "ddddd"), errs=(0.0, 0.0), nd=40)
    tb.save_table(t, tmp_path / "w.yaml")
    monkeypatch.setenv("FFTMATVEC_TUNING_PATH", str(tmp_path))
    built = []
    real = operator_module.BlockToeplitz.__init__

    def spy(self, kernel, *a, **k):
        built.append(kernel.shape)
        real(self, kernel, *a, **k)

    monkeypatch.setattr(operator_module.BlockToeplitz, "__init__", spy)
    F = BlockToeplitz(K, "auto", rtol=1e-6)
    assert F.precision.letters == "ddddd" and "ddhdd gave" in F.precision_source
    assert (1, 5, 12) in built  # the reference: one sensor row


def test_auto_on_columns_in_different_units():
    """The issue's case: parameter columns 1e12 apart, the input balancing them; auto with
    rtol=1e-2 (the model picks `h` here) returned errors far above rtol."""
    rng = np.random.default_rng(11)
    col = np.array([1.0, 1e-12, 1.0, 1e-12, 1e-6, 1.0])
    K = rng.standard_normal((4, 6, 16)) * col[None, :, None]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no table for the CPU: the model's one warning
        F = BlockToeplitz(K, "auto", rtol=1e-2)
    for _ in range(3):
        x = rng.standard_normal((6, 16)) / col[:, None]
        ref = _dense_product(K, x)
        assert np.linalg.norm(F @ x - ref) / np.linalg.norm(ref) < 1e-2
