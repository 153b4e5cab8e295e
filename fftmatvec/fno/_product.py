"""The channel product of the paired modes on the package's kernel, for small batches.

On the paired modes (:class:`._dft.PairedChain`) the forward's channel product is one batched
complex GEMM, ``Y[m] = X[m] W[m]`` for every kept mode ``m``: ``X`` ``(M, B, C)``, ``W`` ``(M, C,
O)``, ``Y`` ``(M, B, O)``, complex64. With a batch of a few rows cuBLAS runs it in tiles of 32 x
64 on those rows and reads the weight, the product's largest array, at about half the memory's
rate.
``fno_modes_cgemm_f32_b<NB>`` (``hip_kernels/fno.cuh``) streams the weight once, every thread
two output columns of up to ``NB`` rows, the rows of ``X`` through shared memory
(``scripts/bench_fno_rows.py --products``; docs/benchmarks.md). The planner takes it for
batches of at most
:data:`~fftmatvec.fno._plan.FNO_PRODUCT_MAX_BATCH` rows (:func:`fftmatvec.fno._plan.fno_product`);
the backward's products stay on cuBLAS.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from .. import backend, kernels
from ._rows import _ALIGN, _data_ptr, _is_torch, _raw_stream, cached_launch

#: Rows a thread holds, by kernel (``fno_modes_cgemm_f32_b<NB>``): the smallest tile that holds
#: the batch, larger batches in tiles of the largest.
TILES = (8, 16)
#: Columns of ``X`` a chunk in shared memory (``FNO_PRODUCT_KC`` in ``hip_kernels/fno.cuh``).
CHUNK = 32
#: Threads of a block at most; a block holds whole modes of ``O / 2`` threads.
THREADS = 256
#: Shared memory a block asks for at most (two chunks of its modes' rows): fewer modes a block
#: where ``O`` is small.
SMEM_BUDGET = 48 * 1024


def supported(cin: int, cout: int) -> bool:
    """Whether the kernel takes ``cin`` input and ``cout`` output channels: both even (16-byte
    reads of two values), ``cout / 2`` threads a mode fitting a block."""
    return cin >= 2 and cout >= 2 and cin % 2 == 0 and cout % 2 == 0 \
        and cout // 2 <= THREADS


def launch_shape(M: int, B: int, C: int, O: int) -> tuple:
    """``(tile, modes a block, grid, block, shared memory)`` of a product."""
    tile = next((t for t in TILES if t >= B), TILES[-1])
    tpm = O // 2
    per_mode = 2 * tile * CHUNK * 8  # two chunks of the mode's rows, complex64
    mpb = max(1, min(THREADS // tpm, SMEM_BUDGET // per_mode, M))
    grid = (-(-M // mpb), -(-B // tile))
    return tile, mpb, grid, (mpb * tpm,), mpb * per_mode


class ModeProduct:
    """``Y[m] = X[m] W[m]`` on device ``device_id``: ``X`` ``(M, B, C)`` and ``W`` ``(M, C, O)``
    complex64, contiguous (CuPy arrays or PyTorch tensors on that device, on their current
    stream) -> a new ``Y`` ``(M, B, O)``. ``C`` and ``O`` even (:func:`supported`); a call
    that the kernel cannot take (other shapes or dtypes, arrays not 16-byte aligned) raises
    ValueError; :meth:`takes` says beforehand, and :meth:`run` then runs it unchecked."""

    def __init__(self, device_id: int):
        cp = backend.cupy
        self.device_id = int(device_id)
        with cp.cuda.Device(self.device_id):
            self._fns = {t: kernels.get_function(f"fno_modes_cgemm_f32_b{t}", SMEM_BUDGET)
                         for t in TILES}
        self._launches: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def takes(self, X, W) -> bool:
        """Whether a call on ``X`` and ``W`` is one the kernel takes."""
        if X.ndim != 3 or W.ndim != 3 or X.shape[0] != W.shape[0] or X.shape[2] != W.shape[1]:
            return False
        if not supported(X.shape[2], W.shape[2]):
            return False
        if _is_torch(X):
            import torch

            ok = (X.dtype == W.dtype == torch.complex64 and X.is_contiguous()
                  and W.is_contiguous() and X.device.type == "cuda"
                  and X.device.index == W.device.index == self.device_id)
        else:
            ok = (X.dtype == W.dtype == np.complex64 and X.flags.c_contiguous
                  and W.flags.c_contiguous and X.device.id == W.device.id == self.device_id)
        return ok and _data_ptr(X) % _ALIGN == 0 and _data_ptr(W) % _ALIGN == 0

    def _launch(self, M, B, C, O):
        def make():
            tile, _, grid, block, smem = launch_shape(M, B, C, O)
            args = (None, None, None, np.int32(M), np.int32(B), np.int32(C), np.int32(O))
            return kernels.PackedLaunch(self._fns[tile], grid, block, smem, args)

        return cached_launch(self._launches, self._lock, (M, B, C, O), make)

    def __call__(self, X, W):
        if not self.takes(X, W):
            raise ValueError(
                f"fno_modes_cgemm: expected contiguous, 16-byte aligned complex64 X (M, B, C) "
                f"and W (M, C, O) on device {self.device_id}, C and O even and O / 2 <= "
                f"{THREADS}, got {X.dtype} {tuple(X.shape)} and {W.dtype} {tuple(W.shape)}")
        return self.run(X, W)

    def run(self, X, W):
        """The product of ``X`` and ``W`` that :meth:`takes` accepted, unchecked."""
        (M, B, C), O = X.shape, W.shape[2]
        cp = backend.cupy
        if _is_torch(X):
            import torch

            Y = torch.empty((M, B, O), dtype=X.dtype, device=X.device)
            if Y.numel():
                stream = _raw_stream(torch, X.device)
                cp.cuda.runtime.setDevice(self.device_id)  # see _rows.LastAxis._torch_call
                self._launch(M, B, C, O)(stream, X.data_ptr(), W.data_ptr(), Y.data_ptr())
            return Y
        with cp.cuda.Device(self.device_id):
            Y = cp.empty((M, B, O), dtype=np.complex64)
            if Y.size:
                self._launch(M, B, C, O)(cp.cuda.get_current_stream().ptr, X.data.ptr,
                                         W.data.ptr, Y.data.ptr)
        return Y
