"""The juliacall route: juliabridge.export_lux on Julia objects of a running session.

No machine here has Julia, so juliacall is replaced by a fake module with the parts the route
uses (``ValueBase``, ``newmodule``, ``CONFIG``): these tests check what Python hands to the
``julia`` subprocess by default (a serialized file and a request; the subprocess itself is
replaced) and, with ``in_process=True``, what it sends to ``JuliaBridge.export_from_python``,
and how answers and failures come back. The Julia side of both entry points is tested in
julia/test/runtests.jl ("the subprocess driver").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import juliabridge
from juliabridge.driver import handoff, session
from juliabridge.errors import CallArgumentError, JuliaExportError, JuliaUnavailable

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "juliabridge" / "examples" / "lenet.bundle"


class Value:
    """A stand-in for a wrapped Julia value (juliacall.ValueBase)."""

    def __init__(self, name: str) -> None:
        self.name = name


class FakeJuliaError(Exception):
    pass


class FakeBridge:
    """JuliaBridge as the fake session exposes it: records calls, answers like Julia would."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.answer: str | None = None
        self.raises: BaseException | None = None

    def export_from_python(
        self, out: str, model: Any, ps: Any, st: Any, options: str, *inputs: Any, **kw: Any
    ) -> str:
        self.calls.append(
            {
                "out": out,
                "model": model,
                "ps": ps,
                "st": st,
                "options": json.loads(options),
                "inputs": inputs,
                "kw": kw,
            }
        )
        if self.raises is not None:
            raise self.raises
        if "progress" in kw:
            kw["progress"](1, 4, "moving the example input, parameters and states to Reactant")
        if self.answer is not None:
            return self.answer
        shutil.copytree(SHIPPED, out)
        return json.dumps({"ok": True, "path": out})


@pytest.fixture
def fake_juliacall(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    bridge = FakeBridge()
    state = types.SimpleNamespace(
        bridge=bridge, evaluated=[], fail_import=False, serialized=[], fail_serialize=False
    )

    class Host:
        JuliaBridge = bridge

        def seval(self, code: str) -> None:
            state.evaluated.append(code)
            if state.fail_import and "JuliaBridge" in code:
                raise FakeJuliaError(
                    "ArgumentError: Package JuliaBridge not found in current path.\nmore"
                )

        def juliabridge_session(self) -> str:
            return f"/opt/julia/bin/julia\n{REPO / 'julia' / 'Project.toml'}\n1.11.5"

        def juliabridge_serialize(self, path: str, *objects: Any) -> str:
            if state.fail_serialize:
                raise FakeJuliaError("MethodError: no method matching serialize\nmore")
            Path(path).write_bytes(b"serialized")
            state.serialized.append((path, objects))
            return "Lux=b2108857-7c20-44ae-9111-449ecde12c47\nRandom=9a3f8284"

    module = types.ModuleType("juliacall")
    module.ValueBase = Value  # type: ignore[attr-defined]
    module.CONFIG = {"inited": True}  # type: ignore[attr-defined]
    module.newmodule = lambda name: Host()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "juliacall", module)
    monkeypatch.setattr(session, "_BRIDGE", {})
    monkeypatch.setattr(handoff, "_HOSTS", {})
    return state


def julia_objects() -> tuple[Value, Value, Value, Value]:
    return Value("model"), Value("ps"), Value("st"), Value("x")


def test_export_sends_objects_and_options_and_imports_the_bundle(
    fake_juliacall: types.SimpleNamespace, tmp_path: Path
) -> None:
    model, ps, st, x = julia_objects()
    out = tmp_path / "m.bundle"
    imported = juliabridge.export_lux(
        model,
        ps,
        st,
        x,
        out=out,
        name="m",
        metadata={"epochs": 3},
        progress=False,
        backend="xla",
        in_process=True,
    )
    assert isinstance(imported, juliabridge.LuxModel)
    assert imported.bundle.root == out.resolve()
    assert imported.fn.backend_name == "xla"
    (call,) = fake_juliacall.bridge.calls
    assert call["out"] == str(out.resolve())
    assert (call["model"], call["ps"], call["st"], call["inputs"]) == (model, ps, st, (x,))
    assert call["options"] == {
        "name": "m",
        "mode": "test",
        "overwrite": False,
        "reference": True,
        "metadata": {"epochs": 3},
        "samples_independent": None,
    }
    assert call["kw"] == {}  # no progress callback without a progress bar
    assert fake_juliacall.evaluated == ["import JuliaBridge"]
    # JuliaBridge is loaded into the session once.
    juliabridge.export_lux(
        model, ps, st, x, out=tmp_path / "n.bundle", progress=False, in_process=True
    )
    assert fake_juliacall.evaluated == ["import JuliaBridge"]


