"""Reliability of the files and the command line: full disks, outputs over inputs, the user's
files in a matrix directory, interrupted writes, sizes in files, and the package's errors for
the remaining bad input."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from fftmatvec import BlockToeplitz, _memory, _writes, io
from fftmatvec.io import _write as io_write
from fftmatvec._errors import (FFTMatvecError, FFTMatvecFileError, FFTMatvecMemoryError,
                               FFTMatvecTypeError, FFTMatvecValueError)

from h5files import meta_lines, row_file, write_fftmatvec_dir, write_native, write_vector

REPO = str(Path(__file__).resolve().parents[1])


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + os.path.join(REPO, "tests") + os.pathsep + env.get(
        "PYTHONPATH", "")
    return env


def cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "fftmatvec.cli", *map(str, args)], cwd=cwd,
                          env=_env(), capture_output=True, text=True, timeout=120)


def leftovers(folder):
    """Temporaries anywhere under ``folder``."""
    return [os.path.join(d, n) for d, dirs, names in os.walk(folder) for n in names + dirs
            if ".tmp-" in n or ".old-" in n]


@contextlib.contextmanager
def small_tmpfs(tmp_path, size="1m", options=""):
    """A tmpfs of ``size`` (root only; skip elsewhere)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    opts = f"size={size}" + (f",{options}" if options else "")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


# ------------------------------------------------------------------------------------------
# 1. A full disk: a clear error, the old file intact, no temporary, no crash
# ------------------------------------------------------------------------------------------
def test_too_little_space_is_refused_before_writing(tmp_path, rng, monkeypatch):
    K_old = rng.standard_normal((3, 2, 5))
    io.save_matrix(tmp_path / "K.h5", K_old)
    io.save_matrix(tmp_path / "D", K_old, layout="fftmatvec")
    io.save_vector(tmp_path / "v.h5", K_old[0])
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage._replace(free=1000))
    K = rng.standard_normal((3, 2, 5))
    calls = [
        (tmp_path / "K.h5", lambda: io.save_matrix(tmp_path / "K.h5", K)),
        (tmp_path / "new.h5", lambda: io.save_matrix(tmp_path / "new.h5", K)),
        (tmp_path / "D", lambda: io.save_matrix(tmp_path / "D", K, layout="fftmatvec")),
        (tmp_path / "E", lambda: io.save_matrix(tmp_path / "E", K, layout="fftmatvec")),
        (tmp_path / "v.h5", lambda: io.save_vector(tmp_path / "v.h5", K[0])),
        (tmp_path / "C", lambda: io.convert_matrix(tmp_path / "K.h5", tmp_path / "C")),
    ]
    for path, call in calls:
        with pytest.raises(FFTMatvecFileError, match="free") as exc:
            call()
        assert str(path) in str(exc.value) and "bytes" in str(exc.value)
    assert np.array_equal(io.load_matrix(tmp_path / "K.h5"), K_old)
    assert np.array_equal(io.load_matrix(tmp_path / "D"), K_old)
    assert np.array_equal(io.load_vector(tmp_path / "v.h5"), K_old[0])
    assert not (tmp_path / "new.h5").exists() and not (tmp_path / "E").exists()
    assert not leftovers(tmp_path)


_FULL_DISK = """
import shutil, sys
import numpy as np
from fftmatvec import io
from fftmatvec._errors import FFTMatvecFileError
mnt, layout, lie = sys.argv[1], sys.argv[2], sys.argv[3] == "lie"
if lie:  # the free-space check passes: the reservation must still catch the full disk
    real = shutil.disk_usage
    shutil.disk_usage = lambda p: real(p)._replace(free=1 << 40)
K = np.ones((40, 10, 1000))  # 3.2 MB on a 1 MB file system
try:
    io.save_matrix(mnt + "/K", K, layout=layout)
except FFTMatvecFileError as exc:
    print("ERROR", exc)
import gc; gc.collect()
print("ALIVE")
"""


