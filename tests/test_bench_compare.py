"""scripts/bench_compare.py on synthetic bench_matvec results (CPU only, no GPU run)."""

import json
import sys
import textwrap

import pytest
from conftest import load_script


def _mv(size, precision, direction, seconds, b2b=None, plain=None):
    nm, nd, nt = size
    row = dict(nm=nm, nd=nd, nt=nt, precision=precision, direction=direction, seconds=seconds,
               floor=0.5 * seconds, bound=0.9, plain_seconds=plain, plain_floor=None,
               pylops_mdc_seconds=None)
    if b2b is not None:
        row["b2b_seconds"] = b2b
    return row


def _batch(size, precision, direction, t1, tk, k=16):
    nm, nd, nt = size
    return dict(nm=nm, nd=nd, nt=nt, precision=precision, direction=direction, k=k, t1=t1, tk=tk,
                matmul_t1=2 * t1, matmul_tk=2 * tk, bound=0.05)


def _run(scale=1.0, b2b=True, extra=()):
    """One run's results: two single-vector cases and one batch, times times ``scale``."""
    s = scale
    return {"device": {"gpu": "test"}, "copy_bandwidth": 1e12, "read_bandwidth": 1e12,
            "matvec": [_mv((1000, 100, 1000), "ddddd", "fwd", 2e-3 * s, 1.8e-3 * s if b2b else None),
                       _mv((1000, 100, 1000), "ddddd", "adj", 3e-3 * s, 2.7e-3 * s if b2b else None),
                       *extra],
            "batches": [_batch((1000, 100, 1000), "ddhdd", "adj", 1e-3 * s, 4e-3 * s)],
            "small": []}


def _write(path, data):
    path.write_text(json.dumps(data))
    return path


def test_cases_from_both_formats(tmp_path):
    bench = load_script("bench_compare")
    # an older bench_matvec: no back-to-back times, a baseline not run (None); today's format
    old = json.loads(_write(tmp_path / "old.json", _run(b2b=False)).read_text())
    new = json.loads(_write(tmp_path / "new.json", _run()).read_text())
    got_old, got_new = bench.case_times(old), bench.case_times(new)
    labels = sorted({c[7] for c in got_new})
    assert labels == ["back to back", "cuBLAS k=1", "cuBLAS k=16", "stage 3 k=1", "stage 3 k=16",
                      "waited"]
    assert len(got_old) == 6 and len(got_new) == 8
    case = ("matvec", 1000, 100, 1000, "ddddd", "adj", None, "waited", False)
    assert got_old[case] == got_new[case] == 3e-3
    batch = ("batches", 1000, 100, 1000, "ddhdd", "adj", 16, "stage 3 k=16", False)
    assert got_new[batch] == 4e-3
    assert got_new[batch[:7] + ("cuBLAS k=16", True)] == 8e-3
    # a stages row: its five stages and the whole product three ways, NaN (nothing fused) left out
    row = dict(nm=5, nd=2, nt=3, precision="sssss", direction="fwd", stages=[1, 2, 3, 4, 5],
               stage_by_stage=16.0, fused=float("nan"), graph=14.0, floor=1.0)
    got = bench.case_times({"stages": [row]})
    assert sorted(c[7] for c in got) == ["one graph", "stage by stage", "stage fft", "stage ifft",
                                         "stage pad", "stage sbgemv", "stage unpad"]
    with pytest.raises(ValueError, match="two rows of table 'matvec'"):
        bench.case_times({"matvec": [_mv((1, 2, 3), "ddddd", "fwd", 1.0)] * 2})


def test_medians_ratios_flags():
    bench = load_script("bench_compare")
    before = [_run(1.00), _run(1.10), _run(1.02)]    # medians: the 1.02 round
    after = [_run(1.04), _run(1.05, extra=[_mv((9, 9, 9), "sssss", "fwd", 1.0)]), _run(0.95)]
    after[1]["matvec"][0]["seconds"] = 2.5e-3         # one slow round: the median ignores it
    after[0]["batches"][0]["tk"] = 4.6e-3             # stage 3 k=16 slower in every round
    after[1]["batches"][0]["tk"] = 4.7e-3
    after[2]["batches"][0]["tk"] = 4.5e-3
    cmp = bench.compare(before, after, tolerance=0.03)
    cases = {c["case"][5:8]: c for c in cmp["cases"]}
    fwd = cases[("fwd", None, "waited")]
    assert fwd["before_median"] == pytest.approx(2e-3 * 1.02)
    assert fwd["after_median"] == pytest.approx(2e-3 * 1.04)
    assert fwd["ratio"] == pytest.approx(1.04 / 1.02) and fwd["within"]
    assert fwd["spread_before"] == pytest.approx(1.10) and fwd["spread_after"] == pytest.approx(1.25 / 0.95)
    assert bench.flag(fwd) == ""
    k16 = cases[("adj", 16, "stage 3 k=16")]
    assert k16["ratio"] == pytest.approx(4.6 / 4.08) and not k16["within"]
    assert not k16["overlap"] and bench.flag(k16) == "slower"
    # outside the tolerance, but the rounds of the two trees overlap: marked as such
    cmp_tight = bench.compare(before, after, tolerance=0.01)
    b2b = {c["case"][5:8]: c for c in cmp_tight["cases"]}[("fwd", None, "back to back")]
    assert b2b["ratio"] == pytest.approx(1.04 / 1.02)
    assert bench.flag(b2b) == "slower + overlap"
    assert cmp["only_before"] == []
    assert cmp["only_after"] == [("matvec", 9, 9, 9, "sssss", "fwd", None, "waited", False)]
    assert not bench.passed(cmp)  # one case outside, one in after's runs only
    lines = bench.table_lines(cmp, {"before": 3, "after": 3})
    assert lines[0].startswith("## after/before per case") and "rounds: before 3, after 3" in lines[0]
    row = next(ln for ln in lines if "stage 3 k=16" in ln and "ddhdd" in ln)
    assert row.split("|")[1].split() == ["4.0800", "4.6000", "1.127"]
    assert row.rstrip().endswith("| slower")
    assert next(ln for ln in lines if "cuBLAS k=16" in ln).rstrip().endswith("| control")
    assert "6 cases, 5 within 3 % (waited 2 of 2; back to back 2 of 2; stage 3 k=1 1 of 1; " \
           "stage 3 k=16 0 of 1)" in lines
    assert any(ln.startswith("  the largest ratios: 1.127 (1000, 100, 1000) ddhdd adj stage 3 k=16")
               for ln in lines)
    assert any(ln.startswith("controls (baselines, the same code in both trees): 2,") for ln in lines)
    assert "only in after's runs (1): (9, 9, 9) sssss fwd waited" in lines
    same = bench.compare([_run()], [_run(1.01)])
    assert bench.passed(same)