def test_progress_is_a_python_callback_julia_calls(
    fake_juliacall: types.SimpleNamespace, tmp_path: Path
) -> None:
    juliabridge.export_lux(
        *julia_objects(), out=tmp_path / "m.bundle", progress=True, in_process=True
    )
    (call,) = fake_juliacall.bridge.calls
    assert callable(call["kw"]["progress"])


def test_numpy_inputs_go_to_julia_in_julia_layout(
    fake_juliacall: types.SimpleNamespace, tmp_path: Path
) -> None:
    model, ps, st, _ = julia_objects()
    x = np.arange(24, dtype=np.float32).reshape(4, 1, 2, 3)  # MLIR layout: batch first
    mask = np.ones((4, 3), dtype=bool)
    juliabridge.export_lux(
        model,
        ps,
        st,
        x,
        (mask, Value("t")),
        out=tmp_path / "m.bundle",
        progress=False,
        in_process=True,
    )
    (call,) = fake_juliacall.bridge.calls
    sent_x, (sent_mask, sent_t) = call["inputs"]
    assert sent_x.shape == (3, 2, 1, 4)  # Julia's dims: the MLIR ones reversed
    assert np.shares_memory(sent_x, x)  # a view: juliacall wraps it, JuliaBridge copies it
    assert sent_x[2, 1, 0, 3] == x[3, 0, 1, 2]
    assert sent_mask.shape == (3, 4)
    assert isinstance(sent_t, Value)


M, P, S, X = (Value(n) for n in ("model", "ps", "st", "x"))


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ((M, {"w": 1}, S, X), "ps is a dict, not a Julia object"),
        ((3, P, S, X), "model is a int, not a Julia object"),
        ((M, P, (S, [1]), X), r"st\[1\] is a list"),
        ((M, P, S, object()), r"inputs\[0\] is a object"),
        ((M, P, S, np.zeros(3, dtype=ml_dtypes.bfloat16)), r"inputs\[0\] has dtype bfloat16"),
    ],
)
def test_non_julia_arguments_are_refused(
    fake_juliacall: types.SimpleNamespace, tmp_path: Path, arguments: tuple[Any, ...], match: str
) -> None:
    with pytest.raises(CallArgumentError, match=match):
        juliabridge.export_lux(*arguments, out=tmp_path / "m.bundle", progress=False)
    assert not fake_juliacall.bridge.calls


def test_no_inputs_is_refused(fake_juliacall: types.SimpleNamespace, tmp_path: Path) -> None:
    with pytest.raises(CallArgumentError, match="at least one example input"):
        juliabridge.export_lux(*julia_objects()[:3], out=tmp_path / "m.bundle")


def test_julia_error_answer_becomes_export_error(
    fake_juliacall: types.SimpleNamespace, tmp_path: Path
) -> None:
    fake_juliacall.bridge.answer = json.dumps(
        {
            "ok": False,
            "error_type": "NonReactantLeafError",
            "message": "the parameter tree ps at layer_1.scale is a Float32",
        }
    )
    with pytest.raises(
        JuliaExportError,
        match=r"NonReactantLeafError in Julia: the parameter tree ps at layer_1\.scale",
    ):
        juliabridge.export_lux(
            *julia_objects(), out=tmp_path / "m.bundle", progress=False, in_process=True
        )


@pytest.mark.parametrize("answer", ["not json", "[1]", json.dumps({"ok": True})])
def test_malformed_answers_are_export_errors(
    fake_juliacall: types.SimpleNamespace, tmp_path: Path, answer: str
) -> None:
    fake_juliacall.bridge.answer = answer
    with pytest.raises(JuliaExportError):
        juliabridge.export_lux(
            *julia_objects(), out=tmp_path / "m.bundle", progress=False, in_process=True
        )


def test_uncaught_julia_exception_becomes_export_error(
    fake_juliacall: types.SimpleNamespace, tmp_path: Path
) -> None:
    fake_juliacall.bridge.raises = FakeJuliaError("InterruptException:")
    with pytest.raises(JuliaExportError, match="the export failed in Julia: InterruptException"):
        juliabridge.export_lux(
            *julia_objects(), out=tmp_path / "m.bundle", progress=False, in_process=True
        )


