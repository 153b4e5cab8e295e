"""The readers: :func:`matrix_info`, :func:`load_matrix`, :func:`vector_info` and
:func:`load_vector`, over one reader per matrix format (``info`` and ``read(rows, cols)``)."""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from collections.abc import Sequence
from typing import Any, Literal

import h5py
import numpy as np

from .. import _memory
from .._typing import PathLike
from .._errors import FFTMatvecFileError, FFTMatvecTypeError, FFTMatvecValueError
from ._formats import (_META, _META_FIELDS, _ROW_DIGITS, _VEC_ATTRS, NATIVE_FORMAT,
                       NATIVE_VERSION, SPACES, MatrixInfo, VectorInfo, _check_shape2, _dataset,
                       _fspath, _h5_open, _int_attr, _read_into, _str_attr)


# ------------------------------------------------------------------------------------------
# Public functions: check, then call the private readers
# ------------------------------------------------------------------------------------------
def matrix_info(path: PathLike) -> MatrixInfo:
    """Metadata of a matrix, without reading its data.

    Parameters
    ----------
    path : str or os.PathLike
        An FFTMatvec matrix directory (the one holding ``binary/``; ``binary/`` itself is
        accepted too) or a native ``.h5`` file.

    Returns
    -------
    MatrixInfo

    Raises
    ------
    FFTMatvecFileError
        Missing path, missing or malformed ``meta_adj``, a file that is not a native matrix.
    """
    path = _fspath(path, "path")
    with _open_matrix(path) as reader:
        return reader.info


def load_matrix(path: PathLike, *, rows: slice | Sequence[int] | Sequence[bool] | None = None,
                cols: slice | Sequence[int] | Sequence[bool] | None = None) -> np.ndarray:
    """Read a kernel, or the block of it a process owns.

    Parameters
    ----------
    path : str or os.PathLike
        FFTMatvec matrix directory or native file (detected).
    rows, cols : None, slice, range, or 1-D sequence of int or bool
        Block rows (sensors, ``0 <= i < Nd``) and block columns (parameters) to read;
        ``None`` means all. Negative indices count from the end. The result follows the
        requested order. Only the selected row files, and within them only the selected
        columns, are read: HDF5 hyperslabs on contiguous runs of indices.

    Returns
    -------
    (len(rows), len(cols), Nt) float64 array
        ``K[rows][:, cols]``.

    Raises
    ------
    FFTMatvecFileError
        Missing directory, meta file or row file; malformed meta file (too few lines,
        non-numeric values, reindex or reverse-dof not 1); a dataset of the wrong length or
        dtype; attributes contradicting the meta file; checksum mismatch; truncated or
        non-HDF5 files. The first and last row files wanted are looked for before anything
        is allocated.
    FFTMatvecMemoryError
        The block asked for (``len(rows) * len(cols) * Nt * 8`` bytes) is more than the memory
        available; raised before anything is allocated. Also a ``MemoryError``.
    FFTMatvecTypeError, FFTMatvecValueError
        Bad ``rows``/``cols`` (wrong type, out of range).
    """
    path = _fspath(path, "path")
    with _open_matrix(path) as reader:
        info = reader.info
        ridx = _as_index(rows, info.nd, "rows")
        cidx = _as_index(cols, info.nm, "cols")
        return reader.read(ridx, cidx)


def vector_info(path: PathLike) -> VectorInfo:
    """Metadata of a vector file (space, blocks, time steps), without reading the data.

    Raises
    ------
    FFTMatvecFileError
        Missing, truncated or non-HDF5 file; no ``vec`` dataset; missing or contradictory
        attributes; ``reindex`` not 1; dataset length not ``n*nt``.
    """
    path = _fspath(path, "path")
    with _h5_open(path, "vector file") as f:
        return _vector_info(f, path, None)[0]