@pytest.mark.parametrize("layout", ["native", "fftmatvec"])
@pytest.mark.parametrize("lie", ["honest", "lie"])
def test_full_tmpfs_gives_an_error_not_a_crash(tmp_path, rng, layout, lie):
    with small_tmpfs(tmp_path) as mnt:
        old = np.ones((1, 2, 3))
        io.save_matrix(mnt / "K", old, layout=layout)
        proc = subprocess.run([sys.executable, "-c", _FULL_DISK, str(mnt), layout, lie],
                              env=_env(), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "ERROR cannot write" in proc.stdout and "ALIVE" in proc.stdout, proc.stdout
        assert str(mnt / "K") in proc.stdout
        assert np.array_equal(io.load_matrix(mnt / "K"), old)
        assert not leftovers(mnt)


# ------------------------------------------------------------------------------------------
# 2. An output over an input
# ------------------------------------------------------------------------------------------
def test_cli_refuses_output_over_input(tmp_path, rng):
    K = rng.standard_normal((3, 2, 5))
    write_native(str(tmp_path / "K.h5"), K)
    write_fftmatvec_dir(str(tmp_path / "D"), K)
    write_vector(str(tmp_path / "m.h5"), rng.standard_normal((2, 5)))
    os.symlink(tmp_path / "K.h5", tmp_path / "link.h5")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()}
    cases = [("K.h5", "m.h5", "K.h5"), ("K.h5", "m.h5", "m.h5"), ("K.h5", "m.h5", "link.h5"),
             ("D", "m.h5", "D/binary/adj/vec_000001.h5"), ("D", "m.h5", "D/notes.h5")]
    for matrix, inp, out in cases:
        proc = cli("matvec", matrix, inp, out, "--repeat", "1", cwd=tmp_path)
        assert proc.returncode == 2, (out, proc.stderr)
        assert "OUTPUT" in proc.stderr and ("same path" in proc.stderr or "inside" in proc.stderr)
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    for src, dst in [("D", "D/binary/x.h5"), ("K.h5", "link.h5"), ("D/binary", "D")]:
        proc = cli("convert", src, dst, "--force", cwd=tmp_path)
        assert proc.returncode == 2, (src, dst, proc.stderr)
    after = {p: p.read_bytes() for p in before}
    assert after == before and not (tmp_path / "D" / "notes.h5").exists()


def test_cli_refuses_an_empty_path(tmp_path, rng):
    """An empty argument is refused as empty, naming it (it is not the current folder)."""
    write_native(str(tmp_path / "K.h5"), rng.standard_normal((3, 2, 5)))
    write_vector(str(tmp_path / "m.h5"), rng.standard_normal((2, 5)))
    cases = [(("matvec", "", "m.h5", "o.h5"), "MATRIX"), (("matvec", "K.h5", "", "o.h5"), "INPUT"),
             (("matvec", "K.h5", "m.h5", ""), "OUTPUT"), (("convert", "", "o.h5"), "SRC"),
             (("convert", "K.h5", ""), "DST")]
    for args, label in cases:
        proc = cli(*args, cwd=tmp_path)
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and f"{label} must not be empty" in lines[0], (args, proc.stderr)
    assert not (tmp_path / "o.h5").exists()


def test_save_refuses_a_matrix_directorys_own_files(tmp_path, rng):
    K = rng.standard_normal((3, 2, 5))
    io.save_matrix(tmp_path / "D", K, layout="fftmatvec")
    row = row_file(str(tmp_path / "D"), 1)
    meta = tmp_path / "D" / "binary" / "meta_adj"
    with pytest.raises(FFTMatvecFileError, match="row file 1 of the FFTMatvec matrix directory"):
        io.save_vector(row, K[0])
    with pytest.raises(FFTMatvecFileError, match="row file 2"):
        io.save_matrix(row_file(str(tmp_path / "D"), 2), K)
    with pytest.raises(FFTMatvecFileError):
        io.save_vector(meta, K[0])
    with pytest.raises(FFTMatvecFileError, match="destination"):
        io.convert_matrix(tmp_path / "D", tmp_path / "D" / "binary" / "adj" / "x.h5")
    assert np.array_equal(io.load_matrix(tmp_path / "D"), K)
    # the user's own files in the directory are theirs to write, a row beyond Nd too
    io.save_vector(tmp_path / "D" / "result.h5", K[0])
    io.save_vector(tmp_path / "D" / "binary" / "adj" / "vec_000003.h5", K[0])
    assert np.array_equal(io.load_matrix(tmp_path / "D"), K)


