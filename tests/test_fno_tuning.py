"""FNO tuning tables: the tune command, the strict schema, and the layer's lookup."""

import os

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")

from fftmatvec.cli import main  # noqa: E402
from fftmatvec.fno import _torch as fno_torch  # noqa: E402
from fftmatvec.fno import _tuning, spectral_conv, spectral_conv_torch  # noqa: E402
from fftmatvec.fno._plan import fno_chain  # noqa: E402
from fftmatvec.tuning.table import TableError  # noqa: E402

from conftest import set_plan  # noqa: E402


@pytest.fixture(autouse=True)
def _tables(tmp_path, monkeypatch):
    """Tables of this test only: its own folder, an empty user cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(_tuning.ENV, str(tmp_path / "tables"))
    (tmp_path / "tables").mkdir()
    _tuning.reload_tables()
    yield
    _tuning.reload_tables()


def _entry(**choice):
    """A table entry for a (3, 4, 5, (32,), modes (9,)) layer in training."""
    return {"batch": 3, "cin": 4, "cout": 5, "spatial": [32], "modes": [9], "dtype": "float32",
            "compute_dtype": "float32", "grad": True, "repeat": 1,
            "choice": {"method": "dft", "graphs": "auto", "plan": {}, **choice},
            "time": 1e-4, "builtin_time": 2e-4, "candidates": []}


def _write(tmp_path, *entries, name="t.yaml", arch="cpu"):
    table = _tuning.new_table({"vendor": "cpu", "arch": arch, "name": "test", "runtime": "-",
                               "torch": "-", "fftmatvec": "-"})
    table["entries"] = list(entries)
    path = tmp_path / "tables" / name
    _tuning.save_table(table, path)
    return path


def _inputs(requires_grad=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((3, 4, 32), generator=g).requires_grad_(requires_grad)
    w = (torch.randn((4, 5, 9), dtype=torch.complex64, generator=g) / 2).requires_grad_(
        requires_grad)
    return x, w


@pytest.fixture
def spy(monkeypatch):
    """The ``tuned`` plan and ``graphs`` of each call that takes the DFT path, and a None for
    each that takes the FFT path."""
    calls = []
    real_dft, real_function = fno_torch.dft_spectral_conv, fno_torch._function

    def dft(x, weight, bias, modes, cdtype, graphs="auto", tuned=()):
        calls.append((tuned, graphs))
        return real_dft(x, weight, bias, modes, cdtype, graphs, tuned)

    def function():
        fn = real_function()

        class Spied(fn):
            @staticmethod
            def forward(ctx, *args):
                calls.append(None)
                return fn.forward(ctx, *args)

        return Spied

    monkeypatch.setattr(fno_torch, "dft_spectral_conv", dft)
    monkeypatch.setattr(fno_torch, "_function", function)
    monkeypatch.setattr(fno_torch, "_FN", None)
    return calls


def test_the_layer_takes_its_entry(tmp_path, spy):
    _write(tmp_path, _entry(plan={"fno_split": "0"}, graphs=False))
    x, w = _inputs()
    y = spectral_conv_torch(x, w, 16)
    assert spy == [((("fno_split", "0"),), False)]
    want = spectral_conv(x.detach().numpy().astype(np.float64),
                         w.detach().numpy().astype(np.complex128), 16)
    assert np.abs(y.detach().numpy() - want).max() <= 1e-5 * np.abs(want).max()
    with torch.no_grad():  # the entry is for training: a forward alone takes the rules
        spectral_conv_torch(x, w, 16)
    assert spy[-1] == ((), "auto")
    spectral_conv_torch(x[:2], w, 16)  # another signature: the rules
    assert spy[-1] == ((), "auto")


def test_an_fft_entry_and_the_callers_own_choices(tmp_path, spy):
    _write(tmp_path, _entry(method="fft", graphs=False))
    x, w = _inputs()
    y = spectral_conv_torch(x, w, 16)
    assert spy == [None]
    y.sum().backward()
    spectral_conv_torch(x, w, 16, method="dft")  # the caller's method: the entry is not used
    assert spy[-1] == ((), "auto")
    spectral_conv_torch(x, w, 16, method="fft")
    assert spy[-1] is None


def test_the_environment_overrides_the_entry_key_by_key(monkeypatch):
    one_axis = (64, 8, 8, (128,), (33,), "float32", -1, False)
    assert fno_chain(*one_axis)[2] == "split"  # by the rules: B (Cin + Cout) >= Cin Cout
    assert fno_chain(*one_axis, tuned=(("fno_split", "0"),))[2] == "interleaved"
    set_plan(monkeypatch, "fno_split", "1")
    assert fno_chain(*one_axis, tuned=(("fno_split", "0"),))[2] == "split"


def test_none_and_a_bad_path(tmp_path, monkeypatch, spy):
    _write(tmp_path, _entry(method="fft"))
    monkeypatch.setenv(_tuning.ENV, "none")
    spectral_conv_torch(*_inputs(), 16)
    assert spy == [((), "auto")]
    monkeypatch.setenv(_tuning.ENV, str(tmp_path / "missing"))
    with pytest.raises(Exception, match="missing.*neither a file nor a folder"):
        spectral_conv_torch(*_inputs(), 16)


def test_first_table_wins_and_other_devices_are_ignored(tmp_path, spy):
    _write(tmp_path, _entry(method="fft"), name="a.yaml", arch="sm_90")
    _write(tmp_path, _entry(graphs=False), name="b.yaml")
    _write(tmp_path, _entry(method="fft"), name="c.yaml")
    spectral_conv_torch(*_inputs(), 16)
    assert spy == [((), False)]


@pytest.mark.parametrize("change, problem", [
    (lambda t: t.pop("kind"), "missing key 'kind'"),
    (lambda t: t.update(kind="matvec"), "expected 'fno'"),
    (lambda t: t.update(schema=2), "newer than this fftmatvec reads"),
    (lambda t: t["device"].pop("arch"), "device: missing key 'arch'"),
    (lambda t: t["entries"].append(dict(t["entries"][0])), "a second entry"),
    (lambda t: t["entries"][0].update(batch=0), "batch: expected a positive integer"),
    (lambda t: t["entries"][0].update(modes=[9, 9]), "a mode count each"),
    (lambda t: t["entries"][0].update(dtype="float8"), "dtype: expected one of"),
    (lambda t: t["entries"][0].update(grad="yes"), "grad: expected bool"),
    (lambda t: t["entries"][0].update(time=-1.0), "time: expected a finite positive"),
    (lambda t: t["entries"][0]["choice"].update(method="fast"), "method: expected one of"),
    (lambda t: t["entries"][0]["choice"].update(graphs="maybe"), "graphs: expected auto"),
    (lambda t: t["entries"][0]["choice"].update(method="fft", graphs=True), "no CUDA graph"),
    (lambda t: t["entries"][0]["choice"].update(plan={"row_fft": "1"}), "only the FNO keys"),
    (lambda t: t["entries"][0]["choice"].update(plan={"fno_turbo": "1"}), "unknown plan key"),
    (lambda t: t["entries"][0]["choice"].update(plan={"fno_rows": "2"}), "must be auto, 0 or 1"),
    (lambda t: t["entries"][0]["candidates"].append(
        {"method": "dft", "graphs": False, "plan": {}, "time": 1e-4, "builtin": "yes"}),
     "builtin: expected bool"),
])
def test_a_bad_table_is_refused_naming_the_file(tmp_path, change, problem, spy):
    path = _write(tmp_path, _entry())
    table = yaml.safe_load(path.read_text())
    change(table)
    path.write_text(yaml.safe_dump(table))
    _tuning.reload_tables()
    with pytest.raises(TableError, match=problem) as err:
        spectral_conv_torch(*_inputs(), 16)
    assert str(path) in str(err.value)
    with pytest.raises(TableError, match=problem):
        _tuning.save_table(table, tmp_path / "other.yaml")
    assert not (tmp_path / "other.yaml").exists()


def test_a_table_that_is_not_yaml(tmp_path):
    path = tmp_path / "tables" / "t.yaml"
    path.write_text("schema: [1\n")
    with pytest.raises(TableError, match="not valid YAML"):
        spectral_conv_torch(*_inputs(), 16)


def test_tune_writes_the_fastest_and_the_layer_reads_it(tmp_path, monkeypatch, spy):
    out = tmp_path / "tables" / "cpu.yaml"
    seen = []
    table = _tuning.tune(["3,4,5,32,16"], device="cpu", repeat=2, rounds=2, out=out,
                         progress=seen.append)
    assert _tuning.load_table(out) == table and [e["batch"] for e in seen] == [3]
    (entry,) = table["entries"]
    assert entry["modes"] == [9] and entry["grad"] is True
    timed = [c for c in entry["candidates"] if "time" in c]
    assert {c["method"] for c in timed} == {"dft", "fft"}
    assert all(c["error"] <= 1e-4 for c in timed)
    skipped = [c for c in entry["candidates"] if "skipped" in c]
    assert all(c["plan"] for c in skipped)
    (twin,) = [c for c in timed if c.get("builtin")]  # the rules' own choice, timed once
    assert twin["time"] == entry["builtin_time"] and twin["graphs"] is False
    fastest = min(timed, key=lambda c: c["time"])
    choice = entry["choice"]
    if fastest["time"] <= (1 - _tuning.MARGIN) * entry["builtin_time"]:
        assert choice == {k: fastest[k] for k in ("method", "graphs", "plan")}
    else:
        assert choice == {"method": "dft", "graphs": "auto", "plan": {}}
    assert not [p for p in os.listdir(out.parent) if p != "cpu.yaml"]  # no temporary left
    spy.clear()
    spectral_conv_torch(*_inputs(), 16)
    assert spy[0] == (None if choice["method"] == "fft" else
                      (tuple(sorted(choice["plan"].items())), choice["graphs"]))
    # a second run keeps the entry; force measures it again
    before = out.stat().st_mtime_ns
    _tuning.tune(["3,4,5,32,16"], device="cpu", repeat=2, rounds=1, out=out)
    assert out.stat().st_mtime_ns == before
    again = _tuning.tune(["3,4,5,32,16"], device="cpu", repeat=2, rounds=1, out=out,
                         force=True)
    assert len(again["entries"]) == 1 and again["entries"][0]["repeat"] == 2


def test_tune_inference_and_two_axes(tmp_path):
    out = tmp_path / "t.yaml"
    table = _tuning.tune([(2, 3, 3, (12, 10), (6, 4))], device="cpu", grad=False, repeat=2,
                         rounds=1, out=out, dtype="float64")
    (entry,) = table["entries"]
    assert entry["grad"] is False and entry["modes"] == [6, 3] and entry["dtype"] == "float64"
    assert any("split modes cannot serve" in c.get("skipped", "") for c in entry["candidates"])


def test_tune_refuses_bad_arguments(tmp_path):
    with pytest.raises(Exception, match="dtype: expected one of float32, float64"):
        _tuning.tune(["2,3,16,6"], device="cpu", dtype="float16", out=tmp_path / "t.yaml")
    with pytest.raises(Exception, match="compute_dtype: float64 for float32"):
        _tuning.tune(["2,3,16,6"], device="cpu", compute_dtype="float64",
                     out=tmp_path / "t.yaml")
    _write(tmp_path, _entry(), name="gpu.yaml", arch="sm_90")
    with pytest.raises(Exception, match="a table of sm_90, this device is cpu"):
        _tuning.tune(["2,3,16,6"], device="cpu", out=tmp_path / "tables" / "gpu.yaml")


@pytest.mark.parametrize("text, case", [
    ("32,64,64x64,16", (32, 64, 64, (64, 64), (16, 16))),
    ("20,32,16,85x85,12x10", (20, 32, 16, (85, 85), (12, 10))),
    ("4,32,64x64x64,16", (4, 32, 32, (64, 64, 64), (16, 16, 16))),
])
def test_parse_case(text, case):
    assert _tuning.parse_case(text) == case


@pytest.mark.parametrize("text", ["4,8,64", "a,8,64,16", "4,8,64x64,16x16x16", "0,8,64,16",
                                  "4,8,64x64x64x64,16"])
def test_parse_case_refuses(text):
    with pytest.raises(Exception, match="case"):
        _tuning.parse_case(text)


def test_the_command(tmp_path, capsys):
    out = tmp_path / "cmd.yaml"
    assert main(["tune-fno", "2,3,16,6", "--repeat", "2", "--rounds", "1", "--out",
                 str(out), "--inference"]) == 0
    text = capsys.readouterr().out
    assert f"into {out}" in text and "fwd:" in text and "built-in" in text
    assert _tuning.load_table(out)["entries"][0]["grad"] is False
    assert main(["tune-fno", "2,3,16", "--out", str(out)]) == 2
    assert "expected B,C,GRID,MODES" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA/ROCm device for torch")
@pytest.mark.parametrize("case", ["8,16,128,64", "4,8,6,64x64,16"])
def test_tune_on_the_device(tmp_path, case):
    """On the device: the graphs' two forms and no graphs are timed for each chain, the plan
    keys' refusals are listed, and the layer runs the entry's choice to within float32 of the
    CPU's float64 result."""
    out = tmp_path / "tables" / "gpu.yaml"
    table = _tuning.tune([case], repeat=3, rounds=2, out=out)
    (entry,) = table["entries"]
    timed = [c for c in entry["candidates"] if "time" in c]
    assert {(c["graphs"], c["plan"].get("fno_ends")) for c in timed if c["method"] == "dft"} \
        >= {(False, None), (True, "0"), (True, "1")}
    assert table["device"]["arch"] == _tuning.device_arch("cuda", torch.cuda.current_device())
    b, cin, cout, grid, n_modes = _tuning.parse_case(case)
    x = torch.randn((b, cin) + grid, device="cuda", requires_grad=True)
    w = torch.randn((cin, cout) + _tuning.kept_modes(n_modes), dtype=torch.complex64,
                    device="cuda", requires_grad=True)
    y = spectral_conv_torch(x, w, n_modes)
    want = spectral_conv(x.detach().cpu().double().numpy(),
                         w.detach().cpu().to(torch.complex128).numpy(), n_modes)
    got = y.detach().cpu().numpy()
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    y.backward(torch.randn_like(y))
    assert torch.isfinite(w.grad).all() and torch.isfinite(x.grad).all()
