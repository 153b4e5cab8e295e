"""The GPU engine: ``Khat`` stored for the kernels (:class:`~fftmatvec.gpu.khat.KhatStore`)
and the parts that run the product's stages on it, from which an
:class:`~fftmatvec.gpu.executor.Executor` builds what its plan names: stage 3
(:class:`~fftmatvec.gpu.stage3.Stage3Runner`), the FFT stages
(:class:`~fftmatvec.gpu.ffts.FFTStages`) and the fused products' buffers
(:class:`~fftmatvec.gpu.fused.FusedBuffers`)."""

from __future__ import annotations


import numpy as np

from .. import backend
from ..precision import PrecisionConfig
from .ffts import FFTStages
from .fused import FusedBuffers
from .planning import Overrides, device_info
from .khat import KhatStore
from .rules import _STORE_SUFFIX, rules_for
from .stage3 import Stage3Runner


class KernelEngine:
    """``Khat`` stored for the package's kernels, and its parts, each holding its own state:
    :attr:`stage3` (a :class:`~fftmatvec.gpu.stage3.Stage3Runner` of the whole ``Khat``;
    :meth:`block` one of a block), :attr:`ffts` (:class:`~fftmatvec.gpu.ffts.FFTStages`) and
    :attr:`buffers` (:class:`~fftmatvec.gpu.fused.FusedBuffers`). It chooses nothing: a
    product's launches and transforms are its plan's
    (:func:`~fftmatvec.gpu.planning.make_plan`); stage 3 run on its own takes those of
    :func:`~fftmatvec.gpu.planning.stage3_launches`
    (:meth:`Stage3Runner.launches <fftmatvec.gpu.stage3.Stage3Runner.launches>`).

    Its :meth:`pad`, :meth:`fft`, :meth:`apply`, :meth:`ifft` and :meth:`unpad` are the
    stages' leaves that :class:`~fftmatvec._matmul.MatmulEngine` has too (the operator's
    stages and an executor's stage-by-stage product call either engine's): here they are its
    parts'."""

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
        self.compute = self.khat_store.compute
        self.device = device = device_info(cp.cuda.Device().id)  # read once per device
        self.num_sms = device.multiprocessors
        self.arch = device.arch
        self.rules = rules_for(self.arch)  # the thresholds of this architecture
        # the plan overrides of stage 3 run on its own (the operator's sbgemv stage, the
        # building blocks), resolved once by its operator
        self.resolved = Overrides() if overrides is None else overrides
        self.stage3 = Stage3Runner(self.khat_store, device, self.rules, self.resolved, prec, nt)
        self.ffts = FFTStages(self.khat_store, device, nt)
        self.buffers = FusedBuffers(cp, nf, nt, fft_len, self.compute)
        self._blocks: dict = {}  # (i0, i1, j0, j1) -> Stage3Runner of that block (block())

    def block(self, i0: int, i1: int, j0: int, j1: int) -> Stage3Runner:
        """Stage 3 of the block ``Khat[i0:i1, j0:j1]``: a
        :class:`~fftmatvec.gpu.stage3.Stage3Runner` of the block of the stored ``Khat``
        (:meth:`KhatStore.block <fftmatvec.gpu.khat.KhatStore.block>`, read in place) on the
        engine's device, rules and overrides, made once per block; the whole ``Khat`` is
        :attr:`stage3`."""
        if (i0, i1, j0, j1) == (0, self.nd, 0, self.nm):
            return self.stage3
        key = (i0, i1, j0, j1)
        hit = self._blocks.get(key)
        if hit is None:
            hit = self._blocks[key] = Stage3Runner(self.khat_store.block(i0, i1, j0, j1),
                                                   self.device, self.rules, self.resolved,
                                                   self.prec, self.nt)
        return hit

    @property
    def nbytes(self) -> int:
        """Bytes of the stored Khat (without the few padding frequencies)."""
        return self.khat_store.nbytes

    def store_rows(self, i0: int, khat_rows) -> None:
        """Store rows ``i0:i0+c`` of ``Khat`` given as ``(c, Nm, Nf)`` complex128
        (:meth:`KhatStore.store_rows <fftmatvec.gpu.khat.KhatStore.store_rows>`)."""
        self.khat_store.store_rows(i0, khat_rows)

    # the stages' leaves of the engine seam (those of MatmulEngine too), on the parts
    def pad(self, x, prec: PrecisionConfig, out=None):
        """Stage 1 (:meth:`FFTStages.pad <fftmatvec.gpu.ffts.FFTStages.pad>`)."""
        return self.ffts.pad(x, prec, out=out)

    def fft(self, x, out=None):
        """Stage 2 (:meth:`FFTStages.fft <fftmatvec.gpu.ffts.FFTStages.fft>`)."""
        return self.ffts.fft(x, out=out)

    def apply(self, xhat, adjoint: bool, out_dtype, out=None, workspace=None, plan=None,
              xhat_scaled: bool = False):
        """Stage 3 (:meth:`Stage3Runner.apply <fftmatvec.gpu.stage3.Stage3Runner.apply>`)."""
        return self.stage3.apply(xhat, adjoint, out_dtype, out=out, workspace=workspace,
                                 plan=plan, xhat_scaled=xhat_scaled)

    def ifft(self, y, out=None):
        """Stage 4 (:meth:`FFTStages.ifft <fftmatvec.gpu.ffts.FFTStages.ifft>`)."""
        return self.ffts.ifft(y, out=out)

    def unpad(self, y, prec: PrecisionConfig, nt: int, dtype, weight=None, out=None):
        """Stage 5 (:meth:`FFTStages.unpad <fftmatvec.gpu.ffts.FFTStages.unpad>`)."""
        return self.ffts.unpad(y, prec, nt, dtype, weight=weight, out=out)
