"""The array-module engine: every stage written once against ``xp`` (NumPy or CuPy).

``Khat`` is stored ``(Nf, Nd, Nm)`` and stage 3 is a batched ``matmul``: multithreaded BLAS on
the CPU, cuBLAS / hipBLAS on a GPU whose kernels are unavailable. The FFT stages use
``scipy.fft`` on all cores, or CuPy's cuFFT / hipFFT with its plan cache.
"""

from __future__ import annotations

import numpy as np
import scipy.fft

from .precision import PrecisionConfig

__all__ = ["MatmulEngine", "quantize_half", "rfft", "irfft"]


def rfft(xp, x, n):
    """Real-to-complex FFT of length ``n`` along the last axis."""
    if xp is np:
        return scipy.fft.rfft(x, n=n, axis=-1, workers=-1)
    import cupyx.scipy.fft as cufft

    return cufft.rfft(x, n=n, axis=-1)


def irfft(xp, x, n):
    """Complex-to-real inverse FFT of length ``n`` along the last axis (``x`` may be destroyed)."""
    if xp is np:
        return scipy.fft.irfft(x, n=n, axis=-1, workers=-1, overwrite_x=True)
    import cupyx.scipy.fft as cufft

    return cufft.irfft(x, n=n, axis=-1, overwrite_x=True)


def quantize_half(xp, z, axis: int):
    """Split complex ``z`` into float16 (re, im) pairs and a float32 scale over ``axis``.

    The scale maps the largest real or imaginary magnitude of each block to ``2**15``, well
    inside float16's range (max 65504): nothing overflows, and values down to ``2**-14`` of the
    scale's reference stay normal numbers, with relative precision ``2**-11``.

    Returns
    -------
    q : float16 array, ``z.shape + (2,)``
    scale : float32 array, ``z.shape`` without ``axis``
    """
    amax = xp.maximum(xp.abs(z.real), xp.abs(z.imag)).max(axis=axis, keepdims=True)
    scale = xp.where(amax > 0, amax / 2.0**15, 1.0)
    zs = z / scale
    q = xp.stack([zs.real, zs.imag], axis=-1).astype(np.float16)
    return q, xp.squeeze(scale, axis=axis).astype(np.float32)


def _into(out, value):
    """``value``, or copied into ``out`` (the stages' optional output buffers) when given."""
    if out is None:
        return value
    out[...] = value
    return out


