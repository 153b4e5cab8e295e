"""The writers: :func:`save_matrix`, :func:`convert_matrix` and :func:`save_vector`, each
atomic (the generic part in :mod:`fftmatvec._writes`)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator, Literal

import h5py
import numpy as np

from .. import _writes
from .._typing import Array, PathLike
from .._errors import FFTMatvecFileError, FFTMatvecTypeError, FFTMatvecValueError
from ._formats import (_INT32, _META, _ROW_DIGITS, _VEC_ATTRS,
                       DEFAULT_PREFIX, NATIVE_FORMAT, NATIVE_VERSION, SPACES, MatrixInfo,
                       VectorInfo, _check_checksum, _check_kernel, _check_layout,
                       _check_overwrite, _check_prefix, _finite_as_float64, _fspath, _host_array,
                       _str_attr)
from ._read import _DirReader, _open_matrix, _parse_meta, matrix_info

_CHUNK_BYTES = 1 << 20  # target size of a native chunk
_COPY_BYTES = 256 << 20  # rows converted per step: bounded memory for any matrix size


# ------------------------------------------------------------------------------------------
# Public functions: check, then call the private writers
# ------------------------------------------------------------------------------------------
def save_matrix(
    path: PathLike,
    kernel: Array,
    *,
    layout: Literal["native", "fftmatvec"] = "native",
    prefix: str = DEFAULT_PREFIX,
    p2q: bool = False,
    checksum: int = 0,
    overwrite: bool | None = None,
) -> MatrixInfo:
    """Write a kernel atomically, as a native file or an FFTMatvec matrix directory.

    Parameters
    ----------
    path : str or os.PathLike
        Destination file (``native``) or matrix directory (``fftmatvec``).
    kernel : (Nd, Nm, Nt) real array
        NumPy or CuPy; written as float64.
    layout : {"native", "fftmatvec"}
    prefix : str, default ``"adj/vec_"``
        Row-file prefix relative to ``binary/`` (``fftmatvec`` layout only).
    p2q : bool
        FFTMatvec's parameter-to-QoI flag, written to ``meta_adj`` (a native file records it
        as the ``p2q`` attribute).
    checksum : int
        FFTMatvec's checksum tag (see the module notes); 0 writes none to the row files.
    overwrite : bool, optional
        None (default): replace an existing destination of the same kind (a native matrix
        file for ``native``, an FFTMatvec matrix directory for ``fftmatvec``) and refuse any
        other. True: a ``native`` file also replaces an HDF5 file of another kind (a vector
        file). False: replace nothing. A directory, a non-HDF5 file or one of a matrix
        directory's own files is never replaced.

    Returns
    -------
    MatrixInfo
        Of the written matrix.

    Raises
    ------
    FFTMatvecTypeError
        ``kernel`` is not a real NumPy/CuPy array.
    FFTMatvecValueError
        Bad shape, NaN/Inf, bad ``layout``/``prefix``/``checksum``.
    FFTMatvecFileError
        The destination exists and may not be replaced (see ``overwrite``), or it cannot be
        written.

    Notes
    -----
    The native file is written under a temporary name in the same directory and renamed with
    ``os.replace``. A new directory is built in a temporary sibling directory and renamed into
    place. In an existing matrix directory only the matrix's own files are replaced
    (``binary/meta_adj`` and the row files it names): the new ones are written under
    temporary names beside them, then swapped in by renames, the meta file last; a failure
    before that puts the old ones back. The user's other files in the directory stay.

    A native file may not be one of an existing matrix directory's own files (a row file or
    its ``meta_adj``); the free space is checked before writing, and a failure to write raises
    :class:`FFTMatvecFileError` naming the path, the old file intact.
    """
    path = _fspath(path, "path")
    k = _check_kernel(kernel)
    layout = _check_layout(layout)
    checksum = _check_checksum(checksum)
    overwrite = _check_overwrite(overwrite)
    if layout == "fftmatvec":
        prefix = _check_prefix(prefix)
    blocks = [(0, k)]
    if layout == "native":
        _write_native(path, k.shape, blocks, p2q=bool(p2q), checksum=checksum, overwrite=overwrite)
    else:
        _write_dir(path, k.shape, blocks, prefix=prefix, p2q=bool(p2q), checksum=checksum,
                   overwrite=overwrite)
    return matrix_info(path)


def convert_matrix(src: PathLike, dst: PathLike, *,
                   layout: Literal["native", "fftmatvec"] | None = None,
                   prefix: str | None = None, overwrite: bool | None = False,
                   progress: Callable[[int], object] | None = None) -> MatrixInfo:
    """Convert a matrix between the two layouts, a block of rows at a time.

    Parameters
    ----------
    src, dst : str or os.PathLike
    layout : {"native", "fftmatvec"}, optional
        Layout of ``dst``; default: the other one than ``src``'s.
    prefix : str, optional
        Row-file prefix of an FFTMatvec ``dst``: default ``src``'s, else ``"adj/vec_"``.
    overwrite : bool or None, default False
        False: replace nothing. None: replace an existing ``dst`` of the same kind. True: as
        None, and a native ``dst`` also replaces an HDF5 file of another kind (a vector file).
    progress : callable, optional
        Called with the number of block rows (sensors) of each block once it is read, e.g. a
        ``tqdm`` bar's ``update``.

    Returns
    -------
    MatrixInfo
        Of ``dst``. The p2q flag and checksum tag are carried over.

    Raises
    ------
    FFTMatvecFileError
        As :func:`load_matrix` for ``src`` and :func:`save_matrix` for ``dst``; ``dst`` is,
        or lies inside, ``src`` (or the other way round), resolved paths.

    Notes
    -----
    Memory stays bounded (about 256 MiB of rows at a time) whatever the matrix size; every
    row of ``src`` is validated as it is read.
    """
    src = _fspath(src, "src")
    dst = _fspath(dst, "dst")
    overwrite = _check_overwrite(overwrite)
    _writes.check_not_inside(dst, {"source": src}, "destination")
    _writes.check_not_inside(src, {"destination": dst}, "source")
    with _open_matrix(src) as reader:
        info = reader.info
        layout = _check_layout(layout or ("native" if info.format == "fftmatvec" else "fftmatvec"))
        if prefix is None:
            prefix = info.prefix if info.prefix is not None else DEFAULT_PREFIX
        if isinstance(reader, _DirReader):
            reader.check_rows(range(info.nd))
        all_cols = range(info.nm)
        step = max(1, _COPY_BYTES // (info.nm * info.nt * 8))

        def blocks():
            for i0 in range(0, info.nd, step):
                i1 = min(info.nd, i0 + step)
                block = reader.read(range(i0, i1), all_cols)
                if progress is not None:
                    progress(i1 - i0)
                yield i0, block

        p2q = bool(info.p2q)
        if layout == "native":
            _write_native(dst, info.shape, blocks(), p2q=info.p2q, checksum=info.checksum,
                          overwrite=overwrite)
        else:
            _write_dir(dst, info.shape, blocks(), prefix=_check_prefix(prefix), p2q=p2q,
                       checksum=info.checksum, overwrite=overwrite)
    return matrix_info(dst)


def save_vector(path: PathLike, v: Array, space: Literal["param", "obs"] = "param", *,
                checksum: int = 0, qoi: bool = False, overwrite: bool | None = None) -> VectorInfo:
    """Write a vector file atomically, with FFTMatvec's attributes.

    Parameters
    ----------
    path : str or os.PathLike
    v : (N, Nt) real array
        NumPy or CuPy; written as float64, flattened SOTI.
    space : {"param", "obs"}
        ``n_param``/``param_steps`` (parameter space) or ``n_obs``/``obs_steps``.
    checksum : int
        Written as the ``checksum`` attribute when nonzero (parameter space only).
    qoi : bool
        Write ``qoi = 1`` (observation space only).
    overwrite : bool, optional
        None (default): replace an existing vector file and refuse any other file. True: also
        replace an HDF5 file of another kind (a native matrix file). False: replace nothing.
        A directory, a non-HDF5 file or one of a matrix directory's own files is never
        replaced.

    Returns
    -------
    VectorInfo

    Raises
    ------
    FFTMatvecTypeError
        ``v`` is not a real NumPy/CuPy array (a masked array is refused: files have no mask).
    FFTMatvecValueError
        Bad shape, NaN/Inf (or a long double too large for float64), bad ``space``/``checksum``.
    FFTMatvecFileError
        ``path`` exists and may not be replaced (see ``overwrite``), is one of an existing
        matrix directory's own files (its ``binary/meta_adj`` or a row file), or cannot be
        written (not enough free space, read-only, no permission): the old file intact, no
        temporary left.
    """
    path = _fspath(path, "path")
    if space not in SPACES:
        raise FFTMatvecValueError(f"space must be one of {SPACES}, got {space!r}")
    a = _host_array(v, "v")
    if a.ndim != 2 or 0 in a.shape:
        raise FFTMatvecValueError(
            f"v must be a 2-D array (N, Nt) with no empty dimension, got shape {a.shape}"
            + (" (reshape a flat vector to (N, Nt) first)" if a.ndim == 1 else "")
        )
    if a.dtype.kind not in "fiu":
        raise FFTMatvecTypeError(f"v must be real, got dtype {a.dtype}")
    checksum = _check_checksum(checksum)
    overwrite = _check_overwrite(overwrite)
    if checksum and space != "param":
        raise FFTMatvecValueError("checksum is an attribute of parameter-space vectors only")
    if qoi and space != "obs":
        raise FFTMatvecValueError("qoi is an attribute of observation-space vectors only")
    n, nt = (int(s) for s in a.shape)
    for name, value in (("N", n), ("Nt", nt)):
        if value > _INT32.max:
            raise FFTMatvecValueError(f"v: {name} = {value} does not fit FFTMatvec's int attributes")
    if a.dtype.kind == "f" and not _finite_as_float64(a):
        raise FFTMatvecValueError("v contains NaN or Inf values, or values too large for float64")
    data = np.ascontiguousarray(a, dtype=np.float64).reshape(-1)
    with _atomic_file(path, _VECTOR_KIND, overwrite, data.nbytes) as tmp:
        with _writes.h5_create(tmp, data.nbytes) as f:
            ds = f.create_dataset("vec", data=data)
            n_name, steps_name = _VEC_ATTRS[space]
            ds.attrs[n_name] = np.int32(n)
            ds.attrs[steps_name] = np.int32(nt)
            ds.attrs["reindex"] = np.int32(1)
            if checksum:
                ds.attrs["checksum"] = np.int32(checksum)
            if qoi:
                ds.attrs["qoi"] = np.int32(1)
    return VectorInfo(path, space, n, nt, checksum, bool(qoi))


# ------------------------------------------------------------------------------------------
# Writers (atomic; the generic part in _writes)
# ------------------------------------------------------------------------------------------
def _check_parent(path: str) -> None:
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise FFTMatvecFileError(path, f"cannot write {path!r}: directory {parent!r} does not exist")


def _matrix_owning(path: str) -> tuple[str, str] | None:
    """``(matrix directory, role)`` if ``path`` is one of an existing FFTMatvec matrix
    directory's own files (its ``binary/meta_adj`` or one of its row files), else ``None``.

    Every ancestor of ``path`` (resolved) holding ``binary/meta_adj`` is looked at; a row file
    is ``binary/<prefix><6 digits><extension>`` with the row below ``Nd``, as its meta file
    says. Other files in a matrix directory (notes, results) are not the matrix's."""
    p = Path(path).resolve()
    for root in p.parents:
        binary = root / "binary"
        meta = binary / _META
        if not meta.is_file():
            continue
        if p == meta:
            return str(root), f"its binary/{_META}"
        try:
            info = _parse_meta(str(root), str(meta))
        except FFTMatvecFileError:
            continue
        try:
            rel = p.relative_to(binary).as_posix()
        except ValueError:
            continue
        m = re.fullmatch(re.escape(info.prefix) + r"(\d{6})" + re.escape(info.extension), rel)
        if m is not None and int(m.group(1)) < info.nd:
            return str(root), f"row file {int(m.group(1))}"
    return None


