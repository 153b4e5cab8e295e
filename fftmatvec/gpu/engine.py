"""The GPU engine: ``Khat`` stored for the kernels (:class:`~fftmatvec.gpu.khat.KhatStore`)
and the leaves of the product's stages on the package's kernels and cuFFT/hipFFT, from which
an :class:`~fftmatvec.gpu.executor.Executor` builds what its plan names."""

from __future__ import annotations


import numpy as np

from .. import backend
from ..precision import PrecisionConfig
from .ffts import FFTStages
from .fused import FusedProducts
from .blocks import BlockView
from .planning import Overrides, device_info
from .khat import KhatStore
from .rules import _STORE_SUFFIX, rules_for
from .stage3 import Stage3Launches


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
        self.khat_store = KhatStore.zeros(cp, self.store, nd, nm, nf, fft_len,
                                          np.uint32 if letter == "h" else prec.sbgemv_dtype)
        self.compute = np.dtype(np.complex128 if letter == "d" else np.complex64)
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
        return self.khat_store.nbytes

    def store_rows(self, i0: int, khat_rows) -> None:
        """Store rows ``i0:i0+c`` of ``Khat`` given as ``(c, Nm, Nf)`` complex128
        (:meth:`KhatStore.store_rows <fftmatvec.gpu.khat.KhatStore.store_rows>`)."""
        self.khat_store.store_rows(i0, khat_rows)