class MatmulEngine:
    """Stages through the array module; ``Khat`` stored ``(Nf, Nd, Nm)``.

    Precision ``h`` is emulated: ``Khat`` is stored as float16 pairs with a float32 scale per
    (frequency, row) and expanded to complex64 one block of frequencies at a time.
    """

    name = "matmul"
    _chunk_bytes = 256 * 2**20

    def __init__(self, xp, prec: PrecisionConfig, nd: int, nm: int, nf: int, nt: int, fft_len: int):
        self.xp, self.prec, self.nd, self.nm, self.nf = xp, prec, nd, nm, nf
        self.nt, self.fft_len = nt, fft_len
        if prec.half:
            self.data = xp.empty((nf, nd, nm, 2), dtype=np.float16)
            self.scale = xp.empty((nf, nd), dtype=np.float32)
        else:
            self.data = xp.empty((nf, nd, nm), dtype=prec.sbgemv_dtype)
            self.scale = None

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes + (0 if self.scale is None else self.scale.nbytes))

    def store_rows(self, i0: int, khat_rows) -> None:
        """Store ``khat_rows`` (rows ``i0:i0+c``, shape ``(c, Nm, Nf)`` complex128)."""
        xp = self.xp
        blk = xp.moveaxis(khat_rows, -1, 0)  # (Nf, c, Nm)
        i1 = i0 + blk.shape[1]
        if self.scale is None:
            self.data[:, i0:i1, :] = blk
        else:
            q, s = quantize_half(xp, blk, axis=-1)
            self.data[:, i0:i1] = q
            self.scale[:, i0:i1] = s

    # ---- stages ----------------------------------------------------------------------------
    def pad(self, x, prec: PrecisionConfig, out=None, scale_exp=0):
        """Stage 1; ``scale_exp``: ``x * 2**scale_exp`` in the cast (exact: a normal power of
        two of the wider of ``x``'s and the stage's dtypes, computed in that dtype), or an
        integer array ``(n, 1)``: one exponent per row (``ldexp``: any exponent, one rounding to
        the stage's dtype)."""
        xp = self.xp
        k, n, nt = x.shape
        if out is None:
            out = xp.empty((k, n, self.fft_len), dtype=prec.pad_dtype)
        if getattr(scale_exp, "ndim", 0):
            xp.ldexp(x, xp.asarray(scale_exp, dtype=np.int32), out=out[..., :nt],
                     casting="same_kind")
        elif scale_exp:
            wide = np.result_type(x.dtype, out.dtype)
            xp.multiply(x, wide.type(2.0 ** scale_exp), out=out[..., :nt], casting="same_kind")
        else:
            out[..., :nt] = x
        out[..., nt:] = 0
        return out

    def fft(self, x, out=None):
        return _into(out, rfft(self.xp, x, self.fft_len))

    def ifft(self, y, out=None):
        return _into(out, irfft(self.xp, y, self.fft_len))

    def unpad(self, y, prec: PrecisionConfig, nt: int, dtype, weight=None, out=None,
              exponent=0):
        """Stage 5; ``exponent``: times ``2**exponent`` (``ldexp``: any exponent, one rounding)
        after the rounding to stage 5's precision, before the weight; or an integer array
        ``(n, 1)``, one exponent per row."""
        r = y[..., :nt].astype(prec.reduce_dtype).astype(dtype, copy=False)
        if getattr(exponent, "ndim", 0):
            self.xp.ldexp(r, self.xp.asarray(exponent, dtype=np.int32), out=r)
        elif exponent:
            self.xp.ldexp(r, exponent, out=r)
        if weight is not None:
            r *= weight
        return _into(out, r)

    def _blocks(self):
        """Yield ``(f0, f1, Khat[f0:f1])`` in the compute dtype."""
        if self.scale is None:
            yield 0, self.nf, self.data
            return
        per_f = self.nd * self.nm * 8
        step = max(1, self._chunk_bytes // per_f)
        for f0 in range(0, self.nf, step):
            f1 = min(self.nf, f0 + step)
            q = self.data[f0:f1].astype(np.float32)
            blk = (q[..., 0] + 1j * q[..., 1]).astype(np.complex64)
            blk *= self.scale[f0:f1, :, None]
            yield f0, f1, blk

    def apply(self, xhat, adjoint: bool, out_dtype, out=None, workspace=None,
              xhat_scaled=False):
        """``xhat`` is ``(k, n_in, Nf)``; return ``(k, n_out, Nf)`` in ``out_dtype``. This engine
        applies the float16 scales to ``Khat`` itself, so ``xhat_scaled`` must be False."""
        if xhat_scaled:
            raise ValueError("the matmul engine takes xhat without the float16 row scales")
        xp = self.xp
        cd = self.prec.sbgemv_dtype
        x = xhat.astype(cd, copy=False).transpose(2, 1, 0)  # (Nf, n_in, k)
        n_out = self.nm if adjoint else self.nd
        k = xhat.shape[0]
        y = xp.empty((self.nf, n_out, k), dtype=cd)
        for f0, f1, kh in self._blocks():
            if adjoint:
                # Khat^H x = conj(Khat^T conj(x)): no conjugate transpose of Khat is formed.
                xp.matmul(xp.swapaxes(kh, -1, -2), x[f0:f1].conj(), out=y[f0:f1])
                xp.conjugate(y[f0:f1], out=y[f0:f1])
            else:
                xp.matmul(kh, x[f0:f1], out=y[f0:f1])
        r = y.transpose(2, 1, 0)
        return _into(out, r) if out is not None else xp.ascontiguousarray(r, dtype=out_dtype)