def load_vector(path: PathLike, *, space: Literal["param", "obs"] | None = None,
                shape: tuple[int, int] | None = None) -> np.ndarray:
    """Read a vector file.

    Parameters
    ----------
    path : str or os.PathLike
    space : {"param", "obs"}, optional
        Require this space. Needed only when a file carries the attributes of both.
    shape : (int, int), optional
        Require this shape ``(N, Nt)``, e.g. ``(Nm, Nt)`` to feed a matrix.

    Returns
    -------
    (N, Nt) float64 array
        SOTI: block-outer, time-inner.

    Raises
    ------
    FFTMatvecFileError
        As :func:`vector_info`, plus a space or shape other than required.
    """
    path = _fspath(path, "path")
    if space is not None and space not in SPACES:
        raise FFTMatvecValueError(f"space must be one of {SPACES}, got {space!r}")
    if shape is not None:
        shape = _check_shape2(shape)
    with _h5_open(path, "vector file") as f:
        info, ds = _vector_info(f, path, space)
        if shape is not None and shape != info.shape:
            raise FFTMatvecFileError(
                path,
                f"vector file {path!r} holds {_space_name(info.space)} vector of shape "
                f"{info.shape}, expected {tuple(shape)}",
            )
        _memory.require_memory(info.n * info.nt * 8,
                               f"reading vector file {path!r} (N={info.n}, Nt={info.nt})")
        out = np.empty(info.n * info.nt, dtype=np.float64)
        _read_into(ds, out, np.s_[:], np.s_[:], path)
    return out.reshape(info.shape)


# ------------------------------------------------------------------------------------------
# Selections of rows and columns
# ------------------------------------------------------------------------------------------
def _as_index(sel: Any, n: int, name: str) -> np.ndarray:
    """Indices ``(k,)`` int64 selected by ``sel`` among ``n``."""
    if sel is None:
        return range(n)  # ranges allocate nothing: the sizes are checked before the reading
    if isinstance(sel, slice):
        return range(n)[sel]
    if isinstance(sel, (bool, np.bool_, int, np.integer)):
        raise FFTMatvecTypeError(
            f"{name} must be a slice, range or sequence of indices, got the scalar {sel!r} "
            f"(use slice({sel}, {sel} + 1) for one block)"
        )
    if isinstance(sel, range):
        idx = np.asarray(sel, dtype=np.int64)
    else:
        try:
            idx = np.asarray(sel)
        except Exception as exc:  # ragged input and the like
            raise FFTMatvecTypeError(f"{name} must be a 1-D sequence of indices: {exc}") from None
        if idx.ndim != 1:
            raise FFTMatvecValueError(f"{name} must be 1-D, got shape {idx.shape}")
        if idx.dtype.kind == "b":
            if idx.shape[0] != n:
                raise FFTMatvecValueError(f"{name}: boolean mask of length {idx.shape[0]}, expected {n}")
            return np.flatnonzero(idx)
        if idx.size == 0:
            return np.zeros(0, dtype=np.int64)
        if idx.dtype.kind not in "iu":
            raise FFTMatvecTypeError(f"{name} must hold integers, got dtype {idx.dtype}")
        idx = idx.astype(np.int64)
    bad = (idx < -n) | (idx >= n)
    if bad.any():
        raise FFTMatvecValueError(
            f"{name}: index {int(idx[bad][0])} is out of range for {n} blocks"
        )
    return np.where(idx < 0, idx + n, idx)


def _runs(sorted_unique: np.ndarray) -> list[tuple[int, int, int]]:
    """Contiguous runs ``(start, stop, position)`` of sorted unique indices."""
    if sorted_unique.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(sorted_unique) != 1) + 1
    starts = np.concatenate(([0], breaks))
    stops = np.concatenate((breaks, [sorted_unique.size]))
    return [(int(sorted_unique[a]), int(sorted_unique[b - 1]) + 1, int(a)) for a, b in zip(starts, stops)]


def _plan(idx: np.ndarray):
    """Unique sorted indices, their runs, and the gather that restores the requested order
    (``None`` when the request is already sorted and unique)."""
    if isinstance(idx, range):
        if idx.step == 1 or len(idx) <= 1:
            return idx, ([(idx.start, idx.start + len(idx), 0)] if len(idx) else []), None
        idx = np.asarray(idx, dtype=np.int64)
    uniq, inverse = np.unique(idx, return_inverse=True)
    restore = None if (uniq.size == idx.size and np.array_equal(uniq, idx)) else inverse.reshape(-1)
    return uniq, _runs(uniq), restore


