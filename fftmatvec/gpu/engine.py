"""The GPU engine: ``Khat`` stored in the kernels' layout, and the product's stages through
the package's kernels. It executes what the planner (:mod:`fftmatvec.gpu.planner`) chooses.

``Khat`` is stored in blocks of frequencies, ``(blocks, Nd, Nm, B)``, as :func:`khat_layout`
says: the stage-3 kernels read it coalesced in both directions, and read and write the FFT
stages' layouts ``(k, n, Nf)`` directly, with no transpose pass.
"""

from __future__ import annotations


import numpy as np

from .. import backend
from .._matmul import quantize_half
from ..precision import PrecisionConfig
from .ffts import FFTStages
from .fused import FusedProducts
from .blocks import BlockView
from .planning import Overrides, device_info
from .rules import (KHAT_BLOCK, KHAT_MAX_WASTE, PAD, _ELEM_BYTES, _ONE_BLOCK_SHIFT, _STORE_SUFFIX,
                    rules_for)
from .stage3 import Stage3Launches


def khat_layout(store: str, nfp: int) -> tuple[int, int, int]:
    """(frequencies per block, blocks, khat_foff's shift) of a stored ``Khat`` with ``nfp``
    padded frequencies (:data:`KHAT_BLOCK`)."""
    block = KHAT_BLOCK.get(store)
    if block is not None and (block <= 0 or block & (block - 1) or block % (16 // _ELEM_BYTES[store])):
        raise ValueError(f"KHAT_BLOCK[{store!r}] = {block}: a block of Khat's frequencies must "
                         f"be a power of two of whole 16-byte chunks ({16 // _ELEM_BYTES[store]} "
                         f"frequencies)")
    blocks = 1 if block is None else -(-nfp // block)
    if blocks == 1 or blocks * block > (1 + KHAT_MAX_WASTE) * nfp:
        return nfp, 1, _ONE_BLOCK_SHIFT  # one block: (Nd, Nm, Nfp)
    return block, blocks, block.bit_length() - 1


class KernelEngine(Stage3Launches, FFTStages, FusedProducts):
    """``Khat`` stored for the package's kernels, and the leaves of stages 1-5 on them and on
    cuFFT/hipFFT: what an :class:`~fftmatvec.gpu.executor.Executor` builds its product from.
    It chooses nothing: a product's launches and transforms are its plan's
    (:func:`~fftmatvec.gpu.planning.make_plan`); stage 3 run on its own takes those of
    :func:`~fftmatvec.gpu.planning.stage3_launches` (:meth:`launches`)."""

    name = "kernels"

    def __init__(self, prec: PrecisionConfig, nd: int, nm: int, nf: int, nt: int, fft_len: int,
                 overrides: Overrides | None = None):
        cp = backend.cupy
        self.cp, self.prec = cp, prec
        self.nd, self.nm, self.nf, self.nt, self.fft_len = nd, nm, nf, nt, fft_len
        letter = prec.letters[2]
        self.store = _STORE_SUFFIX[letter]
        self._alloc_khat(np.uint32 if letter == "h" else prec.sbgemv_dtype)
        self.compute = np.dtype(np.complex128 if letter == "d" else np.complex64)
        self._nbytes = int(self.data.itemsize * nd * nm * nf
                           + (0 if self.scale is None else 4 * nd * nf))
        self.device = device = device_info(cp.cuda.Device().id)  # read once per device
        self.num_sms = device.multiprocessors
        self._launches: dict = {}  # (adjoint, k, in dtype, out dtype) -> launches (launches())
        self._blocks: dict = {}  # (i0, i1, j0, j1) -> BlockView (block())
        self._args: dict = {}  # (launch, adjoint, out dtype) -> kernel, arguments (_launch_args)
        self._stage3: dict = {}  # (adjoint, k, in dtype, out dtype) -> packed launches (_Stage3)
        self._fft_plans: dict = {}
        self.smem_per_sm, self.smem_per_block = device.smem_per_sm, device.smem_per_block
        self.threads_per_sm, self.regs_per_sm = device.threads_per_sm, device.regs_per_sm
        self.arch = device.arch
        self.rules = rules_for(self.arch)  # the thresholds of this architecture
        # the plan overrides of the engine's own choices (stage 3 run on its own: the
        # operator's sbgemv stage, the building blocks), resolved once by its operator
        self.resolved = Overrides() if overrides is None else overrides


    def block(self, i0: int, i1: int, j0: int, j1: int):
        """Stage 3 of the block ``Khat[i0:i1, j0:j1]`` (:class:`~fftmatvec.gpu.blocks.BlockView`,
        read in place), made once per block; the whole ``Khat`` is this engine."""
        if (i0, i1, j0, j1) == (0, self.nd, 0, self.nm):
            return self
        key = (i0, i1, j0, j1)
        hit = self._blocks.get(key)
        if hit is None:
            hit = self._blocks[key] = BlockView(self, i0, i1, j0, j1)
        return hit

    @property
    def nbytes(self) -> int:
        """Bytes of the stored Khat (without the few padding frequencies)."""
        return self._nbytes

    def _alloc_khat(self, dtype) -> None:
        """The zeroed arrays of the stored ``Khat`` (:func:`khat_layout`: blocks of frequencies)
        and, for float16 storage, its row scales ``(Nd, Nfp)``."""
        cp = self.cp
        self.nfp = -(-self.nf // PAD[self.store]) * PAD[self.store]
        self.khat_block, self.khat_blocks, self.khat_shift = khat_layout(self.store, self.nfp)
        self.data = cp.zeros((self.khat_blocks, self.nd, self.nm, self.khat_block), dtype=dtype)
        self.scale = (cp.zeros((self.nd, self.nfp), dtype=np.float32) if self.store == "c32h"
                      else None)


    def store_rows(self, i0: int, khat_rows) -> None:
        """Store rows ``i0:i0+c`` of ``Khat`` given as ``(c, Nm, Nf)`` complex128.

        What is stored is ``Khat / L``: the normalisation of the inverse FFT is folded in, so
        stage 4 runs the raw (unnormalised) complex-to-real transform with no extra pass."""
        cp = self.cp
        i1 = i0 + khat_rows.shape[0]
        khat_rows = khat_rows * (1.0 / self.fft_len)
        nf = self.nf
        if self.scale is None:
            words = khat_rows
        else:
            q, s = quantize_half(cp, khat_rows, axis=1)  # q (c, Nm, Nf, 2) float16, s (c, Nf)
            bits = q.view(np.uint16).astype(np.uint32)
            words = bits[..., 0] | (bits[..., 1] << 16)
            self.scale[i0:i1, :nf] = s
        B = self.khat_block
        for b in range(self.khat_blocks):  # frequencies b B .. b B + B - 1 in block b
            f0, f1 = b * B, min(nf, (b + 1) * B)
            if f1 > f0:
                self.data[b, i0:i1, :, :f1 - f0] = words[..., f0:f1]


    def khat_strides(self, adjoint: bool) -> tuple[int, int, int, int]:
        """(so, sr, shift, block stride) that address ``Khat`` for the kernels of one direction
        (hip_kernels/common.cuh: khat_foff): output rows are Nd forward, Nm adjoint."""
        B = self.khat_block
        so, sr = (B, self.nm * B) if adjoint else (self.nm * B, B)
        return so, sr, self.khat_shift, self.nd * self.nm * B


    def khat(self):
        """The stored ``Khat`` as ``(Nd, Nm, Nfp)`` (a copy; raw float16 words for ``h``)."""
        d = self.data.transpose(1, 2, 0, 3).reshape(self.nd, self.nm, -1)
        return self.cp.ascontiguousarray(d[:, :, :self.nfp])
