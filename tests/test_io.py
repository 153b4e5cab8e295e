"""fftmatvec.io: FFTMatvec matrix directories, the native file, vectors, validation."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

import fftmatvec as fm
from fftmatvec import FFTMatvecError, FFTMatvecTypeError, FFTMatvecValueError, io
from fftmatvec.io import FFTMatvecFileError
from fftmatvec.io import _write as io_write

from conftest import dense_btt, rel_err
from h5files import (
    meta_lines,
    row_file,
    truncate,
    write_fftmatvec_dir,
    write_native,
    write_vector,
)

SHAPES = [(1, 1, 1), (3, 4, 5), (5, 2, 9), (2, 7, 16)]


def _kernel(rng, shape):
    return rng.standard_normal(shape)


def _leftovers(directory):
    """Temporary names a failed atomic write would leave behind."""
    return [n for n in os.listdir(directory) if ".tmp-" in n or ".old-" in n]


# ------------------------------------------------------------------------------------------
# Reading files written with h5py directly
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("prefix", ["adj/vec_", "F_"])
@pytest.mark.parametrize("checksum", [None, 0, 1234])
def test_load_fftmatvec_directory(tmp_path, rng, shape, prefix, checksum):
    K = _kernel(rng, shape)
    root = write_fftmatvec_dir(str(tmp_path / "m"), K, prefix=prefix, checksum=checksum, p2q=1)
    out = io.load_matrix(root)
    assert out.dtype == np.float64 and out.shape == shape
    np.testing.assert_array_equal(out, K)
    info = io.matrix_info(root)
    assert (info.nd, info.nm, info.nt) == shape and info.shape == shape
    assert info.format == "fftmatvec" and info["format"] == "fftmatvec"
    assert info.p2q is True and info.checksum == (checksum or 0)
    assert info.prefix == prefix and info.extension == ".h5"
    # binary/ itself is accepted as the path too
    np.testing.assert_array_equal(io.load_matrix(os.path.join(root, "binary")), K)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("stored", [np.float64, np.float32])
@pytest.mark.parametrize("attrs_on", ["root", "dataset"])
def test_load_native(tmp_path, rng, shape, stored, attrs_on):
    K = _kernel(rng, shape)
    path = write_native(str(tmp_path / "k.h5"), K, dtype=stored, attrs_on=attrs_on)
    out = io.load_matrix(path)
    assert out.dtype == np.float64 and out.shape == shape
    np.testing.assert_array_equal(out, K.astype(stored).astype(np.float64))
    info = io.matrix_info(path)
    assert info.format == "native" and info.shape == shape and info.version == 1
    assert info.p2q is None and info.checksum == 0


def test_matrix_info_reads_only_metadata(tmp_path, rng):
    K = _kernel(rng, (4, 3, 6))
    root = write_fftmatvec_dir(str(tmp_path / "m"), K)
    for i in range(4):
        os.remove(row_file(root, i))
    info = io.matrix_info(root)  # the row files are not needed
    assert info.as_dict()["nd"] == 4 and info.nm == 3 and info.nt == 6


def test_meta_with_windows_line_endings_and_trailing_blank_lines(tmp_path, rng):
    K = _kernel(rng, (2, 3, 4))
    root = write_fftmatvec_dir(str(tmp_path / "m"), K)
    meta = os.path.join(root, "binary", "meta_adj")
    with open(meta, "w", newline="") as fh:
        fh.write("\r\n".join(meta_lines(2, 3, 4)) + "\r\n\r\n\n")
    np.testing.assert_array_equal(io.load_matrix(root), K)


# ------------------------------------------------------------------------------------------
# Writing: the files are what FFTMatvec (and h5py) read
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES)
def test_save_fftmatvec_directory_layout(tmp_path, rng, shape):
    K = _kernel(rng, shape)
    nd, nm, nt = shape
    root = str(tmp_path / "m")
    info = io.save_matrix(root, K, layout="fftmatvec", checksum=77)
    assert info.format == "fftmatvec" and info.shape == shape and info.checksum == 77
    with open(os.path.join(root, "binary", "meta_adj")) as fh:
        assert fh.read().splitlines() == meta_lines(nd, nm, nt, "adj/vec_", checksum=77)
    for i in range(nd):
        with h5py.File(row_file(root, i), "r") as f:
            ds = f["vec"]
            assert ds.shape == (nm * nt,) and ds.dtype == np.float64
            np.testing.assert_array_equal(ds[()].reshape(nm, nt), K[i])
            for name, value in (("reindex", 1), ("n_param", nm), ("param_steps", nt), ("checksum", 77)):
                assert ds.attrs[name] == value and ds.attrs[name].dtype == np.int32
    assert sorted(os.listdir(tmp_path)) == ["m"]


def test_save_native_layout_is_chunked_by_blocks(tmp_path, rng, monkeypatch):
    monkeypatch.setattr(io_write, "_CHUNK_BYTES", 8192)  # small chunks for a small test matrix
    K = _kernel(rng, (40, 30, 50))
    path = str(tmp_path / "k.h5")
    io.save_matrix(path, K)
    with h5py.File(path, "r") as f:
        assert f.attrs["format"] == io.NATIVE_FORMAT and f.attrs["version"] == io.NATIVE_VERSION
        ds = f["kernel"]
        assert ds.shape == K.shape and ds.dtype == np.float64
        cr, cc, ct = ds.chunks
        assert ct == 50 and (cr, cc) != (40, 30)  # whole time series, tiles of rows x cols
        assert cr * cc * ct * 8 <= 8192 and cr > 1 and cc > 1
        np.testing.assert_array_equal(ds[()], K)


@pytest.mark.parametrize("layout", io.LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_save_load_round_trip(tmp_path, rng, layout, dtype):
    K = _kernel(rng, (3, 5, 7)).astype(dtype)
    path = str(tmp_path / ("m.h5" if layout == "native" else "m"))
    io.save_matrix(path, K, layout=layout)
    out = io.load_matrix(path)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, K.astype(np.float64))


def test_convert_both_ways_keeps_metadata(tmp_path, rng):
    K = _kernel(rng, (4, 3, 5))
    src = write_fftmatvec_dir(str(tmp_path / "src"), K, prefix="F_", checksum=99, p2q=1)
    native = str(tmp_path / "k.h5")
    info = io.convert_matrix(src, native)
    assert info.format == "native" and info.p2q is True and info.checksum == 99
    np.testing.assert_array_equal(io.load_matrix(native), K)
    back = io.convert_matrix(native, str(tmp_path / "back"), prefix="adj/vec_")
    assert back.format == "fftmatvec" and back.p2q is True and back.checksum == 99
    assert back.prefix == "adj/vec_"
    np.testing.assert_array_equal(io.load_matrix(str(tmp_path / "back")), K)
    # directory -> directory keeps the prefix unless told otherwise
    copy = io.convert_matrix(src, str(tmp_path / "copy"), layout="fftmatvec")
    assert copy.prefix == "F_"
    np.testing.assert_array_equal(io.load_matrix(str(tmp_path / "copy")), K)


def test_convert_streams_in_row_blocks(tmp_path, rng, monkeypatch):
    monkeypatch.setattr(io_write, "_COPY_BYTES", 2 * 3 * 5 * 8)  # two rows at a time
    K = _kernel(rng, (7, 3, 5))
    src = write_fftmatvec_dir(str(tmp_path / "src"), K)
    io.convert_matrix(src, str(tmp_path / "k.h5"))
    np.testing.assert_array_equal(io.load_matrix(str(tmp_path / "k.h5")), K)
    steps = []
    io.convert_matrix(str(tmp_path / "k.h5"), str(tmp_path / "d"), progress=steps.append)
    np.testing.assert_array_equal(io.load_matrix(str(tmp_path / "d")), K)
    assert steps == [2, 2, 2, 1]  # the rows of each block, as it is read


def test_convert_refuses_same_path_and_existing_destination(tmp_path, rng):
    K = _kernel(rng, (2, 2, 3))
    path = io.save_matrix(str(tmp_path / "k.h5"), K).path
    with pytest.raises(FFTMatvecValueError, match="same path"):
        io.convert_matrix(path, path)
    io.save_matrix(str(tmp_path / "other.h5"), K)
    with pytest.raises(FFTMatvecFileError, match="exists"):
        io.convert_matrix(path, str(tmp_path / "other.h5"), layout="native")
    io.convert_matrix(path, str(tmp_path / "other.h5"), layout="native", overwrite=True)


# ------------------------------------------------------------------------------------------
# Slices: only the selected rows and columns are read
# ------------------------------------------------------------------------------------------
SELECTIONS = [
    (slice(1, 4), slice(2, 5)),
    (slice(None, None, 2), slice(None, None, -1)),
    (range(2, 5), [6, 0, 3]),
    ([4, 4, 0], slice(0, 1)),
    ([-1], [-2, -1]),
    (np.array([True, False, True, False, True, False]), None),
    (None, np.array([1, 2, 3, 5])),
    (slice(3, 3), None),
]


@pytest.mark.parametrize("layout", io.LAYOUTS)
@pytest.mark.parametrize("rows,cols", SELECTIONS)
def test_slices(tmp_path, rng, layout, rows, cols):
    K = _kernel(rng, (6, 7, 4))
    path = str(tmp_path / "m")
    if layout == "native":
        write_native(path, K, chunks=(2, 2, 4))
    else:
        write_fftmatvec_dir(path, K)
    ridx = np.arange(6)[rows] if isinstance(rows, slice) else np.arange(6) if rows is None else np.arange(6)[np.asarray(rows)]
    cidx = np.arange(7)[cols] if isinstance(cols, slice) else np.arange(7) if cols is None else np.arange(7)[np.asarray(cols)]
    out = io.load_matrix(path, rows=rows, cols=cols)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, K[np.ix_(ridx, cidx)])


def test_directory_block_reads_only_its_rows_and_columns(tmp_path, rng):
    """Other ranks' row files are gone, and in ours every checksummed chunk of another
    column block is corrupted on disk: the block still reads."""
    K = _kernel(rng, (6, 5, 3))
    root = write_fftmatvec_dir(str(tmp_path / "m"), K, chunks=(3,), fletcher32=True)
    for i in (0, 1, 5):
        os.remove(row_file(root, i))
    for i in (2, 3, 4):
        with h5py.File(row_file(root, i), "r") as f:
            dsid = f["vec"].id
            chunks = [dsid.get_chunk_info(k) for k in range(dsid.get_num_chunks())]
        with open(row_file(root, i), "r+b") as fh:
            for c in chunks:
                if c.chunk_offset[0] // 3 not in (1, 2):  # columns 1 and 2 are ours
                    fh.seek(c.byte_offset)
                    fh.write(b"\x01" * (c.size - 4))
    np.testing.assert_array_equal(io.load_matrix(root, rows=slice(2, 5), cols=slice(1, 3)), K[2:5, 1:3])
    _expect("vec_000002.h5", "truncated or corrupt", io.load_matrix, root, rows=slice(2, 5))


def test_native_block_reads_only_its_chunks(tmp_path, rng):
    """Corrupt, on disk, every checksummed (fletcher32) chunk outside a rank's block: the block
    still reads, so no other chunk was touched; the whole kernel does not."""
    K = _kernel(rng, (6, 8, 5))
    path = write_native(str(tmp_path / "k.h5"), K, chunks=(2, 4, 5), fletcher32=True)
    block = (slice(2, 4), slice(4, 8))
    with h5py.File(path, "r") as f:
        dsid = f["kernel"].id
        chunks = [dsid.get_chunk_info(k) for k in range(dsid.get_num_chunks())]
    corrupted = 0
    with open(path, "r+b") as fh:
        for c in chunks:
            r, col, _ = c.chunk_offset
            if (r, col) != (2, 4):
                fh.seek(c.byte_offset)
                fh.write(b"\x01" * (c.size - 4))  # data, not its stored checksum
                corrupted += 1
    assert corrupted == len(chunks) - 1 > 0
    np.testing.assert_array_equal(io.load_matrix(path, rows=block[0], cols=block[1]), K[block])
    _expect("k.h5", "truncated or corrupt", io.load_matrix, path)


@pytest.mark.parametrize(
    "rows,exc,match",
    [
        (slice(0, 9), None, None),  # slices clip like NumPy
        (3, FFTMatvecTypeError, "scalar"),
        ([0, 4], FFTMatvecValueError, "out of range"),
        ([-5], FFTMatvecValueError, "out of range"),
        ([0.5], FFTMatvecTypeError, "integers"),
        ([[0, 1]], FFTMatvecValueError, "1-D"),
        (np.array([True]), FFTMatvecValueError, "mask"),
    ],
)
def test_bad_selections(tmp_path, rng, rows, exc, match):
    K = _kernel(rng, (4, 3, 2))
    path = write_native(str(tmp_path / "k.h5"), K)
    if exc is None:
        np.testing.assert_array_equal(io.load_matrix(path, rows=rows), K)
        return
    with pytest.raises(exc, match=match):
        io.load_matrix(path, rows=rows)


# ------------------------------------------------------------------------------------------
# load_matrix + the operator against the dense float64 reference
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", io.LAYOUTS)
@pytest.mark.parametrize("rows,cols", [(None, None), (slice(1, 4), slice(0, 3)), ([4, 0], [5, 1, 2])])
def test_loaded_operator_matches_dense(tmp_path, rng, layout, rows, cols):
    K = _kernel(rng, (5, 6, 9))
    path = str(tmp_path / "m")
    if layout == "native":
        write_native(path, K)
    else:
        write_fftmatvec_dir(path, K)
    block = io.load_matrix(path, rows=rows, cols=cols)
    F = fm.BlockToeplitz(block)
    D = dense_btt(block)
    nd, nm, nt = block.shape
    m = rng.standard_normal((nm, nt))
    d = rng.standard_normal((nd, nt))
    y = F.matvec(m)
    x = F.rmatvec(d)
    assert y.dtype == np.float64 and x.dtype == np.float64
    assert rel_err(y.reshape(-1), D @ m.reshape(-1)) < 1e-12
    assert rel_err(x.reshape(-1), D.T @ d.reshape(-1)) < 1e-12


def test_vector_files_feed_the_operator(tmp_path, rng):
    K = _kernel(rng, (3, 4, 6))
    root = write_fftmatvec_dir(str(tmp_path / "m"), K)
    m = rng.standard_normal((4, 6))
    write_vector(str(tmp_path / "m.h5"), m, "param")
    info = io.matrix_info(root)
    x = io.load_vector(str(tmp_path / "m.h5"), space="param", shape=(info.nm, info.nt))
    y = fm.BlockToeplitz(io.load_matrix(root)).matvec(x)
    io.save_vector(str(tmp_path / "y.h5"), y, "obs")
    back = io.load_vector(str(tmp_path / "y.h5"), shape=(info.nd, info.nt))
    assert back.dtype == np.float64
    assert rel_err(back.reshape(-1), dense_btt(K) @ m.reshape(-1)) < 1e-12


# ------------------------------------------------------------------------------------------
# Vectors
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("space", io.SPACES)
def test_vector_round_trip_and_attributes(tmp_path, rng, space):
    v = rng.standard_normal((5, 8))
    path = str(tmp_path / "v.h5")
    kw = {"checksum": 12} if space == "param" else {"qoi": True}
    vi = io.save_vector(path, v, space, **kw)
    assert vi.space == space and vi.shape == (5, 8)
    with h5py.File(path, "r") as f:
        ds = f["vec"]
        assert ds.shape == (40,) and ds.dtype == np.float64
        np.testing.assert_array_equal(ds[()], v.reshape(-1))
        n_name, steps_name = ("n_param", "param_steps") if space == "param" else ("n_obs", "obs_steps")
        extra = ("checksum", 12) if space == "param" else ("qoi", 1)
        for name, value in ((n_name, 5), (steps_name, 8), ("reindex", 1), extra):
            assert ds.attrs[name] == value and ds.attrs[name].dtype == np.int32
    out = io.load_vector(path)
    assert out.dtype == np.float64 and out.shape == (5, 8)
    np.testing.assert_array_equal(out, v)
    info = io.vector_info(path)
    assert info.space == space and info["n"] == 5 and info.nt == 8
    assert (info.checksum, info.qoi) == ((12, False) if space == "param" else (0, True))


def test_load_vector_written_with_h5py(tmp_path, rng):
    v = rng.standard_normal((3, 4)).astype(np.float32)
    path = write_vector(str(tmp_path / "v.h5"), v, "obs")
    out = io.load_vector(path)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, v.astype(np.float64))


def test_save_vector_from_float32_and_overwrite(tmp_path, rng):
    path = str(tmp_path / "v.h5")
    io.save_vector(path, rng.standard_normal((2, 3)), "param")
    v = rng.standard_normal((4, 3)).astype(np.float32)
    io.save_vector(path, v, "obs")  # replaces an HDF5 file by default
    np.testing.assert_array_equal(io.load_vector(path), v.astype(np.float64))
    with pytest.raises(FFTMatvecFileError, match="exists"):
        io.save_vector(path, v, "obs", overwrite=False)
    assert _leftovers(tmp_path) == []


# ------------------------------------------------------------------------------------------
# Atomic writes
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", io.LAYOUTS)
def test_interrupted_write_leaves_nothing_under_the_final_name(tmp_path, rng, layout):
    """A conversion that fails on row 3 (truncated file) leaves neither a partial destination
    nor temporary files."""
    K = _kernel(rng, (5, 3, 4))
    src = write_fftmatvec_dir(str(tmp_path / "src"), K)
    truncate(row_file(src, 3))
    dst = str(tmp_path / ("out.h5" if layout == "native" else "out"))
    with pytest.raises(FFTMatvecFileError, match="row file 3"):
        io.convert_matrix(src, dst, layout=layout)
    assert not os.path.exists(dst)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("layout", io.LAYOUTS)
def test_interrupted_overwrite_keeps_the_old_matrix(tmp_path, rng, layout):
    old = _kernel(rng, (2, 3, 4))
    dst = str(tmp_path / ("out.h5" if layout == "native" else "out"))
    io.save_matrix(dst, old, layout=layout)
    src = write_fftmatvec_dir(str(tmp_path / "src"), _kernel(rng, (5, 3, 4)))
    truncate(row_file(src, 4))
    with pytest.raises(FFTMatvecFileError):
        io.convert_matrix(src, dst, layout=layout, overwrite=True)
    np.testing.assert_array_equal(io.load_matrix(dst), old)
    assert _leftovers(tmp_path) == []


def test_interrupted_save_by_exception(tmp_path, rng, monkeypatch):
    K = _kernel(rng, (3, 3, 3))
    path = str(tmp_path / "k.h5")
    io.save_matrix(path, K)

    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(io_write, "_native_chunks", boom)
    with pytest.raises(KeyboardInterrupt):
        io.save_matrix(path, 2 * K)
    np.testing.assert_array_equal(io.load_matrix(path), K)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("layout", io.LAYOUTS)
def test_overwrite_rules(tmp_path, rng, layout):
    K = _kernel(rng, (2, 3, 4))
    dst = str(tmp_path / "dst")
    io.save_matrix(dst, K, layout=layout)
    io.save_matrix(dst, 2 * K, layout=layout)  # same kind: replaced
    np.testing.assert_array_equal(io.load_matrix(dst), 2 * K)
    with pytest.raises(FFTMatvecFileError, match="overwrite=True"):
        io.save_matrix(dst, K, layout=layout, overwrite=False)
    other = "native" if layout == "fftmatvec" else "fftmatvec"
    with pytest.raises(FFTMatvecFileError, match="directory|file is in the way"):
        io.save_matrix(dst, K, layout=other)  # never replaces the other kind
    np.testing.assert_array_equal(io.load_matrix(dst), 2 * K)


def test_never_replaces_foreign_files_or_directories(tmp_path, rng):
    K = _kernel(rng, (2, 2, 2))
    notes = tmp_path / "notes.txt"
    notes.write_text("precious")
    with pytest.raises(FFTMatvecFileError, match="not an HDF5 file"):
        io.save_matrix(str(notes), K)
    with pytest.raises(FFTMatvecFileError, match="not an HDF5 file"):
        io.save_vector(str(notes), K[0], "param")
    assert notes.read_text() == "precious"
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "data").write_text("precious")
    with pytest.raises(FFTMatvecFileError, match="not an FFTMatvec matrix directory"):
        io.save_matrix(str(folder), K, layout="fftmatvec")
    assert (folder / "data").read_text() == "precious"
    with pytest.raises(FFTMatvecFileError, match="does not exist"):
        io.save_matrix(str(tmp_path / "missing" / "k.h5"), K)


# ------------------------------------------------------------------------------------------
# Validation: every broken file says what is wrong and where
# ------------------------------------------------------------------------------------------
def _dir(tmp_path, rng, **kw):
    K = _kernel(rng, (3, 4, 5))
    return write_fftmatvec_dir(str(tmp_path / "m"), K, **kw), K


def _expect(path_fragment, match, fn, *args, **kwargs):
    with pytest.raises(FFTMatvecFileError, match=match) as ei:
        fn(*args, **kwargs)
    err = ei.value
    assert isinstance(err, FFTMatvecError) and isinstance(err, ValueError)
    assert path_fragment in err.path and path_fragment in str(err)
    return err


def test_missing_directory(tmp_path):
    _expect("nowhere", "does not exist", io.load_matrix, str(tmp_path / "nowhere"))
    _expect("nowhere", "does not exist", io.matrix_info, str(tmp_path / "nowhere"))


def test_missing_binary_and_meta(tmp_path, rng):
    (tmp_path / "empty").mkdir()
    _expect("empty", "no binary/ subdirectory", io.load_matrix, str(tmp_path / "empty"))
    (tmp_path / "empty" / "binary").mkdir()
    _expect("meta_adj", "missing meta file", io.load_matrix, str(tmp_path / "empty"))


def test_missing_row_file(tmp_path, rng):
    root, _ = _dir(tmp_path, rng)
    os.remove(row_file(root, 1))
    err = _expect("vec_000001.h5", "row file 1 of 3 is missing", io.load_matrix, root)
    assert root in str(err)


@pytest.mark.parametrize("n", [0, 3, 7])
def test_meta_too_few_lines(tmp_path, rng, n):
    root, _ = _dir(tmp_path, rng)
    with open(os.path.join(root, "binary", "meta_adj"), "w") as fh:
        fh.write("\n".join(meta_lines(3, 4, 5)[:n]) + "\n")
    _expect("meta_adj", f"has {n} lines, expected 8 or 9", io.load_matrix, root)


@pytest.mark.parametrize(
    "line,value,match",
    [
        (0, "three", r"line 1 \(Nd\): expected an integer, got 'three'"),
        (2, "5.5", r"line 3 \(Nt\): expected an integer"),
        (1, "0", r"line 2 \(Nm\): must be >= 1"),
        (5, "yes", r"line 6 \(reindex\): expected an integer"),
        (5, "0", r"reindex\): must be 1"),
        (6, "2", r"p2q\): must be 0 or 1"),
        (7, "0", r"reverse_dof\): must be 1"),
        (8, "abc", r"line 9 \(checksum\): expected an integer"),
    ],
)
def test_meta_bad_values(tmp_path, rng, line, value, match):
    K = _kernel(rng, (3, 4, 5))
    lines = meta_lines(3, 4, 5, checksum=0)
    lines[line] = value
    root = write_fftmatvec_dir(str(tmp_path / "m"), K, lines=lines)
    _expect("meta_adj", match, io.load_matrix, root)
    _expect("meta_adj", match, io.matrix_info, root)


@pytest.mark.parametrize(
    "attrs,match",
    [
        ({"reindex": 0}, "reindex = 0, must be 1"),
        ({"n_param": 7}, r"n_param = 7 contradicts meta_adj \(Nm = 4\)"),
        ({"param_steps": 6}, r"param_steps = 6 contradicts meta_adj \(Nt = 5\)"),
        ({"n_param": None}, "missing attribute 'n_param'"),
        ({"reindex": "one"}, "must be an integer"),
    ],
)
def test_row_attributes_contradicting_meta(tmp_path, rng, attrs, match):
    root, _ = _dir(tmp_path, rng, row_attrs={2: attrs})
    _expect("vec_000002.h5", match, io.load_matrix, root)
    io.load_matrix(root, rows=slice(0, 2))  # the other rows are fine


def test_row_dataset_wrong_length_or_missing(tmp_path, rng):
    root, _ = _dir(tmp_path, rng)
    with h5py.File(row_file(root, 0), "r+") as f:
        attrs = dict(f["vec"].attrs)
        del f["vec"]
        ds = f.create_dataset("vec", data=np.ones(19))
        ds.attrs.update(attrs)
    _expect("vec_000000.h5", r"shape \(19,\), expected \(20,\) = Nm\*Nt = 4\*5", io.load_matrix, root)
    with h5py.File(row_file(root, 0), "w") as f:
        f.create_dataset("data", data=np.ones(20))
    _expect("vec_000000.h5", "no dataset 'vec'", io.load_matrix, root)
    with h5py.File(row_file(root, 0), "w") as f:
        f.create_dataset("vec", data=np.ones(20, dtype=np.complex128))
    _expect("vec_000000.h5", "real numbers", io.load_matrix, root)


def test_checksum(tmp_path, rng):
    root, K = _dir(tmp_path, rng, checksum=41, row_attrs={1: {"checksum": 40}})
    err = _expect("vec_000001.h5", "checksum mismatch: file has 40, meta_adj has 41", io.load_matrix, root)
    assert "row file 1" in str(err)
    root2, _ = _dir(tmp_path / "b", rng, checksum=41, row_attrs={0: {"checksum": None}})
    _expect("vec_000000.h5", "no checksum attribute", io.load_matrix, root2)
    # checksum 0 (or no ninth line) means no check, as in FFTMatvec
    root3, K3 = _dir(tmp_path / "c", rng, checksum=0, row_attrs={0: {"checksum": 5}})
    np.testing.assert_array_equal(io.load_matrix(root3), K3)


def test_truncated_and_non_hdf5_row_files(tmp_path, rng):
    root, _ = _dir(tmp_path, rng)
    truncate(row_file(root, 2))
    _expect("vec_000002.h5", "truncated or corrupt", io.load_matrix, root)
    with open(row_file(root, 2), "w") as fh:
        fh.write("not hdf5\n")
    _expect("vec_000002.h5", "not an HDF5 file", io.load_matrix, root)


def test_native_validation(tmp_path, rng):
    K = _kernel(rng, (3, 4, 5))
    path = str(tmp_path / "k.h5")
    write_native(path, K)
    truncate(path)
    _expect("k.h5", "truncated or corrupt", io.load_matrix, path)
    with open(path, "w") as fh:
        fh.write("plain text")
    _expect("k.h5", "not an HDF5 file", io.load_matrix, path)
    with h5py.File(path, "w") as f:
        f.create_dataset("kernel", data=K)
    _expect("k.h5", "no 'format' attribute", io.load_matrix, path)
    with h5py.File(path, "a") as f:
        f.attrs["format"] = "something-else"
        f.attrs["version"] = 1
    _expect("k.h5", "format attribute is 'something-else'", io.matrix_info, path)
    with h5py.File(path, "a") as f:
        f.attrs["format"] = io.NATIVE_FORMAT
        f.attrs["version"] = 2
    _expect("k.h5", "version 2 is not supported", io.load_matrix, path)
    with h5py.File(path, "w") as f:
        f.attrs["format"] = io.NATIVE_FORMAT
        f.attrs["version"] = 1
        f.create_dataset("kernel", data=K[0])
    _expect("k.h5", r"shape \(4, 5\), expected \(Nd, Nm, Nt\)", io.load_matrix, path)
    with h5py.File(path, "w") as f:
        f.attrs["format"] = io.NATIVE_FORMAT
        f.attrs["version"] = 1
    _expect("k.h5", "no dataset 'kernel'", io.load_matrix, path)


def test_vector_validation(tmp_path, rng):
    v = rng.standard_normal((4, 5))
    path = str(tmp_path / "v.h5")
    write_vector(path, v, "param")
    _expect("v.h5", r"holds a parameter-space vector of shape \(4, 5\), expected \(3, 5\)",
            io.load_vector, path, shape=(3, 5))
    _expect("v.h5", "expected an observation-space vector", io.load_vector, path, space="obs")
    write_vector(path, v, "param", reindex=0)
    _expect("v.h5", "reindex = 0, must be 1", io.load_vector, path)
    write_vector(path, v, "param", param_steps=6)
    _expect("v.h5", r"length 20, but n_param\*param_steps = 4\*6 = 24", io.load_vector, path)
    write_vector(path, v, "param", param_steps=None)
    _expect("v.h5", "missing attribute 'param_steps'", io.vector_info, path)
    write_vector(path, v, "param", n_obs=4, obs_steps=5)
    _expect("v.h5", "both parameter- and observation-space", io.load_vector, path)
    np.testing.assert_array_equal(io.load_vector(path, space="obs"), v)
    write_vector(path, v, "param", n_param=None, param_steps=None)
    _expect("v.h5", "neither n_param/param_steps", io.load_vector, path)
    write_vector(path, v, "param")
    truncate(path)
    _expect("v.h5", "truncated or corrupt", io.load_vector, path)
    _expect("nothing.h5", "does not exist", io.load_vector, str(tmp_path / "nothing.h5"))


@pytest.mark.parametrize(
    "kernel,kw,exc,match",
    [
        (np.ones((2, 3)), {}, FFTMatvecValueError, "3-D"),
        (np.ones((2, 0, 3)), {}, FFTMatvecValueError, "empty"),
        (np.ones((2, 2, 2), complex), {}, FFTMatvecTypeError, "real"),
        (np.full((2, 2, 2), np.nan), {}, FFTMatvecValueError, "NaN"),
        ([[[1.0]]], {}, FFTMatvecTypeError, "numpy.ndarray"),
        (np.ones((2, 2, 2)), {"layout": "csv"}, FFTMatvecValueError, "layout"),
        (np.ones((2, 2, 2)), {"layout": "fftmatvec", "prefix": "../x_"}, FFTMatvecValueError, "prefix"),
        (np.ones((2, 2, 2)), {"layout": "fftmatvec", "prefix": "/abs/x_"}, FFTMatvecValueError, "prefix"),
        (np.ones((2, 2, 2)), {"checksum": 2**31}, FFTMatvecValueError, "32-bit"),
        (np.ones((2, 2, 2)), {"checksum": "7"}, FFTMatvecTypeError, "int"),
    ],
)
def test_save_matrix_argument_errors(tmp_path, kernel, kw, exc, match):
    with pytest.raises(exc, match=match):
        io.save_matrix(str(tmp_path / "out"), kernel, **kw)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "v,space,kw,exc,match",
    [
        (np.ones(6), "param", {}, FFTMatvecValueError, r"reshape a flat vector"),
        (np.ones((2, 3), complex), "param", {}, FFTMatvecTypeError, "real"),
        (np.ones((2, 3)), "data", {}, FFTMatvecValueError, "space"),
        (np.ones((2, 3)), "obs", {"checksum": 3}, FFTMatvecValueError, "parameter-space vectors only"),
        (np.ones((2, 3)), "param", {"qoi": True}, FFTMatvecValueError, "observation-space vectors only"),
    ],
)
def test_save_vector_argument_errors(tmp_path, v, space, kw, exc, match):
    with pytest.raises(exc, match=match):
        io.save_vector(str(tmp_path / "v.h5"), v, space, **kw)
    assert os.listdir(tmp_path) == []


def test_path_argument_type():
    with pytest.raises(FFTMatvecTypeError, match="path must be a str or os.PathLike"):
        io.load_matrix(3)