# ------------------------------------------------------------------------------------------
# Readers: one per format, both with ``info`` and ``read(row_idx, col_idx)``
# ------------------------------------------------------------------------------------------
@contextmanager
def _open_matrix(path: str):
    if not os.path.exists(path):
        raise FFTMatvecFileError(
            path,
            f"matrix {path!r} does not exist (expected an FFTMatvec matrix directory or a "
            f"native HDF5 file)",
        )
    if os.path.isdir(path):
        yield _DirReader(path)
    else:
        with _h5_open(path, "native matrix file") as f:
            yield _NativeReader(path, f)


def _require_read_memory(info: MatrixInfo, ridx, cidx) -> None:
    _memory.require_memory(
        len(ridx) * len(cidx) * info.nt * 8,
        f"reading matrix {info.path!r} ({len(ridx)} of its Nd={info.nd} rows, {len(cidx)} of "
        f"its Nm={info.nm} columns, Nt={info.nt}, float64)",
    )


class _DirReader:
    """An FFTMatvec matrix directory: ``binary/meta_adj`` and one HDF5 file per block row."""

    def __init__(self, path: str):
        binary = os.path.join(path, "binary")
        if not os.path.isdir(binary):
            if os.path.isfile(os.path.join(path, _META)):
                binary = path  # the caller pointed at binary/ itself
            else:
                raise FFTMatvecFileError(
                    path,
                    f"FFTMatvec matrix directory {path!r} has no binary/ subdirectory "
                    f"(expected binary/{_META} and the row files)",
                )
        self.binary = binary
        self.info = _parse_meta(path, os.path.join(binary, _META))

    def row_file(self, i: int) -> str:
        info = self.info
        return os.path.join(self.binary, f"{info.prefix}{i:0{_ROW_DIGITS}d}{info.extension}")

    def check_rows(self, ridx) -> None:
        """The first and last requested row files exist: a meta file claiming more rows than
        the directory holds fails at once, before anything is allocated."""
        if len(ridx):
            ends = ({ridx[0], ridx[-1]} if isinstance(ridx, range)
                    else {int(np.min(ridx)), int(np.max(ridx))})
            for i in sorted(ends):
                fname = self.row_file(i)
                if not os.path.exists(fname):
                    raise FFTMatvecFileError(
                        fname,
                        f"FFTMatvec matrix {self.info.path!r}: row file {i} of {self.info.nd} is "
                        f"missing: {fname!r}",
                    )

    def read(self, ridx, cidx) -> np.ndarray:
        info = self.info
        nt = info.nt
        self.check_rows(ridx)
        _require_read_memory(info, ridx, cidx)
        rows, _, rrestore = _plan(ridx)
        cols, cruns, crestore = _plan(cidx)
        out = np.empty((len(rows), len(cols), nt), dtype=np.float64)
        for k, i in enumerate(rows):
            flat = out[k].reshape(-1)  # a view: out is C-contiguous
            with self._row(int(i)) as (ds, fname):
                for c0, c1, pos in cruns:
                    _read_into(ds, flat, np.s_[c0 * nt : c1 * nt],
                               np.s_[pos * nt : (pos + c1 - c0) * nt], fname)
        if rrestore is not None:
            out = out[rrestore]
        if crestore is not None:
            out = out[:, crestore]
        return out

    @contextmanager
    def _row(self, i: int):
        info = self.info
        fname = self.row_file(i)
        if not os.path.exists(fname):
            raise FFTMatvecFileError(
                fname,
                f"FFTMatvec matrix {info.path!r}: row file {i} of {info.nd} is missing: {fname!r}",
            )
        what = f"row file {i} of matrix {info.path!r},"
        with _h5_open(fname, what) as f:
            ds = _dataset(f, "vec", fname, what)
            expected = info.nm * info.nt
            if ds.ndim != 1 or ds.shape[0] != expected:
                raise FFTMatvecFileError(
                    fname,
                    f"{what} {fname!r}: dataset 'vec' has shape {ds.shape}, expected "
                    f"({expected},) = Nm*Nt = {info.nm}*{info.nt} from {_META}",
                )
            attrs = ds.attrs
            reindex = _int_attr(attrs, "reindex", fname)
            if reindex != 1:
                raise FFTMatvecFileError(
                    fname, f"{what} {fname!r}: attribute reindex = {reindex}, must be 1 (SOTI order)"
                )
            for attr, field, value in (("n_param", "Nm", info.nm), ("param_steps", "Nt", info.nt)):
                got = _int_attr(attrs, attr, fname)
                if got != value:
                    raise FFTMatvecFileError(
                        fname,
                        f"{what} {fname!r}: attribute {attr} = {got} contradicts {_META} "
                        f"({field} = {value})",
                    )
            if info.checksum != 0:
                if "checksum" not in attrs:
                    raise FFTMatvecFileError(
                        fname,
                        f"{what} {fname!r}: no checksum attribute, but {_META} requires "
                        f"checksum {info.checksum}",
                    )
                got = _int_attr(attrs, "checksum", fname)
                if got != info.checksum:
                    raise FFTMatvecFileError(
                        fname,
                        f"{what} {fname!r}: checksum mismatch: file has {got}, {_META} has "
                        f"{info.checksum} (a row file from another matrix?)",
                    )
            yield ds, fname


