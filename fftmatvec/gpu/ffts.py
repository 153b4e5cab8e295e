"""Stages 1+2 and 4+5: cuFFT/hipFFT plans, cuFFT plans with callbacks (stage 1 and 5 inside
the transforms), the package's row FFT kernels, and the pad/unpad kernels of the products that
run stage by stage."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import kernels
from ..precision import PrecisionConfig
from . import callbacks as _fftcb
from . import rowfft as _rowfft
from .plan import FFT_CALLBACKS, FFT_IN_FUSED_ADJOINT, FFT_ROW
from .launches import _i64, rows_launch
from .rules import (_CTYPE2, _REAL_SUFFIX)


class FusedPlans(NamedTuple):
    """The two FFT plans of a product, stages 1+2 and 4+5: callables ``plan(in_ptr, out_ptr,
    stream)``, cuFFT callback plans or row FFT kernels. ``xhat_scaled``: the forward
    FFT's output already carries the float16 row scales (adjoints with `h` storage), so stage 3
    runs without them. ``split_sum``: the inverse plan reads stage 3's partial sums and adds
    these many splits itself (:data:`FOLD_MAX_SPLITS`), so stage 3 runs without its sum."""

    fwd: object
    inv: object
    xhat_scaled: bool = False
    split_sum: int = 0  # the splits the inverse FFT's load adds (0: stage 3 writes its sums)


def xhat_dtype(compute, prec: PrecisionConfig) -> np.dtype:
    """Dtype of the forward FFT's output in a fused product of ``prec`` whose stage 3 computes
    in ``compute``: complex64 when that is float32 (stage 3 rounds its input so on load), else
    stage 2's complex dtype."""
    if np.dtype(compute) == np.complex64:
        return np.dtype(np.complex64)
    return prec.complex_dtype("fft")


def yhat_dtype(compute, prec: PrecisionConfig) -> np.dtype:
    """Dtype of the inverse FFT's input in a fused product of ``prec`` whose stage 3 computes
    in ``compute``: complex64 when that is float32 (the FFT's load callback widens its sums
    exactly), else stage 4's complex dtype. (Run stage by stage, stage 3 writes stage 4's
    dtype.)"""
    if np.dtype(compute) == np.complex64:
        return np.dtype(np.complex64)
    return prec.complex_dtype("ifft")


