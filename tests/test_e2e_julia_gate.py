"""The end-to-end Julia tests' gate and comparisons, where no Julia is (every machine here).

tests/test_e2e_julia.py runs only with JULIABRIDGE_JULIA_TESTS and a Julia on PATH; these check
the one reason it gives elsewhere, that a `julia` on PATH that is not Julia fails the run
instead of letting it pass as skipped, and that its comparison with Lux's reference
(tests/e2e_julia/reference.py) reads the arrays models/common.jl writes the right way round.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

import juliabridge
from tests.e2e_julia import reference
from tests.e2e_julia.gate import VARIABLE, Gate, decide
from tests.julia_export_writer import JArg, JExport, flat, write_julia_export

REPO = Path(__file__).resolve().parents[1]
OFF_REASON = (
    "end-to-end Julia tests are off: set JULIABRIDGE_JULIA_TESTS=1 and put julia >= 1.10 on "
    "PATH to run them (docs/developing.md: What runs where)"
)
posix_only = pytest.mark.skipif(os.name == "nt", reason="fake executables are shell scripts")


def no_julia(_: str) -> None:
    return None


@pytest.mark.parametrize("value", [None, "", "0", "no", "false", "off", " OFF "])
def test_off_skips_with_one_reason(value: str | None) -> None:
    environ = {} if value is None else {VARIABLE: value}
    assert decide(environ, which=lambda _: "/usr/bin/julia") == Gate(skip=OFF_REASON)


@pytest.mark.parametrize("value", ["1", "yes", "true", "on"])
def test_on_without_julia_skips_saying_how_to_install(value: str) -> None:
    gate = decide({VARIABLE: value}, which=no_julia)
    assert gate.julia is None and not gate.error
    assert gate.skip.startswith(f"needs Julia: {VARIABLE}={value} but there is no `julia` on PATH")
    assert "juliaup" in gate.skip


def test_require_without_julia_fails() -> None:
    gate = decide({VARIABLE: "require"}, which=no_julia)
    assert not gate.skip and gate.error.startswith(f"{VARIABLE}=require but there is no `julia`")


def test_a_misspelt_value_fails() -> None:
    assert decide({VARIABLE: "ture"}, which=no_julia).error == (
        f"{VARIABLE}='ture' is not one of 1, yes, true, on, require or 0"
    )


def test_a_julia_that_is_not_julia_fails() -> None:
    gate = decide({VARIABLE: "1"}, which=lambda _: "/bin/julia", version_of=lambda _: None)
    assert not gate.skip and "the `julia` on PATH is not Julia" in gate.error


def test_an_old_julia_fails_and_a_new_one_runs() -> None:
    old = decide({VARIABLE: "1"}, which=lambda _: "/j", version_of=lambda _: (1, 9, 4))
    assert old.error.startswith("/j is Julia 1.9.4; JuliaBridge needs >= 1.10")
    new = decide({VARIABLE: "require"}, which=lambda _: "/j", version_of=lambda _: (1, 12, 1))
    assert new == Gate(julia="/j", version=(1, 12, 1))


def run_e2e(
    tmp_path: Path, fake: str | None, value: str | None
) -> subprocess.CompletedProcess[str]:
    """tests/test_e2e_julia.py in a child pytest, with only `fake` as `julia` on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if fake is not None:
        exe = bin_dir / "julia"
        exe.write_text(fake)
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JULIABRIDGE_", "PYTEST_"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin"
    env["PYTHONPATH"] = str(REPO)
    if value is not None:
        env[VARIABLE] = value
    argv = ["-q", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist", "-k", "lenet"]
    return subprocess.run(
        [sys.executable, "-m", "pytest", *argv, "tests/test_e2e_julia.py"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=env,
    )


@posix_only
def test_unset_the_whole_file_skips_with_the_reason(tmp_path: Path) -> None:
    proc = run_e2e(tmp_path, "#!/bin/sh\necho 'julia version 1.11.5'\n", None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert OFF_REASON in proc.stdout
    assert " passed" not in proc.stdout and " skipped" in proc.stdout


@posix_only
def test_a_fake_julia_on_path_fails_the_run_loudly(tmp_path: Path) -> None:
    proc = run_e2e(tmp_path, "#!/bin/sh\necho 'this is not julia'\nexit 0\n", "1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the `julia` on PATH is not Julia" in proc.stdout
    assert " passed" not in proc.stdout and " skipped" not in proc.stdout
    assert " error" in proc.stdout  # each test errors in the module fixture


# -- reference.py: Lux's arrays as models/common.jl writes them -------------------------------


def as_common_jl(a: np.ndarray) -> dict[str, Any]:
    """`a` (MLIR layout) as common.jl's lux_array writes the Julia array it is: the Julia
    size (reversed) and the values in column-major order of that array."""
    julia = np.asarray(a, dtype=np.float64).T  # the Julia array, dims reversed
    return {"julia_shape": list(julia.shape), "values": julia.flatten(order="F").tolist()}


def dense_export(tmp_path: Path, planted: str = "") -> tuple[Path, dict[str, Any]]:
    """A Dense(3 => 2) export (from the spec, as JuliaBridge writes it) and Lux's reference."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3)).astype(np.float32)  # MLIR layout: batch first
    w = rng.standard_normal((3, 2)).astype(np.float32)  # Julia (out, in) = (2, 3)
    b = rng.standard_normal((2,)).astype(np.float32)
    args = [
        JArg("input", [], x),
        JArg("parameter", ["weight"], w),
        JArg("parameter", ["bias"], b),
    ]
    y = np.tanh(x @ w + b)
    e = JExport("dense", flat(lambda x, w, b: (jnp.tanh(x @ w + b),), args), args, [["output"]])
    e.example_outputs = {0: y}
    out = write_julia_export(tmp_path / "dense.jlexport", e)
    want = y.T if planted == "transposed" else y
    lux = {
        "mode": "test",
        "inputs": [as_common_jl(x)],
        "y": as_common_jl(want)
        if planted != "reshaped"
        else {
            "julia_shape": list(y.shape[::-1]),
            # The Julia array y.T read row-major: the wrong order (Julia's vec is column-major).
            "values": y.T.flatten().tolist(),
        },
        "state": {},
    }
    return out, lux


def test_reference_reads_lux_arrays_the_right_way_round(tmp_path: Path) -> None:
    export, lux = dense_export(tmp_path)
    assert reference.julia_array(lux["inputs"][0]).shape == (4, 3)
    for backend in reference.backends():
        model = juliabridge.import_lux(export, backend=backend)
        assert reference.check_against_lux(model, lux) == [], backend


@pytest.mark.parametrize("planted", ["transposed", "reshaped"])
def test_reference_catches_a_wrong_lux_array(tmp_path: Path, planted: str) -> None:
    export, lux = dense_export(tmp_path, planted)
    bad = reference.check_against_lux(juliabridge.import_lux(export, backend="lax"), lux)
    assert len(bad) == 1 and bad[0].startswith("output: ")


def test_backends_are_every_one_that_imports() -> None:
    from juliabridge.backends.enzyme import enzyme_available

    assert reference.backends()[:2] == ["lax", "xla"]
    assert ("enzyme" in reference.backends()) == enzyme_available()


def test_every_model_script_is_a_case_and_defines_the_convention() -> None:
    from tests.test_e2e_julia import CASES

    models = REPO / "tests" / "e2e_julia" / "models"
    drivers = {"common", "export_juliabridge", "export_reactant", "load_params_back"}
    scripts = {p.stem for p in models.glob("*.jl")} - drivers
    assert scripts == set(CASES)
    for name, mode in CASES.items():
        text = (models / f"{name}.jl").read_text()
        for defined in ("model = ", "ps", "st", "x = ", "metadata = lux_reference("):
            assert defined in text, (name, defined)
        assert f"export_mode = :{mode}" in text, name
