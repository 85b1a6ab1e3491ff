"""The Python driver of the Julia side (subprocess route), the `export` CLI, and the Julia
syntax check.

Without Julia (every machine here) these test the error paths, the subprocess plumbing with a
fake `julia`, and tools/check_julia_syntax.py. Tests marked `julia` export real models with
JuliaBridge.jl through the pytest plugin's cached `julia_export` fixture, import them in JAX and
compare with Julia's reference outputs and with Lux's own CPU outputs; the plugin skips them,
saying why, when no Julia is found.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from juliabridge.cli.export import add_export_parser, run_export
from juliabridge.driver import process as driver
from juliabridge.driver.process import (
    JULIABRIDGE_UUID,
    JuliaInstallation,
    find_julia,
    julia_project_dir,
)
from juliabridge.driver.process import export_script as export_lux
from juliabridge.errors import JuliaBridgeError, JuliaExportError, JuliaUnavailable
from juliabridge.testing import assert_matches_julia

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "check_julia_syntax.py"
FAST = 5.0  # seconds: "no Julia" must be reported without any network wait

posix_only = pytest.mark.skipif(os.name == "nt", reason="fake executables are shell scripts")


@pytest.fixture
def no_julia(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An environment in which no Julia can be found: empty PATH, fresh HOME and depots."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("JULIAUP_DEPOT_PATH", str(tmp_path / "juliaup-depot"))
    monkeypatch.setenv("JULIA_DEPOT_PATH", str(tmp_path / "depot"))
    monkeypatch.setenv("PYTHON_JULIAPKG_PROJECT", str(tmp_path / "julia_env"))
    for var in ("PYTHON_JULIAPKG_EXE", "JULIABRIDGE_JULIA_ENV", "JULIABRIDGE_JULIA_PROJECT"):
        monkeypatch.delenv(var, raising=False)
    return empty


def fake_executable(path: Path, body: str) -> Path:
    """A Python script at `path` that behaves like an executable (for `julia --version` etc.)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def fake_julia(path: Path, version: str = "1.11.5", export_body: str = "") -> Path:
    """A fake `julia`: answers --version, and runs `export_body` for an export request."""
    header = textwrap.dedent(
        f"""
        import json, sys, time
        if sys.argv[1:] == ["--version"]:
            print("julia version {version}")
            sys.exit(0)
        request = json.load(open(sys.argv[-1]))
        result_file = request["result_file"]
        """
    )
    return fake_executable(path, header + textwrap.dedent(export_body))


def script(tmp_path: Path) -> Path:
    s = tmp_path / "model.jl"
    s.write_text(
        "using Lux, Random\nmodel = Dense(2 => 3)\nps, st = Lux.setup(Xoshiro(0), model)\n"
    )
    return s


# -- finding Julia ---------------------------------------------------------------------------


def test_no_julia_is_reported_fast_with_install_hint(no_julia: Path) -> None:
    start = time.monotonic()
    with pytest.raises(JuliaUnavailable) as info:
        find_julia()
    assert time.monotonic() - start < FAST
    message = str(info.value)
    assert "PYTHON_JULIAPKG_EXE" in message
    assert "juliaup" in message
    assert isinstance(info.value, JuliaBridgeError)


