"""``fftmatvec matvec`` and ``fftmatvec convert`` end to end, in a subprocess, on files written
with h5py directly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from fftmatvec import backend, io

from conftest import dense_btt, rel_err
from h5files import write_fftmatvec_dir, write_native, write_vector

REPO = str(Path(__file__).resolve().parents[1])


def cli(*args, cwd):
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "fftmatvec.cli", *map(str, args)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )


def ok(proc):
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def failed(proc, code=2):
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    return proc.stderr


@pytest.fixture
def files(tmp_path, rng):
    """A kernel in both formats and one input vector per space."""
    K = rng.standard_normal((4, 3, 7))
    write_fftmatvec_dir(str(tmp_path / "mdir"), K)
    write_native(str(tmp_path / "m.h5"), K)
    m = rng.standard_normal((3, 7))
    d = rng.standard_normal((4, 7))
    write_vector(str(tmp_path / "m_in.h5"), m, "param")
    write_vector(str(tmp_path / "d_in.h5"), d, "obs")
    return K, m, d


def _read_vec(path):
    with h5py.File(path, "r") as f:
        ds = f["vec"]
        assert ds.dtype == np.float64
        return ds[()], dict(ds.attrs)


def test_python_dash_m_runs_the_command(tmp_path):
    """``python -m fftmatvec`` is the ``fftmatvec`` command."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-m", "fftmatvec", "info"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert "fftmatvec" in ok(proc) and "backends" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "fftmatvec", "no-such-command"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "no-such-command" in proc.stderr


@pytest.mark.parametrize("matrix", ["mdir", "m.h5"])
@pytest.mark.parametrize(
    "flags,inp,space",
    [([], "m_in.h5", "obs"), (["--adjoint"], "d_in.h5", "param"), (["--normal"], "m_in.h5", "param")],
)
def test_matvec_against_dense(tmp_path, files, matrix, flags, inp, space):
    K, m, d = files
    out = ok(cli("matvec", matrix, inp, "out.h5", *flags, "--repeat", 3, "--check", cwd=tmp_path))
    D = dense_btt(K)
    x = (m if inp == "m_in.h5" else d).reshape(-1)
    if "--normal" in flags:
        ref = D.T @ (D @ x)
    elif "--adjoint" in flags:
        ref = D.T @ x
    else:
        ref = D @ x
    y, attrs = _read_vec(tmp_path / "out.h5")
    assert rel_err(y, ref) < 1e-12
    nd, nm, nt = K.shape
    n = nd if space == "obs" else nm
    if space == "obs":
        assert (attrs["n_obs"], attrs["obs_steps"]) == (n, nt)
    else:
        assert (attrs["n_param"], attrs["param_steps"]) == (n, nt)
    assert attrs["reindex"] == 1
    out_vec = io.load_vector(str(tmp_path / "out.h5"), space=space, shape=(n, nt))
    assert out_vec.dtype == np.float64
    assert re.search(r"time\s+median [0-9.e+-]+ ms over 3 repeats", out)
    err = float(re.search(r"rel_err\s+(\S+)", out).group(1))
    assert err < 1e-13
    assert f"Nd={nd} Nm={nm} Nt={nt}" in out


@pytest.mark.parametrize("precision,lo,hi", [("dssdd", 1e-10, 1e-5), ("ddhdd", 1e-6, 5e-3)])
def test_matvec_precision_check(tmp_path, files, precision, lo, hi):
    out = ok(cli("matvec", "m.h5", "m_in.h5", "y.h5", "--precision", precision, "--check",
                 "--repeat", 2, cwd=tmp_path))
    err = float(re.search(r"rel_err\s+(\S+)", out).group(1))
    assert lo < err < hi
    assert f"precision {precision}" in out
    y = io.load_vector(str(tmp_path / "y.h5"))
    assert y.dtype == np.float64 and y.shape == (4, 7)


def test_matvec_input_that_does_not_fit(tmp_path, files, rng):
    write_vector(str(tmp_path / "small.h5"), rng.standard_normal((2, 7)), "param")
    write_vector(str(tmp_path / "short.h5"), rng.standard_normal((3, 6)), "param")
    io.save_vector(str(tmp_path / "y.h5"), rng.standard_normal((4, 7)), "obs")
    before = io.load_vector(str(tmp_path / "y.h5"))
    err = failed(cli("matvec", "mdir", "small.h5", "y.h5", cwd=tmp_path))
    assert "INPUT 'small.h5'" in err and "shape (2, 7)" in err and "shape (3, 7)" in err
    err = failed(cli("matvec", "mdir", "short.h5", "y.h5", cwd=tmp_path))
    assert "shape (3, 6)" in err
    err = failed(cli("matvec", "mdir", "d_in.h5", "y.h5", cwd=tmp_path))  # obs vector into F
    assert "an observation-space vector" in err and "needs a parameter-space vector" in err
    err = failed(cli("matvec", "mdir", "m_in.h5", "y.h5", "--adjoint", cwd=tmp_path))
    assert "needs an observation-space vector of shape (4, 7)" in err
    # a failed run leaves the existing OUTPUT as it was, and no temporary files
    np.testing.assert_array_equal(io.load_vector(str(tmp_path / "y.h5")), before)
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


