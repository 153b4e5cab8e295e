"""A one-axis layer's forward in one kernel: the analysis, the channel product and the synthesis
between one read of ``x`` and one write of ``y``.

On the paired modes (:class:`._dft.PairedChain`) a one-axis layer's forward is three launches,
each through global memory: the row kernel writes the kept modes modes-major, the batched
complex GEMM reads them and writes the product, the inverse row kernel reads it.
``fno_layer1d_f32_w<P>_c<CQ>_r<RB>`` (``hip_kernels/fno.cuh``) gives a block ``NB`` batch rows:
their ``NB C`` rows' real FFTs (the warp form's, rows of ``64 P`` points), the kept bins in
shared memory, the product of every mode with the weight (read in place from the layer's
modes-major weight, ``RB`` batch rows a group of 32 lanes: all 8 of a block for 64 channels,
so that a block reads the weight once), the bias on the real part of mode 0, and the inverse
real FFTs of the ``NB O`` output rows, written to ``y``. The modes never leave the
multiprocessor. A block's three steps run one after the other (one block a multiprocessor,
its registers and shared memory allowing no second), so the kernel's time is a block's: the
row FFTs' shuffles and the product's float32 FMAs, whatever the batch (docs/benchmarks.md).

It takes rows of 64, 128 or 256 points, ``C = O`` of 64 or 128 channels, and as many kept bins
as a block's shared memory holds for ``NB >= 4`` batch rows (``NB C m`` complex values: 135 KB
at ``NB = 8``, ``C = 64``, ``m = 33``; an AMD block's 64 KB hold none of these, so the chain
serves there); float32. The backward keeps the chain (it needs the modes of ``x`` and of
``dL/dy`` for ``dL/dW``): the planner takes the kernel for a forward that records no gradient
(:func:`fftmatvec.fno._plan.fno_fused`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from .. import backend, kernels
from ._rows import _ALIGN, _data_ptr, _is_torch, _raw_stream, cached_launch, row_warp_p

#: Channels the kernel takes (in and out alike): ``64 CQ``.
CHANNELS = (64, 128)
#: Batch rows a block at most (a multiple of 4: a group's item holds four), and at least.
MAX_BATCH_ROWS = 8
MIN_BATCH_ROWS = 4
#: Threads of a block at most, by ``(P, CQ, RB)`` (``hip_kernels/fno.cuh``:
#: ``FNO_L1_THREADS_<P>_<CQ>_<RB>``; the launch bounds give the registers that many threads
#: leave). ``RB``: the batch rows of a group's item (a mode of them), 4 or 8 (64 channels).
MAX_THREADS = {(1, 1, 4): 704, (2, 1, 4): 704, (4, 1, 4): 640, (1, 2, 4): 512,
               (2, 2, 4): 512, (4, 2, 4): 512, (1, 1, 8): 640, (2, 1, 8): 640, (4, 1, 8): 512}
#: Whether a block of 8 batch rows and 64 channels gives a group all 8 for a mode (the weight
#: read once a block; ``RB = 8``) rather than 4 (``RB = 4``: two groups a mode).
ITEM_ROWS_8 = True


def smem_bytes(C: int, m: int, nb: int) -> int:
    """Shared memory of a block of ``nb`` batch rows: ``m`` modes of ``nb C + 1`` complex
    values."""
    return 8 * m * (nb * C + 1)


def batch_rows(C: int, m: int, smem_per_block: int):
    """Batch rows a block takes: the most, up to :data:`MAX_BATCH_ROWS`, a multiple of 4 whose
    modes fit ``smem_per_block``; None where not even :data:`MIN_BATCH_ROWS` do."""
    nb = MAX_BATCH_ROWS
    while nb >= MIN_BATCH_ROWS and smem_bytes(C, m, nb) > smem_per_block:
        nb -= 4
    return nb if nb >= MIN_BATCH_ROWS else None


def supported(L: int, m: int, cin: int, cout: int, smem_per_block: int) -> bool:
    """Whether the kernel takes a layer of rows of ``L`` points keeping ``m`` bins, ``cin``
    input and ``cout`` output channels: the warp form's rows (64, 128 or 256 points), ``cin ==
    cout`` in :data:`CHANNELS`, a block's modes fitting ``smem_per_block`` for at least
    :data:`MIN_BATCH_ROWS` batch rows."""
    return (row_warp_p(L, m) is not None and cin == cout and cin in CHANNELS
            and batch_rows(cin, m, smem_per_block) is not None)


def item_rows(C: int, nb: int) -> int:
    """Batch rows of a group's item (``RB``) in a block of ``nb``: all 8 for 64 channels where
    :data:`ITEM_ROWS_8`, else 4."""
    return 8 if ITEM_ROWS_8 and C == 64 and nb == 8 else 4


def launch_shape(B: int, L: int, C: int, m: int, smem_per_block: int, rb: int | None = None,
                 threads: int | None = None, nb: int | None = None) -> tuple:
    """``(batch rows a block, rows an item, grid, threads, shared memory)``: the kernel's most
    threads (or ``threads``, at most those), whatever the items (``m NB / RB``): the row FFTs,
    latency-bound, want the groups, more than the fewest that take the items in as few rounds
    (docs/benchmarks.md). ``nb``: the batch rows a block, fewer than
    :func:`batch_rows` gives (a multiple of 4)."""
    nb = min(nb, batch_rows(C, m, smem_per_block)) if nb else batch_rows(C, m, smem_per_block)
    rb = min(rb or item_rows(C, nb), nb)
    most = MAX_THREADS[row_warp_p(L, m), C // 64, rb] // 32
    groups = max(1, min(most, threads // 32 if threads else most))
    return nb, rb, (-(-B // nb),), (32 * groups,), smem_bytes(C, m, nb)


class Layer1d:
    """``y = S(X W + b)``, ``X`` the kept modes of ``x``, on device ``device_id``: a one-axis
    layer's forward in one launch, for rows of ``L`` points keeping ``m`` bins and ``C``
    channels in and out (:func:`supported`). ``analysis``, ``synthesis``: the chain's row
    kernels it stands for (:class:`._rows.LastAxis`, ``F`` and ``A`` of
    :func:`._rows.last_axis_set`), whose twiddles and scales it reads. ``item_rows``,
    ``threads`` and ``batch_rows`` override the launch's shape (:func:`launch_shape`), for the
    benchmark's sweeps (docs/benchmarks.md).

    Called as ``layer(x, W, bias)``: ``x`` ``(B, C, L)`` float32, ``W`` the modes-major
    weight ``(m, C, C)`` complex64, ``bias`` ``(C,)`` float32 or None, contiguous and 16-byte
    aligned (8 for the bias), on the device (CuPy arrays or PyTorch tensors, on their current
    stream); a new ``y`` ``(B, C, L)``. :meth:`takes` says whether a call is one it takes."""

    def __init__(self, L: int, m: int, C: int, analysis, synthesis, device_id: int,
                 item_rows: int | None = None, threads: int | None = None,
                 batch_rows: int | None = None):
        cp = backend.cupy
        with cp.cuda.Device(device_id):
            per_sm, self.smem_limit = backend.shared_memory_limits()
            if not supported(L, m, C, C, self.smem_limit):
                raise ValueError(f"no one-kernel FNO layer for L = {L} keeping m = {m} bins "
                                 f"with {C} channels")
            P, CQ = row_warp_p(L, m), C // 64
            if batch_rows is not None and (batch_rows % 4 or batch_rows < MIN_BATCH_ROWS):
                raise ValueError(f"batch_rows must be a multiple of 4 from {MIN_BATCH_ROWS}, "
                                 f"got {batch_rows}")
            nb, rb, _, _, smem = launch_shape(1, L, C, m, self.smem_limit, item_rows, threads,
                                              batch_rows)
            self.name = f"fno_layer1d_f32_w{P}_c{CQ}_r{rb}"
            self._fn = kernels.get_function(self.name, smem)
            # the shared memory its blocks need (as many as fit a multiprocessor), not the
            # most: the rest stays L1, where a mode's weight read by one group is found by the
            # next
            kernels.set_carveout(self._fn, max(1, per_sm // (smem + 1024)) * (smem + 1024))
        self.L, self.m, self.C, self.device_id = int(L), int(m), int(C), int(device_id)
        self.item_rows, self.threads, self.batch_rows = rb, threads, nb
        self.twiddles = analysis.twiddles
        self._set_device = cp.cuda.runtime.setDevice
        self.analysis_scale, self.synthesis_scale = analysis.scale, synthesis.scale
        self._launches: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def _launch(self, B: int):
        hit = self._launches.get(B)  # (a dict lookup is atomic: a hit takes no closure)
        if hit is not None:
            return hit

        def make():
            nb, _, grid, block, smem = launch_shape(B, self.L, self.C, self.m,
                                                    self.smem_limit, self.item_rows,
                                                    self.threads, self.batch_rows)
            args = (None, None, None, None, self.twiddles, self.analysis_scale,
                    self.synthesis_scale, np.int32(B), np.int32(self.m), np.int32(nb))
            return kernels.PackedLaunch(self._fn, grid, block, smem, args)

        return cached_launch(self._launches, self._lock, B, make)

    def takes(self, x, W, bias) -> bool:
        """Whether ``layer(x, W, bias)`` is a call the kernel takes (shapes, dtypes, device,
        contiguity and alignment)."""
        L, m, C = self.L, self.m, self.C
        if x.ndim != 3 or tuple(x.shape[1:]) != (C, L) or tuple(W.shape) != (m, C, C):
            return False
        if bias is not None and tuple(bias.shape) != (C,):
            return False
        arrays = (x, W) if bias is None else (x, W, bias)
        if _is_torch(x):
            import torch

            want = (torch.float32, torch.complex64, torch.float32)
            ok = all(_is_torch(a) and a.dtype == d and a.is_contiguous() and a.is_cuda
                     and a.device.index == self.device_id for a, d in zip(arrays, want))
        else:
            want = (np.float32, np.complex64, np.float32)
            ok = all(not _is_torch(a) and a.dtype == d and a.flags.c_contiguous
                     and a.device.id == self.device_id for a, d in zip(arrays, want))
        return (ok and (_data_ptr(x) | _data_ptr(W)) % _ALIGN == 0
                and (bias is None or _data_ptr(bias) % 8 == 0))

    def __call__(self, x, W, bias=None):
        if not self.takes(x, W, bias):
            raise ValueError(
                f"{self.name}: expected contiguous, 16-byte aligned float32 x (B, {self.C}, "
                f"{self.L}), complex64 W ({self.m}, {self.C}, {self.C}) and float32 bias "
                f"({self.C},) or None on device {self.device_id}, got {x.dtype} "
                f"{tuple(x.shape)}, {W.dtype} {tuple(W.shape)} and "
                f"{None if bias is None else (bias.dtype, tuple(bias.shape))}")
        return self.run(x, W, bias)

    def run_torch(self, torch, x, w_ptr: int, b_ptr: int, stream: int | None = None, y=None):
        """:meth:`run` of a torch ``x`` that :meth:`takes` accepted with a weight and a bias at
        ``w_ptr`` and ``b_ptr`` (0: none; the forward's fast path,
        :class:`fftmatvec.fno._torch_dft.FusedForward`, keeps them), on the stream of handle
        ``stream`` (None: the current one), into ``y`` (None: a new one; else a tensor like
        ``x``)."""
        if y is None:
            y = torch.empty_like(x)
        B = x.shape[0]
        if B:
            launch = self._launch(B)
            # the device's primary context current on this thread (see _rows.LastAxis._torch_call)
            self._set_device(self.device_id)
            launch(_raw_stream(torch, x.device) if stream is None else stream, x.data_ptr(),
                   w_ptr, b_ptr, y.data_ptr())
        return y

    def run(self, x, W, bias=None):
        """``y`` of a call that :meth:`takes` accepted, unchecked."""
        B = x.shape[0]
        cp = backend.cupy
        if _is_torch(x):
            import torch

            return self.run_torch(torch, x, W.data_ptr(), 0 if bias is None else bias.data_ptr())
        with cp.cuda.Device(self.device_id):
            y = cp.empty(x.shape, dtype=np.float32)
            if B:
                self._launch(B)(cp.cuda.get_current_stream().ptr, x.data.ptr, W.data.ptr,
                                0 if bias is None else bias.data.ptr, y.data.ptr)
        return y
