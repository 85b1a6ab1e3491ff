"""juliabridge.testing: the comparison with a bundle's reference outputs, and the pytest plugin.

The comparison is checked against the example bundle shipped with the package (its reference
outputs were computed when it was made), with an independent numpy LeNet, and with deliberately
perturbed models whose expected errors are computed here with numpy. The plugin is run in child
pytest sessions: without Julia (everything skips, with the reason) and with a fake `julia`
that records every export, to see the cache export each script once.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

import juliabridge
from juliabridge.errors import BundleError, CallArgumentError, JuliaBridgeError
from juliabridge.testing import (
    ReferenceMismatch,
    assert_matches_julia,
    compare_arrays,
    compare_with_julia,
    export_key,
)
from tests.julia_export_writer import write_julia_export
from tests.reference import lux_numpy
from tests.test_julia_export import dense_bn

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "juliabridge" / "examples" / "lenet.bundle"


@pytest.fixture(scope="module")
def lenet() -> juliabridge.LuxModel:
    return juliabridge.import_lux(SHIPPED, backend="xla")


def reference_outputs() -> tuple[np.ndarray, np.ndarray]:
    """(example input, reference output) read straight from the weights file."""
    import h5py

    with h5py.File(SHIPPED / "weights.h5", "r") as f:
        return np.asarray(f["examples/inputs/0"][()]), np.asarray(f["examples/outputs/0"][()])


# -- the comparison ------------------------------------------------------------------------------


def test_the_model_and_an_independent_numpy_lenet_match(lenet: juliabridge.LuxModel) -> None:
    report = assert_matches_julia(lenet)
    assert report.ok and [d.name for d in report.diffs] == ["output"]
    params = jax.tree.map(np.asarray, lenet.params)
    numpy_lenet = assert_matches_julia(lambda x: lux_numpy.lenet(x, params, {})[0], SHIPPED)
    assert numpy_lenet.diffs[0].max_abs < 1e-4
    assert "all 1 outputs match" in str(numpy_lenet)


def test_a_perturbed_model_fails_with_a_readable_diff(lenet: juliabridge.LuxModel) -> None:
    params = jax.tree.map(np.asarray, lenet.params)
    params["layer_7"]["bias"] = params["layer_7"]["bias"] + np.linspace(
        0, 0.09, 10, dtype=np.float32
    )
    x, want = reference_outputs()
    got = np.asarray(lenet.apply(params, lenet.state, x)[0])
    err = np.abs(got.astype(np.float64) - want)
    worst = np.unravel_index(np.argmax(err), err.shape)
    outside = int(np.count_nonzero(err > 1e-5 + 1e-4 * np.abs(want)))

    with pytest.raises(ReferenceMismatch) as info:
        assert_matches_julia(lambda x: lenet.apply(params, lenet.state, x)[0], SHIPPED)
    e = info.value
    assert isinstance(e, AssertionError) and isinstance(e, JuliaBridgeError)
    (diff,) = e.report.diffs
    assert diff.abs_index == tuple(int(i) for i in worst)
    assert diff.max_abs == pytest.approx(err.max(), rel=1e-6)
    assert diff.outside == outside
    message = str(e)
    assert "1 of 1 outputs differ from the reference outputs" in message  # made without Julia
    assert (
        f"output (result 0, f32[4, 10]): max abs err {err.max():.3g} at {list(diff.abs_index)}"
        in message
    )
    assert f"{outside}/40 elements outside rtol=0.0001, atol=1e-05" in message


def test_one_bad_element_is_located(lenet: juliabridge.LuxModel) -> None:
    def off_by_one_element(x: Any) -> np.ndarray:
        y = np.array(lenet.apply(lenet.params, lenet.state, x)[0])
        y[2, 7] += 1.0
        return y

    with pytest.raises(ReferenceMismatch) as info:
        assert_matches_julia(off_by_one_element, SHIPPED)
    (diff,) = info.value.report.diffs
    assert (diff.abs_index, diff.outside) == ((2, 7), 1)
    assert diff.max_abs == pytest.approx(1.0, rel=1e-4)
    # Looser tolerances make the same output pass.
    assert assert_matches_julia(off_by_one_element, SHIPPED, atol=1.5).ok


def test_layouts_and_state(lenet: juliabridge.LuxModel) -> None:
    julia = juliabridge.import_lux(SHIPPED, backend="xla", layout="julia")
    assert assert_matches_julia(julia).ok  # takes and returns Julia-layout arrays
    with_state = assert_matches_julia(
        lambda x: lenet.apply(lenet.params, lenet.state, x), SHIPPED, with_state=True
    )
    assert with_state.ok
    with pytest.raises(CallArgumentError, match=r"must return \(y, new_state\)"):
        compare_with_julia(lambda x: lenet(x), SHIPPED, with_state=True)


def test_a_state_pair_without_with_state_says_what_to_pass(lenet: juliabridge.LuxModel) -> None:
    # Issue 29 item 10: a candidate written after Lux's model(x, ps, st) returns (y, st); the
    # caller saw numpy's "setting an array element with a sequence".
    with pytest.raises(CallArgumentError) as e:
        compare_with_julia(lambda x: lenet.apply(lenet.params, lenet.state, x), SHIPPED)
    assert str(e.value) == (
        "lenet: the model's output is one array, but the candidate returned a tuple of 2; if "
        "it returns (y, new_state) as Lux does, pass with_state=True (the state is compared "
        "too), else return y alone"
    )


def test_a_failure_report_shows_the_callers_line_not_the_helpers_source(tmp_path: Path) -> None:
    (tmp_path / "test_pair.py").write_text(
        "import numpy as np\n"
        "from juliabridge.examples.paths import example_bundle_path\n"
        "from juliabridge.testing import assert_matches_julia\n\n"
        "def test_pair():\n"
        "    assert_matches_julia(lambda x: (np.zeros((4, 10), np.float32), {}),\n"
        "                         example_bundle_path('lenet'))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = run_pytest(tmp_path, env, "-p", "no:cacheprovider", "test_pair.py")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "pass with_state=True" in out, out
    assert "setting an array element" not in out, out
    assert "def compare_with_julia" not in out and "def assert_matches_julia" not in out, out


def test_wrong_shapes_and_kinds_are_reported(lenet: juliabridge.LuxModel) -> None:
    report = compare_with_julia(lambda x: np.zeros((4, 9), np.float32), SHIPPED)
    assert not report.ok
    assert "the candidate's output has shape [4, 9], Julia's [4, 10]" in str(report)
    with pytest.raises(JuliaBridgeError, match="must be a LuxModel or a callable"):
        compare_with_julia(42, SHIPPED)
    with pytest.raises(JuliaBridgeError, match="pass bundle=PATH"):
        compare_with_julia(lambda x: x)


def test_an_output_the_candidate_lacks_is_reported(tmp_path: Path) -> None:
    copy = tmp_path / "lenet.bundle"
    shutil.copytree(SHIPPED, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["results"][0]["paths"] = [["output", "logits"]]  # y is a NamedTuple (; logits)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    model = juliabridge.import_lux(copy, backend="xla")
    as_dict = assert_matches_julia(lambda x: {"logits": model.fn(x, *params_of(model))[0]}, copy)
    assert [d.name for d in as_dict.diffs] == ["output.logits"]
    with pytest.raises(
        ReferenceMismatch, match=r"output\.logits .*: the candidate returns no output\.logits"
    ):
        assert_matches_julia(lambda x: model.fn(x, *params_of(model))[0], copy)


def params_of(model: juliabridge.LuxModel) -> list[Any]:
    """The flat @main parameter arguments of `model`, in argument order."""
    out = []
    for a in model.manifest.arguments[1:]:
        node = model.params
        for step in a.path:
            node = node[step]
        out.append(node)
    return out


def test_a_bundle_without_reference_outputs_is_a_bundle_error(tmp_path: Path) -> None:
    copy = tmp_path / "lenet.bundle"
    shutil.copytree(SHIPPED, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    del manifest["examples"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="no reference outputs"):
        assert_matches_julia(lambda x: x, copy)


def test_compare_arrays_rules() -> None:
    nan = np.nan
    same_nans = compare_arrays(np.array([1.0, nan]), np.array([1.0, nan]), rtol=0, atol=0)
    assert same_nans["outside"] == 0 and same_nans["max_abs"] == 0
    one_nan = compare_arrays(np.array([1.0, nan]), np.array([1.0, 2.0]), rtol=1, atol=1)
    assert one_nan["outside"] == 1 and one_nan["max_abs"] == np.inf and one_nan["abs_index"] == (1,)
    ints = compare_arrays(np.array([1, 2, 3]), np.array([1, 2, 4]), rtol=1, atol=1)
    assert ints["outside"] == 1 and ints["max_abs"] == 1.0  # integers compare exactly
    rel = compare_arrays(np.array([[1.0, 10.5]]), np.array([[1.0, 10.0]]), rtol=0.1, atol=0)
    assert (
        rel["outside"] == 0 and rel["max_rel"] == pytest.approx(0.05) and rel["rel_index"] == (0, 1)
    )
    c = compare_arrays(np.array([1 + 1j]), np.array([1 + 2j]), rtol=0, atol=0.5)
    assert c["outside"] == 1 and c["max_abs"] == pytest.approx(1.0)


def test_export_key_follows_what_an_export_depends_on(tmp_path: Path) -> None:
    script = tmp_path / "m.jl"
    layers = tmp_path / "layers.jl"
    script.write_text('include("layers.jl")\n')
    layers.write_text("f(x) = x\n")
    key = export_key(script, {"mode": "test"}, [layers], "julia 1.11.5")
    assert key == export_key(script, {"mode": "test"}, [layers], "julia 1.11.5")
    layers.write_text("f(x) = 2x\n")
    changed = {
        export_key(script, {"mode": "test"}, [layers], "julia 1.11.5"),
        export_key(script, {"mode": "train"}, [layers], "julia 1.11.5"),
        export_key(script, {"mode": "test"}, [layers], "julia 1.12.0"),
        export_key(script, {"mode": "test"}, [], "julia 1.11.5"),
    }
    assert key not in changed and len(changed) == 4


# -- the plugin, in child pytest sessions ------------------------------------------------------

USER_TESTS = """
import pytest
from pathlib import Path