def _refuse_matrix_file(path: str) -> None:
    owner = _matrix_owning(path)
    if owner is not None:
        raise FFTMatvecFileError(
            path,
            f"refusing to write {path!r}: it is {owner[1]} of the FFTMatvec matrix directory "
            f"{owner[0]!r} (write the matrix with save_matrix, or choose another path)",
        )


# What a writer writes, as :func:`_file_kind` names it.
_NATIVE_KIND = "native matrix file"
_VECTOR_KIND = "vector file"


def _file_kind(path: str) -> str:
    """What the existing HDF5 file ``path`` holds: a native matrix file (its ``format``
    attribute), a vector file (a ``vec`` dataset), else (unreadable included) an HDF5 file."""
    try:
        with h5py.File(path, "r") as f:
            if _str_attr(f.attrs, "format") == NATIVE_FORMAT:
                return _NATIVE_KIND
            if isinstance(f.get("vec"), h5py.Dataset):
                return _VECTOR_KIND
    except (OSError, RuntimeError, KeyError, ValueError):
        pass
    return "HDF5 file"


def _check_destination(path: str, kind: str, overwrite: bool | None) -> None:
    """Refuse to write a file of ``kind`` at ``path`` where it would replace what it must not.

    Refused: a missing folder, a file of a matrix directory (:func:`_matrix_owning`), a
    directory, an existing file when ``overwrite`` is False, an existing file that is not
    HDF5, an existing file of another kind than ``kind`` unless ``overwrite`` is True.

    Parameters
    ----------
    path : str
    kind : {"native matrix file", "vector file"}
    overwrite : bool or None
        None: replace a file of the same kind only; True: any HDF5 file; False: nothing.
    """
    _check_parent(path)
    _refuse_matrix_file(path)
    if os.path.lexists(path):
        if os.path.isdir(path):
            raise FFTMatvecFileError(path, f"cannot write {path!r}: it is a directory")
        if overwrite is False:
            raise FFTMatvecFileError(path, f"{path!r} exists (pass overwrite=True to replace it)")
        if not h5py.is_hdf5(path):
            raise FFTMatvecFileError(
                path, f"refusing to replace {path!r}: it exists and is not an HDF5 file"
            )
        found = _file_kind(path)
        if found != kind and overwrite is not True:
            raise FFTMatvecFileError(
                path, f"refusing to replace {path!r} with a {kind}: it is a {found} (pass "
                      f"overwrite=True to replace it, or choose another path)"
            )


