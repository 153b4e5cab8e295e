"""The last axis of the FNO layer's transforms as row FFT kernels (``hip_kernels/fno.cuh``).

The DFT-product chain (:mod:`._dft`) applies the truncated transform of the last axis as a GEMM
with a ``(N, 2m)`` matrix: ``4 N m`` flops per row, which on large grids and many modes is most
of the layer's time (an H200 ran those GEMMs at about a third of its float32 peak). The row FFT
kernels of the operator (:mod:`fftmatvec.gpu.rowfft`) transform a row in shared memory for the
bytes it moves; here they keep only the ``m`` bins the layer needs, in the chain's layout (the
``m`` real parts, then the ``m`` imaginary parts), with a real scale per bin. A
:class:`LastAxis` takes the place of one of the four matrices of the last axis (forward
analysis, forward synthesis and their adjoints in the backward) and has its ``shape``.

They run in float32 on CuPy arrays and on CUDA/ROCm tensors of PyTorch (zero-copy, on the
current stream), for lengths whose complex FFT is 5-smooth and fits a block's shared memory;
:func:`fftmatvec.gpu.planner.fno_rows` says where they are taken (by default the forward
transforms where the GEMM is compute-bound; the inverse ones lost to the GEMMs everywhere on an
H200).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from .. import backend, kernels
from ..gpu import rowfft as _rowfft

#: Launches kept per transform, one per number of rows (a layer sees a few batch sizes).
MAX_LAUNCHES = 16
#: Bytes of rows a block's buffer holds by default (at least one row): on an H200 8 KB blocks
#: were the fastest or within 10 % of them for rows of 64-256 points in both directions, and
#: one row of 4096 points the fastest (docs/benchmarks.md, thirty-sixth run).
ROWS_BYTES = 8192

_F32 = np.dtype(np.float32)


def supported(n_last: int, m_last: int, smem_per_block: int) -> bool:
    """Whether the kernels take a last axis of ``n_last`` points keeping ``m_last`` bins."""
    return (1 <= m_last <= n_last // 2 + 1
            and _rowfft.supported(n_last, _F32, smem_per_block))


def _is_torch(a) -> bool:
    return type(a).__module__.split(".", 1)[0] == "torch"


class LastAxis:
    """One truncated transform of rows of length ``L`` keeping ``m`` bins, on device
    ``device_id``.

    ``kind="r2c"``: ``(rows, L)`` -> ``(rows, 2m)``, ``s_k`` times bin ``k`` of the
    unnormalised real FFT. ``kind="c2r"``: ``(rows, 2m)`` -> ``(rows, L)``, the unnormalised
    inverse real FFT of ``s_k`` times the bins (zero above ``m``; the imaginary parts of the DC
    and Nyquist bins dropped). ``scale``: the ``m`` values ``s_k``. ``shape``: that of the
    matrix it replaces, ``(L, 2m)`` or ``(2m, L)``. Called on a 2-D float32 array (CuPy) or
    tensor (PyTorch) on that device, it returns a new one of the same kind.
    """

    def __init__(self, kind: str, L: int, m: int, scale, device_id: int,
                 rows_per_block: int | None = None):
        if kind not in ("r2c", "c2r"):
            raise ValueError(f"kind must be 'r2c' or 'c2r', got {kind!r}")
        cp = backend.cupy
        with cp.cuda.Device(device_id):
            smem_limit = backend.shared_memory_limits()[1]
            if not supported(L, m, smem_limit):
                raise ValueError(f"no FNO row kernel for L = {L} keeping m = {m} bins")
            n = _rowfft.complex_length(L)
            rads = _rowfft.radices(n, _rowfft.MAX_RADIX[_F32, kind])
            family = min(f for f in _rowfft.FAMILIES if f >= max(rads, default=2))
            n_bytes = _rowfft.complex_length(L) * 8
            rpb = int(rows_per_block or max(1, ROWS_BYTES // n_bytes))
            rpb = max(1, min(rpb, smem_limit // _rowfft.block_bytes(L, _F32)))
            self.smem = _rowfft.block_bytes(L, _F32, rpb)
            self.twiddles = _rowfft.twiddles(n, np.complex64, rads)
            self.scale = cp.asarray(np.asarray(scale, dtype=np.float64).astype(np.float32))
            if self.scale.shape != (m,):
                raise ValueError(f"scale must hold {m} values, got shape {self.scale.shape}")
            name = f"fno_{'rfft' if kind == 'r2c' else 'irfft'}_f32_r{family}"
            self._fn = kernels.get_function(name, self.smem)
        self.kind, self.L, self.m, self.device_id = kind, int(L), int(m), int(device_id)
        self.rows_per_block, self.radices, self.name = rpb, rads, name
        self.shape = (self.L, 2 * self.m) if kind == "r2c" else (2 * self.m, self.L)
        self._geometry = (np.int32(L), np.int32(m), np.int32(rpb),
                          np.uint64(_rowfft.packed_radices(rads)), np.int32(len(rads)))
        self._launches: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def _launch(self, rows: int):
        with self._lock:
            hit = self._launches.get(rows)
            if hit is not None:
                self._launches.move_to_end(rows)
                return hit
        grid = (-(-rows // self.rows_per_block),)
        args = (None, None, self.twiddles, self.scale, np.int64(rows)) + self._geometry
        launch = kernels.PackedLaunch(self._fn, grid, (_rowfft.THREADS,), self.smem, args)
        with self._lock:
            self._launches[rows] = launch
            while len(self._launches) > MAX_LAUNCHES:
                self._launches.popitem(last=False)
        return launch

    def __call__(self, a, out=None):
        """The transform of the rows of ``a``, into ``out`` where given (else a new array)."""
        width_in, width_out = self.shape
        if a.ndim != 2 or a.shape[1] != width_in:
            raise ValueError(f"{self.name}: expected rows of {width_in} values, got shape "
                             f"{tuple(a.shape)}")
        rows = int(a.shape[0])
        if _is_torch(a):
            return _outside_compile()(self._torch_call, a, out, rows, width_out)
        cp = backend.cupy
        if a.dtype != _F32 or a.device.id != self.device_id:
            raise ValueError(f"{self.name}: expected a float32 array on device "
                             f"{self.device_id}, got {a.dtype} on {a.device.id}")
        a = cp.ascontiguousarray(a)
        with cp.cuda.Device(self.device_id):
            if out is None:
                out = cp.empty((rows, width_out), dtype=_F32)
            self._check_out(out, rows, _F32)
            if rows:
                self._launch(rows)(cp.cuda.get_current_stream().ptr, a.data.ptr, out.data.ptr)
        return out

    def _torch_call(self, a, out, rows, width_out):
        """The PyTorch side of :meth:`__call__`: on the tensor's current stream, with the
        device's context current (the backward runs on autograd's own threads)."""
        import torch

        if a.dtype != torch.float32 or a.device.type != "cuda" \
                or a.device.index != self.device_id:
            raise ValueError(f"{self.name}: expected a float32 tensor on cuda:"
                             f"{self.device_id}, got {a.dtype} on {a.device}")
        a = a.contiguous()
        if out is None:
            out = torch.empty((rows, width_out), dtype=torch.float32, device=a.device)
        self._check_out(out, rows, torch.float32)
        if rows:
            stream = torch.cuda.current_stream(a.device).cuda_stream
            # the device's primary context current on this thread: PyTorch's autograd threads
            # select the device without making a context current, which a driver launch needs
            backend.cupy.cuda.runtime.setDevice(self.device_id)
            self._launch(rows)(stream, a.data_ptr(), out.data_ptr())
        return out

    def _check_out(self, out, rows, dtype):
        strides_ok = (out.is_contiguous() if _is_torch(out) else out.flags.c_contiguous)
        if tuple(out.shape) != (rows, self.shape[1]) or out.dtype != dtype or not strides_ok:
            raise ValueError(f"{self.name}: out must be contiguous float32 of shape "
                             f"{(rows, self.shape[1])}, got {out.dtype} {tuple(out.shape)}")


_OUTSIDE = None


def _outside_compile():
    """A caller of ``fn(*args)`` that ``torch.compile`` does not trace into (a launch through
    the driver is not something it can put in its graph; it breaks the graph there)."""
    global _OUTSIDE
    if _OUTSIDE is None:
        import torch

        _OUTSIDE = torch.compiler.disable(lambda fn, *args: fn(*args))
    return _OUTSIDE


def last_axis_set(n_last: int, m_last: int, device_id: int, kinds=("r2c", "c2r")) -> dict:
    """The transforms of ``kinds`` of a last axis of ``n_last`` points keeping ``m_last`` bins,
    by the name of the matrix each replaces in :class:`._dft.Chain`: ``r2c`` gives ``F``
    (analysis, ``1 / N``) and ``AT`` (adjoint of the synthesis, ``c_k``), ``c2r`` gives ``A``
    (synthesis) and ``FT`` (adjoint of the analysis, ``1 / (N c_k)``)."""
    from ._modes import hermitian_weights

    c = hermitian_weights(n_last, m_last)
    n, m = n_last, m_last
    out = {}
    if "r2c" in kinds:
        out["F"] = LastAxis("r2c", n, m, np.full(m, 1.0 / n), device_id)
        out["AT"] = LastAxis("r2c", n, m, c, device_id)
    if "c2r" in kinds:
        out["A"] = LastAxis("c2r", n, m, np.ones(m), device_id)
        out["FT"] = LastAxis("c2r", n, m, 1.0 / (n * c), device_id)
    return out