HERE = Path(__file__).parent

@pytest.mark.julia
def test_marked():
    pass

def test_export_twice(julia_export):
    a = julia_export(HERE / "model.jl", depends=[HERE / "layers.jl"])
    b = julia_export(HERE / "model.jl", depends=[HERE / "layers.jl"])
    assert a == b and (a / "manifest.json").is_file()

@pytest.mark.julia_script("model.jl", mode="train")
def test_bundle(julia_bundle):
    assert julia_bundle.name.startswith("model-")

def test_plain():
    pass
"""

FAKE_JULIA = f"""#!{sys.executable}
import json, os, shutil, sys
if sys.argv[1:] == ["--version"]:
    print("julia version 1.11.5")
    sys.exit(0)
request = json.load(open(sys.argv[-1]))
with open(os.environ["FAKE_JULIA_LOG"], "a") as log:
    log.write(json.dumps({{"script": request["script"], "mode": request["mode"]}}) + "\\n")
# What JuliaBridge.export_lux writes: a Julia export directory (written from the spec).
shutil.copytree(os.environ["FAKE_JULIA_EXPORT"], request["out"], dirs_exist_ok=True)
json.dump({{"ok": True, "path": request["out"]}}, open(request["result_file"], "w"))
"""


def run_pytest(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", *args],
        capture_output=True,
        text=True,
        cwd=project,
        env=env,
        timeout=300,
    )


@pytest.fixture
def user_project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A user's project using the plugin, in an environment with no Julia."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_user.py").write_text(USER_TESTS)
    (project / "model.jl").write_text("using Lux\n")
    (project / "layers.jl").write_text("f(x) = x\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {
        **os.environ,
        "PATH": str(bin_dir),
        "HOME": str(tmp_path / "home"),
        "JULIAUP_DEPOT_PATH": str(tmp_path / "juliaup"),
        "JULIA_DEPOT_PATH": str(tmp_path / "depot"),
        "PYTHON_JULIAPKG_PROJECT": str(tmp_path / "julia_env"),
        "PYTHONPATH": str(REPO),
        "FAKE_JULIA_LOG": str(tmp_path / "julia.log"),
    }
    for var in ("PYTHON_JULIAPKG_EXE", "JULIABRIDGE_JULIA_ENV", "JULIABRIDGE_JULIA_PROJECT"):
        env.pop(var, None)
    return project, env


def test_without_julia_the_plugin_skips_with_the_reason(
    user_project: tuple[Path, dict[str, str]],
) -> None:
    project, env = user_project
    proc = run_pytest(project, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 3 skipped" in proc.stdout, proc.stdout
    assert "needs Julia: no Julia found" in proc.stdout, proc.stdout
    markers = run_pytest(project, env, "--markers").stdout
    assert "@pytest.mark.julia:" in markers and "@pytest.mark.julia_script(path" in markers


@pytest.mark.skipif(os.name == "nt", reason="the fake julia is a shell-executable script")
def test_exports_are_cached_within_and_across_sessions(
    user_project: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    project, env = user_project
    julia = Path(env["PATH"]) / "julia"
    julia.write_text(FAKE_JULIA)
    julia.chmod(julia.stat().st_mode | stat.S_IXUSR)
    env["JULIABRIDGE_JULIA_ENV"] = str(tmp_path)  # a prepared environment: no juliapkg
    env["FAKE_JULIA_EXPORT"] = str(write_julia_export(tmp_path / "made.jlexport", dense_bn()))
    log = Path(env["FAKE_JULIA_LOG"])

    def exports() -> list[dict[str, str]]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    proc = run_pytest(project, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 passed" in proc.stdout, proc.stdout
    # Once per (script, options): test mode for the two calls, train mode for julia_script.
    assert sorted(e["mode"] for e in exports()) == ["test", "train"]

    proc = run_pytest(project, env)  # a new session: everything comes from pytest's cache
    assert "4 passed" in proc.stdout, proc.stdout
    assert len(exports()) == 2

    (project / "layers.jl").write_text("f(x) = 2x\n")  # a dependency changed: export again
    proc = run_pytest(project, env, "-k", "export_twice")
    assert "1 passed" in proc.stdout, proc.stdout
    assert len(exports()) == 3
    proc = run_pytest(project, env, "--cache-clear", "-k", "bundle")
    assert len(exports()) == 4


def test_the_project_uses_the_plugin() -> None:
    """The repository's own Julia tests go through the plugin's fixture and helper."""
    source = (REPO / "tests" / "test_julia_driver.py").read_text()
    assert "julia_export(" in source and "assert_matches_julia(" in source
    assert "julia_or_skip" not in source
    entry = textwrap.dedent(
        """
        [project.entry-points.pytest11]
        juliabridge = "juliabridge.testing.plugin"
        """
    )
    assert entry.strip() in (REPO / "pyproject.toml").read_text()