def _row_blocks(rows: int, L: int, fft_dtype) -> int:
    """Blocks of a transform of ``rows`` rows of length ``L`` at the row FFT kernels' default
    rows per block (:func:`fftmatvec.gpu.rowfft.default_rows_per_block`)."""
    return -(-rows // _rowfft.default_rows_per_block(L, fft_dtype))


def _partials_nbytes(eng, plans, rows: int) -> int:
    """Bytes of the stage-3 partial sums over ``rows`` rows that ``plans``' inverse adds
    (:attr:`FusedPlans.split_sum`), in the compute dtype of ``eng`` (FFT stages or buffers)."""
    return plans.split_sum * rows * eng.nf * eng.compute.itemsize


class FFTStages:
    """Stages 1+2 and 4+5 of the products on a stored ``Khat`` (``store``, a
    :class:`~fftmatvec.gpu.khat.KhatStore`: its sizes, compute dtype, float16 row scales) over
    ``nt`` time steps on ``device`` (:class:`~fftmatvec.gpu.planning.DeviceInfo`): cuFFT plans
    made once per size, the fused products' transforms of the kinds a plan names, and the
    pad/unpad kernels (an engine's :attr:`~fftmatvec.gpu.engine.KernelEngine.ffts`)."""

    def __init__(self, store, device, nt: int):
        self.khat_store = store  # its row scales and padded frequencies: the float16 adjoint's
        self.cp = store.xp
        self.nd, self.nm, self.nf, self.fft_len, self.nt = (store.nd, store.nm, store.nf,
                                                            store.fft_len, nt)
        self.compute = store.compute
        self.num_sms, self.smem_per_block = device.multiprocessors, device.smem_per_block
        self._fft_plans: dict = {}  # (kind, rows, input dtype) -> cuFFT plan (fft_plan())

    def fft_plan(self, kind: str, batch: int, dtype):
        """The cuFFT plan of stage 2 (``kind`` "r2c", input ``dtype`` real) or stage 4 ("c2r",
        input ``dtype`` complex) over ``batch`` rows of length ``L``, made once per size."""
        from cupy.cuda import cufft

        key = (kind, batch, np.dtype(dtype))
        plan = self._fft_plans.get(key)
        if plan is None:
            double = np.dtype(dtype) in (np.float64, np.complex128)
            if kind == "r2c":
                t = cufft.CUFFT_D2Z if double else cufft.CUFFT_R2C
            else:
                t = cufft.CUFFT_Z2D if double else cufft.CUFFT_C2R
            plan = cufft.Plan1d(self.fft_len, t, batch)
            self._fft_plans[key] = plan
        return plan


    def fft(self, x, out=None):
        """Real-to-complex FFT of ``x`` ``(k, n, L)`` along time: ``(k, n, Nf)``."""
        cd = np.complex128 if x.dtype == np.float64 else np.complex64
        return self._transform("r2c", x, out, self.nf, cd)


    def ifft(self, y, out=None):
        """Complex-to-real inverse FFT of ``y`` ``(k, n, Nf)``, length ``L``, unnormalised: the
        ``1/L`` is folded into the stored ``Khat``. ``y`` is overwritten."""
        rd = np.float64 if y.dtype == np.complex128 else np.float32
        return self._transform("c2r", y, out, self.fft_len, rd)


    def _transform(self, kind: str, a, out, n_last: int, out_dtype):
        from cupy.cuda import cufft

        cp = self.cp
        a = cp.ascontiguousarray(a)
        k, n, _ = a.shape
        if out is None:
            out = cp.empty((k, n, n_last), dtype=out_dtype)
        direction = cufft.CUFFT_FORWARD if kind == "r2c" else cufft.CUFFT_INVERSE
        self.fft_plan(kind, k * n, a.dtype).fft(a, out, direction)
        return out


    def xhat_dtype(self, prec: PrecisionConfig) -> np.dtype:
        """:func:`xhat_dtype` of stage 3's compute dtype."""
        return xhat_dtype(self.compute, prec)

    def yhat_dtype(self, prec: PrecisionConfig) -> np.dtype:
        """:func:`yhat_dtype` of stage 3's compute dtype."""
        return yhat_dtype(self.compute, prec)


    def fused_plans(self, prec: PrecisionConfig, adjoint: bool, k: int, in_dtype, out_dtype,
                    ffts: tuple, fold: int = 0) -> FusedPlans:
        """The FFT plans of a product with stages 1 and 5 inside (:class:`FusedPlans`), of the
        kinds a plan names (:attr:`~fftmatvec.gpu.plan.Plan.ffts`, ``ffts`` = (forward,
        inverse)): :data:`~fftmatvec.gpu.plan.FFT_ROW` on the package's row FFT kernels,
        :data:`~fftmatvec.gpu.plan.FFT_CALLBACKS` a cuFFT plan with callbacks,
        :data:`~fftmatvec.gpu.plan.FFT_IN_FUSED_ADJOINT` no inverse plan (``inv`` None: stages
        3-5 run as one kernel). An adjoint with float16 storage gets a forward FFT that writes its
        output times the row scales. Where stage 3 computes in float32 and an FFT in float64,
        that FFT's output (input) is complex64: :meth:`xhat_dtype`, :meth:`yhat_dtype`. An inverse
        cuFFT plan adds ``fold`` splits of stage 3 itself (``split_sum``; the plan's ``fold``).
        Nothing is chosen here; a callback plan cuFFT cannot make raises
        :class:`fftmatvec.gpu.callbacks.CallbackError`."""
        in_dtype, out_dtype = np.dtype(in_dtype), np.dtype(out_dtype)
        fwd_kind, inv_kind = ffts
        if fwd_kind not in (FFT_ROW, FFT_CALLBACKS) or inv_kind not in (
                FFT_ROW, FFT_CALLBACKS, FFT_IN_FUSED_ADJOINT):
            raise ValueError(f"a fused product's transforms are row FFT kernels or cuFFT with "
                             f"callbacks, got {ffts}")
        if fold and inv_kind != FFT_CALLBACKS:
            raise ValueError("only an inverse cuFFT plan with callbacks adds stage 3's splits")
        fwd = self._row_fft_fwd(prec, adjoint, k, in_dtype) if fwd_kind == FFT_ROW else None
        inv = self._row_fft_inv(prec, adjoint, k, out_dtype) if inv_kind == FFT_ROW else None
        want_fwd, want_inv = fwd_kind == FFT_CALLBACKS, inv_kind == FFT_CALLBACKS
        if want_fwd or want_inv:
            cb_fwd, cb_inv = self._callback_plans(prec, adjoint, k, in_dtype, out_dtype,
                                                  want_fwd, want_inv, fold)
            fwd = cb_fwd if want_fwd else fwd
            inv = cb_inv if want_inv else inv
        return FusedPlans(fwd, inv, self.khat_store.scales_input(adjoint), fold)


    def _callback_plans(self, prec: PrecisionConfig, adjoint: bool, k: int, in_dtype, out_dtype,
                        want_fwd: bool = True, want_inv: bool = True, split_sum: int = 0) -> tuple:
        """The cuFFT callback plans (forward, inverse) of :meth:`fused_plans`, None for one not
        wanted; a plan cuFFT cannot make raises :class:`fftmatvec.gpu.callbacks.CallbackError`.
        ``split_sum``: the inverse loads stage 3's partial sums of that many splits and adds
        them (the plan's ``fold``)."""
        n_in, n_out = (self.nd, self.nm) if adjoint else (self.nm, self.nd)
        L, nt = self.fft_len, self.nt
        fft_real, ifft_real = prec.real_dtype("fft"), prec.real_dtype("ifft")
        sizes = {"FMV_L": f"{L}ULL", "FMV_NT": f"{nt}ULL"}
        fwd = inv = None
        if want_fwd:
            pad = ("FMV_PAD_LOAD", {**sizes, "FMV_TIN": _fftcb.ctype(in_dtype),
                                    "FMV_TMID": _fftcb.ctype(prec.pad_dtype),
                                    "FMV_TFFT": _fftcb.ctype(fft_real)})
            store, store_info = None, None
            if self.khat_store.scales_input(adjoint):  # float16 adjoint: the row scales out
                store = ("FMV_XHAT_SCALE_STORE", {
                    "FMV_NF": f"{self.nf}ULL", "FMV_ND": f"{self.nd}ULL",
                    "FMV_NFP": f"{self.khat_store.nfp}ULL",
                    "FMV_TFFTC": "double2" if fft_real == np.float64 else "float2"})
                store_info = self.khat_store.scale
            elif self.xhat_dtype(prec) != prec.complex_dtype("fft"):
                store = ("FMV_XHAT_STORE", {})
            fwd = _fftcb.get_plan("r2c", L, k * n_in, fft_real == np.float64, load=pad,
                                  store=store, store_info=store_info)
        if want_inv:
            widen = None  # stage 3's float32 sums widened as the inverse FFT loads them
            if split_sum:  # ... or its partial sums, added (and widened) as they are loaded
                widen = ("FMV_SPLIT_LOAD", {
                    "FMV_SPLITS": str(split_sum), "FMV_SPLIT_STRIDE": f"{k * n_out * self.nf}ULL",
                    "FMV_TPART": _CTYPE2[self.compute],
                    "FMV_TYHAT": _CTYPE2[self.yhat_dtype(prec)],
                    "FMV_TFFTC": _CTYPE2[prec.complex_dtype("ifft")]})
            elif self.yhat_dtype(prec) != prec.complex_dtype("ifft"):
                widen = ("FMV_YHAT_LOAD", {})
            unpad = ("FMV_UNPAD_STORE", {**sizes, "FMV_TOUT": _fftcb.ctype(out_dtype),
                                         "FMV_TMID": _fftcb.ctype(prec.reduce_dtype),
                                         "FMV_TFFT": _fftcb.ctype(ifft_real)})
            inv = _fftcb.get_plan("c2r", L, k * n_out, ifft_real == np.float64, load=widen,
                                  store=unpad)
        return fwd, inv


    def _row_fft_fwd(self, prec: PrecisionConfig, adjoint: bool, k: int, in_dtype):
        """:meth:`fused_plans`' forward transform on the row FFT kernels
        (:class:`fftmatvec.gpu.rowfft.RowFFT`)."""
        n_in = self.nd if adjoint else self.nm
        scaled = self.khat_store.scales_input(adjoint)
        return _rowfft.RowFFT("r2c", self.fft_len, self.nt, k * n_in, in_dtype, prec.pad_dtype,
                              prec.real_dtype("fft"), self.xhat_dtype(prec),
                              scale=self.khat_store.scale if scaled else None, nd=self.nd,
                              nfp=self.khat_store.nfp,
                              smem_per_block=self.smem_per_block)


    def _row_fft_inv(self, prec: PrecisionConfig, adjoint: bool, k: int, out_dtype):
        """:meth:`fused_plans`' inverse transform on the row FFT kernels."""
        n_out = self.nm if adjoint else self.nd
        return _rowfft.RowFFT("c2r", self.fft_len, self.nt, k * n_out, self.yhat_dtype(prec),
                              prec.reduce_dtype, prec.real_dtype("ifft"), out_dtype,
                              smem_per_block=self.smem_per_block)


    def pad_fft(self, plans, x, out):
        """Stages 1 and 2: the forward FFT of ``x`` ``(k, n, Nt)`` zero-padded to ``L``, into
        ``out`` (from :meth:`FusedBuffers.xhat_buffer
        <fftmatvec.gpu.fused.FusedBuffers.xhat_buffer>`); the input is only read."""
        x = self.cp.ascontiguousarray(x)
        plans[0](x.data.ptr, out.data.ptr)
        return out


    def ifft_unpad(self, plans, yhat, out):
        """Stages 4 and 5: the inverse FFT of ``yhat`` ``(k, n, Nf)``, its first ``Nt`` samples
        written to ``out`` (from :meth:`FusedBuffers.y_buffer
        <fftmatvec.gpu.fused.FusedBuffers.y_buffer>`). ``yhat`` is overwritten. Where the plan
        adds stage 3's splits (``plans.split_sum``), ``yhat`` holds their partial sums instead,
        ``(splits, k, n, Nf)`` in the compute dtype
        (:meth:`~fftmatvec.gpu.fused.FusedBuffers.inverse_input_nbytes`)."""
        rows = out.shape[0] * out.shape[1]
        if plans.split_sum:
            need = _partials_nbytes(self, plans, rows)
            what = f"the partial sums of {plans.split_sum} splits"
        else:
            need = rows * self.nf * np.dtype(yhat.dtype).itemsize
            what = "the spectra"
        if yhat.nbytes < need:
            raise ValueError(f"the inverse FFT reads {what} of {rows} rows, {need} bytes; "
                             f"the array given has {yhat.nbytes}")
        plans[1](yhat.data.ptr, out.data.ptr)
        return out


    def pad(self, x, prec: PrecisionConfig, out=None):
        """Stage 1 fused with stage 2's input cast: ``(k, n, Nt)`` -> ``(k, n, L)`` in the FFT's
        real precision, each value rounded to stage 1's precision on the way."""
        cp = self.cp
        x = cp.ascontiguousarray(x)
        k, n, nt = x.shape
        L = self.fft_len
        out_dtype = prec.real_dtype("fft")
        if out is None:
            out = cp.empty((k, n, L), dtype=out_dtype)
        name = f"pad_{_REAL_SUFFIX[x.dtype]}_{_REAL_SUFFIX[prec.pad_dtype]}_{_REAL_SUFFIX[out_dtype]}"
        rows = k * n
        kernels.get_function(name)(*rows_launch(rows, L, self.num_sms),
                                   (x, out, _i64(rows), _i64(nt), _i64(L)))
        return out


    def unpad(self, y, prec: PrecisionConfig, nt: int, dtype, weight=None, out=None):
        """Stage 5: ``(k, n, L)`` -> ``(k, n, Nt)`` in ``dtype``, rounded to stage 5's precision
        on the way, optionally multiplied by a diagonal weight ``(n, Nt)``."""
        cp = self.cp
        y = cp.ascontiguousarray(y)
        k, n, L = y.shape
        dtype = np.dtype(dtype)
        if out is None:
            out = cp.empty((k, n, nt), dtype=dtype)
        name = f"unpad_{_REAL_SUFFIX[y.dtype]}_{_REAL_SUFFIX[prec.reduce_dtype]}_{_REAL_SUFFIX[dtype]}"
        rows = k * n
        if weight is None:
            w, n_w = np.uint64(0), 1
        else:
            w, n_w = cp.ascontiguousarray(weight, dtype=dtype), weight.shape[0]
        kernels.get_function(name)(
            *rows_launch(rows, nt, self.num_sms),
            (y, out, w, _i64(n_w), _i64(rows), _i64(nt), _i64(L))
        )
        return out
