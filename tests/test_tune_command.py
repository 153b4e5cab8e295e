"""``fftmatvec tune``: its inputs and outputs checked before the sweep, one-line errors, the
user's kernel from any matrix file, another device's table refused, no temporary left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fftmatvec import backend, io
from fftmatvec.cli import main
from fftmatvec.tuning import table as tb
from fftmatvec.tuning.sweep import device_info

ROOT = str(Path(__file__).resolve().parents[1])
# the smallest sweep: one shape, one op, two precisions, one timed repeat
SMALL = ["--ops", "matvec", "--precisions", "ddddd,ddsdd", "--repeat", "1", "--n-inputs", "1",
         "--device", "cpu"]
SHAPE = ["--nm", "3", "--nd", "2", "--nt", "5"]


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("FFTMATVEC_TUNING_PATH", raising=False)
    monkeypatch.chdir(tmp_path)


def refused(capsys, args, *words):
    """``fftmatvec tune ARGS`` exits 2 with one line naming ``words``, before the sweep."""
    assert main(["tune", *args]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fftmatvec tune: error: "), err
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert "tuning" not in out, out  # nothing was measured
    return lines[0]


def test_bad_options_are_one_line_before_the_sweep(tmp_path, capsys, rng):
    (tmp_path / "shapes.txt").write_text("4 3 8\n4 3 x\n")
    (tmp_path / "two.txt").write_text("4 3\n")
    np.save(tmp_path / "x.npy", rng.standard_normal((4, 5)))  # (nm, nt) would be (3, 5)
    out = ["--out", "t.yaml"]
    refused(capsys, ["--shapes", "shapes.txt", *SMALL, *out], "shapes.txt", "line 2", "'4 3 x'")
    refused(capsys, ["--shapes", "two.txt", *SMALL, *out], "two.txt", "line 1", "nm nd nt")
    refused(capsys, ["--shapes", "missing.txt", *SMALL, *out], "missing.txt")
    refused(capsys, [*SHAPE, *SMALL, "--precisions", "", *out], "--precisions")
    refused(capsys, [*SHAPE, *SMALL, "--precisions", "ddddd,dxddd", *out], "--precisions",
            "dxddd")
    refused(capsys, [*SHAPE, *SMALL, "--nrhs", "a", *out], "--nrhs", "'a'")
    refused(capsys, [*SHAPE, *SMALL, "--nrhs", "0", *out], "--nrhs")
    refused(capsys, [*SHAPE, *SMALL, "--inputs", "x.npy", *out], "--inputs", "(4, 5)", "(3, 5)")
    refused(capsys, [*SHAPE, *SMALL, "--inputs", "none.npy", *out], "--inputs", "none.npy")
    refused(capsys, [*SHAPE, *SMALL, "--plot", "p.txt", *out], "--plot", "p.txt")
    refused(capsys, [*SHAPE, *SMALL, "--plot", "no/such/p.png", *out], "--plot")
    refused(capsys, [*SHAPE, *SMALL, "--plot", "t.yaml", *out], "--plot", "--out")
    refused(capsys, [*SHAPE, *SMALL, "--out", "x.npy/t.yaml"], "--out", "x.npy")  # a file
    refused(capsys, [*SHAPE, *SMALL, "--out", "x.npy"], "x.npy")  # not a table
    assert not (tmp_path / "t.yaml").exists() and not (tmp_path / "p.txt").exists()


@pytest.mark.parametrize("kind", ["npy", "native", "fftmatvec"])
def test_matrix_from_any_matrix_file(tmp_path, capsys, rng, kind):
    """``--matrix`` takes what ``matvec`` takes (a native file, a matrix directory) and .npy;
    the entry is measured on that kernel."""
    K = rng.standard_normal((2, 3, 5))
    path = {"npy": "K.npy", "native": "K.h5", "fftmatvec": "D"}[kind]
    if kind == "npy":
        np.save(tmp_path / path, K)
    else:
        io.save_matrix(tmp_path / path, K, layout=kind)
    assert main(["tune", "--matrix", path, *SMALL, "--out", "t.yaml"]) == 0, capsys.readouterr()
    (e,) = tb.load_table(tmp_path / "t.yaml")["entries"]
    assert (e["nm"], e["nd"], e["nt"]) == (3, 2, 5)
    errs = {p["precision"]: p["error_max"] for p in e["points"]}
    assert errs["ddddd"] == 0 and 0 < errs["ddsdd"] < 1e-5


def test_bad_matrix_is_one_line(tmp_path, capsys, rng):
    np.save(tmp_path / "flat.npy", rng.standard_normal((3, 5)))
    np.save(tmp_path / "cplx.npy", rng.standard_normal((2, 3, 5)) * 1j)
    bad = rng.standard_normal((2, 3, 5))
    bad[0, 1, 2] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    (tmp_path / "junk.npy").write_bytes(b"not an array")
    for name, words in [("flat.npy", ["(3, 5)"]), ("cplx.npy", ["complex"]),
                        ("nan.npy", ["NaN"]), ("junk.npy", []), ("none.h5", [])]:
        refused(capsys, ["--matrix", name, *SMALL, "--out", "t.yaml"], "--matrix", name, *words)
    assert not (tmp_path / "t.yaml").exists()


def test_another_devices_table_is_refused(tmp_path, capsys):
    mine = device_info(np)
    other = dict(mine, vendor="nvidia", arch="sm_90", name="NVIDIA H200")
    tb.save_table(tb.new_table(other), tmp_path / "gpu.yaml")
    before = (tmp_path / "gpu.yaml").read_bytes()
    refused(capsys, [*SHAPE, *SMALL, "--out", "gpu.yaml"], "gpu.yaml", "nvidia sm_90",
            "NVIDIA H200", "cpu")
    assert (tmp_path / "gpu.yaml").read_bytes() == before
    # this device's own table, written by another fftmatvec version, is added to
    tb.save_table(tb.new_table(dict(mine, fftmatvec="0.0.1")), tmp_path / "mine.yaml")
    assert main(["tune", *SHAPE, *SMALL, "--out", "mine.yaml"]) == 0
    assert len(tb.load_table(tmp_path / "mine.yaml")["entries"]) == 1


@pytest.mark.skipif(backend.gpu_available(), reason="checks the refusal without a GPU")
def test_device_gpu_without_a_gpu_is_refused(tmp_path, capsys):
    args = [*SHAPE, *SMALL, "--out", "t.yaml"]
    refused(capsys, args[:-4] + ["--device", "gpu", "--out", "t.yaml"], "--device gpu", "no GPU")
    assert not (tmp_path / "t.yaml").exists()


# os.replace made slow for the table's rename, so that a signal lands while its temporary exists
_SLOW_TABLE_WRITE = """
import os, sys, time
real = os.replace
def slow(src, dst, *a, **k):
    if os.path.basename(dst) == "t.yaml":
        print("WRITING", flush=True)
        time.sleep(60)
    return real(src, dst, *a, **k)
