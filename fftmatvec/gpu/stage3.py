"""Stage 3 launches: the per-frequency products with ``Khat`` on the package's kernels (GEMV,
staged, cp.async, input-in-registers, tensor cores), their tiles, split-K and packed
arguments. Which of them a product takes is the planner's choice
(:mod:`fftmatvec.gpu.planner`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import math
from dataclasses import dataclass

import numpy as np

from .. import kernels
from .rules import (ASYNC_TILES, MMA_MAX_KB, PIPE_TILES, REDUCE_LANES, REDUCE_SERIAL_THREADS,
                    STAGED_TILES, TILES, WIDE_TILES, XREG_MAX_ND, XREG_MAX_SMEM, XREG_ND,
                    XREG_TILES, _CPLX_SUFFIX, _MMA_ROWS, _STAGED_J)

if TYPE_CHECKING:
    from .engine import KernelEngine


@dataclass(frozen=True)
class _Launch:
    name: str
    kb: int
    grid: tuple
    block: tuple
    splits: int
    red_chunk: int
    staged: bool = False  # the staged kernels' arguments (sbgemvs_* and sbgemva_*)
    mma: bool = False
    smem: int = 0  # bytes of dynamic shared memory (tensor-core and cp.async launches)
    resident: int = 0  # blocks resident on the device at once (tensor-core launches)
    freq_major: bool = False  # consecutive blocks take consecutive frequency tiles (tensor cores)
    xreg_rows: int = 0  # output rows per block of an input-in-registers adjoint (sbgemvx_*), else 0

    def describe(self) -> str:
        """The launch in words: kernel family, right-hand sides, kernel, grid, split-K."""
        family = ("tensor cores" if self.mma else "input in registers" if self.xreg_rows
                  else "cp.async" if self.name.startswith("sbgemva_")
                  else "staged" if self.staged else "GEMV")
        split = (f", split-K {self.splits} x {self.red_chunk} rows" if self.splits > 1
                 else "")
        sides = f"{self.kb} right-hand side" + ("s" if self.kb > 1 else "")
        return f"{family}, {sides}: {self.name}, grid {self.grid}, block {self.block}{split}"


def async_chunks(tile) -> int:
    """W of a cp.async tile (RT, TY, J, NS[, W]): chunks of 16 bytes per thread and row."""
    return tile[4] if len(tile) > 4 else 1


def _holding(n: int, compiled) -> int | None:
    """The smallest of the ``compiled`` counts (ascending) that holds ``n``, or None."""
    return next((c for c in compiled if c >= n), None)


def _i64(v) -> np.int64:
    return np.int64(v)


def _split_k(splits: int, n_red: int, step: int) -> tuple[int, int]:
    """(splits, rows per split) for ``splits`` wanted over ``n_red`` reduction rows, each
    split a multiple of ``step`` rows (the kernel's chunk); fewer splits when rounding up the
    chunks leaves some empty."""
    red_chunk = -(-math.ceil(n_red / splits) // step) * step
    return math.ceil(n_red / red_chunk), red_chunk


def _fill_splits(base: int, target: int, max_splits: int) -> int:
    """Split-K count that brings ``base`` blocks up to ``target`` (whole rounds of the device's
    block slots), at most ``max_splits``; 1 when ``base`` already reaches it."""
    if base >= target:
        return 1
    return max(1, min(math.ceil(target / base), max_splits))


def pipe_max_splits(n_red: int, tile) -> int:
    """The most splits a tensor-core launch with ``tile`` = (MT, V, WR, WF, KS, NS) takes over
    ``n_red`` reduction rows: each split keeps at least 2 x NS stages of KS rows."""
    ks, ns = tile[4], tile[5]
    return max(1, n_red // (2 * ns * ks))


def pipe_split_time(splits: int, chunk: int, base: int, resident: int, partial_bytes: int,
                    model) -> float:
    """``PIPE_SPLIT_MODEL``'s time (microseconds) of a launch of ``splits`` splits of ``chunk``
    reduction rows, ``base`` blocks per split, ``resident`` blocks on the device at once,
    ``partial_bytes`` of partial sums per split; ``model`` = (a, w, b)."""
    a, w, b = model
    t = math.ceil(base * splits / resident) * (a * chunk + w)
    return t + (b * splits * partial_bytes / 1e6 if splits > 1 else 0.0)


def pipe_split_count(base: int, resident: int, n_red: int, step: int, max_splits: int,
                     partial_bytes: int, model, max_rows: int | None = None) -> int:
    """The split-K count, 1 to ``max_splits``, that minimises ``pipe_split_time`` over
    ``n_red`` reduction rows split in whole multiples of ``step``, with at most ``max_rows``
    rows a split where that leaves ``max_splits`` or fewer splits."""
    best_t, best = math.inf, 1
    first = 1 if max_rows is None else max(1, min(max_splits, math.ceil(n_red / max_rows)))
    # past 64 rounds of blocks the rounding of the last one no longer matters
    top = max(first, min(max_splits, math.ceil(64 * resident / max(1, base))))
    seen = set()
    for want in range(first, top + 1):
        splits, chunk = _split_k(want, n_red, step)
        if splits in seen:
            continue
        seen.add(splits)
        t = pipe_split_time(splits, chunk, base, resident, partial_bytes, model)
        if t < best_t * (1 - 1e-9):
            best_t, best = t, splits
    return best


class Stage3Launches:
    """Stage 3's launches (a base class of :class:`~fftmatvec.gpu.engine.KernelEngine`)."""

    def _xreg_fw(self) -> int:
        """The frequencies per block of an input-in-registers launch (:data:`XREG_TILES`)."""
        return min(XREG_TILES[self.store], key=lambda fw: (-(-self.nf // fw) * fw, -fw))


    def _xreg_name(self, fw: int, in_dtype, out_dtype) -> str:
        return (f"sbgemvx_{self.store}_{_CPLX_SUFFIX[np.dtype(in_dtype)]}_"
                f"{_CPLX_SUFFIX[np.dtype(out_dtype)]}_n{_holding(self.nd, XREG_ND)}_f{fw}")


    def xreg_smem(self, fw: int) -> int:
        """Bytes of shared memory of an input-in-registers launch of ``fw`` frequencies."""
        _, rs, ns = XREG_TILES[self.store][fw]
        return ns * rs * _holding(self.nd, XREG_ND) * fw * self.data.itemsize


    def xreg_rows(self, fw: int) -> int:
        """Output rows per block of an input-in-registers launch of ``fw`` frequencies, before
        the grid's limit: :data:`XREG_FEW_ROWS` for few sensors, else :data:`XREG_ROWS`."""
        return self.rules.xreg_few_rows.get((self.store, _holding(self.nd, XREG_ND), fw), self.rules.xreg_rows)


    def _launch_xreg(self, kb: int, in_dtype, out_dtype, fw: int | None = None,
                     rows: int | None = None) -> _Launch:
        """An adjoint launch of ``kb`` <= 16 right-hand sides with the input in registers
        (``hip_kernels/sbgemvx.cuh``): blocks of ``fw`` frequencies (default
        :meth:`_xreg_fw`) and ``rows`` output rows (default :meth:`xreg_rows`)."""
        if not 1 <= kb <= MMA_MAX_KB:
            raise ValueError(f"an input-in-registers launch takes 1 to {MMA_MAX_KB} right-hand "
                             f"sides, got {kb}")
        if self.nd > XREG_MAX_ND:
            raise ValueError(f"the input-in-registers kernel takes at most {XREG_MAX_ND} "
                             f"reduction rows, got {self.nd}")
        fw = self._xreg_fw() if fw is None else fw
        if fw not in XREG_TILES.get(self.store, {}):
            raise ValueError(f"no input-in-registers kernel of {fw} frequencies for {self.store}")
        bg, rs, _ = XREG_TILES[self.store][fw]
        rows = self.xreg_rows(fw) if rows is None else rows
        rows = max(rows, -(-self.nm // 65535))  # the grid's y extent
        rows = -(-rows // rs) * rs
        smem = self.xreg_smem(fw)
        if smem > self.smem_per_block:
            raise ValueError(f"the input-in-registers kernel needs {smem} bytes of shared "
                             f"memory, the device allows {self.smem_per_block} per block")
        grid = (-(-self.nf // fw), -(-self.nm // rows))
        block = (fw * -(-kb // bg), 1)
        return _Launch(self._xreg_name(fw, in_dtype, out_dtype), kb, grid, block, 1, 0,
                       smem=smem, xreg_rows=rows)


    def _pipe_name(self, tile, in_dtype, out_dtype) -> str:
        mt, v, wr, wf, ks, ns = tile
        return (f"sbgemmp_{self.pipe_store}_{_CPLX_SUFFIX[np.dtype(in_dtype)]}_"
                f"{_CPLX_SUFFIX[np.dtype(out_dtype)]}_m{mt}_v{v}_w{wr}x{wf}_k{ks}_s{ns}")


    def pipe_smem(self, tile, in_dtype) -> int:
        """Bytes of shared memory of a pipelined launch with ``tile`` = (MT, V, WR, WF, KS, NS)."""
        mt, v, wr, wf, ks, ns = tile
        rows = _MMA_ROWS * mt * wr
        freqs = wf * v
        per_stage = ks * freqs * (rows * self.data.itemsize + 16 * np.dtype(in_dtype).itemsize)
        return per_stage * ns


    def _launch_pipe(self, kb, n_out, n_red, in_dtype, out_dtype, tile=None,
                     adjoint=False) -> _Launch:
        """A tensor-core launch for ``kb`` <= 16 right-hand sides; ``tile`` = (MT, V, WR, WF,
        KS, NS) overrides the default (:meth:`_pipe_tile`). The split-K count minimises
        ``PIPE_SPLIT_MODEL``'s time over the counts that leave each split at least 2 x NS
        stages, or for the few-row tile fills ``PIPE_FEW_WAVES`` rounds of the device's resident
        blocks; the rules' ``pipe_splits`` sets it, and their ``pipe_waves`` the rounds."""
        if not 1 <= kb <= MMA_MAX_KB:
            raise ValueError(f"a tensor-core launch takes 1 to {MMA_MAX_KB} right-hand sides, got {kb}")
        waves = self.rules.pipe_waves
        if tile is None:
            tile, few_waves = self._pipe_tile(n_out, n_red, adjoint)
            if waves is None:
                waves = few_waves
        tile = tuple(tile)
        store = self.pipe_store
        if tile not in PIPE_TILES[store]:
            raise ValueError(f"pipelined tile {tile} is not compiled for {store}")
        mt, v, wr, wf, ks, _ = tile
        smem = self.pipe_smem(tile, in_dtype)
        if smem > self.smem_per_block:
            raise ValueError(f"pipelined tile {tile} needs {smem} bytes of shared memory, "
                             f"the device allows {self.smem_per_block} per block")
        rows = _MMA_ROWS * mt * wr
        base = math.ceil(n_out / rows) * math.ceil(self.nf / (wf * v))
        threads = 32 * wr * wf
        # the split kernel writes partial sums in the compute dtype: its registers decide
        resident = self.num_sms * self.resident_blocks(
            self._pipe_name(tile, in_dtype, self.compute), threads, smem)
        max_splits = pipe_max_splits(n_red, tile)
        if self.rules.pipe_splits is not None:
            splits = max(1, min(self.rules.pipe_splits, max_splits))
        elif waves is not None:
            splits = _fill_splits(base, waves * resident, max_splits)
        else:
            splits = pipe_split_count(base, resident, n_red, ks, max_splits,
                                      kb * n_out * self.nf * self.compute.itemsize,
                                      self.rules.pipe_split_model[(store, bool(adjoint))],
                                      self.rules.pipe_max_split_rows.get(store))
        splits, red_chunk = _split_k(splits, n_red, ks)
        name = self._pipe_name(tile, in_dtype, self.compute if splits > 1 else out_dtype)
        # Adjoints whose row tiles outnumber the resident blocks take the frequency tiles of a
        # row tile together: a round of blocks in the row order would read 128-byte runs of one
        # frequency tile, far apart. Forward products keep the row order: their row tiles share
        # the large vectors' tiles in L2 (the measurements: docs/history.md).
        freq_major = bool(adjoint) and math.ceil(n_out / rows) > resident
        if self.rules.pipe_freq_major is not None:
            freq_major = bool(self.rules.pipe_freq_major)
        return _Launch(name, kb, (base, splits), (32, wr * wf), splits, red_chunk, mma=True,
                       smem=smem, resident=resident, freq_major=freq_major)


    def resident_blocks(self, name: str | None, threads: int, smem: int) -> int:
        """Blocks of kernel ``name`` (``threads`` threads, ``smem`` bytes of dynamic shared
        memory) that one multiprocessor holds at once: the least of what its shared memory
        (1 KB reserved per block), threads and registers allow. The registers come from the
        compiled kernel; where the driver does not report them, or ``name`` is None, they are
        left out."""
        by_smem = self.smem_per_sm // (smem + 1024) if smem else 32
        by_threads = self.threads_per_sm // threads
        by_regs = 32
        regs = 0 if name is None else self.kernel_regs(name)
        if regs:
            per_warp = -(-regs * 32 // 256) * 256  # registers are allocated 256 per warp
            by_regs = (self.regs_per_sm // per_warp) // max(1, threads // 32)
        return max(1, min(by_smem, by_threads, by_regs, 32))


    def kernel_regs(self, name: str) -> int:
        """Registers per thread of kernel ``name`` in the device's code object (0 where the
        driver does not report them or there is no such kernel), looked up once."""
        regs = self._num_regs.get(name)
        if regs is None:
            try:
                regs = int(kernels.get_function(name).attributes["num_regs"])
            except (RuntimeError, KeyError, AttributeError):  # KernelLoadError is a RuntimeError
                regs = 0  # no such kernel, or no such attribute on this platform
            self._num_regs[name] = regs
        return regs


    def _launch_staged(self, n_out, n_red, in_dtype, out_dtype, tile=None) -> _Launch:
        """A launch of the staged kernel; ``tile`` = (RT, V, TY) overrides the defaults."""
        if tile is None:
            rt, v = {"c128": (2, 1), "c64": (4, 2), "c32h": (4, 4)}[self.store]
            if self.store == "c32h" and n_out <= 16:
                rt = 1
            ty = 16
        else:
            rt, v, ty = tile
            if not 1 <= ty <= 16:  # the kernel's launch bound: 512 threads
                raise ValueError(f"staged blocks have 1 to 16 rows of 32 threads, got {ty}")
        if (rt, v) not in STAGED_TILES[self.store]:
            raise ValueError(f"staged tile (RT={rt}, V={v}) is not compiled for {self.store}")
        ty = max(1, min(ty, math.ceil(n_out / rt)))
        threads = 32 * ty
        base = math.ceil(n_out / (rt * ty)) * math.ceil(self.nf / (32 * v))
        per_sm = self.rules.staged_threads_per_sm or (2048 if self.store == "c64" else 1024)
        target = self.num_sms * max(1, per_sm // threads)
        splits = _fill_splits(base, target, math.ceil(n_red / _STAGED_J))
        splits, red_chunk = _split_k(splits, n_red, _STAGED_J)
        out_sfx = _CPLX_SUFFIX[self.compute if splits > 1 else np.dtype(out_dtype)]
        name = f"sbgemvs_{self.store}_{_CPLX_SUFFIX[np.dtype(in_dtype)]}_{out_sfx}_r{rt}_v{v}"
        return _Launch(name, 1, (base, splits), (32, ty), splits, red_chunk, staged=True)


    def _async_grid(self, tile, waves: int, n_out: int, n_red: int, in_dtype,
                    adjoint: bool = False):
        """(blocks of one split, split-K count, reduction rows per split, block slots of the
        device) of a cp.async launch: when the blocks fill less than ``waves`` rounds of the
        slots the shared memory and threads leave, split-K makes that many rounds of them
        (where one split fills a round, only down to :data:`ASYNC_SPLIT_ROWS` rows per split)."""
        rt, ty, j, ns = tile[:4]
        smem = self.async_smem(tile, in_dtype)
        base = math.ceil(n_out / (rt * ty)) * math.ceil(self.nf / self._async_freqs(tile))
        slots = self.num_sms * self.resident_blocks(None, 32 * ty, smem)
        # each split keeps at least 2 * NS stages of reduction steps, and where one split's
        # blocks fill a round, ASYNC_SPLIT_ROWS rows
        most = n_red // (2 * ns * j)
        rows = self.rules.async_split_rows.get((self.store, bool(adjoint)))
        if rows is not None and base >= slots:
            most = max(1, min(most, n_red // rows))
        splits = _fill_splits(base, waves * slots, most)
        splits, red_chunk = _split_k(splits, n_red, j)
        return base, splits, red_chunk, slots


    def async_fill(self, tile, waves: int, n_out: int, n_red: int, in_dtype,
                   adjoint: bool = False) -> float:
        """The share of the block slots that a launch's rounds keep busy: its blocks over the
        rounds they take times the slots (1 when the last round is full)."""
        base, splits, _, slots = self._async_grid(tile, waves, n_out, n_red, in_dtype, adjoint)
        blocks = base * splits
        return blocks / (math.ceil(blocks / slots) * slots)


    def _async_freqs(self, tile) -> int:
        """Frequencies a cp.async block covers: 32 threads x W chunks of 16 bytes of Khat."""
        return 32 * (16 // self.data.itemsize) * async_chunks(tile)


    def _async_name(self, tile, in_dtype, out_dtype) -> str:
        rt, ty, j, ns = tile[:4]
        w = async_chunks(tile)
        return (f"sbgemva_{self.store}_{_CPLX_SUFFIX[np.dtype(in_dtype)]}_"
                f"{_CPLX_SUFFIX[np.dtype(out_dtype)]}_r{rt}_y{ty}_j{j}_s{ns}"
                + (f"_w{w}" if w > 1 else ""))


    def async_smem(self, tile, in_dtype) -> int:
        """Bytes of shared memory of a cp.async launch with ``tile`` = (RT, TY, J, NS[, W])."""
        rt, ty, j, ns = tile[:4]
        w = async_chunks(tile)
        freqs = self._async_freqs(tile)
        per_stage = j * (rt * 32 * ty * 16 * w + freqs * np.dtype(in_dtype).itemsize)
        return per_stage * ns


    def _launch_async(self, n_out, n_red, in_dtype, out_dtype, tile=None,
                      adjoint=False) -> _Launch:
        """A launch of the cp.async one-vector kernel; ``tile`` = (RT, TY, J, NS[, W]) overrides the
        default. When the blocks fill less than the rules' ``async_waves`` rounds of the block slots the
        shared memory and threads leave, split-K makes that many rounds of them."""
        default, waves = self._async_default(n_out, n_red, adjoint, in_dtype)
        tile = default if tile is None else tuple(tile)
        if self.rules.async_waves is not None:
            waves = self.rules.async_waves
        if tile not in ASYNC_TILES[self.store]:
            raise ValueError(f"cp.async tile {tile} is not compiled for {self.store}")
        ty = tile[1]
        smem = self.async_smem(tile, in_dtype)
        if smem > self.smem_per_block:
            raise ValueError(f"cp.async tile {tile} needs {smem} bytes of shared memory, "
                             f"the device allows {self.smem_per_block} per block")
        base, splits, red_chunk, _ = self._async_grid(tile, waves, n_out, n_red, in_dtype,
                                                      adjoint)
        name = self._async_name(tile, in_dtype, self.compute if splits > 1 else out_dtype)
        return _Launch(name, 1, (base, splits), (32, ty), splits, red_chunk, staged=True, smem=smem)


    def _launch(self, kb, n_out, n_red, in_dtype, out_dtype, tile=None, adjoint=False) -> _Launch:
        if tile is None and self._use_async(kb, n_out, n_red, adjoint, in_dtype):
            return self._launch_async(n_out, n_red, in_dtype, out_dtype, adjoint=adjoint)
        if tile is None and self._use_staged(kb, n_red, adjoint):
            return self._launch_staged(n_out, n_red, in_dtype, out_dtype)
        bx = ty = None
        w, per_sm = 1, self.rules.gemv_blocks_per_sm
        if tile is not None:  # (rt, v, bx, ty) or (rt, v, bx, ty, w) from a tuning sweep
            rt, v, bx, ty, w = (tuple(tile) + (1,))[:5]
        else:
            wide = self._wide_default(kb, n_out, n_red, adjoint)
            if wide is not None:
                (rt, v, w), (bx, ty), per_sm = wide
            else:
                rt, v = self._tile(kb, n_out, adjoint)
        if w == 1 and (rt, kb, v) not in TILES[self.store]:
            raise ValueError(f"tile (RT={rt}, KB={kb}, V={v}) is not compiled for {self.store}")
        if w != 1 and (kb != 1 or (rt, v, w) not in WIDE_TILES[self.store]):
            raise ValueError(f"tile (RT={rt}, KB={kb}, V={v}, W={w}) is not compiled for "
                             f"{self.store}")
        if bx is None:
            bx = 32 if math.ceil(self.nf / v) <= 32 else 64
            ty = max(1, min(128 // bx, math.ceil(n_out / rt)))  # 128-thread blocks
        base, splits = self._gemv_blocks(n_out, n_red, rt, v, w, bx, ty, per_sm)
        splits, red_chunk = _split_k(splits, n_red, 1)
        out_sfx = _CPLX_SUFFIX[self.compute if splits > 1 else np.dtype(out_dtype)]
        name = (f"sbgemv_{self.store}_{_CPLX_SUFFIX[np.dtype(in_dtype)]}_{out_sfx}"
                f"_r{rt}_k{kb}_v{v}" + (f"_w{w}" if w > 1 else ""))
        return _Launch(name, kb, (base, splits), (bx, ty), splits, red_chunk)


    def _gemv_blocks(self, n_out, n_red, rt, v, w, bx, ty, per_sm) -> tuple[int, int]:
        """(blocks of one split, split-K count) of a GEMV launch: blocks of bx x ty threads, each
        thread RT rows x W groups of V frequencies, split until ``per_sm`` blocks of 128 threads
        per multiprocessor are reached, each split keeping at least 32 reduction rows."""
        base = math.ceil(math.ceil(self.nf / v) / (bx * w)) * math.ceil(n_out / (ty * rt))
        target = per_sm * self.num_sms * max(1, 128 // (bx * ty))
        return base, _fill_splits(base, target, n_red // 32)


    def launches(self, adjoint: bool, k: int, in_dtype, out_dtype) -> tuple:
        """Stage 3's launches for an input of ``in_dtype`` and an output of ``out_dtype`` run on
        their own (the operator's sbgemv stage, the building blocks): those of
        :func:`~fftmatvec.gpu.planning.stage3_launches` for this shape, device (``device``),
        rules (``rules``) and overrides (``resolved``), asked once per shape."""
        from .planning import Problem, stage3_launches

        key = (bool(adjoint), int(k), np.dtype(in_dtype), np.dtype(out_dtype))
        hit = self._launches.get(key)
        if hit is None:
            problem = Problem(self.nd, self.nm, self.nt, self.fft_len, k, adjoint,
                              self.prec.letters)
            hit = self._launches[key] = stage3_launches(problem, self.device, self.rules,
                                                        self.resolved, in_dtype, out_dtype)
        return hit

    def workspace_size(self, adjoint: bool, k: int, in_dtype, out_dtype) -> int:
        """Elements (of the compute dtype) of split-K workspace a product needs."""
        return self.stage3(adjoint, k, in_dtype, out_dtype).workspace_bytes // self.compute.itemsize


    def apply(self, xhat, adjoint: bool, out_dtype, out=None, workspace=None, plan=None,
              xhat_scaled: bool = False):
        """``xhat`` ``(k, n_in, Nf)`` -> ``(k, n_out, Nf)`` in ``out_dtype`` (into ``out`` if given,
        a C-contiguous array of that shape and dtype). The kernels of a float16 adjoint take
        their input times the row scales: ``xhat_scaled`` says ``xhat`` is so already (the FFT's
        store callback), else :meth:`scale_xhat` makes it so first. ``plan``: the launches to run,
        packed (:meth:`stage3`: an executor's) or a list of launches; by default the engine's."""
        cp = self.cp
        xhat = cp.ascontiguousarray(xhat)
        scales = self.scales_input(adjoint)
        if xhat_scaled and not scales:
            raise ValueError("only a float16 adjoint's input carries the row scales")
        if scales and not xhat_scaled:
            xhat = self.scale_xhat(xhat)
        k = xhat.shape[0]
        n_out = self.nm if adjoint else self.nd
        out_dtype = np.dtype(out_dtype)
        y = cp.empty((k, n_out, self.nf), dtype=out_dtype) if out is None else out
        run = plan if isinstance(plan, _Stage3) else self.stage3(adjoint, k, xhat.dtype,
                                                                 out_dtype, plan)
        work = 0
        if run.workspace_bytes:
            if workspace is None:
                work_mem = cp.cuda.alloc(run.workspace_bytes)  # held until the launches are queued
                work = work_mem.ptr
            elif workspace.nbytes < run.workspace_bytes:
                raise ValueError(f"the split-K workspace has {workspace.nbytes} bytes, this "
                                 f"product needs {run.workspace_bytes}")
            else:
                work = workspace.data.ptr
        run(cp.cuda.get_current_stream().ptr, xhat.data.ptr, y.data.ptr, work)
        return y


    def stage3(self, adjoint: bool, k: int, in_dtype, out_dtype, plan=None) -> "_Stage3":
        """Stage 3 of a product of ``k`` right-hand sides, its launches packed once
        (:class:`_Stage3`): ``plan``'s launches (a :class:`~fftmatvec.gpu.plan.Plan`'s
        ``launches``: an executor, tests, tuning), packed afresh for the caller to hold; without
        ``plan``, the launches the planning function chooses for stage 3 on its own
        (:meth:`~fftmatvec.gpu.engine.KernelEngine.launches`), packed once per shape."""
        in_dtype, out_dtype = np.dtype(in_dtype), np.dtype(out_dtype)
        if plan is not None:
            return _Stage3(self, adjoint, k, in_dtype, out_dtype, tuple(plan))
        plan = self.launches(adjoint, k, in_dtype, out_dtype)
        key = (adjoint, k, in_dtype, out_dtype)
        run = self._stage3.get(key)
        if run is None or run.plan != tuple(plan):  # re-packed where the plan was made afresh
            run = _Stage3(self, adjoint, k, in_dtype, out_dtype, tuple(plan))
            self._stage3[key] = run
        return run


    def scales_input(self, adjoint: bool) -> bool:
        """Whether a product's stage-3 input must carry the float16 row scales: adjoints with
        `h` storage (the kernels of the adjoint read no scales)."""
        return bool(adjoint) and self.scale is not None


    def scale_xhat(self, xhat, out=None):
        """An adjoint's input ``(k, Nd, Nf)`` times the float16 row scales, in its own dtype
        (into ``out`` if given): what the forward FFT's store callback writes, as a kernel of
        its own for the products that run without callbacks."""
        if self.scale is None:
            raise ValueError("only float16 storage has row scales")
        cp = self.cp
        xhat = cp.ascontiguousarray(xhat)
        k, n, nf = xhat.shape
        if n != self.nd or nf != self.nf:
            raise ValueError(f"an adjoint's input is (k, {self.nd}, {self.nf}), got {xhat.shape}")
        if out is None:
            out = cp.empty_like(xhat)
        rows = k * n
        kernels.get_function(f"scale_rows_{_CPLX_SUFFIX[xhat.dtype]}")(
            *self._rows_launch(rows, nf),
            (xhat, self.scale, out, _i64(rows), _i64(self.nd), _i64(nf), _i64(self.nfp)))
        return out


    def split_sum(self, n: int, splits: int, out_dtype, serial: bool | None = None) -> tuple:
        """(kernel, grid, block, arguments after the two pointers) of the split-K sum of
        ``splits`` partial results of ``n`` outputs each (in the compute dtype) into
        ``out_dtype``: one thread per output where there are few splits and many outputs,
        else lanes of threads summing each output's splits (``serial`` True or False: that
        kernel, for the probes)."""
        pair = f"{_CPLX_SUFFIX[self.compute]}_{_CPLX_SUFFIX[np.dtype(out_dtype)]}"
        args = (_i64(n), np.int32(splits))
        if serial is None:
            serial = (splits <= self.rules.reduce_serial_max_splits
                      and n >= self.rules.reduce_serial_min_outputs * self.num_sms)
        if serial:
            threads = REDUCE_SERIAL_THREADS
            blocks = min(math.ceil(n / threads), 8 * self.num_sms)
            return kernels.get_function(f"reduce_serial_{pair}"), (blocks,), (threads,), args
        lanes = min(REDUCE_LANES, splits)  # threads summing one output's splits
        blocks = min(math.ceil(n / 32), 32 * self.num_sms)
        return kernels.get_function(f"reduce_{pair}"), (blocks,), (32, lanes), args


    def _launch_args(self, launch: _Launch, adjoint: bool, n_out: int, n_red: int, out_dtype):
        """(kernel, its arguments after Khat, scale, x and y, the split-K sum or None) of a
        launch, made once: a product's host time before its first kernel runs is time the
        device waits."""
        key = (launch, adjoint, out_dtype)
        hit = self._args.get(key)
        if hit is not None:
            return hit
        nf, nfp, kb = self.nf, self.nfp, launch.kb
        so, sr, shift, sb = self.khat_strides(adjoint)
        args = (_i64(nf), _i64(nfp), _i64(n_out), _i64(n_red), _i64(so), _i64(sr),
                np.int32(shift), _i64(sb))
        smem = launch.smem
        if launch.xreg_rows:
            if not adjoint:
                raise ValueError("the input-in-registers kernel serves adjoints only")
            args += (np.int32(kb), np.int32(launch.xreg_rows))
            smem = smem if smem > XREG_MAX_SMEM else 0  # no opt-in: the default carveout
        else:
            args += (np.int32(adjoint), _i64(launch.red_chunk))
            if launch.staged:
                args += (_i64(n_out * nf),)
            elif launch.mma:
                args += (np.int32(kb), _i64(n_red * nf), _i64(n_out * nf),
                         _i64(kb * n_out * nf), np.int32(launch.freq_major))
            else:
                args += (_i64(n_red * nf), _i64(n_out * nf), _i64(kb * n_out * nf))
        reduce = None
        if launch.splits > 1:
            n = kb * n_out * nf
            reduce = self.split_sum(n, launch.splits, out_dtype)
        hit = (kernels.get_function(launch.name, shared_mem=smem), args, reduce)
        self._args[key] = hit
        return hit


class _Stage3:
    """Stage 3 of one product shape (direction, right-hand sides, dtypes): its launches, their
    arguments packed once (:class:`~fftmatvec.kernels.PackedLaunch`). A call passes the
    input, output and split-K workspace pointers; launches of a slice of the right-hand sides
    take them at that slice's offset."""

    def __init__(self, eng: KernelEngine, adjoint: bool, k: int, in_dtype, out_dtype, plan):
        n_in, n_out, n_red = (eng.nd, eng.nm, eng.nd) if adjoint else (eng.nm, eng.nd, eng.nm)
        in_dtype, out_dtype = np.dtype(in_dtype), np.dtype(out_dtype)
        if sum(la.kb for la in plan) != k:
            raise ValueError(f"the plan's launches take {sum(la.kb for la in plan)} "
                             f"right-hand sides, the product {k}")
        self.plan = plan
        scale = np.uint64(0) if eng.scale is None or adjoint else eng.scale  # forward only
        in_row, out_row = n_in * eng.nf * in_dtype.itemsize, n_out * eng.nf * out_dtype.itemsize
        self.steps = []  # (launch, split-K sum or None, input offset, output offset)
        self.workspace_bytes = 0
        b0 = 0
        for la in plan:
            fn, args, reduce = eng._launch_args(la, adjoint, n_out, n_red, out_dtype)
            main = kernels.PackedLaunch(fn, la.grid, la.block, la.smem,
                                        (eng.data, scale, None, None) + args)
            red = None
            if reduce is not None:
                red_fn, grid, block, red_args = reduce
                red = kernels.PackedLaunch(red_fn, grid, block, 0, (None, None) + red_args)
                self.workspace_bytes = max(self.workspace_bytes, la.splits * la.kb * n_out
                                           * eng.nf * eng.compute.itemsize)
            self.steps.append((main, red, b0 * in_row, b0 * out_row))
            b0 += la.kb

    def partials_launch(self):
        """The launch of a plan of one launch with split-K, without its sum: called as
        ``launch(stream_ptr, x_ptr, work_ptr)``, it writes the partial sums
        ``(splits, k, n_out, Nf)`` into the workspace, for an inverse FFT that adds them
        (:attr:`FusedPlans.split_sum`)."""
        if len(self.steps) != 1 or self.steps[0][1] is None:
            raise ValueError("only a stage 3 of one launch with split-K leaves partial sums")
        return self.steps[0][0]

    def __call__(self, stream_ptr: int, x_ptr: int, y_ptr: int, work_ptr: int = 0) -> None:
        for main, red, xo, yo in self.steps:
            if red is None:
                main(stream_ptr, x_ptr + xo, y_ptr + yo)
            else:  # partial sums into the workspace, then their sum into the output
                main(stream_ptr, x_ptr + xo, work_ptr)
                red(stream_ptr, work_ptr, y_ptr + yo)