def test_session_without_juliabridge_says_how_to_install_it(
    fake_juliacall: types.SimpleNamespace, tmp_path: Path
) -> None:
    fake_juliacall.fail_import = True
    with pytest.raises(JuliaUnavailable) as info:
        juliabridge.export_lux(
            *julia_objects(), out=tmp_path / "m.bundle", progress=False, in_process=True
        )
    message = str(info.value)
    assert "Package JuliaBridge not found" in message
    assert "juliapkg.json" in message and "juliapkg.resolve(force=True)" in message
    assert "Pkg.develop(path=" in message and "jl_package" in message


def test_options_are_checked_before_julia(
    fake_juliacall: types.SimpleNamespace, tmp_path: Path
) -> None:
    objects = julia_objects()
    with pytest.raises(ValueError, match="contradicts mode='train'"):
        juliabridge.export_lux(
            *objects, out=tmp_path / "m.bundle", mode="train", samples_independent=True
        )
    with pytest.raises(ValueError, match="metadata must be JSON-serializable"):
        juliabridge.export_lux(*objects, out=tmp_path / "m.bundle", metadata={"x": float("nan")})
    (tmp_path / "taken.bundle").mkdir()
    with pytest.raises(JuliaExportError, match="already exists"):
        juliabridge.export_lux(*objects, out=tmp_path / "taken.bundle")
    assert not fake_juliacall.evaluated


