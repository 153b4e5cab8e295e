"""The two matrix formats and the vector format: their constants, the metadata records,
the checks of the writers' arguments and the HDF5 helpers that name the file in every error
(the notes on the formats are :mod:`fftmatvec.io`'s)."""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Iterator

import h5py
import numpy as np

from .. import backend
from .._errors import FFTMatvecFileError, FFTMatvecTypeError, FFTMatvecValueError

NATIVE_FORMAT = "fftmatvec-btt"
NATIVE_VERSION = 1
DEFAULT_PREFIX = "adj/vec_"
LAYOUTS = ("native", "fftmatvec")
SPACES = ("param", "obs")

_META = "meta_adj"
_META_FIELDS = ("Nd", "Nm", "Nt", "prefix", "extension", "reindex", "p2q", "reverse_dof", "checksum")
_ROW_DIGITS = 6
_INT32 = np.iinfo(np.int32)
_VEC_ATTRS = {"param": ("n_param", "param_steps"), "obs": ("n_obs", "obs_steps")}


# ------------------------------------------------------------------------------------------
# Metadata
# ------------------------------------------------------------------------------------------
class _InfoRecord:
    """Dictionary-style access to a metadata dataclass (``info["nd"]``, ``info.as_dict()``)."""

    def as_dict(self) -> dict:
        return asdict(self)

    def __getitem__(self, key: str):
        if key not in self.__dataclass_fields__:
            raise KeyError(key)
        return getattr(self, key)


@dataclass(frozen=True)
class MatrixInfo(_InfoRecord):
    """What a matrix file or directory holds, read without reading the kernel.

    Attributes
    ----------
    path : str
        As given.
    format : {"fftmatvec", "native"}
        FFTMatvec matrix directory or native single file.
    nd, nm, nt : int
        Block rows (sensors), block columns (parameters), time steps.
    p2q : bool or None
        FFTMatvec's parameter-to-QoI flag (``None``: a native file that does not record it).
    checksum : int
        FFTMatvec's checksum tag; 0 means none.
    prefix, extension : str or None
        Row-file naming of a directory (``None`` for a native file).
    version : int or None
        Native format version (``None`` for a directory).

    Items can also be read as ``info["nd"]``; :meth:`as_dict` gives a plain dictionary.
    """

    path: str
    format: str
    nd: int
    nm: int
    nt: int
    p2q: bool | None = None
    checksum: int = 0
    prefix: str | None = None
    extension: str | None = None
    version: int | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        """Kernel shape ``(Nd, Nm, Nt)``."""
        return (self.nd, self.nm, self.nt)


@dataclass(frozen=True)
class VectorInfo(_InfoRecord):
    """What a vector file holds.

    Attributes
    ----------
    path : str
    space : {"param", "obs"}
        Parameter space (``n_param``/``param_steps``) or observation space (``n_obs``/``obs_steps``).
    n, nt : int
        Blocks and time steps: the vector is ``(n, nt)``.
    checksum : int
        The ``checksum`` attribute (parameter space), 0 if absent.
    qoi : bool
        The ``qoi`` attribute (observation space).
    """

    path: str
    space: str
    n: int
    nt: int
    checksum: int = 0
    qoi: bool = False

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.nt)


# ------------------------------------------------------------------------------------------
# Argument checks
# ------------------------------------------------------------------------------------------
def _fspath(path: Any, name: str) -> str:
    try:
        p = os.fspath(path)
    except TypeError:
        raise FFTMatvecTypeError(f"{name} must be a str or os.PathLike, got {type(path).__name__}")
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    if not p:
        raise FFTMatvecValueError(f"{name} must not be empty")
    return p


def _host_array(a: Any, name: str) -> np.ndarray:
    if backend.is_cupy_array(a):
        return backend.cupy.asnumpy(a)
    if isinstance(a, np.ma.MaskedArray):
        raise FFTMatvecTypeError(
            f"{name} is a masked array: the files have no mask, so its masked values would be "
            f"written as they are; pass {name}.filled(value) or a plain numpy.ndarray"
        )
    if isinstance(a, np.ndarray):
        return a
    raise FFTMatvecTypeError(
        f"{name} must be a numpy.ndarray or cupy.ndarray, got {type(a).__module__}.{type(a).__name__}"
    )


def _check_kernel(kernel: Any) -> np.ndarray:
    k = _host_array(kernel, "kernel")
    if k.ndim != 3:
        raise FFTMatvecValueError(
            f"kernel must be a 3-D array (Nd, Nm, Nt), got {k.ndim}-D with shape {k.shape}"
        )
    if 0 in k.shape:
        raise FFTMatvecValueError(f"kernel must have no empty dimension, got shape {k.shape}")
    if k.dtype.kind not in "fiu":
        raise FFTMatvecTypeError(f"kernel must be real, got dtype {k.dtype}")
    if k.dtype.kind == "f" and not _finite_as_float64(k):
        raise FFTMatvecValueError("kernel contains NaN or Inf values, or values too large for float64")
    for name, value in zip(("Nd", "Nm", "Nt"), k.shape):
        if value > _INT32.max:
            raise FFTMatvecValueError(f"kernel: {name} = {value} does not fit FFTMatvec's int fields")
    return k


