#!/usr/bin/env python
"""Two source trees of fftmatvec timed by their own bench_matvec.py, case by case, on one device.

A product timed in two separate runs moves between the runs (waited-for single products the
most), more than a refactor should change it. So the two trees are
run in interleaved rounds, each run a fresh process of the tree's own
``scripts/bench_matvec.py`` with ``PYTHONPATH`` and the working directory set to that tree:
before, after, after, before, before, after, ... (``--order abba``, the default: a drift of
the device during the runs hits both trees alike; ``--order ab`` runs before first in every
round). Every case is the median over the rounds of each tree.

A case is one time of the JSON that bench_matvec writes (``--json``), named by its table and
its identifying keys: size (Nm, Nd, Nt), precision, direction and, for batches, k. The times
compared are, for single vectors, ``waited`` (the median of products each waited for, device
events around each) and ``back to back`` (products queued back to back, the device's time per
product); for batches, stage 3 on k=1 and on k right-hand sides; the small problems, waited
and as one graph, and with ``--stages`` the stage table, where the runs hold them. The
baselines (plain CuPy, PyLops MDC, cuBLAS's batched matmul) run the same code in both trees:
they are shown as controls, marked ``control``, and left out of the count; a control far from
1 says the device moved between the rounds. Cases present in one tree's runs only (a table or a
time that one version of bench_matvec does not write) are listed after the table.

How to read the table: ``before`` and ``after`` are the medians in ms, ``ratio`` is
after/before (above 1: after is slower); ``spread`` is max/min over the rounds of each tree (1.00:
the rounds agree). ``flag`` is empty within the tolerance, else ``slower`` or ``faster``, with
``overlap`` added where the rounds of the two trees overlap (the slowest round of the faster
tree is slower than the fastest round of the slower one): a difference the rounds do not
separate from noise. The summary counts the cases within the tolerance, per kind of time, and
names the largest and smallest ratios. The exit status is 0 when every case is there in both
trees and within the tolerance, 1 otherwise, 2 when a run fails (its output's tail is printed).

``--budget`` bounds the wall time: no round starts that the longest round so far says would
end past it (the rounds run are kept, and with ``--order abba`` an even number of them is
balanced). ``--json`` writes every run's results and the comparison after each round, so a run
cut short leaves the rounds it finished; ``--load`` prints the comparison of such a file again
(for instance with another tolerance) without running anything.

Usage: python scripts/bench_compare.py BEFORE_TREE AFTER_TREE [--rounds 3] [--tolerance 0.03]
       [--order abba|ab] [--budget SECONDS] [--json OUT] [-- ARGUMENTS OF bench_matvec.py]
       python scripts/bench_compare.py --load OUT [--tolerance 0.03]
e.g.   python scripts/bench_compare.py ../before . --rounds 3 -- --no-baseline --skip-small
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TREES = ("before", "after")

# table of bench_matvec's JSON -> its identifying keys (a row's ``k`` only where it has one)
CASE_KEYS = {
    "matvec": ("nm", "nd", "nt", "precision", "direction"),
    "batches": ("nm", "nd", "nt", "precision", "direction", "k"),
    "small": ("nm", "nd", "nt", "precision", "direction"),
    "stages": ("nm", "nd", "nt", "precision", "direction"),
}
# table -> (key of a time in seconds, its label, control: a baseline's time, not the package's)
TIMES = {
    "matvec": [("seconds", "waited", False), ("b2b_seconds", "back to back", False),
               ("plain_seconds", "plain CuPy", True), ("pylops_mdc_seconds", "PyLops MDC", True)],
    "batches": [("t1", "stage 3 k=1", False), ("tk", "stage 3 k={k}", False),
                ("matmul_t1", "cuBLAS k=1", True), ("matmul_tk", "cuBLAS k={k}", True)],
    "small": [("seconds", "small: waited", False), ("graph_seconds", "small: graph", False)],
    "stages": [("stage_by_stage", "stage by stage", False), ("fused", "fused stages", False),
               ("graph", "one graph", False)],
}
STAGE_NAMES = ("pad", "fft", "sbgemv", "ifft", "unpad")  # the ``stages`` list of a stages row


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def case_times(results: dict) -> dict:
    """{case: seconds} of one run's results (bench_matvec's ``--json``). A case is the tuple
    (table, Nm, Nd, Nt, precision, direction, k or None, label, control); times that are
    missing, None or NaN (a baseline not run, nothing fused) are left out.

    Raises
    ------
    ValueError
        Two rows of one table with the same identifying keys.
    """
    out: dict = {}
    for table, keys in CASE_KEYS.items():
        for row in results.get(table) or []:
            ident = tuple(row.get(key) for key in keys)
            nm, nd, nt, precision, direction = ident[:5]
            k = row.get("k")
            times = [(key, label, control) for key, label, control in TIMES[table]]
            named = {key: row.get(key) for key, _, _ in times}
            if table == "stages" and isinstance(row.get("stages"), list):
                for name, t in zip(STAGE_NAMES, row["stages"]):
                    times.append((name, f"stage {name}", False))
                    named[name] = t
            for key, label, control in times:
                t = named[key]
                if not _finite(t):
                    continue
                case = (table, nm, nd, nt, precision, direction, k, label.format(k=k), control)
                if case in out:
                    raise ValueError(f"two rows of table {table!r} for {describe(case)}: "
                                     f"a case must appear once in a run")
                out[case] = float(t)
    return out


def describe(case) -> str:
    """A case in words: '(5000, 100, 1000) ddhdd adj back to back'."""
    _, nm, nd, nt, precision, direction, _, label, _ = case
    return f"({nm}, {nd}, {nt}) {precision} {direction} {label}"


def compare(before_runs, after_runs, tolerance: float = 0.03) -> dict:
    """The comparison of two trees' runs (each a list of bench_matvec results, one per round).

    Returns a dict: ``cases``, a list of dicts (``case``; ``before`` and ``after``, the seconds
    of each round; ``before_median``, ``after_median``; ``ratio`` = after/before medians;
    ``spread_before``, ``spread_after`` = max/min over the rounds; ``within``: |ratio - 1| <=
    tolerance; ``overlap``: the rounds' ranges overlap), in the order the runs list them;
    ``only_before`` and ``only_after``, the cases that the other tree's runs never give.
    A case that some round of a tree lacks is compared over the rounds that have it.
    """
    times = {tree: [case_times(r) for r in runs] for tree, runs in zip(TREES, (before_runs, after_runs))}
    seen = {tree: {} for tree in TREES}  # case -> None, in order of first appearance
    for tree in TREES:
        for run in times[tree]:
            for case in run:
                seen[tree].setdefault(case, None)
    cases = []
    order = list(seen["before"]) + [c for c in seen["after"] if c not in seen["before"]]
    order.sort(key=lambda c: list(CASE_KEYS).index(c[0]))  # stable: tables in bench's order
    for case in order:
        if case not in seen["before"] or case not in seen["after"]:
            continue
        got = {tree: [run[case] for run in times[tree] if case in run] for tree in TREES}
        med = {tree: float(np.median(got[tree])) for tree in TREES}
        ratio = med["after"] / med["before"]
        lo_b, hi_b = min(got["before"]), max(got["before"])
        lo_a, hi_a = min(got["after"]), max(got["after"])
        cases.append(dict(case=case, before=got["before"], after=got["after"],
                          before_median=med["before"], after_median=med["after"], ratio=ratio,
                          spread_before=hi_b / lo_b, spread_after=hi_a / lo_a,
                          within=abs(ratio - 1.0) <= tolerance,
                          overlap=hi_b >= lo_a and hi_a >= lo_b))
    return dict(cases=cases, tolerance=tolerance,
                only_before=[c for c in seen["before"] if c not in seen["after"]],
                only_after=[c for c in seen["after"] if c not in seen["before"]])


def flag(c: dict) -> str:
    """'' within the tolerance, else 'slower' or 'faster', '+ overlap' where the rounds overlap."""
    if c["within"]:
        return ""
    word = "slower" if c["ratio"] > 1 else "faster"
    return word + (" + overlap" if c["overlap"] else "")


def _percent(tolerance: float) -> str:
    return f"{tolerance * 100:g} %"


def table_lines(comparison: dict, rounds: dict | None = None) -> list[str]:
    """The comparison as printed: header, one line per case, then the summary lines."""
    tol = comparison["tolerance"]
    counted = f"rounds: before {rounds['before']}, after {rounds['after']}; " if rounds else ""
    hdr = (f"{'Nm':>7} {'Nd':>4} {'Nt':>5} {'prec':>6} {'dir':>4} {'time':<16} | {'before':>9} "
           f"{'after':>9} {'ratio':>6} | {'spread b':>8} {'spread a':>8} | flag")
    lines = [f"## after/before per case, medians over the rounds ({counted}ms; flag outside "
             f"{_percent(tol)})", hdr, "-" * len(hdr)]
    for c in comparison["cases"]:
        _, nm, nd, nt, precision, direction, _, label, control = c["case"]
        f = flag(c)
        if control:
            f = "control" + (f", {f}" if f else "")
        lines.append(f"{nm:>7} {nd:>4} {nt:>5} {precision:>6} {direction:>4} {label:<16} | "
                     f"{c['before_median'] * 1e3:9.4f} {c['after_median'] * 1e3:9.4f} "
                     f"{c['ratio']:6.3f} | {c['spread_before']:8.3f} {c['spread_after']:8.3f} | {f}".rstrip())
    return lines + summary_lines(comparison)


def summary_lines(comparison: dict) -> list[str]:
    """'N cases, M within 3 %' with the count per kind of time, the largest and smallest ratios,
    the controls and the cases present in one tree only."""
    tol = _percent(comparison["tolerance"])
    own = [c for c in comparison["cases"] if not c["case"][8]]
    controls = [c for c in comparison["cases"] if c["case"][8]]
    lines = []
    if own:
        kinds: dict = {}
        for c in own:
            kinds.setdefault(c["case"][7], []).append(c["within"])
        per_kind = "; ".join(f"{label} {sum(w)} of {len(w)}" for label, w in kinds.items())
        ranked = sorted(own, key=lambda c: c["ratio"])
        top = ", ".join(f"{c['ratio']:.3f} {describe(c['case'])}" for c in ranked[::-1][:3])
        bottom = ", ".join(f"{c['ratio']:.3f} {describe(c['case'])}" for c in ranked[:3])
        lines += [f"{len(own)} cases, {sum(c['within'] for c in own)} within {tol} ({per_kind})",
                  f"  the largest ratios: {top}", f"  the smallest ratios: {bottom}"]
        outside = [c for c in own if not c["within"]]
        if outside:
            noise = sum(c["overlap"] for c in outside)
            lines.append(f"  outside {tol}: {len(outside)}, of which {noise} with the rounds of "
                         f"the two trees overlapping")
    else:
        lines.append("no case timed in both trees")
    if controls:
        lines.append(f"controls (baselines, the same code in both trees): {len(controls)}, "
                     f"{sum(c['within'] for c in controls)} within {tol}, ratios "
                     f"{min(c['ratio'] for c in controls):.3f} to "
                     f"{max(c['ratio'] for c in controls):.3f}")
    for tree in TREES:
        only = comparison[f"only_{tree}"]
        if only:
            lines.append(f"only in {tree}'s runs ({len(only)}): " + ", ".join(describe(c) for c in only))
    return lines


def passed(comparison: dict) -> bool:
    """Every case of the package in both trees and within the tolerance."""
    own = [c for c in comparison["cases"] if not c["case"][8]]
    missing = [c for tree in TREES for c in comparison[f"only_{tree}"] if not c[8]]
    return bool(own) and not missing and all(c["within"] for c in own)


def round_order(rounds: int, order: str) -> list[str]:
    """The trees in the order they run: 'abba' alternates which tree opens a round."""
    out = []
    for i in range(rounds):
        pair = list(TREES) if order == "ab" or i % 2 == 0 else list(TREES[::-1])
        out += pair
    return out


def tree_env(tree: Path) -> dict:
    """The environment of a run in ``tree``: its sources first on ``PYTHONPATH``."""
    env = dict(os.environ)
    rest = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
    env["PYTHONPATH"] = os.pathsep.join([str(tree.resolve())] + rest)
    return env


class RunError(RuntimeError):
    """A run of a tree failed: the message holds its exit status and the tail of its output."""


def _tail(text: str, n: int = 30) -> str:
    lines = text.rstrip().splitlines()[-n:]
    return "\n".join("    " + ln for ln in lines) if lines else "    (nothing)"


def check_tree(python: str, tree: Path) -> str:
    """The path of the ``fftmatvec`` a run in ``tree`` imports; it must be the tree's own."""
    if not (tree / "scripts" / "bench_matvec.py").is_file():
        raise RunError(f"{tree} holds no scripts/bench_matvec.py: not a source tree of fftmatvec")
    p = subprocess.run([python, "-c", "import fftmatvec; print(fftmatvec.__file__)"], cwd=tree,
                       env=tree_env(tree), capture_output=True, text=True)
    if p.returncode != 0:
        raise RunError(f"importing fftmatvec in {tree} failed (exit {p.returncode}):\n{_tail(p.stderr)}")
    package = Path(p.stdout.strip().splitlines()[-1]).resolve().parent
    if package != tree.resolve() / "fftmatvec":  # an installed copy, or a tree inside the tree
        raise RunError(f"a run in {tree} imports fftmatvec from {package}, not the tree's own")
    return str(package)


def run_bench(python: str, tree: Path, bench_args, out: Path) -> tuple[dict, list[str], float]:
    """(results, the '#' header lines of its output, wall seconds) of one run of the tree's
    bench_matvec.py."""
    cmd = [python, str(tree.resolve() / "scripts" / "bench_matvec.py"), *bench_args, "--json", str(out)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=tree, env=tree_env(tree), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RunError(f"bench_matvec.py in {tree} failed (exit {p.returncode}) after {wall:.0f} s: "
                       f"{' '.join(cmd)}\n  its stderr ends:\n{_tail(p.stderr)}\n  its stdout ends:\n"
                       f"{_tail(p.stdout, 10)}")
    if not out.is_file():
        raise RunError(f"bench_matvec.py in {tree} exited 0 but wrote no {out}")
    with open(out) as fh:
        results = json.load(fh)
    out.unlink()
    header = [ln for ln in p.stdout.splitlines() if ln.startswith("# ")]
    return results, header, wall


def write_json(path: str, data) -> None:
    """``data`` as JSON at ``path``, through a temporary name, so a cut-short run leaves no half
    file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=1, default=str)
    os.replace(tmp, path)


def _saved(comparison: dict) -> list[dict]:
    return [dict(zip(("table", "nm", "nd", "nt", "precision", "direction", "k", "time", "control"),
                     c["case"]), **{k: v for k, v in c.items() if k != "case"})
            for c in comparison["cases"]]


def run_rounds(args, bench_args) -> dict:
    """Run the rounds; returns the saved record (see ``--json``) of the runs made."""
    trees = {"before": Path(args.before), "after": Path(args.after)}
    for tree, path in trees.items():
        print(f"# {tree}: {path} (fftmatvec from {check_tree(args.python, path)})")
    for name in sorted(v for v in os.environ if v.startswith("FFTMATVEC_")):
        print(f"# note: {name}={os.environ[name]} is set for both trees", file=sys.stderr)
    record = dict(before=args.before, after=args.after, bench_args=list(bench_args),
                  order=args.order, tolerance=args.tolerance, runs=[],
                  results={tree: [] for tree in TREES})
    sequence = round_order(args.rounds, args.order)
    start, longest = time.perf_counter(), 0.0
    headers: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(0, len(sequence), 2):
            elapsed = time.perf_counter() - start
            if args.budget and i and elapsed + longest > args.budget:
                print(f"# stopped after {i // 2} of {args.rounds} rounds: another would end past "
                      f"the budget of {args.budget:.0f} s ({elapsed:.0f} s so far, the longest round "
                      f"{longest:.0f} s)")
                break
            t_round, walls = time.perf_counter(), []
            for tree in sequence[i:i + 2]:
                results, header, wall = run_bench(args.python, trees[tree], bench_args,
                                                  Path(tmp) / f"{tree}.json")
                record["results"][tree].append(results)
                record["runs"].append(dict(tree=tree, round=i // 2 + 1, seconds=wall, header=header))
                walls.append(f"{tree} {wall:.0f} s")
                if tree not in headers:
                    headers[tree] = header
                    for ln in header:
                        print(f"# {tree} {ln[2:]}")
            longest = max(longest, time.perf_counter() - t_round)
            print(f"# round {i // 2 + 1} of {args.rounds}: {', '.join(walls)}")
            sys.stdout.flush()
            if args.json:
                comparison = compare(record["results"]["before"], record["results"]["after"],
                                     args.tolerance)
                write_json(args.json, dict(record, cases=_saved(comparison)))
    devices = {json.dumps(r.get("device"), sort_keys=True, default=str)
               for runs in record["results"].values() for r in runs}
    if len(devices) > 1:
        print(f"# warning: the runs name {len(devices)} different devices: {sorted(devices)}",
              file=sys.stderr)
    kernel_lines = {tree: [ln for ln in h if ln.startswith("# kernels:")] for tree, h in headers.items()}
    if kernel_lines.get("before") != kernel_lines.get("after"):
        print("# note: the trees load their kernels differently (see the '# kernels' lines)",
              file=sys.stderr)
    return record


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    bench_args = []
    if "--" in argv:
        cut = argv.index("--")
        argv, bench_args = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="arguments after -- go to bench_matvec.py of both trees")
    ap.add_argument("before", nargs="?", help="the source tree before (a checkout of the package)")
    ap.add_argument("after", nargs="?", help="the source tree after")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each tree (default 3)")
    ap.add_argument("--tolerance", type=float, default=0.03,
                    help="flag |after/before - 1| above this (default 0.03)")
    ap.add_argument("--order", choices=["abba", "ab"], default="abba",
                    help="abba: the tree that opens a round alternates (default); ab: before first")
    ap.add_argument("--budget", type=float, metavar="SECONDS",
                    help="start no round that would end past this many seconds of wall time")
    ap.add_argument("--python", default=sys.executable, help="the interpreter of the runs")
    ap.add_argument("--json", help="write the runs' results and the comparison here, after each round")
    ap.add_argument("--load", metavar="FILE", help="compare the runs saved in FILE (--json) again")
    args = ap.parse_args(argv)
    if not (0 <= args.tolerance < 1):
        ap.error(f"--tolerance must be in [0, 1), got {args.tolerance}")
    if args.load:
        if args.before or args.after or bench_args:
            ap.error("--load takes no trees and no arguments of bench_matvec.py")
        with open(args.load) as fh:
            record = json.load(fh)
        print(f"# {args.load}: before {record['before']}, after {record['after']}, "
              f"bench_matvec.py {' '.join(record['bench_args'])}")
    else:
        if not (args.before and args.after):
            ap.error("give BEFORE_TREE and AFTER_TREE (or --load FILE)")
        if args.rounds < 1:
            ap.error(f"--rounds must be at least 1, got {args.rounds}")
        if any(a == "--json" or a.startswith("--json=") for a in bench_args):
            ap.error("bench_matvec.py's --json is set by this script; give --json before the --")
        try:
            record = run_rounds(args, bench_args)
        except RunError as exc:
            print(f"bench_compare.py: error: {exc}", file=sys.stderr)
            return 2
    results = record["results"]
    comparison = compare(results["before"], results["after"], args.tolerance)
    print()
    rounds = {tree: len(results[tree]) for tree in TREES}
    print("\n".join(table_lines(comparison, rounds)))
    if args.json and not args.load:
        write_json(args.json, dict(record, cases=_saved(comparison)))
    return 0 if passed(comparison) else 1


if __name__ == "__main__":
    raise SystemExit(main())