def test_save_refuses_to_replace_a_file_of_another_kind(tmp_path, rng):
    """A vector never silently replaces a native matrix file, nor a matrix a vector file (or
    any other HDF5 file): only ``overwrite=True`` says so. A file of the same kind is replaced."""
    K, v = rng.standard_normal((3, 2, 5)), rng.standard_normal((2, 5))
    io.save_matrix(tmp_path / "K.h5", K)
    io.save_vector(tmp_path / "v.h5", v)
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["data"] = rng.standard_normal(4)
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(FFTMatvecFileError, match="'.*K.h5'.* native matrix file.*overwrite=True"):
        io.save_vector(tmp_path / "K.h5", v)
    with pytest.raises(FFTMatvecFileError, match="'.*v.h5'.* vector file.*overwrite=True"):
        io.save_matrix(tmp_path / "v.h5", K)
    for write in (lambda p: io.save_vector(p, v), lambda p: io.save_matrix(p, K),
                  lambda p: io.convert_matrix(tmp_path / "K.h5", p, layout="native",
                                              overwrite=None)):
        with pytest.raises(FFTMatvecFileError, match="'.*other.h5'.* HDF5 file"):
            write(tmp_path / "other.h5")
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before
    # the same kind is replaced, as before
    v2, K2 = rng.standard_normal((2, 5)), rng.standard_normal((3, 2, 5))
    io.save_vector(tmp_path / "v.h5", v2)
    io.save_matrix(tmp_path / "K.h5", K2)
    assert np.array_equal(io.load_vector(tmp_path / "v.h5"), v2)
    assert np.array_equal(io.load_matrix(tmp_path / "K.h5"), K2)
    # overwrite=True replaces a file of another kind, overwrite=False nothing
    with pytest.raises(FFTMatvecFileError, match="exists"):
        io.save_vector(tmp_path / "v.h5", v, overwrite=False)
    io.save_vector(tmp_path / "K.h5", v, overwrite=True)
    io.save_matrix(tmp_path / "v.h5", K, overwrite=True)
    assert np.array_equal(io.load_vector(tmp_path / "K.h5"), v)
    assert np.array_equal(io.load_matrix(tmp_path / "v.h5"), K)
    assert not leftovers(tmp_path)