def _finite_as_float64(a: np.ndarray) -> bool:
    """Every entry finite, also once cast to float64 (a long double of 1e400 is not)."""
    if a.size == 0:
        return True
    if a.dtype.itemsize > 8:
        big = np.abs(a).max()
        with np.errstate(over="ignore"):
            return bool(np.isfinite(big)) and bool(np.isfinite(np.float64(big)))
    return math.isfinite(float(np.abs(a).max()))


def _check_shape2(shape: Any) -> tuple[int, int]:
    """``shape=`` of :func:`load_vector`: two ints ``(N, Nt)``."""
    try:
        items = tuple(shape)
    except TypeError:
        items = None
    if (items is None or len(items) != 2
            or not all(isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_))
                       for n in items)):
        raise FFTMatvecTypeError(f"shape must be a pair of ints (N, Nt), got {shape!r}")
    return (int(items[0]), int(items[1]))


def _check_layout(layout: Any) -> str:
    if layout not in LAYOUTS:
        raise FFTMatvecValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    return layout


def _check_overwrite(overwrite: Any) -> bool | None:
    if overwrite is None or isinstance(overwrite, (bool, np.bool_)):
        return None if overwrite is None else bool(overwrite)
    raise FFTMatvecTypeError(f"overwrite must be None, True or False, got {overwrite!r}")


def _check_checksum(checksum: Any) -> int:
    if isinstance(checksum, (bool, np.bool_)) or not isinstance(checksum, (int, np.integer)):
        raise FFTMatvecTypeError(f"checksum must be an int, got {type(checksum).__name__}")
    if not _INT32.min <= int(checksum) <= _INT32.max:
        raise FFTMatvecValueError(f"checksum must fit a 32-bit int (FFTMatvec's), got {checksum}")
    return int(checksum)


def _check_prefix(prefix: Any) -> str:
    if not isinstance(prefix, str):
        raise FFTMatvecTypeError(f"prefix must be a str, got {type(prefix).__name__}")
    parts = prefix.replace("\\", "/").split("/")
    if (
        prefix != prefix.strip()
        or any(c in prefix for c in "\n\r\0")
        or prefix.startswith(("/", "\\"))
        or ".." in parts
        or prefix.endswith("/")
    ):
        raise FFTMatvecValueError(
            f"prefix must be a relative file-name prefix inside binary/ such as {DEFAULT_PREFIX!r} "
            f"(no surrounding spaces, no '..', not ending in '/'), got {prefix!r}"
        )
    return prefix


# ------------------------------------------------------------------------------------------
# HDF5 helpers: every error names the file
# ------------------------------------------------------------------------------------------
@contextmanager
def _h5_open(path: str, what: str) -> Iterator[h5py.File]:
    if not os.path.exists(path):
        raise FFTMatvecFileError(path, f"{what} {path!r} does not exist")
    if os.path.isdir(path):
        raise FFTMatvecFileError(path, f"{what} {path!r} is a directory, expected an HDF5 file")
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        if not h5py.is_hdf5(path):
            raise FFTMatvecFileError(path, f"{what} {path!r} is not an HDF5 file") from None
        raise FFTMatvecFileError(
            path, f"{what} {path!r} cannot be opened: truncated or corrupt HDF5 file ({exc})"
        ) from None
    try:
        yield f
    finally:
        f.close()


def _read_into(ds, out: np.ndarray, source_sel, dest_sel, path: str) -> None:
    try:
        ds.read_direct(out, source_sel=source_sel, dest_sel=dest_sel)
    except OSError as exc:
        raise FFTMatvecFileError(
            path, f"{path!r}: reading dataset {ds.name!r} failed, truncated or corrupt file ({exc})"
        ) from None


def _dataset(f: h5py.File, name: str, path: str, what: str):
    obj = f.get(name)
    if obj is None or not isinstance(obj, h5py.Dataset):
        found = ", ".join(sorted(f.keys())) or "nothing"
        raise FFTMatvecFileError(
            path, f"{what} {path!r} has no dataset {name!r} (found: {found})"
        )
    if obj.dtype.kind not in "fiu":
        raise FFTMatvecFileError(
            path, f"{what} {path!r}: dataset {name!r} must be real numbers, got dtype {obj.dtype}"
        )
    return obj


def _int_attr(attrs, name: str, path: str, required: bool = True, default: int = 0) -> int:
    if name not in attrs:
        if required:
            raise FFTMatvecFileError(path, f"{path!r}: missing attribute {name!r}")
        return default
    raw = attrs[name]
    a = np.asarray(raw)
    ok = a.size == 1 and a.dtype.kind in "iub"
    if a.size == 1 and a.dtype.kind == "f":
        x = float(a.reshape(()))
        ok = bool(np.isfinite(x)) and x == int(x)
    if not ok:
        raise FFTMatvecFileError(path, f"{path!r}: attribute {name!r} must be an integer, got {raw!r}")
    return int(a.reshape(()))


def _str_attr(attrs, name: str) -> str | None:
    if name not in attrs:
        return None
    v = attrs[name]
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, np.ndarray) and v.size == 1:
        v = v.reshape(()).item()
        return v.decode(errors="replace") if isinstance(v, bytes) else str(v)
    return str(v)