@contextmanager
def _atomic_file(path: str, kind: str, overwrite: bool | None, nbytes: int) -> Iterator[str]:
    """Yield a temporary file name next to ``path``; on success rename it onto ``path``.

    Refused first as :func:`_check_destination` says. ``nbytes``: what the file will take,
    for the free-space check."""
    _check_destination(path, kind, overwrite)
    with _writes.atomic_file(path, nbytes) as tmp:
        yield tmp


def _native_chunks(nd: int, nm: int, nt: int) -> tuple[int, int, int]:
    """Tiles of whole time series, about ``_CHUNK_BYTES`` each, square-ish in (rows, cols)."""
    per_series = nt * 8
    tiles = max(1, _CHUNK_BYTES // per_series)
    cc = min(nm, max(1, int(np.sqrt(tiles))))
    cr = min(nd, max(1, tiles // cc))
    return (cr, cc, nt)


def _write_native(path: str, shape, blocks: Iterable, *, p2q, checksum: int,
                  overwrite: bool | None) -> None:
    nd, nm, nt = shape
    nbytes = nd * nm * nt * 8
    with _atomic_file(path, _NATIVE_KIND, overwrite, nbytes) as tmp:
        with _writes.h5_create(tmp, nbytes) as f:
            f.attrs["format"] = NATIVE_FORMAT
            f.attrs["version"] = np.int32(NATIVE_VERSION)
            if p2q is not None:
                f.attrs["p2q"] = np.int32(bool(p2q))
            if checksum:
                f.attrs["checksum"] = np.int32(checksum)
            ds = f.create_dataset("kernel", shape=(nd, nm, nt), dtype="<f8",
                                  chunks=_native_chunks(nd, nm, nt))
            for i0, blk in blocks:
                ds[i0 : i0 + blk.shape[0]] = np.asarray(blk, dtype=np.float64)


_ROW_OVERHEAD = 4096  # bytes of an HDF5 row file besides its data (superblock, attributes)


def _write_row(fname: str, row: np.ndarray, nm: int, nt: int, checksum: int) -> None:
    data = np.ascontiguousarray(row, dtype=np.float64).reshape(-1)
    with _writes.h5_create(fname, data.nbytes + _ROW_OVERHEAD) as f:
        ds = f.create_dataset("vec", data=data)
        ds.attrs["reindex"] = np.int32(1)
        ds.attrs["n_param"] = np.int32(nm)
        ds.attrs["param_steps"] = np.int32(nt)
        if checksum:
            ds.attrs["checksum"] = np.int32(checksum)


def _meta_text(shape, prefix: str, p2q: bool, checksum: int) -> str:
    nd, nm, nt = shape
    return "".join(f"{v}\n" for v in (nd, nm, nt, prefix, ".h5", 1, int(p2q), 1, checksum))


def _write_dir(path: str, shape, blocks: Iterable, *, prefix: str, p2q: bool, checksum: int,
               overwrite: bool | None) -> None:
    """A new matrix directory: built in a temporary sibling, renamed into place. An existing
    one: only its own files replaced (:func:`_replace_dir_files`), the user's others kept."""
    nd, nm, nt = shape
    _check_parent(path)
    nbytes = nd * (nm * nt * 8 + _ROW_OVERHEAD)
    if os.path.lexists(path):
        if not os.path.isdir(path):
            raise FFTMatvecFileError(path, f"cannot write matrix directory {path!r}: a file is in the way")
        if overwrite is False:
            raise FFTMatvecFileError(path, f"{path!r} exists (pass overwrite=True to replace it)")
        if not os.path.isfile(os.path.join(path, "binary", _META)):
            raise FFTMatvecFileError(
                path,
                f"refusing to replace {path!r}: it exists and is not an FFTMatvec matrix "
                f"directory (no binary/{_META})",
            )
        _replace_dir_files(path, shape, blocks, prefix=prefix, p2q=p2q, checksum=checksum,
                           nbytes=nbytes)
        return
    parent = os.path.dirname(os.path.abspath(path))
    _writes.remove_stale(parent, [os.path.basename(os.path.abspath(path))])
    _writes.check_space(path, nbytes)
    tmp = _writes.tmp_name(path)
    try:
        os.mkdir(tmp)
        _writes.register(tmp, is_dir=True)
        binary = os.path.join(tmp, "binary")
        os.makedirs(os.path.dirname(os.path.join(binary, prefix + "x")), exist_ok=True)
        for i0, blk in blocks:
            for k in range(blk.shape[0]):
                fname = os.path.join(binary, f"{prefix}{i0 + k:0{_ROW_DIGITS}d}.h5")
                _write_row(fname, blk[k], nm, nt, checksum)
        # The meta file last: a directory is complete once it has one.
        with open(os.path.join(binary, _META), "w", encoding="utf-8") as fh:
            fh.write(_meta_text(shape, prefix, p2q, checksum))
        os.rename(tmp, path)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, (OSError, RuntimeError)) and not isinstance(exc, FFTMatvecFileError):
            raise _writes.write_error(path, exc) from None
        raise
    finally:
        _writes.unregister(tmp)


def _replace_dir_files(path: str, shape, blocks: Iterable, *, prefix: str, p2q: bool,
                       checksum: int, nbytes: int) -> None:
    """Replace the matrix in the existing directory ``path``, touching only its own files.

    The matrix's files are ``binary/meta_adj`` and the row files its meta file names; anything
    else in the directory (the user's notes, results, other meta files) stays. The new row
    files and meta file are written under temporary names beside their final ones; then, in
    one uninterruptible step of renames, the old files are set aside, the new ones put in
    place (the meta file last: the commit) and the old ones deleted. A failure before the
    commit puts the old files back: the old matrix is intact.
    """
    nd, nm, nt = shape
    binary = os.path.join(path, "binary")
    meta = os.path.join(binary, _META)
    try:
        old = _parse_meta(path, meta)
    except FFTMatvecFileError as exc:
        raise FFTMatvecFileError(
            path,
            f"refusing to replace {path!r}: its meta file cannot be read, so which files are "
            f"the matrix's is unknown ({exc}); remove the directory first",
        ) from None
    old_files = [meta] + [
        f for f in (os.path.join(binary, f"{old.prefix}{i:0{_ROW_DIGITS}d}{old.extension}")
                    for i in range(old.nd)) if os.path.lexists(f)]
    old_set = set(old_files)
    finals = [os.path.join(binary, f"{prefix}{i:0{_ROW_DIGITS}d}.h5") for i in range(nd)]
    for f in finals:
        if f not in old_set and os.path.lexists(f):
            raise FFTMatvecFileError(
                path,
                f"refusing to replace the matrix in {path!r}: the new row file {f!r} would "
                f"replace a file that is not part of the old matrix",
            )
    folders = sorted({os.path.dirname(f) for f in finals + old_files})
    for folder in folders:
        _writes.remove_stale(folder)
    _writes.check_space(meta, nbytes)
    row_dir = os.path.dirname(finals[0])
    made_dir = not os.path.isdir(row_dir)
    pairs: list[tuple[str, str]] = []  # (temporary, final), written
    try:
        os.makedirs(row_dir, exist_ok=True)
        it = iter(finals)
        for i0, blk in blocks:
            for k in range(blk.shape[0]):
                final = next(it)
                tmp = _writes.tmp_name(final)
                _writes.register(tmp)
                pairs.append((tmp, final))
                _write_row(tmp, blk[k], nm, nt, checksum)
        meta_tmp = _writes.tmp_name(meta)
        _writes.register(meta_tmp)
        pairs.append((meta_tmp, meta))
        with open(meta_tmp, "w", encoding="utf-8") as fh:
            fh.write(_meta_text(shape, prefix, p2q, checksum))
            fh.flush()
            os.fsync(fh.fileno())
        aside: list[tuple[str, str]] = []  # (original, set aside)
        placed: list[str] = []
        with _writes.critical():
            try:
                for f in old_files:  # the meta file first: the old matrix is gone as a whole
                    a = _writes.tmp_name(f, "old")
                    os.rename(f, a)
                    aside.append((f, a))
                for tmp, final in pairs:  # the new meta file last: the commit
                    os.rename(tmp, final)
                    placed.append(final)
            except BaseException:
                for final in placed:
                    with contextlib.suppress(OSError):
                        os.remove(final)
                for f, a in reversed(aside):
                    with contextlib.suppress(OSError):
                        os.rename(a, f)
                raise
            for _, a in aside:
                _writes.register(a)
        for _, a in aside:
            with contextlib.suppress(OSError):
                os.remove(a)
            _writes.unregister(a)
        old_dir = os.path.dirname(os.path.join(binary, old.prefix + "x"))
        if old_dir != row_dir and os.path.abspath(old_dir) != os.path.abspath(binary):
            with contextlib.suppress(OSError):
                os.rmdir(old_dir)  # only if empty
    except BaseException as exc:
        for tmp, _ in pairs:
            with contextlib.suppress(OSError):
                if os.path.lexists(tmp):
                    os.remove(tmp)
        if made_dir:
            with contextlib.suppress(OSError):
                os.rmdir(row_dir)
        if isinstance(exc, (OSError, RuntimeError)) and not isinstance(exc, FFTMatvecFileError):
            raise _writes.write_error(path, exc) from None
        raise
    finally:
        for tmp, _ in pairs:
            _writes.unregister(tmp)
