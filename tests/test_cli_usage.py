"""What a new user meets at the command line (issue 29): usage errors on one line with exit 2,
help that describes what each command does, and messages that fit the command and the bundle.

Exit codes come from the one table (juliabridge/support/exitcodes.py), never spelled here as numbers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import juliabridge
from juliabridge.cli import commands as cli
from juliabridge.errors import JuliaBridgeError
from juliabridge.support.exitcodes import EXIT_CODES, MISMATCH, OK, USAGE
from tests.bundle_factory import dense_bn_arrays, edit_manifest, make_dense_bn

REPO = Path(__file__).resolve().parents[1]
CODE = {row.error: row.code for row in EXIT_CODES if row.error is not None}


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]


# --- usage errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["verify", "B", "--rtol", "-1"],
            "juliabridge verify: error: argument --rtol: must be a finite number >= 0, got '-1' "
            "(see juliabridge verify --help)",
        ),
        (
            ["verify", "B", "--atol", "nan"],
            "juliabridge verify: error: argument --atol: must be a finite number >= 0, got 'nan' "
            "(see juliabridge verify --help)",
        ),
        (
            ["verify", "B", "--atol", "inf"],
            "juliabridge verify: error: argument --atol: must be a finite number >= 0, got 'inf' "
            "(see juliabridge verify --help)",
        ),
        (
            ["verify", "B", "--rtol", "tight"],
            "juliabridge verify: error: argument --rtol: not a number: 'tight' "
            "(see juliabridge verify --help)",
        ),
        (
            ["inspect"],
            "juliabridge inspect: error: the following arguments are required: path "
            "(see juliabridge inspect --help)",
        ),
        (
            ["export", "missing.jl", "--out", "d"],
            "juliabridge export: error: argument script: missing.jl: no such file "
            "(see juliabridge export --help)",
        ),
    ],
)
def test_a_usage_error_is_one_line_and_exit_2(
    argv: list[str],
    line: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: --rtol -1 / --atol nan ran and ended in MISMATCH (1); a missing script exited 4
    ("Julia ran but the export failed", though Julia never ran); argparse printed 3-5 lines."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(argv, capsys)
    assert code == USAGE
    assert one_line(err) == line
    assert out == ""
    assert not (tmp_path / "d").exists()


def test_a_directory_is_not_a_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["export", str(tmp_path), "--out", str(tmp_path / "o")], capsys)
    assert code == USAGE and "is a directory, not a Julia script" in one_line(err)


def test_the_verify_api_refuses_a_tolerance_that_cannot_be_met(tmp_path: Path) -> None:
    bundle = make_dense_bn(tmp_path / "b.bundle")
    for name, value in (("rtol", -1.0), ("atol", float("nan")), ("atol", float("inf"))):
        with pytest.raises(JuliaBridgeError, match=f"{name} must be a finite number >= 0"):
            juliabridge.verify(bundle, backend="lax", **{name: value})
    assert juliabridge.verify(bundle, backend="lax", rtol=0.0, atol=1e-5).ok


def test_add_vjp_keeps_a_vjp_module_the_bundle_has_unless_asked(tmp_path: Path) -> None:
    from juliabridge.backends.vjp_text import derive_vjp_text
    from juliabridge.bundle.write.vjp_bundle import add_vjp
    from juliabridge.errors import SaveError

    bundle = make_dense_bn(tmp_path / "b.bundle")
    target = add_vjp(
        bundle, derive=derive_vjp_text
    )  # dense_bn lifts onto lax: derived in this process
    first = target.read_bytes()
    with pytest.raises(
        SaveError, match=r"already has a VJP module \(vjp\.mlir\); pass overwrite=True"
    ):
        add_vjp(bundle, derive=derive_vjp_text)
    assert target.read_bytes() == first
    assert add_vjp(bundle, derive=derive_vjp_text, overwrite=True) == target


def test_add_vjp_failures_name_the_bundle_they_are_about(tmp_path: Path) -> None:
    """The deriver is told which bundle it derives for (its messages name it), and a VJP module
    that would not load is refused naming the bundle and the deriver; nothing is written."""
    from juliabridge.bundle.write.vjp_bundle import add_vjp
    from juliabridge.errors import TransformError
    from juliabridge.stablehlo import StableHLOModule

    bundle = make_dense_bn(tmp_path / "b.bundle")
    before = sorted(p.name for p in bundle.iterdir())

    def refusing(module: StableHLOModule, where: str) -> tuple[str, str]:
        raise TransformError(f"{where}: cannot derive its VJP")

    with pytest.raises(TransformError) as e:
        add_vjp(bundle, derive=refusing)
    assert str(e.value) == f"{bundle}: cannot derive its VJP"

    def broken(module: StableHLOModule, where: str) -> tuple[str, str]:
        return "not a module", f"the test's deriver for {where}"

    with pytest.raises(TransformError) as e:
        add_vjp(bundle, derive=broken)
    assert str(e.value).startswith(
        f"{bundle}: the VJP module the test's deriver for {bundle} produced would not load: "
    )
    assert sorted(p.name for p in bundle.iterdir()) == before


# --- help ---------------------------------------------------------------------------------------


def test_no_verify_help_names_the_digest_each_format_uses(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before: "skip the sha256 checks", though format 3 checks BLAKE3 digests."""
    for command in ("inspect", "verify", "vjp"):
        assert cli.main([command, "--help"]) == OK
        out = " ".join(capsys.readouterr().out.split())
        assert "BLAKE3 per dataset in format 3, sha256 in formats 1-2" in out, command


