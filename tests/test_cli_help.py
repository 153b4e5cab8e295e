"""The command line's words: help text on every option, ``-v`` and the package's logger, the
precision ``--precision auto`` chose, progress bars only on a terminal."""

from __future__ import annotations

import argparse
import logging

import numpy as np
import pytest

from fftmatvec import cli, io

SIZES = (3, 4, 8)  # (Nd, Nm, Nt)


def test_every_option_of_every_subcommand_has_help(monkeypatch):
    made = []
    init = argparse.Action.__init__

    def record(self, *args, **kwargs):  # every action, of every parser, is one of these
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(argparse.Action, "__init__", record)
    parser = cli.build_parser()
    named = [a for a in made if a.option_strings or a.dest != "help"]
    assert len(named) > 40  # the subcommands' options were all seen
    missing = [", ".join(a.option_strings) or a.metavar or a.dest for a in made
               if not (a.help and a.help.strip())]
    assert not missing, f"options without help text: {missing}"
    text = parser.format_help()
    for name in cli.SUBCOMMANDS:
        assert name.replace("_", "-") in text


@pytest.mark.parametrize("command", [c.replace("_", "-") for c in cli.SUBCOMMANDS])
def test_every_subcommand_takes_verbose(command):
    parser = cli.build_parser()
    needs = {"matvec": ["M", "I", "O"], "convert": ["S", "D"], "tune": ["--out", "t.yaml"],
             "tune-fno": ["1,2,8,4"]}.get(command, [])
    assert parser.parse_args([command, *needs]).verbose == 0
    assert parser.parse_args([command, *needs, "-v"]).verbose == 1
    assert parser.parse_args([command, *needs, "-vv"]).verbose == 2


@pytest.fixture
def files(tmp_path, rng, monkeypatch):
    """A native matrix and a parameter vector; no tuning table in reach but the test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("FFTMATVEC_TUNING_PATH", raising=False)
    nd, nm, nt = SIZES
    io.save_matrix(str(tmp_path / "k.h5"), rng.standard_normal(SIZES))
    io.save_vector(str(tmp_path / "m.h5"), rng.standard_normal((nm, nt)), "param")
    return tmp_path


def _matvec(files, *extra):
    return cli.main(["matvec", str(files / "k.h5"), str(files / "m.h5"), str(files / "y.h5"),
                     "--repeat", "1", *extra])


def _model_only(monkeypatch):
    """precision='auto' with no table: the error model (the shipped tables are for GPUs)."""
    from fftmatvec.tuning import select

    monkeypatch.setattr(select, "table_paths", lambda: [])


@pytest.mark.filterwarnings("ignore:no tuning table")
def test_auto_precision_says_what_it_chose_and_from_where(files, capsys, monkeypatch):
    _model_only(monkeypatch)
    assert _matvec(files, "--precision", "auto", "--rtol", "1e-3") == 0
    out = capsys.readouterr().out
    assert "precision  sssss, chosen by --precision auto for rtol 0.001 from the a-priori " \
           "error model" in out
    assert _matvec(files, "--precision", "dsdsd") == 0
    out = capsys.readouterr().out
    assert "chosen" not in out and "precision dsdsd" in out


def test_a_warning_is_one_line_of_the_command(files, capsys, monkeypatch):
    from fftmatvec.tuning import select

    _model_only(monkeypatch)
    monkeypatch.setattr(select, "_warned", set())  # the warning comes once per process
    assert _matvec(files, "--precision", "auto") == 0
    err = capsys.readouterr().err
    assert err == ("fftmatvec matvec: warning: no tuning table for device 'cpu': "
                   "precision='auto' uses the a-priori error model (run `fftmatvec tune` to "
                   "measure this device)\n")


def test_auto_precision_from_a_tuning_table(files, capsys, monkeypatch):
    table = files / "cpu.yaml"
    assert cli.main(["tune", "--nm", "4", "--nd", "3", "--nt", "8", "--ops", "matvec",
                     "--precisions", "ddddd,sssss", "--repeat", "1", "--n-inputs", "1",
                     "--device", "cpu", "--out", str(table)]) == 0
    capsys.readouterr()
    monkeypatch.setenv("FFTMATVEC_TUNING_PATH", str(table))
    assert _matvec(files, "--precision", "auto", "--rtol", "1e-3") == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("precision  "))
    assert "chosen by --precision auto for rtol 0.001 from the tuning table" in line
    assert str(table) in line and "matvec (nm=4, nd=3, nt=8, nrhs=1)" in line
    assert line.split()[1].rstrip(",") in ("ddddd", "sssss")


@pytest.mark.filterwarnings("ignore:no tuning table")
def test_verbose_logs_through_the_package_logger(files, capsys, monkeypatch):
    _model_only(monkeypatch)
    logger = logging.getLogger("fftmatvec")
    before = logger.level, list(logger.handlers)
    assert _matvec(files, "--precision", "auto", "--rtol", "1e-3") == 0
    assert "chose" not in capsys.readouterr().err  # logged at INFO: silent without -v
    seen = []

    class Spy(logging.Handler):
        def emit(self, record):
            seen.append((record.name, record.levelno, logger.getEffectiveLevel()))

    spy = Spy()
    logger.addHandler(spy)
    try:
        assert _matvec(files, "--precision", "auto", "--rtol", "1e-3", "-v") == 0
    finally:
        logger.removeHandler(spy)
    err = capsys.readouterr().err
    assert "fftmatvec matvec: precision='auto' (rtol=0.001) chose sssss from model" in err
    assert ("fftmatvec.operator", logging.INFO, logging.INFO) in seen
    assert (logger.level, logger.handlers) == before  # the command leaves the logger as it was


def test_no_progress_bar_off_a_terminal(files, capsys):
    assert cli.main(["tune", "--nm", "4", "--nd", "3", "--nt", "8", "--ops", "matvec",
                     "--precisions", "ddddd", "--repeat", "1", "--n-inputs", "1",
                     "--device", "cpu", "--out", str(files / "t.yaml")]) == 0
    captured = capsys.readouterr()
    assert "tuning 1 entries" in captured.out
    assert "config" not in captured.err and "%|" not in captured.err, captured.err


def test_no_progress_bar_off_a_terminal_on_convert(files, capsys):
    assert cli.main(["convert", str(files / "k.h5"), str(files / "dir")]) == 0
    captured = capsys.readouterr()
    assert "-> " in captured.out
    assert "row" not in captured.err and "%|" not in captured.err, captured.err
    np.testing.assert_array_equal(io.load_matrix(str(files / "dir")),
                                  io.load_matrix(str(files / "k.h5")))