os.replace = slow
from fftmatvec.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _env():
    return dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _temporaries(folder):
    return sorted(n for n in os.listdir(folder) if n.startswith(".") and n != ".")


def test_sigterm_while_writing_the_table_leaves_no_temporary(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_TABLE_WRITE, "tune", *SHAPE, *SMALL,
                             "--out", "t.yaml"], cwd=tmp_path, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.strip() == "WRITING":
                break
        assert _temporaries(tmp_path), "the table's temporary exists while it is written"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "SIGTERM" in err and "removed 1" in err, err
    assert _temporaries(tmp_path) == [] and not (tmp_path / "t.yaml").exists()


def test_a_later_tune_removes_temporaries_of_dead_writers(tmp_path, capsys):
    from fftmatvec import _writes

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".t.yaml.tmp-{dead.pid}-0123456789ab.{_writes._HOST}"
    live = tmp_path / f".t.yaml.tmp-{os.getpid()}-0123456789ab.{_writes._HOST}"
    # what earlier versions left (tempfile.mkstemp names): removed once old, not while fresh
    old, fresh = tmp_path / ".tune-a1b2c3d4.yaml", tmp_path / ".tune-e5f6g7h8.yaml"
    for p in (stale, live, old, fresh):
        p.write_text("schema: 1\n")
    os.utime(old, (os.path.getmtime(old) - 7200,) * 2)
    assert main(["tune", *SHAPE, *SMALL, "--out", "t.yaml"]) == 0
    assert not stale.exists() and live.exists()
    assert not old.exists() and fresh.exists()
    assert len(tb.load_table(tmp_path / "t.yaml")["entries"]) == 1


@pytest.mark.gpu
@pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)")
def test_device_gpu_measures_the_gpu(tmp_path, capsys):
    args = [*SHAPE, *SMALL[:-2], "--device", "gpu", "--out", "t.yaml"]
    assert main(["tune", *args]) == 0, capsys.readouterr().err
    table = tb.load_table(tmp_path / "t.yaml")
    assert table["device"]["vendor"] in ("nvidia", "amd") and len(table["entries"]) == 1
    # the CPU's measurements are not added to the GPU's table
    capsys.readouterr()  # the GPU sweep's own output
    refused(capsys, [*SHAPE, *SMALL, "--nrhs", "2", "--out", "t.yaml"], "t.yaml", "cpu")
