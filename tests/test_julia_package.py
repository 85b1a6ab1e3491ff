"""The Julia package as shipped: what the wheel holds, what julia/README.md promises, and
statically checkable facts about the Julia sources (no Julia runs here).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
JULIA = REPO / "julia"
README = (JULIA / "README.md").read_text(encoding="utf-8")


def test_readme_instantiates_before_the_first_use() -> None:
    """On a fresh checkout the first command must install the packages (no Manifest is kept)."""
    commands = re.findall(r"julia --project=julia[^\n`]*", README)
    assert commands, README[:200]
    assert "Pkg.instantiate()" in commands[0]
    for cmd in commands:
        if "Pkg.test()" in cmd:
            assert cmd.index("Pkg.instantiate()") < cmd.index("Pkg.test()")


def test_readme_states_the_pins_and_why() -> None:
    toml = tomllib.loads((JULIA / "Project.toml").read_text())
    assert toml["compat"]["Reactant"] == "=0.2.280"
    assert "(`=0.2.280`)" in README and "not public API" in README
    assert "Manifest.toml" in README
    assert "julia/Manifest.toml" in (REPO / ".gitignore").read_text()
    assert not (JULIA / "Manifest.toml").exists()
    # Every Reactant internal the README lists is cited by file and line.
    table = README[README.index("| what | where |") : README.index("Reactant 0.2.280 in turn")]
    rows = [r for r in table.splitlines() if r.startswith("| ") and "---" not in r][1:]
    assert len(rows) >= 8
    for row in rows:
        assert re.search(r"R src/[\w/]+\.jl:\d+", row), row


def test_readme_cites_the_portable_artifact_functions() -> None:
    for name in ("stablehloSerializePortableArtifactFromModule", "stablehloGetCurrentVersion"):
        assert name in README
        assert name in (JULIA / "src" / "artifact.jl").read_text()
    assert re.search(r"libMLIR_h\.jl:\d+-\d+", README)


def test_the_julia_example_never_writes_the_shipped_bundle() -> None:
    """julia/examples/lenet.jl used to regenerate juliabridge/examples/lenet.bundle without its
    vjp.mlir and with other weights, breaking the tests that rely on that bundle."""
    source = (JULIA / "examples" / "lenet.jl").read_text()
    default = re.search(r'const OUT = abspath\(get\(POSITIONAL, 1, "([^"]+)"\)\)', source)
    assert default is not None and default.group(1) == "lenet.bundle"
    assert "SHIPPED" in source and "error(" in source  # and refuses it when asked explicitly
    assert "tools/make_example_bundles.py" in README


def test_julia_results_tests_read_only_keys_the_writer_writes() -> None:
    """runtests.jl read r["julia_shape"] from result entries, which no writer writes."""
    tests = (JULIA / "test" / "runtests.jl").read_text()
    manifest_jl = (JULIA / "src" / "manifest.jl").read_text()
    result_object = manifest_jl[manifest_jl.index("function result_object") :]
    result_object = result_object[: result_object.index("\nend\n")]
    written = set(re.findall(r'"(\w+)" =>', result_object)) | {"echo_of"}
    for key in set(re.findall(r'\br\["(\w+)"\]', tests)):
        assert key in written, key


def test_format_constants() -> None:
    main = (JULIA / "src" / "JuliaBridge.jl").read_text()
    assert "const FORMAT_VERSION = 3" in main
    assert 'const DIGEST_KEY = "blake3"' in main
    # The writer's fallback when its BLAKE3 fails the self-test: format 2, sha256 digests.
    assert "const FALLBACK_FORMAT_VERSION = 2" in main
    assert 'const FALLBACK_DIGEST_KEY = "sha256"' in main
    assert 'const ARTIFACT_FILE = "model.mlirbc"' in main
    assert 'const VJP_ARTIFACT_FILE = "vjp.mlirbc"' in main
    artifact = (JULIA / "src" / "artifact.jl").read_text()
    assert 'const ARTIFACT_TARGET = v"1.17.0"' in artifact


def test_artifact_target_is_what_the_oldest_jaxlib_reads() -> None:
    """The writer's target must be readable by the oldest jaxlib the reader supports (0.10.2)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    jaxlib = next(d for d in pyproject["project"]["dependencies"] if d.startswith("jaxlib"))
    assert ">=0.10.2" in jaxlib
    import jaxlib as jl

    if jl.__version__ != "0.10.2":
        pytest.skip(f"the target is pinned to jaxlib 0.10.2's StableHLO; this is {jl.__version__}")
    from jaxlib.mlir.dialects import stablehlo

    assert stablehlo.get_current_version() == "1.17.0"


def _wheel_tools() -> None:
    if importlib.util.find_spec("wheel") is None:
        pytest.skip("building a wheel needs the 'wheel' package (pip install wheel)")
    import setuptools

    if tuple(int(p) for p in setuptools.__version__.split(".")[:2]) < (69, 0):
        pytest.skip(f"pyproject.toml needs setuptools >= 69, this is {setuptools.__version__}")


@pytest.mark.slow
def test_the_wheel_ships_the_julia_package_and_the_plugin(tmp_path: Path) -> None:
    _wheel_tools()
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "julia", source / "julia")
    shutil.copytree(
        REPO / "juliabridge",
        source / "juliabridge",
        symlinks=True,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("juliabridge-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        declared = json.loads(z.read("juliabridge/juliapkg.json"))
        entry_points = next(z.read(n).decode() for n in names if n.endswith("entry_points.txt"))
        project = tomllib.loads(z.read("juliabridge/julia_project/Project.toml").decode())
    # juliapkg resolves the dev path relative to juliapkg.json: juliabridge/julia_project.
    root = "juliabridge/" + declared["packages"]["JuliaBridge"]["path"]
    assert project["uuid"] == declared["packages"]["JuliaBridge"]["uuid"]
    for jl in (JULIA / "src").glob("*.jl"):
        assert f"{root}/src/{jl.name}" in names, jl.name
    assert "[pytest11]\njuliabridge = juliabridge.testing.plugin" in entry_points
    for module in ("__init__", "cache", "compare", "plugin"):
        assert f"juliabridge/testing/{module}.py" in names


def _source(name: str) -> str:
    return (JULIA / "src" / name).read_text(encoding="utf-8")


def test_review_fixes_that_can_be_seen_without_julia() -> None:
    """Cheap guards for review defects whose real tests are in julia/test/runtests.jl."""
    tracing = _source("tracing.jl")
    # 3: the forward trace keeps every argument Reactant saw written, so mutations are seen.
    forward = tracing[tracing.index("function trace_forward") :]
    forward = forward[: forward.index("\nend\n")]
    assert "args_in_result=:result" not in forward
    assert "checked_trace(:all)" in _source("export.jl")
    # 10: one replace_at method (two would be ambiguous for a Tuple and an empty location).
    assert len(re.findall(r"^(?:function )?replace_at\(", _source("vjp.jl"), re.M)) == 1
    # 12: no fallback to a non-CPU backend for tracing and the reference outputs.
    assert "default_backend" not in "".join(p.read_text() for p in (JULIA / "src").glob("*.jl"))
    # 7: scripts run in a module that has include and eval.
    driver = _source("driver.jl")
    assert "include(path::AbstractString) = Base.include($mod, path)" in driver
    assert "eval(x) = Core.eval($mod, x)" in driver
