"""StableHLO portable artifacts (stablehlo/artifact.py) and the child process that reads them
(stablehlo/_artifact_child.py), pinned from the outside.

The child's functions are also called in this process, with its stdin and stdout replaced, so
that what it sends back is checked byte by byte; the parent's reading of that protocol is
checked against a stand-in child (childproc.run replaced) for every way the real one can stop.
"""

from __future__ import annotations

import io
import subprocess
import threading
from types import SimpleNamespace
from typing import Any

import pytest
from jaxlib.mlir.dialects import stablehlo

from juliabridge.errors import MLIRParseError, UnsupportedModuleError
from juliabridge.stablehlo import _artifact_child as child
from juliabridge.stablehlo import artifact
from juliabridge.support import childproc

MODULE = (
    "func.func public @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
    "  %0 = stablehlo.add %a, %a : tensor<2xf32>\n"
    "  return %0 : tensor<2xf32>\n"
    "}\n"
)
LO, HI = str(stablehlo.get_minimum_version()), str(stablehlo.get_current_version())


def _good() -> bytes:
    return artifact.serialize(MODULE).data


def _frame(*items: bytes) -> bytes:
    return b"".join(len(a).to_bytes(8, "little") + a for a in items)


def _replies(data: bytes) -> list[tuple[bytes, bytes]]:
    out, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos + 1 : pos + 9], "little")
        out.append((data[pos : pos + 1], data[pos + 9 : pos + 9 + n]))
        pos += 9 + n
    return out


def _bump(version: str, k: int) -> str:
    parts = [int(p) for p in version.split(".")]
    parts[k] += 1
    return ".".join(map(str, parts))


# --- versions -------------------------------------------------------------------------------


def test_installed_versions_and_what_they_read() -> None:
    assert artifact.installed_versions() == (LO, HI)
    assert artifact.unreadable_reason(HI) is None and artifact.unreadable_reason(LO) is None
    newer = _bump(HI, 1)
    assert artifact.unreadable_reason(newer) == (
        f"its target {newer} is newer than this jaxlib's StableHLO {HI} reads (it reads {LO} to {HI})"
    )
    assert artifact.unreadable_reason("0.0.1") == (
        f"its target 0.0.1 is older than this jaxlib's StableHLO reads ({LO} to {HI})"
    )
    assert artifact._version_tuple("1.10.2") == (1, 10, 2)  # numbers, not text: 10 > 9
    assert artifact.unreadable_reason(f"{HI.split('.')[0]}.{int(HI.split('.')[1]) * 10 + 10}.0")


def test_newer_writer_reason() -> None:
    assert artifact.newer_writer_reason(HI) is None
    assert artifact.newer_writer_reason(LO) is None
    newer = _bump(HI, 2)
    assert artifact.newer_writer_reason(newer) == (
        f"it was written at StableHLO {newer}, newer than this jaxlib's {HI}, whose parser may "
        "not know all of its text"
    )


# --- serialize, and reading in this process ----------------------------------------------------


def test_serialize_targets() -> None:
    s = artifact.serialize(MODULE)
    assert (s.stablehlo_version, s.target) == (HI, artifact.ARTIFACT_TARGET)
    assert artifact.serialize(MODULE, target=LO).target == LO
    assert artifact.serialize(MODULE, target=_bump(HI, 0)).target == HI  # clamped to this jaxlib
    (text,) = artifact.deserialize([s.data], ["a"], isolated=False)
    assert isinstance(text, str) and "stablehlo.add" in text and "@main" in text


def test_serialize_refuses_what_the_target_cannot_hold() -> None:
    bad = 'func.func @main() {\n  "foo.bar"() : () -> ()\n  return\n}\n'
    from jax.extend import mlir as jax_mlir

    with pytest.raises(Exception) as direct:  # what jax itself says about this module
        jax_mlir.serialize_portable_artifact(bad, artifact.ARTIFACT_TARGET)
    with pytest.raises(UnsupportedModuleError) as info:
        artifact.serialize(bad)
    assert str(info.value).startswith(
        "cannot serialize the module to a StableHLO portable artifact at target "
        f"{artifact.ARTIFACT_TARGET} ({type(direct.value).__name__}: {str(direct.value)[:500]}); "
        "it uses ops or features that version lacks"
    )