def test_without_a_session_the_error_says_how_to_start_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delitem(sys.modules, "juliacall", raising=False)
    monkeypatch.setattr(session.importlib.util, "find_spec", lambda name: object())
    with pytest.raises(
        JuliaUnavailable, match=r"none is running in this process.*from juliacall import Main as jl"
    ):
        juliabridge.export_lux(*julia_objects(), out=tmp_path / "m.bundle")
    monkeypatch.setattr(session.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(
        JuliaUnavailable, match=r"juliacall is not installed: pip install 'juliabridge\[julia\]'"
    ):
        juliabridge.export_lux(*julia_objects(), out=tmp_path / "m.bundle")


def test_missing_session_never_imports_juliacall(tmp_path: Path) -> None:
    """In a fresh interpreter: the error comes fast and juliacall (which would start Julia) is
    not imported."""
    code = textwrap.dedent(
        """
        import json, sys
        import juliabridge
        try:
            juliabridge.export_lux(object(), object(), object(), object(), out=sys.argv[1])
        except juliabridge.JuliaUnavailable as e:
            print(json.dumps({"error": str(e), "juliacall": "juliacall" in sys.modules}))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "m.bundle")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not seen["juliacall"]
    assert "juliacall" in seen["error"]


def test_the_julia_spelling_directory_first_is_the_same_call(
    fake_juliacall: types.SimpleNamespace, tmp_path: Path
) -> None:
    model, ps, st, x = julia_objects()
    out = tmp_path / "j.bundle"
    juliabridge.export_lux(out, model, ps, st, x, progress=False, in_process=True)
    (call,) = fake_juliacall.bridge.calls
    assert call["out"] == str(out.resolve())
    assert (call["model"], call["ps"], call["st"], call["inputs"]) == (model, ps, st, (x,))
    with pytest.raises(CallArgumentError, match="got the bundle directory twice"):
        juliabridge.export_lux(str(out), model, ps, st, x, out=out)
    with pytest.raises(CallArgumentError, match=r"needs the bundle directory: .*out=dir"):
        juliabridge.export_lux(model, ps, st, x)
    with pytest.raises(CallArgumentError, match="needs at least one example input"):
        juliabridge.export_lux(out, model, ps, st)
    with pytest.raises(CallArgumentError, match="needs model, ps, st and an example input"):
        juliabridge.export_lux(out, model, ps)


def test_the_known_crash_platform_is_named() -> None:
    assert session.in_process_risk("Linux", "aarch64", "conda") is not None
    assert "Reactant issue #438" in str(session.in_process_risk("Linux", "arm64", "conda"))
    assert session.in_process_risk("Linux", "aarch64", "pip") is None
    assert session.in_process_risk("Linux", "x86_64", "conda") is None
    assert session.in_process_risk("Darwin", "arm64", "conda") is None


def test_where_the_crash_is_known_the_isolated_route_is_the_default(
    fake_juliacall: types.SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session, "in_process_risk", lambda: "a known crash")
    monkeypatch.delenv(session.IN_PROCESS_ENV, raising=False)
    with pytest.raises(JuliaExportError, match=r"a known crash\. Leave in_process unset"):
        juliabridge.export_lux(
            *julia_objects(), out=tmp_path / "m.bundle", progress=False, in_process=True
        )
    assert not fake_juliacall.bridge.calls
    monkeypatch.setenv(session.IN_PROCESS_ENV, "1")
    juliabridge.export_lux(
        *julia_objects(), out=tmp_path / "m.bundle", progress=False, in_process=True
    )
    assert len(fake_juliacall.bridge.calls) == 1


# --- the default route: serialize in the session, export in a julia subprocess -------------------


class FakeRun:
    """Stands in for process.run_export_request: records the request, writes the directory."""

    def __init__(self, error: str | None = None) -> None:
        self.error = error
        self.requests: list[dict[str, Any]] = []
        self.julia: Any = None
        self.environment: Path | None = None

    def __call__(self, julia: Any, environment: Path, request: dict[str, Any], **kw: Any) -> str:
        assert Path(request["serialized"]).read_bytes() == b"serialized"  # still there
        self.requests.append(dict(request))
        self.julia, self.environment = julia, environment
        if self.error is not None:
            raise JuliaExportError(self.error)
        shutil.copytree(SHIPPED, request["out"])
        return str(request["out"])


def test_by_default_the_session_only_serializes_and_julia_exports(
    fake_juliacall: types.SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = FakeRun()
    monkeypatch.setattr(handoff, "run_export_request", run)
    monkeypatch.delenv("JULIABRIDGE_JULIA_ENV", raising=False)
    model, ps, st, x = julia_objects()
    out = tmp_path / "m.jlexport"
    imported = juliabridge.export_lux(
        model, ps, st, x, out=out, name="m", metadata={"k": 1}, progress=False
    )
    assert imported.bundle.root == out.resolve()
    # JuliaBridge (and with it Reactant) was never loaded into the session.
    assert not fake_juliacall.bridge.calls
    assert not any("JuliaBridge" in code for code in fake_juliacall.evaluated)
    assert fake_juliacall.evaluated == [handoff.SERIALIZER]
    ((path, objects),) = fake_juliacall.serialized
    assert objects == (model, ps, st, x)
    (request,) = run.requests
    assert request == {
        "name": "m",
        "mode": "test",
        "overwrite": False,
        "reference": True,
        "metadata": {"k": 1},
        "samples_independent": None,
        "serialized": path,
        "packages": [["Lux", "b2108857-7c20-44ae-9111-449ecde12c47"], ["Random", "9a3f8284"]],
        "out": str(out.resolve()),
    }
    # The session's own Julia and project run the export.
    assert run.julia.executable == "/opt/julia/bin/julia" and run.julia.version == (1, 11, 5)
    assert run.environment == REPO / "julia"
    assert not Path(path).exists()  # the serialized objects are removed afterwards


def test_a_prepared_environment_overrides_the_sessions_project(
    fake_juliacall: types.SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = FakeRun()
    monkeypatch.setattr(handoff, "run_export_request", run)
    monkeypatch.setenv("JULIABRIDGE_JULIA_ENV", str(tmp_path))
    juliabridge.export_lux(*julia_objects(), out=tmp_path / "m.jlexport", progress=False)
    assert run.environment == tmp_path


def test_subprocess_failures_are_export_errors_with_a_hint_for_session_types(
    fake_juliacall: types.SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(handoff, "run_export_request", FakeRun("UndefVarError: `MyLayer`"))
    with pytest.raises(JuliaExportError, match=r"UndefVarError.*in_process=True"):
        juliabridge.export_lux(*julia_objects(), out=tmp_path / "m.jlexport", progress=False)
    monkeypatch.setattr(handoff, "run_export_request", FakeRun("ExportError: ps.w is a Float32"))
    with pytest.raises(JuliaExportError, match=r"ps\.w is a Float32$"):
        juliabridge.export_lux(*julia_objects(), out=tmp_path / "m.jlexport", progress=False)
    fake_juliacall.fail_serialize = True
    with pytest.raises(JuliaExportError, match=r"could not serialize .*: MethodError"):
        juliabridge.export_lux(*julia_objects(), out=tmp_path / "m.jlexport", progress=False)


def test_the_known_crash_is_no_reason_to_refuse_the_subprocess_route(
    fake_juliacall: types.SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session, "in_process_risk", lambda: "a known crash")
    monkeypatch.delenv(session.IN_PROCESS_ENV, raising=False)
    monkeypatch.setattr(handoff, "run_export_request", FakeRun())
    juliabridge.export_lux(*julia_objects(), out=tmp_path / "m.jlexport", progress=False)