def test_old_format_missing_times():
    bench = load_script("bench_compare")
    cmp = bench.compare([_run(b2b=False)] * 2, [_run()] * 2)
    assert sorted(c[5] for c in cmp["only_after"]) == ["adj", "fwd"]
    assert {c[7] for c in cmp["only_after"]} == {"back to back"}
    assert len(cmp["cases"]) == 6 and all(c["ratio"] == 1.0 for c in cmp["cases"])
    assert not bench.passed(cmp)  # a case of the package timed in one tree only


def test_round_order():
    bench = load_script("bench_compare")
    assert bench.round_order(3, "abba") == ["before", "after", "after", "before", "before", "after"]
    assert bench.round_order(2, "ab") == ["before", "after", "before", "after"]


_FAKE_BENCH = """\
import json, sys
import fftmatvec
args = sys.argv[1:]
out = args[args.index("--json") + 1]
if "--fail" in args:
    sys.stderr.write("Traceback: something broke\\n")
    sys.exit(3)
print("# device: fake")
print("# kernels: none")
t = fftmatvec.SECONDS
row = dict(nm=10, nd=2, nt=4, precision="ddddd", direction="fwd", seconds=t, b2b_seconds=t)
json.dump({"device": {"gpu": "fake"}, "matvec": [row], "batches": [], "small": []}, open(out, "w"))
"""


def _fake_tree(root, name, seconds):
    (root / "scripts").mkdir(parents=True)
    (root / "fftmatvec").mkdir()
    (root / "fftmatvec" / "__init__.py").write_text(f"NAME = {name!r}\nSECONDS = {seconds}\n")
    (root / "scripts" / "bench_matvec.py").write_text(textwrap.dedent(_FAKE_BENCH))


def test_interleaved_runs_of_two_trees(tmp_path, monkeypatch, capsys):
    """The driver on two fake trees whose bench_matvec.py writes fixed times: each tree's own
    package is imported, the rounds alternate, the table and the saved JSON follow."""
    bench = load_script("bench_compare")
    _fake_tree(tmp_path / "a", "a", 1e-3)
    _fake_tree(tmp_path / "b", "b", 1.05e-3)
    seen = []
    real = bench.run_bench

    def spy(python, tree, args, out):
        seen.append(tree.name)
        return real(python, tree, args, out)

    monkeypatch.setattr(bench, "run_bench", spy)
    out = tmp_path / "cmp.json"
    rc = bench.main([str(tmp_path / "a"), str(tmp_path / "b"), "--rounds", "2", "--json", str(out),
                     "--python", sys.executable, "--", "--repeat", "3"])
    text = capsys.readouterr().out
    assert rc == 1  # 1.05 is outside 3 %
    assert seen == ["a", "b", "b", "a"]
    assert "# before kernels: none" in text
    assert any(ln.split()[5:7] == ["waited", "|"] and "1.050" in ln and ln.endswith("slower")
               for ln in text.splitlines())
    saved = json.loads(out.read_text())
    assert [r["tree"] for r in saved["runs"]] == ["before", "after", "after", "before"]
    assert saved["bench_args"] == ["--repeat", "3"]
    assert len(saved["cases"]) == 2 and saved["cases"][0]["ratio"] == pytest.approx(1.05)
    # the saved runs again, with a tolerance the difference is within
    assert bench.main(["--load", str(out), "--tolerance", "0.06"]) == 0
    assert "2 cases, 2 within 6 %" in capsys.readouterr().out


def test_budget_stops_between_rounds(tmp_path, capsys):
    bench = load_script("bench_compare")
    _fake_tree(tmp_path / "a", "a", 1e-3)
    _fake_tree(tmp_path / "b", "b", 1e-3)
    rc = bench.main([str(tmp_path / "a"), str(tmp_path / "b"), "--rounds", "3", "--budget", "1e-6"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "# stopped after 1 of 3 rounds" in text and "rounds: before 1, after 1" in text


def test_failed_run_shows_its_stderr(tmp_path, capsys):
    bench = load_script("bench_compare")
    _fake_tree(tmp_path / "a", "a", 1e-3)
    _fake_tree(tmp_path / "b", "b", 1e-3)
    rc = bench.main([str(tmp_path / "a"), str(tmp_path / "b"), "--", "--fail"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "bench_matvec.py in" in err and "failed (exit 3)" in err
    assert "Traceback: something broke" in err
    with pytest.raises(SystemExit):
        bench.main([str(tmp_path / "a"), str(tmp_path / "b"), "--", "--json", "x.json"])
    assert bench.main([str(tmp_path / "a"), str(tmp_path / "nowhere")]) == 2
    assert "holds no scripts/bench_matvec.py" in capsys.readouterr().err
