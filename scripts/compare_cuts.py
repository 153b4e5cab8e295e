#!/usr/bin/env python
"""The block pipeline's cut for both directions, by the cost model: one cut for the forward and
the adjoint together against a cut of its own for each.

An operator holds one chunk-major ``Khat``, so its forward and its adjoint run on one cut. The
adjoint moves other bytes than the forward (it gathers sensor chunks and reduce-scatters
parameter chunks), so its own best cut may differ. This script prints, for each machine model,
problem, batch, precision and grid, the predicted time of a forward plus an adjoint product
(:func:`fftmatvec.distributed.schedule.predict`, rank ``(0, 0)``, each direction in the order the
operator runs it):

* ``one chunk``: the whole block at once, compute-then-communicate;
* ``fwd cut``: both directions on the forward's own best cut (the choice before the joint one);
* ``own cuts``: each direction on its own best cut, the least a cut per direction could give
  (it leaves out the extra blocks of a grid fine enough for both cuts);
* ``joint cut``: both on the cut of least summed time (what an operator takes);

and the normal operator's predicted time on the joint cut against its own best cut. Everything
printed is the cost model's prediction, not a measurement.

Usage: python scripts/compare_cuts.py [--model h100 --model frontier] [--k 1,8]
       [--precision ddddd,dssdd] [--grid 2x2 ...] [--min-chunk 16]
"""

from __future__ import annotations

import argparse

#: problems (sensors, parameters, time steps): the scaling benchmark's and FFTMatvec's
#: single-GPU benchmark configuration
PROBLEMS = ((64, 2048, 1024), (100, 5000, 1000))

#: grids (process rows x columns) compared by default
GRIDS = ("2x2", "4x4", "8x8", "1x8", "8x1", "16x64", "64x64")


def compare(nd, nm, nt, k, precision, grid, network, bandwidth, min_chunk):
    """The cuts and predicted seconds of one case (the module's notes)."""
    from fftmatvec.distributed.schedule import (DIRECTIONS, MAX_CHUNKS, OPERATOR_DIRECTIONS,
                                                choose_chunks, pipeline_order, predict)

    args = (nd, nm, nt, k, precision, grid, network, bandwidth)
    order = {d: pipeline_order(nd, nm, grid, precision, d) for d in DIRECTIONS}

    def t(cut, d):
        return predict(*args, *cut, d, order[d])

    def best(directions):
        return choose_chunks(*args, directions, order=None, max_chunks=MAX_CHUNKS,
                             min_chunk=min_chunk)

    cut = {d: best(d) for d in DIRECTIONS}
    joint = best(OPERATOR_DIRECTIONS)
    return dict(fwd=cut["forward"], adj=cut["adjoint"], joint=joint,
                one=sum(t((1, 1), d) for d in OPERATOR_DIRECTIONS),
                fwd_cut=sum(t(cut["forward"], d) for d in OPERATOR_DIRECTIONS),
                own=sum(t(cut[d], d) for d in OPERATOR_DIRECTIONS),
                joint_t=sum(t(joint, d) for d in OPERATOR_DIRECTIONS),
                normal=t(joint, "normal"), normal_own=t(cut["normal"], "normal"))


def main(argv=None) -> int:
    from fftmatvec.distributed.emulated import machine_model
    from fftmatvec.distributed.schedule import BANDWIDTH

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", help="machine model (default: h100, frontier)")
    ap.add_argument("--k", default="1,8", help="right-hand sides, comma-separated")
    ap.add_argument("--precision", default="ddddd,dssdd")
    ap.add_argument("--grid", action="append", help="RxC (default: several)")
    ap.add_argument("--min-chunk", type=int, default=16)
    args = ap.parse_args(argv)
    models = args.model or ["h100", "frontier"]
    grids = [tuple(int(v) for v in g.split("x")) for g in (args.grid or GRIDS)]
    print("| model | Nd x Nm x Nt | k | precision | grid | fwd's cut | adj's cut | joint cut "
          "| one chunk ms | fwd cut ms | own cuts ms | joint cut ms | joint / own "
          "| normal, joint cut ms | normal, own cut ms |")
    print("|---|---|---:|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    worst = {"own": 1.0, "fwd": 1.0, "normal": 1.0, "normal_gain": 1.0}
    cases = differ = 0
    for name in models:
        net = machine_model(name)
        for nd, nm, nt in PROBLEMS:
            for k in (int(v) for v in args.k.split(",")):
                for prec in args.precision.split(","):
                    for grid in grids:
                        if grid[0] > nd or grid[1] > nm:
                            continue
                        r = compare(nd, nm, nt, k, prec, grid, net, BANDWIDTH["gpu"],
                                    args.min_chunk)
                        cases += 1
                        differ += r["fwd"] != r["adj"]
                        worst["own"] = max(worst["own"], r["joint_t"] / r["own"])
                        worst["fwd"] = max(worst["fwd"], r["fwd_cut"] / r["joint_t"])
                        worst["normal"] = max(worst["normal"], r["normal"] / r["normal_own"])
                        ms = {key: f"{1e3 * r[key]:.3f}" for key in
                              ("one", "fwd_cut", "own", "joint_t", "normal", "normal_own")}
                        print(f"| {name} | {nd}x{nm}x{nt} | {k} | {prec} | {grid[0]}x{grid[1]} "
                              f"| {r['fwd'][0]}x{r['fwd'][1]} | {r['adj'][0]}x{r['adj'][1]} "
                              f"| {r['joint'][0]}x{r['joint'][1]} | {ms['one']} "
                              f"| {ms['fwd_cut']} | {ms['own']} | {ms['joint_t']} "
                              f"| {r['joint_t'] / r['own']:.4f} | {ms['normal']} "
                              f"| {ms['normal_own']} |")
    print()
    print(f"{cases} cases, {differ} where the forward's and the adjoint's own cuts differ")
    print(f"joint cut against a cut of its own per direction (forward + adjoint): at most "
          f"{100 * (worst['own'] - 1):.2f} % slower")
    print(f"the forward's cut for both against the joint cut: at most "
          f"{100 * (worst['fwd'] - 1):.2f} % slower")
    print(f"the normal operator on the joint cut against its own best cut: at most "
          f"{100 * (worst['normal'] - 1):.2f} % slower")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