def test_in_process_reading() -> None:
    assert artifact.deserialize([], []) == []
    got = artifact.deserialize([_good(), b"junk"], ["a.mlirbc", "b.mlirbc"], isolated=False)
    assert isinstance(got[0], str) and "stablehlo.add" in got[0]
    assert isinstance(got[1], MLIRParseError)
    assert str(got[1]).startswith("b.mlirbc: not a readable StableHLO portable artifact (")


def test_child_process_reads_each_artifact() -> None:
    good = _good()
    (here,) = artifact.deserialize([good], ["x"], isolated=False)
    got = artifact.deserialize([good, b"junk", good], ["a", "b", "c"])
    assert got[0] == here and got[2] == here
    assert isinstance(got[1], MLIRParseError)
    assert str(got[1]).startswith("b: not a readable StableHLO portable artifact (")


def test_child_memory_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(childproc, "physical_memory", lambda: 1 << 50)
    assert artifact.child_memory(10) == (2 << 30) + 640
    monkeypatch.setattr(childproc, "physical_memory", lambda: 12345)
    assert artifact.child_memory(10) == 12345


# --- the parent's side of the protocol, against stand-in children -------------------------------


class _FakeRun:
    def __init__(self, result: Any) -> None:
        self.result = result
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


def _done(stdout: bytes, rc: int = 0, stderr: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.CompletedProcess([], rc, stdout, stderr)


def _with_child(monkeypatch: pytest.MonkeyPatch, result: Any) -> _FakeRun:
    fake = _FakeRun(result)
    monkeypatch.setattr(childproc, "run", fake)
    monkeypatch.setattr(childproc, "physical_memory", lambda: 1 << 50)
    return fake


def test_what_the_parent_sends(monkeypatch: pytest.MonkeyPatch) -> None:
    reply = b"T" + (3).to_bytes(8, "little") + b"abc" + b"T" + (0).to_bytes(8, "little")
    fake = _with_child(monkeypatch, _done(reply))
    assert artifact.deserialize([b"xy", b"z"], ["a", "b"]) == ["abc", ""]
    ((args, kwargs),) = fake.calls
    assert args == (str(artifact._CHILD),)
    framed = _frame(b"xy", b"z")
    assert kwargs["input"] == framed
    assert kwargs["timeout"] == artifact.CHILD_TIMEOUT == 120.0
    assert kwargs["memory"] == (2 << 30) + 64 * len(framed)
    assert kwargs["extra_env"] == {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def test_child_that_times_out_or_cannot_start(monkeypatch: pytest.MonkeyPatch) -> None:
    _with_child(monkeypatch, subprocess.TimeoutExpired("x", 120))
    got = artifact.deserialize([b"a", b"b"], ["one", "two"])
    assert [str(e) for e in got] == [
        f"{o}: the artifact reader process took more than 120 s and was stopped"
        for o in ("one", "two")
    ]
    assert all(isinstance(e, MLIRParseError) for e in got)
    _with_child(monkeypatch, OSError("no fork"))
    (e,) = artifact.deserialize([b"a"], ["one"])
    assert str(e) == "one: the artifact reader process could not start (no fork)"


def test_child_that_stops_before_answering(monkeypatch: pytest.MonkeyPatch) -> None:
    first = b"T" + (2).to_bytes(8, "little") + b"ok"
    _with_child(monkeypatch, _done(first + b"T\x00", rc=-9, stderr=b"  Segmentation fault\n"))
    got = artifact.deserialize([b"a", b"b"], ["one", "two"])
    assert got[0] == "ok"
    assert str(got[1]) == (
        "two: the artifact reader process stopped before answering (killed by signal 9; "
        "Segmentation fault); the artifact is corrupt or crafted"
    )
    _with_child(monkeypatch, _done(first, rc=-11))  # every artifact after the first unanswered
    got = artifact.deserialize([b"a", b"b", b"c"], ["one", "two", "three"])
    assert got[0] == "ok" and len(got) == 3
    assert [str(e).split(":")[0] for e in got[1:]] == ["two", "three"]
    assert all("(killed by signal 11)" in str(e) for e in got[1:])
    _with_child(monkeypatch, _done(b"", rc=3))
    (e,) = artifact.deserialize([b"a"], ["one"])
    assert str(e) == (
        "one: the artifact reader process stopped before answering (exit status 3); the "
        "artifact is corrupt or crafted"
    )
    _with_child(monkeypatch, _done(b"", rc=1, stderr=b"x" * 400 + b"TAIL"))
    (e,) = artifact.deserialize([b"a"], ["one"])
    assert "(exit status 1; " + "x" * 296 + "TAIL)" in str(e)


def test_child_error_replies_and_short_payloads(monkeypatch: pytest.MonkeyPatch) -> None:
    reply = (
        b"E" + (4).to_bytes(8, "little") + b"bad!" + b"T" + (10).to_bytes(8, "little") + b"short"
    )
    _with_child(monkeypatch, _done(reply))
    got = artifact.deserialize([b"a", b"b"], ["one", "two"])
    assert str(got[0]) == "one: not a readable StableHLO portable artifact (bad!)"
    assert str(got[1]) == "two: not a readable StableHLO portable artifact (short)"
    long = "é" * 300
    _with_child(monkeypatch, _done(b"E" + (600).to_bytes(8, "little") + long.encode()))
    (e,) = artifact.deserialize([b"a"], ["one"])
    assert str(e) == f"one: not a readable StableHLO portable artifact ({'é' * 300})"
    _with_child(monkeypatch, _done(b"E" + (3).to_bytes(8, "little") + b"a\xffb"))
    (e,) = artifact.deserialize([b"a"], ["one"])
    assert str(e) == "one: not a readable StableHLO portable artifact (a\ufffdb)"
    _with_child(monkeypatch, _done(b"E" + (1000).to_bytes(8, "little") + b"y" * 1000))
    (e,) = artifact.deserialize([b"a"], ["one"])
    assert str(e) == f"one: not a readable StableHLO portable artifact ({'y' * 500})"


# --- the child's side, in this process -------------------------------------------------------


def test_child_convert() -> None:
    good = _good()
    (here,) = artifact.deserialize([good], ["x"], isolated=False)
    assert child._convert(good) == (b"T", str(here).encode())
    from jaxlib.mlir import ir

    ctx = ir.Context()
    stablehlo.register_dialect(ctx)
    with pytest.raises(Exception) as info:  # what jaxlib itself raises for these bytes
        stablehlo.deserialize_portable_artifact(ctx, b"junk")
    want = f"{type(info.value).__name__}: {info.value}".encode()[:4000]
    assert child._convert(b"junk") == (b"E", want)


def test_child_text_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    good = _good()
    text = child._convert(good)[1]
    monkeypatch.setattr(child, "MAX_TEXT_BYTES", len(text))
    assert child._convert(good) == (b"T", text)
    monkeypatch.setattr(child, "MAX_TEXT_BYTES", len(text) - 1)
    assert child._convert(good) == (
        b"E",
        b"the module's text is larger than the 1 GiB module limit",
    )


def _streams(monkeypatch: pytest.MonkeyPatch, data: bytes) -> io.BytesIO:
    out = io.BytesIO()
    monkeypatch.setattr(child.sys, "stdin", SimpleNamespace(buffer=io.BytesIO(data)))
    monkeypatch.setattr(child.sys, "stdout", SimpleNamespace(buffer=out))
    return out


def test_child_serves_every_artifact_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    good = _good()
    text = child._convert(good)[1]
    out = _streams(monkeypatch, _frame(good, b"junk", good))
    child._serve()
    replies = _replies(out.getvalue())
    assert [r[0] for r in replies] == [b"T", b"E", b"T"]
    assert replies[0][1] == text == replies[2][1]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x05\x00\x00", "truncated length on stdin"),
        ((100).to_bytes(8, "little") + b"12345", "expected 100 bytes on stdin, got 5"),
    ],
)
def test_child_refuses_a_broken_frame(
    monkeypatch: pytest.MonkeyPatch, data: bytes, message: str
) -> None:
    _streams(monkeypatch, data)
    with pytest.raises(EOFError, match=message):
        child._serve()


def test_child_main_status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = threading.stack_size()
    try:
        out = _streams(monkeypatch, _frame(_good()))
        assert child.main() == 0
        assert [r[0] for r in _replies(out.getvalue())] == [b"T"]
        assert capsys.readouterr().err == ""
        _streams(monkeypatch, b"\x01")
        assert child.main() == 1
        assert capsys.readouterr().err == "EOFError: truncated length on stdin\n"
    finally:
        threading.stack_size(before)