def _parse_meta(root: str, meta: str) -> MatrixInfo:
    if not os.path.isfile(meta):
        raise FFTMatvecFileError(meta, f"FFTMatvec matrix directory {root!r}: missing meta file {meta!r}")
    try:
        with open(meta, encoding="utf-8", errors="strict") as fh:
            text = fh.read()
    except UnicodeDecodeError:
        raise FFTMatvecFileError(meta, f"meta file {meta!r} is not a text file") from None
    lines = [ln.strip() for ln in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if len(lines) < 8:
        raise FFTMatvecFileError(
            meta,
            f"meta file {meta!r} has {len(lines)} lines, expected 8 or 9 "
            f"({', '.join(_META_FIELDS)}; checksum optional)",
        )

    def number(k: int) -> int:
        # ASCII digits only: int() would also take "1_0", "+ 1" or full-width digits
        if not re.fullmatch(r"-?[0-9]+", lines[k]):
            raise FFTMatvecFileError(
                meta,
                f"meta file {meta!r}, line {k + 1} ({_META_FIELDS[k]}): expected an integer, "
                f"got {lines[k]!r} (ASCII digits only)",
            )
        return int(lines[k])

    nd, nm, nt = number(0), number(1), number(2)
    for k, v in enumerate((nd, nm, nt)):
        if v < 1:
            raise FFTMatvecFileError(
                meta, f"meta file {meta!r}, line {k + 1} ({_META_FIELDS[k]}): must be >= 1, got {v}"
            )
    prefix, ext = lines[3], lines[4]
    reindex, p2q, reverse = number(5), number(6), number(7)
    checksum = number(8) if len(lines) > 8 else 0
    if reindex != 1:
        raise FFTMatvecFileError(
            meta, f"meta file {meta!r}, line 6 (reindex): must be 1 (SOTI order), got {reindex}"
        )
    if p2q not in (0, 1):
        raise FFTMatvecFileError(meta, f"meta file {meta!r}, line 7 (p2q): must be 0 or 1, got {p2q}")
    if reverse != 1:
        raise FFTMatvecFileError(
            meta,
            f"meta file {meta!r}, line 8 (reverse_dof): must be 1 (the public FFTMatvec code "
            f"requires it too), got {reverse}",
        )
    return MatrixInfo(root, "fftmatvec", nd, nm, nt, p2q=bool(p2q), checksum=checksum,
                      prefix=prefix, extension=ext)


class _NativeReader:
    """The native single file: dataset ``kernel`` ``(Nd, Nm, Nt)``."""

    def __init__(self, path: str, f: h5py.File):
        what = "native matrix file"
        fmt = _str_attr(f.attrs, "format")
        if fmt is None and isinstance(f.get("kernel"), h5py.Dataset):
            fmt = _str_attr(f["kernel"].attrs, "format")
        if fmt is None:
            raise FFTMatvecFileError(
                path,
                f"{path!r} is an HDF5 file but not a native matrix file: no 'format' attribute "
                f"(expected {NATIVE_FORMAT!r}); an FFTMatvec matrix is a directory with binary/{_META}",
            )
        if fmt != NATIVE_FORMAT:
            raise FFTMatvecFileError(
                path, f"{what} {path!r}: format attribute is {fmt!r}, expected {NATIVE_FORMAT!r}"
            )
        vattrs = f.attrs
        if "version" not in vattrs and isinstance(f.get("kernel"), h5py.Dataset):
            vattrs = f["kernel"].attrs
        version = _int_attr(vattrs, "version", path)
        if not 1 <= version <= NATIVE_VERSION:
            raise FFTMatvecFileError(
                path,
                f"{what} {path!r}: version {version} is not supported (this fftmatvec reads "
                f"versions 1 to {NATIVE_VERSION}; a newer one wrote it?)",
            )
        ds = _dataset(f, "kernel", path, what)
        if ds.ndim != 3 or 0 in ds.shape:
            raise FFTMatvecFileError(
                path, f"{what} {path!r}: dataset 'kernel' has shape {ds.shape}, expected (Nd, Nm, Nt)"
            )
        p2q = _int_attr(f.attrs, "p2q", path) if "p2q" in f.attrs else None
        checksum = _int_attr(f.attrs, "checksum", path, required=False)
        nd, nm, nt = (int(s) for s in ds.shape)
        self.ds = ds
        self.info = MatrixInfo(path, "native", nd, nm, nt,
                               p2q=None if p2q is None else bool(p2q), checksum=checksum,
                               version=version)

    def read(self, ridx, cidx) -> np.ndarray:
        _require_read_memory(self.info, ridx, cidx)
        rows, rruns, rrestore = _plan(ridx)
        cols, cruns, crestore = _plan(cidx)
        out = np.empty((len(rows), len(cols), self.info.nt), dtype=np.float64)
        for r0, r1, rp in rruns:
            for c0, c1, cp in cruns:
                _read_into(self.ds, out, np.s_[r0:r1, c0:c1, :],
                           np.s_[rp : rp + r1 - r0, cp : cp + c1 - c0, :], self.info.path)
        if rrestore is not None:
            out = out[rrestore]
        if crestore is not None:
            out = out[:, crestore]
        return out


def _vector_info(f: h5py.File, path: str, space: str | None):
    what = "vector file"
    ds = _dataset(f, "vec", path, what)
    if ds.ndim != 1:
        raise FFTMatvecFileError(path, f"{what} {path!r}: dataset 'vec' must be 1-D, got shape {ds.shape}")
    attrs = ds.attrs
    present = [s for s in SPACES if any(a in attrs for a in _VEC_ATTRS[s])]
    if space is None:
        if not present:
            raise FFTMatvecFileError(
                path,
                f"{what} {path!r}: dataset 'vec' has neither n_param/param_steps (parameter space) "
                f"nor n_obs/obs_steps (observation space) attributes",
            )
        if len(present) > 1:
            raise FFTMatvecFileError(
                path,
                f"{what} {path!r}: dataset 'vec' has both parameter- and observation-space "
                f"attributes; pass space='param' or space='obs'",
            )
        space = present[0]
    elif space not in present:
        other = [s for s in present if s != space]
        got = f"{_space_name(other[0])} vector" if other else "no space attributes"
        n_name, steps_name = _VEC_ATTRS[space]
        raise FFTMatvecFileError(
            path,
            f"{what} {path!r}: expected {_space_name(space)} vector ({n_name}/{steps_name}), "
            f"got {got}",
        )
    n_name, steps_name = _VEC_ATTRS[space]
    n = _int_attr(attrs, n_name, path)
    nt = _int_attr(attrs, steps_name, path)
    reindex = _int_attr(attrs, "reindex", path)
    if reindex != 1:
        raise FFTMatvecFileError(path, f"{what} {path!r}: attribute reindex = {reindex}, must be 1 (SOTI order)")
    if n < 1 or nt < 1:
        raise FFTMatvecFileError(path, f"{what} {path!r}: {n_name} = {n}, {steps_name} = {nt}, both must be >= 1")
    if ds.shape[0] != n * nt:
        raise FFTMatvecFileError(
            path,
            f"{what} {path!r}: dataset 'vec' has length {ds.shape[0]}, but {n_name}*{steps_name} "
            f"= {n}*{nt} = {n * nt}",
        )
    checksum = _int_attr(attrs, "checksum", path, required=False) if space == "param" else 0
    qoi = bool(_int_attr(attrs, "qoi", path, required=False)) if space == "obs" else False
    return VectorInfo(path, space, n, nt, checksum, qoi), ds


def _space_name(space: str) -> str:
    """With its article: 'a parameter-space', 'an observation-space'."""
    return "a parameter-space" if space == "param" else "an observation-space"