def test_upgrade_help_describes_the_path_and_what_changes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["upgrade", "--help"]) == OK
    out = " ".join(capsys.readouterr().out.split())
    assert "path bundle directory to upgrade (changed in place)" in out
    assert "BLAKE3 per-dataset digests" in out and "portable artifacts" in out


def test_vjp_help_says_how_the_vjp_is_derived(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == OK
    out = " ".join(capsys.readouterr().out.split())
    assert "derive the bundle's VJP module (through lax when every op lifts, else with " in out


# --- messages that fit the bundle ---------------------------------------------------------------


def test_upgrading_a_format_3_bundle_does_not_say_3_to_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = make_dense_bn(tmp_path / "b.bundle")  # format 3, without a portable artifact
    code, out, _ = run_cli(["upgrade", str(bundle)], capsys)
    assert code == OK
    assert "from format 3 to 3" not in out
    assert f"{bundle}: format 3 kept; added:" in out and "artifact model.mlirbc" in out


def _mismatching(tmp_path: Path, made_with_julia: bool) -> Path:
    bundle = make_dense_bn(tmp_path / f"{made_with_julia}.bundle")
    with __import__("h5py").File(bundle / "weights.h5", "r+") as f:
        f["/params/layer_1/bias"][0] += 1

    def change(m: dict) -> None:  # type: ignore[type-arg]
        m["producer"]["made_with_julia"] = made_with_julia
        if made_with_julia:
            m["producer"].update(
                tool="JuliaBridge.jl", julia="1.11.5", lux="1.0.0", reactant="0.2.0"
            )

    edit_manifest(bundle, change)
    return bundle


@pytest.mark.parametrize(
    ("made", "says"),
    [
        (
            False,
            "MISMATCH: outputs differ from the bundle's reference outputs (made without Julia)",
        ),
        (True, "MISMATCH: outputs differ from Julia's reference outputs"),
    ],
)
def test_verify_names_whose_reference_differs(
    made: bool, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = _mismatching(tmp_path, made)
    code, out, err = run_cli(["verify", str(bundle), "--no-verify", "--backend", "lax"], capsys)
    assert code == MISMATCH, err
    assert says in out


# --- vjp ----------------------------------------------------------------------------------------


def test_vjp_derives_through_lax_where_the_fallback_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before (CPython 3.13): "--backend enzyme needs enzyme-ad ... or --backend xla" (exit 5),
    though vjp has no --backend; the module lifts, so lax derives the VJP."""
    from juliabridge.backends import vjp_text

    monkeypatch.setattr(vjp_text, "enzyme_available", lambda: False)
    bundle = make_dense_bn(tmp_path / "b.bundle")
    code, out, err = run_cli(["vjp", str(bundle)], capsys)
    assert code == OK, err
    assert "wrote" in out and (bundle / "vjp.mlir").exists()
    assert json.loads((bundle / "manifest.json").read_text())["vjp"]["file"] == "vjp.mlir"
    # The stored VJP gives the gradient finite differences give (xla runs it; no derivation).
    model = juliabridge.import_lux(bundle, backend="xla")
    x = dense_bn_arrays(seed=1)[0]

    import jax

    def loss(p: object) -> jax.Array:
        return jax.numpy.sum(model.apply(p, model.state, x)[0] ** 2)

    g = jax.grad(loss)(model.params)
    leaf = "layer_1"
    bias = np.asarray(model.params[leaf]["bias"], np.float64)
    eps = 1e-2
    for i in range(bias.shape[0]):
        up = jax.tree_util.tree_map(np.asarray, model.params)
        dn = jax.tree_util.tree_map(np.asarray, model.params)
        up[leaf]["bias"] = (bias + eps * (np.arange(bias.size) == i)).astype(np.float32)
        dn[leaf]["bias"] = (bias - eps * (np.arange(bias.size) == i)).astype(np.float32)
        fd = (float(loss(up)) - float(loss(dn))) / (2 * eps)
        np.testing.assert_allclose(float(g[leaf]["bias"][i]), fd, rtol=2e-2, atol=2e-2)


def test_vjp_again_is_a_refused_write_not_a_malformed_bundle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: exit 10, "the bundle is missing, unreadable or malformed"."""
    bundle = make_dense_bn(tmp_path / "b.bundle")
    assert run_cli(["vjp", str(bundle)], capsys)[0] == OK
    code, _, err = run_cli(["vjp", str(bundle)], capsys)
    assert code == CODE[juliabridge.SaveError]
    assert "already has a VJP module (vjp.mlir); pass --overwrite" in one_line(err)
    assert run_cli(["vjp", str(bundle), "--overwrite"], capsys)[0] == OK


def test_vjp_with_neither_lax_nor_the_fallback_says_what_would_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from juliabridge.backends import vjp_text
    from juliabridge.errors import UnsupportedModuleError

    def refuse(module: object) -> None:
        raise UnsupportedModuleError("op foo.bar does not lift")

    monkeypatch.setattr(vjp_text, "LaxBackend", refuse)
    monkeypatch.setattr(vjp_text, "enzyme_available", lambda: False)
    bundle = make_dense_bn(tmp_path / "b.bundle")
    code, _, err = run_cli(["vjp", str(bundle)], capsys)
    line = one_line(err)
    assert code == CODE[juliabridge.BackendUnavailableError]
    assert "--backend" not in line  # vjp has no such option
    assert line == (
        f"juliabridge vjp: error: {bundle.resolve()}: the VJP module cannot be derived here: the "
        "lax backend cannot lift the module (op foo.bar does not lift) and enzyme-ad is not "
        "importable (its wheels are for CPython 3.11: pip install 'juliabridge[enzyme]' there and "
        "run juliabridge vjp there)"
    )


def test_usage_errors_are_one_line_in_a_fresh_process(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "juliabridge", "verify", "B", "--rtol", "-1"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == USAGE
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "WARNING" not in ln]
    assert len(lines) == 1, proc.stderr


# --- inspect ------------------------------------------------------------------------------------


def test_inspect_names_echoed_results_and_static_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: an echoed result had a blank path cell, and static_state was not shown."""
    import jax

    from juliabridge.bundle.write.description import ArgumentSpec, BundleDescription
    from juliabridge.bundle.write.writer import write_bundle

    x = np.ones((2, 3), np.float32)
    w = np.full((3, 4), 0.5, np.float32)
    text = jax.jit(lambda x, w: (x @ w, x)).lower(x, w).as_text()
    bundle = write_bundle(
        tmp_path / "echo.bundle",
        BundleDescription(
            name="echo",
            mlir_text=text,
            arguments=[ArgumentSpec("input", [], x), ArgumentSpec("parameter", ["w"], w)],
            result_paths=[[["output"]], []],
            result_echoes=[None, 0],
            static_state=[(["training"], False, "Val{false}")],
        ),
    )
    code, out, err = run_cli(["inspect", str(bundle)], capsys)
    assert code == OK, err
    assert "(echo of argument #0, unchanged)" in out
    assert (
        "static state (not arrays; model.metadata['static_state']): state.training = False " in out
    )
    assert "(Val{false})" in out


def test_demo_says_whether_enzyme_was_installed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: on CPython 3.12+ the [enzyme] extra installed nothing and nothing said so
    until `juliabridge doctor`."""
    from juliabridge.backends.enzyme import availability

    monkeypatch.setattr(availability, "enzyme_available", lambda: False)
    code, out, err = run_cli(["demo", "--backend", "lax"], capsys)
    assert code == OK, err
    v = sys.version_info
    said = " ".join(out.split())
    assert "enzyme backend: not available (" in said
    if v[:2] == (3, 11):
        # Before: "installs nothing on Python 3.11", where the extra does install it.
        assert "installs nothing on Python" not in said
    else:
        assert (
            "enzyme backend: not available (enzyme-ad has CPython 3.11 wheels only, so the "
            f"[enzyme] extra installs nothing on Python {v.major}.{v.minor}; `juliabridge "
            "doctor` says why)"
        ) in said
    install = " ".join((REPO / "docs" / "install.md").read_text().split())
    assert 'prints "enzyme backend: not available"' in install
    pyproject = (REPO / "pyproject.toml").read_text()
    assert "enzyme-ad==0.0.16; python_version == '3.11'" in pyproject  # what install.md says
    monkeypatch.setattr(availability, "enzyme_available", lambda: True)
    code, out, err = run_cli(["demo", "--backend", "lax"], capsys)
    assert code == OK, err
    assert out.splitlines()[1] == "enzyme backend: available (enzyme-ad)"


@pytest.mark.parametrize(
    ("version", "system", "machine", "says", "never"),
    [
        ((3, 11), "linux", "x86_64", "the [enzyme] extra installs it", "installs nothing"),
        ((3, 11), "linux", "aarch64", "the [enzyme] extra installs it", "installs nothing"),
        ((3, 11), "darwin", "arm64", "the [enzyme] extra installs it", "installs nothing"),
        ((3, 11), "win32", "AMD64", "no wheel for win32 x86_64", "installs it"),
        ((3, 11), "darwin", "x86_64", "no wheel for darwin x86_64", "installs it"),
        ((3, 12), "linux", "x86_64", "installs nothing on Python 3.12", "installs it"),
        ((3, 13), "darwin", "arm64", "installs nothing on Python 3.13", "installs it"),
    ],
)
def test_enzyme_note_is_true_for_each_python_and_platform(
    monkeypatch: pytest.MonkeyPatch,
    version: tuple[int, int],
    system: str,
    machine: str,
    says: str,
    never: str,
) -> None:
    """Where pyproject's marker installs enzyme-ad (CPython 3.11 on Linux x86_64/aarch64 and
    macOS arm64) the note says the extra installs it; elsewhere that it installs nothing."""
    from juliabridge.backends.enzyme import availability
    from juliabridge.cli.commands import _enzyme_note

    monkeypatch.setattr(availability, "enzyme_available", lambda: False)
    note = _enzyme_note(version, system, machine)
    assert note.startswith("enzyme backend: not available (")
    assert says in note and never not in note
    marker = (REPO / "pyproject.toml").read_text()
    for platform_words in ("sys_platform == 'linux'", "platform_machine == 'aarch64'", "'arm64'"):
        assert platform_words in marker  # the platforms the note names are the marker's


# --- piped output -------------------------------------------------------------------------------


def test_doctor_says_what_its_stablehlo_versions_mean(capsys: pytest.CaptureFixture[str]) -> None:
    """Before: "reads_from 0.9.0, writes_and_reads_up_to ..., 12_week_target 1.16.3"."""
    from jaxlib.mlir.dialects import stablehlo

    from juliabridge.stablehlo.artifact import ARTIFACT_TARGET

    code, out, _ = run_cli(["doctor"], capsys)
    assert code == OK
    line = next(ln for ln in out.splitlines() if ln.startswith("StableHLO: "))
    assert line.startswith(
        f"StableHLO: this jaxlib reads portable artifacts from StableHLO "
        f"{stablehlo.get_minimum_version()}, up to {stablehlo.get_current_version()} (its own "
        "version)"
    )
    assert line.endswith(f"juliabridge writes artifacts at {ARTIFACT_TARGET}")
    assert "_" not in line  # no JSON keys


def test_piped_output_never_splits_a_path(tmp_path: Path) -> None:
    """Before: lines past 160 columns wrapped mid-word ("…/len" then "et.bundle")."""
    deep = tmp_path / ("d" * 90) / ("e" * 90)
    deep.mkdir(parents=True)
    bundle = make_dense_bn(deep / "dense_bn.bundle")
    proc = subprocess.run(
        [sys.executable, "-m", "juliabridge", "inspect", str(bundle)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == OK, proc.stderr
    assert "module read from: text" in proc.stdout
    assert any(str(bundle) in ln for ln in proc.stdout.splitlines()), proc.stdout