def test_matvec_broken_matrix_files(tmp_path, files):
    err = failed(cli("matvec", "missing", "m_in.h5", "y.h5", cwd=tmp_path))
    assert "matrix 'missing' does not exist" in err
    os.remove(tmp_path / "mdir" / "binary" / "adj" / "vec_000002.h5")
    err = failed(cli("matvec", "mdir", "m_in.h5", "y.h5", cwd=tmp_path))
    assert "row file 2 of 4 is missing" in err and "vec_000002.h5" in err
    (tmp_path / "junk.h5").write_text("junk")
    err = failed(cli("matvec", "junk.h5", "m_in.h5", "y.h5", cwd=tmp_path))
    assert "'junk.h5' is not an HDF5 file" in err
    assert not (tmp_path / "y.h5").exists()


def test_matvec_bad_options(tmp_path, files):
    assert "precision" in failed(cli("matvec", "m.h5", "m_in.h5", "y.h5", "--precision", "dxd", cwd=tmp_path))
    assert "positive integer" in failed(cli("matvec", "m.h5", "m_in.h5", "y.h5", "--repeat", 0, cwd=tmp_path))
    assert "not allowed with" in failed(cli("matvec", "m.h5", "m_in.h5", "y.h5", "--adjoint", "--normal", cwd=tmp_path))
    assert not (tmp_path / "y.h5").exists()


@pytest.mark.skipif(backend.gpu_available(), reason="checks the message shown without a GPU")
def test_matvec_gpu_without_gpu(tmp_path, files):
    env_err = failed(cli("matvec", "m.h5", "m_in.h5", "y.h5", "--device", "gpu", cwd=tmp_path))
    assert "--device gpu: no GPU is available" in env_err


@pytest.mark.gpu
@pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)")
@pytest.mark.parametrize("flags", [[], ["--adjoint"], ["--normal"]])
def test_matvec_gpu(tmp_path, files, flags):
    inp = "d_in.h5" if flags == ["--adjoint"] else "m_in.h5"
    out = ok(cli("matvec", "m.h5", inp, "y.h5", "--device", "gpu", "--check", *flags, cwd=tmp_path))
    assert float(re.search(r"rel_err\s+(\S+)", out).group(1)) < 1e-12
    assert io.load_vector(str(tmp_path / "y.h5")).dtype == np.float64


def test_convert_both_ways(tmp_path, files):
    K, m, _ = files
    out = ok(cli("convert", "mdir", "k.h5", cwd=tmp_path))
    assert "(fftmatvec) -> k.h5 (native)" in out
    np.testing.assert_array_equal(io.load_matrix(str(tmp_path / "k.h5")), K)
    out = ok(cli("convert", "k.h5", "back", "--prefix", "F_", cwd=tmp_path))
    assert "(native) -> back (fftmatvec)" in out
    assert sorted(os.listdir(tmp_path / "back" / "binary")) == [
        "F_000000.h5", "F_000001.h5", "F_000002.h5", "F_000003.h5", "meta_adj"]
    np.testing.assert_array_equal(io.load_matrix(str(tmp_path / "back")), K)
    # the converted matrices give the same product as the original
    ok(cli("matvec", "back", "m_in.h5", "y1.h5", cwd=tmp_path))
    ok(cli("matvec", "k.h5", "m_in.h5", "y2.h5", cwd=tmp_path))
    y1 = io.load_vector(str(tmp_path / "y1.h5"))
    np.testing.assert_array_equal(y1, io.load_vector(str(tmp_path / "y2.h5")))
    assert rel_err(y1.reshape(-1), dense_btt(K) @ m.reshape(-1)) < 1e-12
    # same-layout copy
    ok(cli("convert", "k.h5", "copy.h5", "--layout", "native", cwd=tmp_path))
    np.testing.assert_array_equal(io.load_matrix(str(tmp_path / "copy.h5")), K)


def test_convert_keeps_p2q_and_checksum(tmp_path, rng):
    K = rng.standard_normal((2, 3, 4))
    write_fftmatvec_dir(str(tmp_path / "src"), K, checksum=314, p2q=1)
    assert "p2q=1, checksum=314" in ok(cli("convert", "src", "k.h5", cwd=tmp_path))
    ok(cli("convert", "k.h5", "dst", cwd=tmp_path))
    lines = (tmp_path / "dst" / "binary" / "meta_adj").read_text().splitlines()
    assert lines == ["2", "3", "4", "adj/vec_", ".h5", "1", "1", "1", "314"]


def test_convert_refuses_to_clobber(tmp_path, files):
    K, _, _ = files
    ok(cli("convert", "m.h5", "dst", cwd=tmp_path))
    err = failed(cli("convert", "m.h5", "dst", cwd=tmp_path))
    assert "DST 'dst' exists; pass --force" in err
    ok(cli("convert", "m.h5", "dst", "--force", cwd=tmp_path))
    np.testing.assert_array_equal(io.load_matrix(str(tmp_path / "dst")), K)
    (tmp_path / "notes").mkdir()
    err = failed(cli("convert", "m.h5", "notes", "--force", cwd=tmp_path))
    assert "not an FFTMatvec matrix directory" in err


def test_convert_broken_source(tmp_path, files):
    with h5py.File(tmp_path / "mdir" / "binary" / "adj" / "vec_000001.h5", "r+") as f:
        f["vec"].attrs["n_param"] = 9
    err = failed(cli("convert", "mdir", "k.h5", cwd=tmp_path))
    assert "n_param = 9 contradicts meta_adj (Nm = 3)" in err
    assert not (tmp_path / "k.h5").exists()
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


def test_help_lists_the_subcommands(tmp_path):
    out = ok(cli("--help", cwd=tmp_path))
    assert "matvec" in out and "convert" in out