def test_julia_exe_pointing_nowhere_is_reported_fast(
    no_julia: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHON_JULIAPKG_EXE", "/nowhere/bin/julia")
    start = time.monotonic()
    with pytest.raises(JuliaUnavailable, match="PYTHON_JULIAPKG_EXE=/nowhere/bin/julia"):
        find_julia()
    assert time.monotonic() - start < FAST


@posix_only
def test_julia_exe_that_is_not_julia(
    no_julia: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    exe = fake_executable(tmp_path / "bin" / "notjulia", "print('hello')\n")
    monkeypatch.setenv("PYTHON_JULIAPKG_EXE", str(exe))
    with pytest.raises(JuliaUnavailable, match="is not a Julia executable"):
        find_julia()


@posix_only
def test_too_old_julia_on_path(no_julia: Path) -> None:
    fake_julia(no_julia / "julia", version="1.9.4")
    with pytest.raises(JuliaUnavailable, match=r"Julia 1\.9\.4.*>= 1\.10"):
        find_julia()


@posix_only
def test_julia_on_path_is_found(no_julia: Path) -> None:
    exe = fake_julia(no_julia / "julia")
    found = find_julia()
    assert found == JuliaInstallation(str(exe), (1, 11, 5), "PATH")


@posix_only
def test_juliaup_installation_is_found(no_julia: Path, tmp_path: Path) -> None:
    depot = tmp_path / "juliaup-depot" / "juliaup"
    fake_julia(depot / "julia-1.11.5+0.x64.linux.gnu" / "bin" / "julia")
    (depot / "juliaup.json").write_text(
        json.dumps(
            {
                "InstalledVersions": {
                    "1.11.5+0.x64.linux.gnu": {"Path": "julia-1.11.5+0.x64.linux.gnu"}
                }
            }
        )
    )
    found = find_julia()
    assert found.source == "juliaup"
    assert found.version == (1, 11, 5)


def test_missing_julia_never_imports_juliacall(no_julia: Path, tmp_path: Path) -> None:
    """In a fresh interpreter: the export fails fast and neither juliacall nor juliapkg loads."""
    code = textwrap.dedent(
        """
        import json, sys, time
        from juliabridge.driver import export_script
        from juliabridge.errors import JuliaUnavailable
        start = time.monotonic()
        try:
            export_script(sys.argv[1], sys.argv[2])
        except JuliaUnavailable:
            pass
        print(json.dumps({"seconds": time.monotonic() - start,
                          "juliacall": "juliacall" in sys.modules,
                          "juliapkg": "juliapkg" in sys.modules}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(script(tmp_path)), str(tmp_path / "out.bundle")],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["seconds"] < FAST
    assert not seen["juliacall"]
    assert not seen["juliapkg"]


# -- argument checks before Julia is even looked for ------------------------------------------


def test_missing_script_is_an_export_error(no_julia: Path, tmp_path: Path) -> None:
    with pytest.raises(JuliaExportError, match="no such Julia script"):
        export_lux(tmp_path / "missing.jl", tmp_path / "out.bundle")


def test_existing_output_needs_overwrite(no_julia: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.bundle"
    out.mkdir()
    with pytest.raises(JuliaExportError, match="already exists"):
        export_lux(script(tmp_path), out)
    with pytest.raises(JuliaUnavailable):  # with overwrite it gets as far as looking for Julia
        export_lux(script(tmp_path), out, overwrite=True)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "eval"}, "mode"),
        ({"name": "a b"}, "name"),
        ({"metadata": {"f": object()}}, "JSON"),
    ],
)
def test_bad_arguments(no_julia: Path, tmp_path: Path, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        export_lux(script(tmp_path), tmp_path / "out.bundle", **kwargs)


# -- where JuliaBridge.jl comes from ------------------------------------------------------------


def test_julia_project_is_the_checkout_julia_dir() -> None:
    project = julia_project_dir()
    assert project == (REPO / "julia").resolve()
    toml = tomllib.loads((project / "Project.toml").read_text())
    assert toml["name"] == "JuliaBridge"
    assert toml["uuid"] == JULIABRIDGE_UUID
    assert (project / "src" / "JuliaBridge.jl").is_file()
    compat = toml["compat"]
    # Every package as a range; Reactant's ends are the releases read (julia/README.md, Versions).
    assert compat["Reactant"] == "0.2.274 - 0.2.280"
    assert compat["Lux"] == "1.31"
    assert "Enzyme" not in compat
    assert compat["HDF5"] == "0.17, 0.18"
    assert compat["julia"] == "1.10"


def test_juliapkg_json_declares_what_project_toml_says() -> None:
    """The juliapkg declaration (shipped in the package) matches julia/Project.toml."""
    declared = json.loads(driver.JULIAPKG_JSON.read_text())
    toml = tomllib.loads((REPO / "julia" / "Project.toml").read_text())
    bridge = declared["packages"]["JuliaBridge"]
    assert bridge["uuid"] == toml["uuid"] == JULIABRIDGE_UUID
    assert bridge["dev"] is True
    # The path is relative to juliapkg.json: the Julia package inside the wheel, a symlink to
    # julia/ in a checkout.
    assert (driver.JULIAPKG_JSON.parent / bridge["path"]).resolve() == (REPO / "julia").resolve()
    for name in ("Lux", "Reactant"):
        assert declared["packages"][name]["uuid"] == toml["deps"][name]
        assert declared["packages"][name]["version"] == toml["compat"][name]
    assert declared["julia"] == "^" + toml["compat"]["julia"]


def test_julia_project_override_must_be_juliabridge(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JULIABRIDGE_JULIA_PROJECT", str(tmp_path))
    with pytest.raises(JuliaExportError, match="JULIABRIDGE_JULIA_PROJECT"):
        julia_project_dir()


def test_prepared_environment_skips_juliapkg(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JULIABRIDGE_JULIA_ENV", str(tmp_path))
    julia = JuliaInstallation("/usr/bin/julia", (1, 11, 5), "PATH")
    env = driver.prepare_environment(julia, notify=print)
    assert env == tmp_path


PKG_JULIA = """
import os, sys
if sys.argv[1:] == ["--version"]:
    print("julia version 1.11.5")
    sys.exit(0)
script = sys.argv[sys.argv.index("-e") + 1]
project = [a for a in sys.argv if a.startswith("--project=")][0]
if "Libdl" in script:  # juliapkg asks for libjulia and the bin dir
    print("/fake/lib/libjulia.so", "/fake/bin", sep="\\0", end="")
else:
    with open(os.environ["FAKE_JULIA_LOG"], "a") as log:
        log.write(project + "\\n" + script + "\\n")
"""


@posix_only
def test_environment_is_set_up_the_juliapkg_way(no_julia: Path, tmp_path: Path) -> None:
    """juliapkg finds juliabridge/juliapkg.json and installs JuliaBridge (dev, the package's
    jl_package), Lux and Reactant with the Julia we found; run in a fresh interpreter, as
    juliapkg's state is global."""
    pytest.importorskip("juliapkg", reason="needs juliapkg (pip install 'juliabridge[julia]')")
    fake_executable(no_julia / "julia", PKG_JULIA)
    log = tmp_path / "julia.log"
    code = textwrap.dedent(
        """
        from juliabridge.driver import process as driver
        julia = driver.find_julia()
        env = driver.prepare_environment(julia, notify=print)
        print("ENV=" + str(env))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "FAKE_JULIA_LOG": str(log)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    env = Path(proc.stdout.strip().splitlines()[-1].removeprefix("ENV="))
    assert env == tmp_path / "julia_env"
    project = tomllib.loads((env / "Project.toml").read_text())
    assert project["deps"]["JuliaBridge"] == JULIABRIDGE_UUID
    # A range (julia/README.md, Versions); juliapkg writes it with or without Pkg's default
    # caret, which means the same.
    assert project["compat"]["Lux"] in ("1.31", "^1.31")
    assert project["compat"]["Reactant"] == "0.2.274 - 0.2.280"  # as juliapkg prints the range
    installed = log.read_text()
    assert f'path=raw"{REPO / "juliabridge" / "jl_package"}"' in installed
    assert "Pkg.develop" in installed and "Pkg.precompile()" in installed
    assert "installing JuliaBridge.jl's Julia packages" in proc.stdout


# -- running Julia: the subprocess protocol, with a fake julia -----------------------------------

OK_EXPORT = """
print("[juliabridge:progress] 0/0 loading")
print("a line of Julia output")
print("[juliabridge:progress] 1/2 tracing")
import os
os.makedirs(request["out"])
json.dump({"ok": True, "path": request["out"], "echo": request}, open(result_file, "w"))
"""


@posix_only
@pytest.mark.parametrize("progress", [False, True])
def test_export_with_fake_julia(
    no_julia: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, progress: bool
) -> None:
    fake_julia(no_julia / "julia", export_body=OK_EXPORT)
    monkeypatch.setenv("JULIABRIDGE_JULIA_ENV", str(tmp_path))
    out = tmp_path / "out.bundle"
    path = export_lux(script(tmp_path), out, name="net", progress=progress)
    assert path == out.resolve()
    assert out.is_dir()


@posix_only
def test_julia_error_becomes_export_error(
    no_julia: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    body = """
    json.dump({"ok": False, "error_type": "NonReactantLeafError",
               "message": "the parameter tree ps at layer_1.scale is a Float32\\nmore"},
              open(result_file, "w"))
    sys.exit(1)
    """
    fake_julia(no_julia / "julia", export_body=body)
    monkeypatch.setenv("JULIABRIDGE_JULIA_ENV", str(tmp_path))
    with pytest.raises(JuliaExportError, match=r"NonReactantLeafError in Julia: the parameter"):
        export_lux(script(tmp_path), tmp_path / "out.bundle", progress=False)


@posix_only
def test_julia_crash_reports_its_last_output(
    no_julia: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    body = """
    print("ERROR: LoadError: Package Lux not found")
    sys.exit(1)
    """
    fake_julia(no_julia / "julia", export_body=body)
    monkeypatch.setenv("JULIABRIDGE_JULIA_ENV", str(tmp_path))
    with pytest.raises(JuliaExportError, match="Package Lux not found"):
        export_lux(script(tmp_path), tmp_path / "out.bundle", progress=False)


@posix_only
def test_julia_timeout(no_julia: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_julia(no_julia / "julia", export_body="time.sleep(60)\n")
    monkeypatch.setenv("JULIABRIDGE_JULIA_ENV", str(tmp_path))
    start = time.monotonic()
    with pytest.raises(JuliaExportError, match="did not finish"):
        export_lux(script(tmp_path), tmp_path / "out.bundle", progress=False, timeout=1)
    assert time.monotonic() - start < 30


# -- the CLI --------------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="juliabridge")
    add_export_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_cli_without_julia_prints_one_line(
    no_julia: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = parse(["export", str(script(tmp_path)), "--out", str(tmp_path / "o.bundle")])
    assert run_export(args) == 3
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("juliabridge export: error: no Julia found")
    assert "Traceback" not in err


def test_cli_bad_script_prints_one_line(
    no_julia: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A missing script is a usage error (exit 2), found before Julia is looked for or started.
    with pytest.raises(SystemExit) as e:
        parse(["export", str(tmp_path / "nope.jl"), "--out", str(tmp_path / "o.bundle")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"juliabridge export: error: argument script: {tmp_path / 'nope.jl'}: no such file"
    )


def test_cli_in_a_fresh_process(no_julia: Path, tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import argparse, sys
        from juliabridge.cli.export import add_export_parser
        parser = argparse.ArgumentParser(prog="juliabridge")
        add_export_parser(parser.add_subparsers(dest="command", required=True))
        args = parser.parse_args(sys.argv[1:])
        sys.exit(args.func(args, None))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "export", str(script(tmp_path)), "-o", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 3
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


# -- tools/check_julia_syntax.py ------------------------------------------------------------------


def run_tool(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), *map(str, paths)], capture_output=True, text=True
    )


def test_repository_julia_parses() -> None:
    proc = run_tool()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 problem(s)" in proc.stderr


def test_planted_syntax_error_fails(tmp_path: Path) -> None:
    good = tmp_path / "good.jl"
    good.write_text("f(x) = x + 1\nstruct A\n    a::Int\nend\n")
    bad = tmp_path / "bad.jl"
    bad.write_text("function f(x)\n    y = (x +\n    return y\nend\n")
    assert run_tool(good).returncode == 0
    proc = run_tool(tmp_path)
    assert proc.returncode == 1
    assert "bad.jl:" in proc.stdout
    assert "good.jl" not in proc.stdout


def test_julia_notebook_cells_are_checked(tmp_path: Path) -> None:
    nb = tmp_path / "tutorials" / "t.ipynb"
    nb.parent.mkdir()
    cells = [
        {"cell_type": "code", "source": ["x = [1, 2\n", "print(x)\n"]},  # Python: not checked
        {"cell_type": "code", "source": ["%%julia\n", "y = 1\n"]},
        {"cell_type": "code", "source": ["%%julia\n", "z = (1 +\n"]},
        {"cell_type": "markdown", "source": ["%%julia\n", "end end"]},
    ]
    nb.write_text(json.dumps({"cells": cells, "nbformat": 4, "nbformat_minor": 5}))
    proc = run_tool(tmp_path)
    assert proc.returncode == 1
    assert "t.ipynb[cell 3]" in proc.stdout
    assert "cell 1]" not in proc.stdout
    assert "cell 2]" not in proc.stdout


# -- argument checks shared with the juliacall route --------------------------------------------


def test_train_mode_with_samples_independent_is_refused_before_julia(
    no_julia: Path, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="samples_independent=True contradicts mode='train'"):
        export_lux(script(tmp_path), tmp_path / "o.bundle", mode="train", samples_independent=True)


# -- real exports (need Julia) -------------------------------------------------------------------

# Each script stores Lux's own CPU output (plain Julia, no Reactant) in the bundle's metadata, an
# independent reference next to the compiled function's outputs the bundle's examples hold.
LENET = """
using Lux, Random
rng = Random.Xoshiro(0)
model = Chain(Conv((5, 5), 1 => 6, relu), MaxPool((2, 2)), Conv((5, 5), 6 => 16, relu),
              MaxPool((2, 2)), FlattenLayer(3), Dense(256 => 128, relu), Dense(128 => 10))
ps, st = Lux.setup(rng, model)
x = randn(rng, Float32, 28, 28, 1, 4)
y, _ = model(x, ps, Lux.testmode(st))
metadata = Dict("lux_y" => vec(y))                # column-major, the MLIR (4, 10) row-major
"""

BATCHNORM = """
using Lux, Random
rng = Random.Xoshiro(1)
model = Chain(Dense(3 => 4), BatchNorm(4, relu))
ps, st = Lux.setup(rng, model)
x = randn(rng, Float32, 3, 6)
y, st2 = model(x, ps, MODE(st))
metadata = Dict("lux_y" => vec(y), "lux_mean" => st2.layer_2.running_mean,
                "lux_var" => st2.layer_2.running_var)
"""

CLOSE = {"rtol": 1e-4, "atol": 1e-5}


def lux_array(model: Any, key: str, julia_shape: tuple[int, ...]) -> np.ndarray:
    """A Float32 array the script stored column-major, in MLIR (row-major, dims reversed) layout."""
    flat = np.asarray(model.manifest.metadata[key], dtype=np.float32)
    return flat.reshape(julia_shape[::-1])


@pytest.fixture(scope="session")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("julia-scripts")
    (d / "lenet.jl").write_text(LENET)
    for mode in ("test", "train"):
        (d / f"bn_{mode}.jl").write_text(BATCHNORM.replace("MODE", f"Lux.{mode}mode"))
    return d


@pytest.mark.julia
def test_lenet_from_julia_matches_lux(julia_export: Any, scripts: Path) -> None:
    import juliabridge

    out = julia_export(scripts / "lenet.jl")
    model = juliabridge.import_lux(out)
    assert model.manifest.producer.made_with_julia
    assert_matches_julia(model, out)  # Julia's reference outputs, the manifest's tolerances
    x = example_input(out)
    assert x.shape == (4, 1, 28, 28)
    y, _ = model.apply(model.params, model.state, x)
    np.testing.assert_allclose(np.asarray(y), lux_array(model, "lux_y", (10, 4)), **CLOSE)
    assert juliabridge.verify(out, **CLOSE).ok


@pytest.mark.julia
@pytest.mark.parametrize("mode", ["test", "train"])
def test_batchnorm_from_julia_matches_lux(julia_export: Any, scripts: Path, mode: str) -> None:
    import juliabridge

    out = julia_export(scripts / f"bn_{mode}.jl", mode=mode)
    model = juliabridge.import_lux(out)
    assert model.manifest.mode == mode
    assert_matches_julia(model, out)
    y, new_state = model.apply(model.params, model.state, example_input(out))
    np.testing.assert_allclose(np.asarray(y), lux_array(model, "lux_y", (4, 6)), **CLOSE)
    bn = new_state["layer_2"]
    np.testing.assert_allclose(
        np.asarray(bn["running_mean"]), lux_array(model, "lux_mean", (4,)), **CLOSE
    )
    np.testing.assert_allclose(
        np.asarray(bn["running_var"]), lux_array(model, "lux_var", (4,)), **CLOSE
    )
    assert juliabridge.verify(out, **CLOSE).ok


def example_input(bundle: Path) -> np.ndarray:
    import h5py

    with h5py.File(bundle / "weights.h5", "r") as f:
        return np.asarray(f["examples/inputs/0"][()])


def test_every_julia_child_runs_without_the_users_startup_file_history_or_colours() -> None:
    """The export and the package listing parse Julia's output: a startup file could print
    into it (or fail), colours would put escape codes in it."""
    julia = driver.JuliaInstallation("/opt/julia/bin/julia", (1, 11, 2), "test")
    cmd = driver._julia_command(julia, Path("/env"), "print(1)", "a", "b")
    assert cmd == [
        "/opt/julia/bin/julia",
        "--project=/env",
        "--startup-file=no",
        "--history-file=no",
        "--color=no",
        "-e",
        "print(1)",
        "a",
        "b",
    ]
