#!/usr/bin/env python
"""What caps the float16 one-vector product's rate: its access pattern, measured.

Times the probe kernels of ``scripts/probe_khat_access.cuh`` (four ways to stream float16
``Khat`` through stage 3 for one vector, see that file) beside the engine's own launch and two
plain reads of 4 GiB (one linear grid-stride read; one contiguous chunk per block, from 16 KiB to
8 MiB). Each probe is first checked against the engine's product; then each is timed computing
the product ('gemv'), with its arithmetic replaced by one add per loaded word ('read'), and
without the vector's copies ('Khat only', cp.async and blocked layout). Two passes, the
second in reverse order; the faster of the two is kept. NVIDIA sm_90 (the bulk copies).

Usage: python scripts/probe_khat_access.py [--sizes 5000x100x1000,...] [--json F]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_matvec import median_time, write_json  # noqa: E402

# (RT, TY, J, NS, W) per family: pa = the engine's cp.async kernel, pb = bulk copies, pp =
# persistent blocks, pl = the blocked layout (its J is also the layout's row pairing).
FAMILIES = {
    "pa": [(4, 4, 2, 4, 1), (4, 4, 2, 3, 2), (2, 4, 2, 4, 2), (4, 2, 2, 4, 2), (4, 4, 1, 4, 2)],
    "pb": [(4, 4, 2, 4, 1), (4, 4, 2, 3, 2), (4, 4, 1, 4, 2), (2, 4, 1, 4, 4)],
    "pp": [(4, 4, 2, 4, 1), (4, 4, 2, 3, 2), (2, 4, 2, 4, 2)],
    "pl": [(4, 4, 2, 4, 1), (4, 4, 2, 3, 2), (2, 4, 2, 4, 2), (8, 4, 2, 3, 2), (4, 8, 2, 3, 1),
           (2, 4, 1, 4, 2)],
}
MODES = {"pa": (0, 1, 2), "pb": (0, 1), "pp": (0, 1), "pl": (0, 1, 2)}
MODE_NAMES = ("gemv", "read", "Khat only")


def entry(fam: str, tile, mode: int) -> str:
    return f"{fam}_{'_'.join(map(str, tile))}_m{mode}"


def source() -> str:
    """The probe kernels with one ``extern "C"`` entry point per (family, tile, mode)."""
    head = ("const unsigned* __restrict__ kh, const float* __restrict__ scale, "
            "const float2* __restrict__ x, double2* __restrict__ y, i64 nf, i64 nfp, i64 n_out, "
            "i64 n_red, ")
    lines = ['#include "probe_khat_access.cuh"']
    for fam, tiles in FAMILIES.items():
        for tile in tiles:
            rt, ty, j, ns, w = tile
            for mode in MODES[fam]:
                if fam == "pl":
                    params = head + "i64 nm, i64 nft, int adjoint, i64 red_chunk, i64 yss"
                    call = "kh, scale, x, y, nf, nfp, n_out, n_red, nm, nft, adjoint, red_chunk, yss"
                else:
                    params = head + "i64 so, i64 sr, int adjoint, i64 red_chunk, i64 yss"
                    call = "kh, scale, x, y, nf, nfp, n_out, n_red, so, sr, adjoint, red_chunk, yss"
                    if fam == "pp":
                        params += ", i64 n_tiles, i64 n_otiles, i64 n_ftiles"
                        call += ", n_tiles, n_otiles, n_ftiles"
                lines.append(
                    f'extern "C" __global__ void __launch_bounds__({32 * ty}) '
                    f"{entry(fam, tile, mode)}({params}) {{ {fam}_body<StoreC32h, float2, "
                    f"double2, {rt}, {ty}, {j}, {ns}, {w}, {mode}>({call}); }}")
    return "\n".join(lines) + "\n"


def smem_bytes(fam: str, tile) -> int:
    rt, ty, j, ns, w = tile
    ft = 128 * w  # 32 lanes x 4 float16 pairs x W
    khat = j * rt * ty * ft * 4  # the same for every family
    return ns * (khat + j * ft * 8)


def blocked(cp, data, nd: int, nm: int, nfp: int, ft: int, pair: int):
    """``Khat`` ``(nd, nm, nfp)`` as ``[d / pair][f / ft][m][d % pair][f % ft]``, zero-padded."""
    nft, ndt = -(-nfp // ft), -(-nd // pair)
    a = cp.zeros((ndt * pair, nm, nft * ft), dtype=np.uint32)
    a[:nd, :, :nfp] = data.reshape(nd, nm, nfp)
    out = cp.ascontiguousarray(a.reshape(ndt, pair, nm, nft, ft).transpose(0, 3, 2, 1, 4))
    return out, nft


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--sizes", default="5000x100x1000,20000x50x500,1000x100x1000")
    ap.add_argument("--repeat", type=int, default=12)
    ap.add_argument("--waves", default="1,2,4", help="split-K targets, in rounds of block slots")
    ap.add_argument("--json", help="also write every timing to this file")
    args = ap.parse_args(argv)
    import cupy as cp

    import fftmatvec as fm
    from fftmatvec import kernels

    dev = cp.cuda.Device()
    if int(dev.compute_capability) < 90:
        print("the bulk-copy probes need NVIDIA sm_90 or newer", file=sys.stderr)
        return 2
    nsm = dev.attributes["MultiProcessorCount"]
    smem_sm = dev.attributes["MaxSharedMemoryPerMultiprocessor"]
    here = Path(__file__).resolve().parent
    options = ("-std=c++17", "-DFFTMATVEC_MMA", f"-I{kernels.source_dir()}", f"-I{here}")
    mod = cp.RawModule(code=source(), options=options)
    name = cp.cuda.runtime.getDeviceProperties(dev.id)["name"]
    results = {"device": name.decode() if isinstance(name, bytes) else name, "reads": {},
               "cases": []}

    a = cp.ones(2**28, dtype=np.complex128)  # 4 GiB
    n16 = a.nbytes // 16
    out = cp.empty(2**22, dtype=np.uint32)
    fn = mod.get_function("read_lin")
    t = median_time(cp, lambda: fn((nsm * 8,), (256,), (a, np.int64(n16), out)), 20)
    results["reads"]["linear"] = a.nbytes / t
    print(f"linear read: {a.nbytes / t / 1e12:.3f} TB/s")
    fc = mod.get_function("read_chunks")
    for kib in (16, 64, 256, 1024, 8192):
        ch = kib * 1024 // 16
        nb = -(-n16 // ch)
        out = cp.empty(nb * 256, dtype=np.uint32)
        t = median_time(cp, lambda: fc((nb,), (256,), (a, np.int64(n16), np.int64(ch), out)), 20)
        results["reads"][f"chunk {kib} KiB"] = a.nbytes / t
        print(f"one {kib} KiB chunk per block: {a.nbytes / t / 1e12:.3f} TB/s")
    del a, out
    cp.get_default_memory_pool().free_all_blocks()

    rng = np.random.default_rng(5)
    waves_list = [int(w) for w in args.waves.split(",")]
    for size in args.sizes.split(","):
        nm, nd, nt = map(int, size.split("x"))
        F = fm.BlockToeplitz(cp.asarray(rng.standard_normal((nd, nm, nt))), "ddhdd")
        eng = F._engine
        nf, nfp, kb = eng.nf, eng.nfp, eng.nbytes
        plain = eng.khat()  # (nd, nm, nfp), as the probe kernels read it
        layouts = {}
        for tile in FAMILIES["pl"]:
            key = (tile[4], tile[2])
            if key not in layouts:
                layouts[key] = blocked(cp, plain, nd, nm, nfp, 128 * tile[4], tile[2])
        for adjoint in (False, True):
            n_in, n_out, n_red = (nd, nm, nd) if adjoint else (nm, nd, nm)
            x = rng.standard_normal((1, n_in, nf)) + 1j * rng.standard_normal((1, n_in, nf))
            x = cp.asarray(x.astype(np.complex64))
            if adjoint:
                x = eng.scale_xhat(x)  # as the forward FFT's store callback writes it
            ref = eng.apply(x, adjoint, np.complex128, xhat_scaled=adjoint)
            launch = eng._plan(adjoint, 1, x.dtype, np.complex128)[0]
            efn, eargs, _ = eng._launch_args(launch, adjoint, n_out, n_red, np.complex128)
            target = cp.empty(launch.splits * n_out * nf,
                              dtype=eng.compute if launch.splits > 1 else np.complex128)
            scale = np.uint64(0) if adjoint else eng.scale
            t_eng = median_time(cp, lambda: efn(launch.grid, launch.block,
                                                (eng.data, scale, x, target) + eargs,
                                                shared_mem=launch.smem), args.repeat)
            direction = "adj" if adjoint else "fwd"
            print(f"\n{size} {direction}: the engine's launch {t_eng * 1e3:.3f} ms "
                  f"({kb / t_eng / 1e12:.3f} TB/s of Khat), {launch.name}")
            so, sr = (nfp, nm * nfp) if adjoint else (nm * nfp, nfp)
            best = {}
            runs = [(fam, tile) for fam, tiles in FAMILIES.items() for tile in tiles]
            for pass_no in (0, 1):
                for fam, tile in (runs if pass_no == 0 else runs[::-1]):
                    rt, ty, j, ns, w = tile
                    smem = smem_bytes(fam, tile)
                    n_ot, n_ft = math.ceil(n_out / (rt * ty)), math.ceil(nf / (128 * w))
                    base = n_ot * n_ft
                    slots = nsm * max(1, min(smem_sm // (smem + 1024), 2048 // (32 * ty), 32))
                    for waves in waves_list:
                        splits = max(1, min(math.ceil(waves * slots / base),
                                            n_red // (2 * ns * j)))
                        chunk = math.ceil(math.ceil(n_red / splits) / j) * j
                        splits = math.ceil(n_red / chunk)
                        n_tiles = base * splits
                        if fam == "pp":
                            grid = (math.ceil(n_tiles / math.ceil(n_tiles / slots)), 1)
                        else:
                            grid = (base, splits)
                        y = cp.empty(splits * n_out * nf, dtype=np.complex128)
                        for mode in MODES[fam]:
                            f = mod.get_function(entry(fam, tile, mode))
                            f.max_dynamic_shared_size_bytes = smem
                            if fam == "pl":
                                kh, nft = layouts[(w, j)]
                                a_args = (kh, scale, x, y, np.int64(nf), np.int64(nfp),
                                          np.int64(n_out), np.int64(n_red), np.int64(nm),
                                          np.int64(nft), np.int32(adjoint), np.int64(chunk),
                                          np.int64(n_out * nf))
                            else:
                                a_args = (plain, scale, x, y, np.int64(nf), np.int64(nfp),
                                          np.int64(n_out), np.int64(n_red), np.int64(so),
                                          np.int64(sr), np.int32(adjoint), np.int64(chunk),
                                          np.int64(n_out * nf))
                                if fam == "pp":
                                    a_args += (np.int64(n_tiles), np.int64(n_ot), np.int64(n_ft))

                            def go(f=f, grid=grid, ty=ty, a_args=a_args, smem=smem):
                                f(grid, (32, ty), a_args, shared_mem=smem)

                            if mode == 0 and pass_no == 0:
                                y.fill(np.nan)
                                go()
                                got = y.reshape(splits, n_out, nf).sum(axis=0)
                                err = float(cp.abs(got - ref[0]).max() / cp.abs(ref).max())
                                if not err < 1e-5:
                                    raise SystemExit(f"{fam} {tile} waves={waves}: differs from "
                                                     f"the engine's product by {err:.2e}")
                            t = median_time(cp, go, args.repeat)
                            key = (fam, tile, waves, mode)
                            best[key] = (min(best.get(key, (np.inf,))[0], t), splits)
                        del y
            case = {"size": size, "dir": direction, "engine_ms": t_eng * 1e3,
                    "engine_launch": launch.name, "runs": []}
            for (fam, tile, waves, mode), (t, splits) in sorted(best.items(), key=lambda kv: kv[1]):
                case["runs"].append(dict(family=fam, tile=tile, waves=waves, splits=splits,
                                         mode=MODE_NAMES[mode], ms=t * 1e3, tbps=kb / t / 1e12))
            for fam in FAMILIES:
                for mode in MODES[fam]:
                    sel = [r for r in case["runs"] if r["family"] == fam and r["mode"] == MODE_NAMES[mode]]
                    r = sel[0]
                    print(f"  {fam} {MODE_NAMES[mode]:>9}: {r['ms']:.3f} ms {r['tbps']:.3f} TB/s "
                          f"(x{t_eng * 1e3 / r['ms']:.3f} the engine's speed)  tile={r['tile']} "
                          f"waves={r['waves']} splits={r['splits']}")
            results["cases"].append(case)
            sys.stdout.flush()
        del F, eng, layouts
        cp.get_default_memory_pool().free_all_blocks()
    if args.json:
        write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