def test_cli_refuses_an_output_of_another_kind_before_the_work(tmp_path, rng):
    """OUTPUT naming another matrix file is refused before anything is read or computed."""
    write_native(str(tmp_path / "K.h5"), rng.standard_normal((3, 2, 5)))
    write_native(str(tmp_path / "K2.h5"), rng.standard_normal((3, 2, 5)))
    write_vector(str(tmp_path / "m.h5"), rng.standard_normal((2, 5)))
    before = (tmp_path / "K2.h5").read_bytes()
    proc = cli("matvec", "K.h5", "m.h5", "K2.h5", "--repeat", "1", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "OUTPUT" in lines[0] and "native matrix file" in lines[0], lines
    assert (tmp_path / "K2.h5").read_bytes() == before


# ------------------------------------------------------------------------------------------
# 3. Replacing a matrix directory keeps the user's other files
# ------------------------------------------------------------------------------------------
def test_replacing_a_matrix_directory_keeps_other_files(tmp_path, rng):
    D = tmp_path / "D"
    io.save_matrix(D, rng.standard_normal((4, 2, 5)), layout="fftmatvec")
    mine = {D / "notes.txt": b"notes", D / "binary" / "meta_fwd": b"fwd",
            D / "binary" / "adj" / "extra.txt": b"x", D / "results" / "y.txt": b"y"}
    for p, data in mine.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    K2 = rng.standard_normal((2, 3, 4))
    io.save_matrix(D, K2, layout="fftmatvec", prefix="fwd/row_", overwrite=True)
    assert np.array_equal(io.load_matrix(D), K2)
    assert {p: p.read_bytes() for p in mine} == mine
    assert not (D / "binary" / "adj" / "vec_000000.h5").exists()
    assert not (D / "binary" / "adj" / "vec_000003.h5").exists()
    assert not leftovers(tmp_path)
    # a failure while writing leaves the old matrix and the user's files as they were
    K3 = rng.standard_normal((2, 3, 4))
    real = io_write._write_row
    calls = []

    def failing(fname, *a):
        calls.append(fname)
        if len(calls) == 2:
            raise OSError(errno.EIO, "Input/output error")
        return real(fname, *a)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(io_write, "_write_row", failing)
        with pytest.raises(FFTMatvecFileError, match="cannot write .*input/output error"):
            io.save_matrix(D, K3, layout="fftmatvec", prefix="fwd/row_")
    assert np.array_equal(io.load_matrix(D), K2)
    assert {p: p.read_bytes() for p in mine} == mine
    assert not leftovers(tmp_path)


def test_a_failed_swap_puts_the_old_matrix_back(tmp_path, rng, monkeypatch):
    D = tmp_path / "D"
    K = rng.standard_normal((3, 2, 5))
    io.save_matrix(D, K, layout="fftmatvec")
    real = os.rename
    failed = []

    def rename(a, b):
        if os.path.basename(b) == "meta_adj" and not failed:  # the commit fails
            failed.append(b)
            raise OSError(errno.EIO, "Input/output error")
        return real(a, b)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(FFTMatvecFileError):
        io.save_matrix(D, rng.standard_normal((3, 2, 5)), layout="fftmatvec")
    monkeypatch.undo()
    assert np.array_equal(io.load_matrix(D), K)
    assert not leftovers(tmp_path)


# ------------------------------------------------------------------------------------------
# 4. Interrupted writes
# ------------------------------------------------------------------------------------------
_SLOW_WRITE = """
import contextlib, sys, time
from fftmatvec import _writes
from fftmatvec.cli import main
real = _writes.h5_create
@contextlib.contextmanager
def slow(tmp, nbytes):
    with real(tmp, nbytes) as f:
        print("WRITING", flush=True)
        time.sleep(60)
        yield f
_writes.h5_create = slow
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("dst", ["out.h5", "outdir"])
def test_signal_removes_temporaries(tmp_path, rng, sig, dst):
    K = rng.standard_normal((3, 2, 5))
    write_native(str(tmp_path / "K.h5"), K)
    old = rng.standard_normal((3, 2, 5))
    io.save_matrix(tmp_path / dst, old, layout="native" if dst.endswith(".h5") else "fftmatvec")
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_WRITE, "convert", "K.h5", dst,
                             "--layout", "native" if dst.endswith(".h5") else "fftmatvec",
                             "--force"], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "WRITING"
        assert leftovers(tmp_path)  # the temporary exists while it is written
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and signal.Signals(sig).name in lines[0] and "removed" in lines[0], err
    assert not leftovers(tmp_path)
    assert np.array_equal(io.load_matrix(tmp_path / dst), old)


# A stand-in for numpy that takes its time to import: a signal sent after it says so lands
# while the command is still importing.
_SLOW_NUMPY = """
import time
print("IMPORTING", flush=True)
time.sleep(60)
"""
# What the console script installed by pip runs.
_CONSOLE_SCRIPT = "import sys; from fftmatvec.cli import main; sys.exit(main())"


@pytest.mark.parametrize("entry", [["-m", "fftmatvec"], ["-c", _CONSOLE_SCRIPT]],
                         ids=["python-m", "console-script"])
@pytest.mark.parametrize("command", [["info"], ["matvec", "K.h5", "m.h5", "o.h5"]])
def test_ctrl_c_while_importing_is_one_line(tmp_path, entry, command):
    """Ctrl-C in the first moments of any command (its imports) ends it as it does later:
    one line and exit 130, no traceback."""
    slow = tmp_path / "slow" / "numpy"
    slow.mkdir(parents=True)
    (slow / "__init__.py").write_text(_SLOW_NUMPY)
    env = _env()
    env["PYTHONPATH"] = str(tmp_path / "slow") + os.pathsep + env["PYTHONPATH"]
    proc = subprocess.Popen([sys.executable, *entry, *command], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "IMPORTING"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    lines = err.strip().splitlines()
    assert proc.returncode == 130 and len(lines) == 1, err
    assert lines[0] == f"fftmatvec {command[0]}: interrupted by SIGINT", err


def test_later_write_removes_temporaries_of_dead_writers(tmp_path, rng):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = _writes._HOST
    stale = tmp_path / f".v.h5.tmp-{dead.pid}-0123456789ab.{host}"
    live = tmp_path / f".v.h5.tmp-{os.getpid()}-0123456789ab.{host}"
    other_host = tmp_path / f".v.h5.tmp-{dead.pid}-0123456789ab.elsewhere"
    other_name = tmp_path / f".w.h5.tmp-{dead.pid}-0123456789ab.{host}"
    for p in (stale, live, other_host, other_name):
        p.write_bytes(b"x" * 100)
    (tmp_path / f".D.tmp-{dead.pid}-0123456789ab.{host}").mkdir()
    io.save_vector(tmp_path / "v.h5", rng.standard_normal((2, 3)))
    io.save_matrix(tmp_path / "D", rng.standard_normal((2, 2, 3)), layout="fftmatvec")
    assert not stale.exists() and not (tmp_path / f".D.tmp-{dead.pid}-0123456789ab.{host}").exists()
    assert live.exists() and other_host.exists() and other_name.exists()
    # and the temporaries' names carry the writer's pid
    assert f".x.h5.tmp-{os.getpid()}-" in _writes.tmp_name(str(tmp_path / "x.h5"))


# ------------------------------------------------------------------------------------------
# 8. Sizes in files checked before anything is allocated
# ------------------------------------------------------------------------------------------
def test_meta_claiming_many_rows_fails_fast(tmp_path, rng):
    K = rng.standard_normal((3, 1, 7))
    write_fftmatvec_dir(str(tmp_path / "D"), K, lines=meta_lines(10**8, 1, 7))
    t0 = time.perf_counter()
    with pytest.raises(FFTMatvecError, match="row file 99999999 of 100000000 is missing"):
        io.load_matrix(tmp_path / "D")
    with pytest.raises(FFTMatvecError):
        io.convert_matrix(tmp_path / "D", tmp_path / "K.h5")
    assert time.perf_counter() - t0 < 1.0
    assert not leftovers(tmp_path) and not (tmp_path / "K.h5").exists()


def test_sizes_beyond_memory_give_the_bytes(tmp_path, rng, monkeypatch):
    with h5py.File(tmp_path / "huge.h5", "w") as f:  # declared, never written: a small file
        f.create_dataset("kernel", shape=(10**6, 10**6, 10**3), dtype="<f8",
                         chunks=(1, 1, 1000))
        f.attrs["format"] = "fftmatvec-btt"
        f.attrs["version"] = 1
    t0 = time.perf_counter()
    with pytest.raises(FFTMatvecMemoryError, match=r"needs 8 PB \(8000000000000000 bytes\)"):
        io.load_matrix(tmp_path / "huge.h5")
    assert time.perf_counter() - t0 < 1.0
    with pytest.raises(MemoryError):  # still a MemoryError for those who catch that
        io.load_matrix(tmp_path / "huge.h5", rows=slice(0, 10**5))
    # the memory reported available is what counts
    write_native(str(tmp_path / "K.h5"), rng.standard_normal((4, 3, 10)))
    write_vector(str(tmp_path / "v.h5"), rng.standard_normal((4, 10)), "obs")
    monkeypatch.setattr(_memory, "available_memory", lambda: 500)
    with pytest.raises(FFTMatvecMemoryError, match="needs 960 bytes, more than the 500 bytes"):
        io.load_matrix(tmp_path / "K.h5")
    assert io.load_matrix(tmp_path / "K.h5", rows=[0]).shape == (1, 3, 10)
    monkeypatch.setattr(_memory, "available_memory", lambda: 300)
    with pytest.raises(FFTMatvecMemoryError, match="vector file .* needs 320 bytes"):
        io.load_vector(tmp_path / "v.h5")


def test_cli_huge_meta_is_one_line(tmp_path, rng):
    write_fftmatvec_dir(str(tmp_path / "D"), rng.standard_normal((2, 2, 3)),
                        lines=meta_lines(10**12, 2, 3))
    write_vector(str(tmp_path / "m.h5"), rng.standard_normal((2, 3)))
    t0 = time.perf_counter()
    proc = cli("matvec", "D", "m.h5", "out.h5", "--repeat", "1", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "row file 999999999999 of 1000000000000 is missing" in proc.stderr
    assert time.perf_counter() - t0 < 30  # the interpreter's start, not a 1e12 loop
    # with every row file there, the bytes are what fails
    write_fftmatvec_dir(str(tmp_path / "E"), rng.standard_normal((1, 2, 3)),
                        lines=meta_lines(10**12, 2, 3))
    os.link(row_file(str(tmp_path / "E"), 0), row_file(str(tmp_path / "E"), 10**12 - 1))
    proc = cli("matvec", "E", "m.h5", "out.h5", cwd=tmp_path)
    assert proc.returncode == 2 and "needs 48 TB (48000000000000 bytes)" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out.h5").exists()


def test_operator_whose_khat_cannot_fit_fails_before_reading(monkeypatch):
    K = np.broadcast_to(np.ones((1, 1, 1)), (10**5, 10**5, 10**3))  # 80 TB, never read
    t0 = time.perf_counter()
    with pytest.raises(FFTMatvecMemoryError, match="Khat .*needs"):
        BlockToeplitz(K)
    with pytest.raises(FFTMatvecMemoryError, match=r"Nf=1001\b.* 80.1 TB"):
        BlockToeplitz(K, "sssss", fft_len=2000)
    assert time.perf_counter() - t0 < 1.0


# ------------------------------------------------------------------------------------------
# 9. The package's errors, no raw library text
# ------------------------------------------------------------------------------------------
def test_load_vector_bad_shape_argument(tmp_path, rng):
    write_vector(str(tmp_path / "v.h5"), rng.standard_normal((2, 3)))
    for shape in (5, (2,), (2, 3, 1), ("2", 3), (2.0, 3), (True, 3)):
        with pytest.raises(FFTMatvecTypeError, match="^shape must be a pair of ints"):
            io.load_vector(tmp_path / "v.h5", shape=shape)
    assert io.load_vector(tmp_path / "v.h5", shape=(np.int64(2), 3)).shape == (2, 3)


def test_ndarray_matmul_operator(rng):
    F = BlockToeplitz(rng.standard_normal((3, 2, 5)))
    for x in (rng.standard_normal((3, 5)), rng.standard_normal(15)):
        with pytest.raises(FFTMatvecTypeError, match=r"x @ BlockToeplitz is not defined.*F\.T @ x"):
            x @ F
    with pytest.raises(FFTMatvecTypeError):
        rng.standard_normal((3, 5)) @ F.normal()
    assert np.array_equal(F @ rng.standard_normal((2, 5)) * 0, np.zeros((3, 5)))


def test_read_only_destination(tmp_path, rng):
    with small_tmpfs(tmp_path, options="ro") as mnt:
        for call in (lambda: io.save_vector(mnt / "v.h5", rng.standard_normal((2, 3))),
                     lambda: io.save_matrix(mnt / "K.h5", rng.standard_normal((2, 2, 3))),
                     lambda: io.save_matrix(mnt / "D", rng.standard_normal((2, 2, 3)),
                                            layout="fftmatvec")):
            with pytest.raises(FFTMatvecFileError, match="^cannot write .*: read-only file system$"):
                call()


def test_hdf5_error_text_becomes_a_reason(tmp_path, rng, monkeypatch):
    def refuse(*a, **k):
        raise OSError("Unable to synchronously create file (unable to open file: name = 'x', "
                      "errno = 30, error message = 'Read-only file system', flags = 13)")

    monkeypatch.setattr(_writes.h5py, "File", refuse)
    for call in (lambda: io.save_vector(tmp_path / "v.h5", rng.standard_normal((2, 3))),
                 lambda: io.save_matrix(tmp_path / "D", rng.standard_normal((2, 2, 3)),
                                        layout="fftmatvec")):
        with pytest.raises(FFTMatvecFileError) as exc:
            call()
        assert str(exc.value).endswith(": read-only file system") and "errno" not in str(exc.value)
    assert not leftovers(tmp_path) and os.listdir(tmp_path) == []


def test_masked_kernel_refused(tmp_path, rng):
    K = rng.standard_normal((3, 2, 5))
    K[0, 0, 0] = np.nan
    Km = np.ma.array(K, mask=np.isnan(K))
    with pytest.raises(FFTMatvecTypeError, match="masked array"):
        BlockToeplitz(Km)
    with pytest.raises(FFTMatvecTypeError, match="masked array"):
        io.save_matrix(tmp_path / "K.h5", Km)
    with pytest.raises(FFTMatvecTypeError, match="masked array"):
        io.save_vector(tmp_path / "v.h5", Km[0])


def test_long_double_kernel_overflowing_float64(tmp_path, rng):
    if np.finfo(np.longdouble).max <= np.finfo(np.float64).max:
        pytest.skip("long double is float64 here")
    K = rng.standard_normal((3, 2, 5)).astype(np.longdouble)
    K[1, 1, 1] = np.longdouble("1e400")
    with pytest.raises(FFTMatvecValueError, match="too large for float64"):
        BlockToeplitz(K)
    with pytest.raises(FFTMatvecValueError, match="too large for float64"):
        io.save_matrix(tmp_path / "K.h5", K)
    with pytest.raises(FFTMatvecValueError, match="too large for float64"):
        io.save_vector(tmp_path / "v.h5", K[1])
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_save_vector_refuses_non_finite(tmp_path, rng, bad):
    v = rng.standard_normal((2, 3))
    v[1, 2] = bad
    with pytest.raises(FFTMatvecValueError, match="^v contains NaN or Inf"):
        io.save_vector(tmp_path / "v.h5", v)
    with pytest.raises(FFTMatvecValueError, match="^v contains NaN or Inf"):
        io.save_vector(tmp_path / "v.h5", v.astype(np.float32))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("text", ["1_0", "\uff11\uff10", "+10", "1e1", "0x10", "١٠"])
def test_meta_numbers_are_ascii_digits(tmp_path, rng, text):
    K = rng.standard_normal((10, 2, 3))
    lines = meta_lines(10, 2, 3)
    lines[0] = text
    write_fftmatvec_dir(str(tmp_path / "D"), K, lines=lines)
    with pytest.raises(FFTMatvecFileError, match=r"line 1 \(Nd\): expected an integer"):
        io.matrix_info(tmp_path / "D")
