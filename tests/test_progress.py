"""Progress bars: drawn on a terminal or when forced, never into a pipe or a log."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import juliabridge
from juliabridge.examples import lenet_bundle
from juliabridge.support import progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _consume(stream: io.StringIO, **kw: object) -> list[int]:
    return list(progress.track_bytes([1, 2, 3], 6, "loading test", size=int, stream=stream, **kw))


def test_quiet_when_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(progress.ENV, raising=False)
    out = io.StringIO()
    assert _consume(out, min_total=0) == [1, 2, 3]
    with progress.spinner("deriving", stream=out):
        pass
    assert out.getvalue() == ""


def test_shown_on_a_terminal_and_when_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(progress.ENV, raising=False)
    tty = _Terminal()
    assert _consume(tty, min_total=0) == [1, 2, 3]
    assert "loading test" in tty.getvalue() and "\x1b[" in tty.getvalue()
    monkeypatch.setenv(progress.ENV, "1")
    piped = io.StringIO()
    with progress.spinner("deriving the VJP", stream=piped):
        pass
    assert "deriving the VJP" in piped.getvalue()


def test_turned_off_by_the_environment_or_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(progress.ENV, "0")
    tty = _Terminal()
    assert _consume(tty, min_total=0) == [1, 2, 3]
    monkeypatch.setenv(progress.ENV, "1")
    assert _consume(tty, min_total=0, show=False) == [1, 2, 3]
    assert tty.getvalue() == ""
    assert progress.enabled(True, io.StringIO()) and not progress.enabled(False, tty)


def test_small_loads_show_no_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(progress.ENV, "1")
    tty = _Terminal()
    assert _consume(tty) == [1, 2, 3]  # 6 bytes < MIN_BYTES
    assert tty.getvalue() == ""


def test_import_lux_shows_the_loading_bar_and_stays_quiet_in_a_pipe(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(progress, "MIN_BYTES", 0)
    monkeypatch.delenv(progress.ENV, raising=False)
    juliabridge.import_lux(lenet_bundle())
    assert capsys.readouterr().err == ""  # pytest's capture is not a terminal
    monkeypatch.setenv(progress.ENV, "1")
    juliabridge.import_lux(lenet_bundle())
    err = capsys.readouterr().err
    assert "loading lenet.bundle" in err and "147.0 kB" in err


def test_vjp_shows_a_spinner_when_forced(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import shutil

    from juliabridge import cli

    bundle = tmp_path / "lenet.bundle"
    shutil.copytree(lenet_bundle(), bundle)
    monkeypatch.setenv(progress.ENV, "1")
    assert cli.main(["vjp", str(bundle), "--overwrite"]) == 0
    err = capsys.readouterr().err
    assert "deriving the VJP module through lax" in err  # LeNet lifts: no Enzyme needed
    monkeypatch.setenv(progress.ENV, "0")
    assert cli.main(["vjp", str(bundle), "--overwrite"]) == 0
    assert "deriving" not in capsys.readouterr().err


def test_the_environment_table_states_the_threshold_and_the_switch() -> None:
    from juliabridge.support.environment import VARIABLES

    (entry,) = [v for v in VARIABLES if v.name == progress.ENV]
    assert progress.MIN_BYTES == 64 << 20 and "over 64 MiB of weights" in entry.effect
    assert entry.effect.startswith("`0` hides every progress bar") and "`1` shows" in entry.effect
