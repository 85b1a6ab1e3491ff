"""The command line under hostile and broken input: one escaped line per error, one exit code
per error class (juliabridge/support/exitcodes.py), the same table in --help and the docs."""

from __future__ import annotations

import glob
import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from juliabridge.bundle.files.checksum import sha256_file
from juliabridge.bundle.write.description import ArgumentSpec, BundleDescription
from juliabridge.bundle.write.writer import write_bundle
from juliabridge.cli import commands as cli
from juliabridge.support.exitcodes import EXIT_CODES, exit_code, safe, table_markdown, table_text
from tests.bundle_factory import edit_manifest, make_dense_bn
from tests.conftest import require_backend

REPO = Path(__file__).resolve().parents[1]
#: Bytes that act on a terminal: ESC (CSI, OSC 0 window title, OSC 52 clipboard), BEL, C1 CSI,
#: a bidi override.
TERMINAL = re.compile("[\x00-\x08\x0b-\x1f\x7f\x80-\x9f\u202a-\u202e\u2066-\u2069]")
CODE = {row.error: row.code for row in EXIT_CODES if row.error is not None}


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert not TERMINAL.search(err), repr(err)
    return lines[0]


def reseal(bundle: Path, name: str, data: bytes) -> None:
    """Replace a bundle file and record its new sha256 (what an attacker would do); a new
    module text goes without the portable artifact, which readers would prefer to it."""
    (bundle / name).write_bytes(data)
    key = "module" if name == "model.mlir" else "weights"

    def change(m: dict) -> None:  # type: ignore[type-arg]
        m[key]["sha256"] = sha256_file(bundle / name)
        if key == "module" and m[key].pop("artifact", None) is not None:
            (bundle / "model.mlirbc").unlink()

    edit_manifest(bundle, change)


def _module_edit(old: str, new: str) -> Callable[[Path], None]:
    def edit(b: Path) -> None:
        reseal(b, "model.mlir", (b / "model.mlir").read_text().replace(old, new, 1).encode())

    return edit


def _change_a_weight(bundle: Path) -> None:
    import h5py

    with h5py.File(bundle / "weights.h5", "r+") as f:
        f["/params/layer_1/bias"][0] += 1


def _inject(line: str) -> Callable[[Path], None]:
    return _module_edit("    %0 =", f"    {line}\n    %0 =")


CASES: dict[str, tuple[Callable[[Path], None], type[BaseException], str]] = {
    "manifest": (
        lambda b: edit_manifest(b, lambda m: m["arguments"][1].update(dtype="float32")),
        __import__("juliabridge").ManifestError,
        "arguments[1].dtype",
    ),
    "checksum": (
        lambda b: _change_a_weight(b),
        __import__("juliabridge").ChecksumError,
        "--no-verify",
    ),
    "version": (
        lambda b: edit_manifest(b, lambda m: m.update(format_version=99)),
        __import__("juliabridge").BundleVersionError,
        "99",
    ),
    "unsafe": (
        lambda b: edit_manifest(b, lambda m: m["weights"].update(file="../w.h5")),
        __import__("juliabridge").UnsafeBundleError,
        "w.h5",
    ),
    "signature": (
        lambda b: edit_manifest(b, lambda m: m["arguments"][3].update(shape=[4], julia_shape=[4])),
        __import__("juliabridge").SignatureMismatchError,
        "tensor<4xf32>",
    ),
    "parse": (
        _module_edit("stablehlo.sqrt", "stablehlo.sqrtt"),
        __import__("juliabridge").MLIRParseError,
        "stablehlo.sqrtt",
    ),
    "policy": (
        _inject(
            '%x = stablehlo.custom_call @tpu_custom_call(%arg2) {backend_config = "x"} : (tensor<3xf32>) -> tensor<3xf32>'
        ),
        __import__("juliabridge").UnsupportedModuleError,
        "tpu_custom_call",
    ),
    "contract": (
        _inject(
            "%x:3 = stablehlo.custom_call @lapack_sgetrf_ffi(%arg1) {mhlo.backend_config = {}} : (tensor<2x3xf32>) -> (tensor<1x1xf32>, tensor<2xi32>, tensor<i32>)"
        ),
        __import__("juliabridge").ModuleContractError,
        "lapack_sgetrf_ffi",
    ),
    "budget": (
        _inject(
            "%x = stablehlo.broadcast_in_dim %arg2, dims = [2] : (tensor<3xf32>) -> tensor<1048576x1048576x3xf32>"
        ),
        __import__("juliabridge").ResourceLimitError,
        "12.0 TiB",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_each_error_class_is_one_line_and_its_own_exit_code(
    case: str, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = make_dense_bn(tmp_path / "b.bundle")
    edit, cls, named = CASES[case]
    edit(bundle)
    argv = [command, str(bundle)] + (["--backend", "xla"] if command == "verify" else [])
    code, _, err = run_cli(argv, capsys)
    line = one_line(err)
    assert code == CODE[cls], line
    assert line.startswith(f"juliabridge {command}: error: ")
    assert named in line, line
    assert "verify_checksums" not in line  # the CLI names its own flag


def test_missing_bundle_usage_and_success_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import juliabridge

    code, _, err = run_cli(["inspect", str(tmp_path / "missing.bundle")], capsys)
    assert code == CODE[juliabridge.BundleError] and "no such bundle" in one_line(err)
    assert run_cli(["inspect", "--frobnicate"], capsys)[0] == 2
    bundle = make_dense_bn(tmp_path / "b.bundle")
    assert run_cli(["inspect", str(bundle)], capsys)[0] == 0
    assert run_cli(["verify", str(bundle), "--backend", "xla"], capsys)[0] == 0


def test_no_verify_is_offered_where_checksums_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = make_dense_bn(tmp_path / "b.bundle")
    with open(bundle / "weights.h5", "ab") as f:
        f.write(b"x")
    assert run_cli(["inspect", str(bundle), "--no-verify"], capsys)[0] == 0
    assert run_cli(["verify", str(bundle), "--no-verify", "--backend", "xla"], capsys)[0] == 0
    for command in ("inspect", "verify", "vjp"):
        assert cli.main([command, "--help"]) == 0
        out = capsys.readouterr().out
        assert "--no-verify" in out and "sha256" in out and "BLAKE3" in out
    assert cli.main(["verify", "--help"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"--rtol RTOL\s+relative tolerance", out)
    assert re.search(r"--atol ATOL\s+absolute tolerance", out)


HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b]52;c;ZWNobyBoaQ==\x07 [/bold] [red]x\u202egnp.exe \x9b31m"


def test_bundle_strings_are_printed_escaped_and_never_as_markup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: the terminal's title changed, the screen cleared, the clipboard was written,
    and `[/bold]` ended in rich's MarkupError traceback."""
    bundle = make_dense_bn(tmp_path / "b.bundle")

    def change(m: dict) -> None:
        m["producer"].update(note=HOSTILE, tool="[bold]tool" + HOSTILE)

    edit_manifest(bundle, change)
    code, out, err = run_cli(["inspect", str(bundle)], capsys)
    assert code == 0, err
    assert not TERMINAL.search(out), repr(out)
    assert "[/bold] [red]x" in out and "[bold]tool" in out  # literally, not as style
    assert "\\x1b]0;pwned\\x07" in out and "\\u202e" in out


def test_hostile_strings_in_error_messages_are_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = make_dense_bn(tmp_path / "b.bundle")
    edit_manifest(bundle, lambda m: m["arguments"][1].update(dtype=HOSTILE))
    code, _, err = run_cli(["inspect", str(bundle)], capsys)
    assert code == 11
    one_line(err)


def test_safe_escapes_controls_and_keeps_text() -> None:
    assert safe("plain text [x]") == "plain text [x]"
    assert safe("a\nb\tc") == "a\\x0ab\\x09c"
    assert safe("é ü 中") == "é ü 中"
    assert safe("\x1b[2J\u202e\ud800") == "\\x1b[2J\\u202e\\ud800"


def test_exit_code_table_is_the_same_in_help_and_docs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import importlib.util

    assert cli.main(["--help"]) == 0
    assert table_text() in capsys.readouterr().out
    assert table_markdown() in (REPO / "docs" / "reliability.md").read_text(), "out of date"
    # The site's CLI reference (generated at build from the parser and this table).
    spec = importlib.util.spec_from_file_location("docs_reference", REPO / "docs/_ext/reference.py")
    assert spec is not None and spec.loader is not None
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    assert table_markdown() in reference.cli_markdown()
    codes = [row.code for row in EXIT_CODES]
    assert len(codes) == len(set(codes))


def test_every_error_class_has_its_own_code() -> None:
    import juliabridge

    classes = [
        getattr(juliabridge, n) for n in juliabridge.__all__ if n.endswith(("Error", "Unavailable"))
    ]
    assert len({exit_code(c("x")) for c in classes}) == len(classes)
    assert exit_code(ZeroDivisionError()) == 70


def test_an_internal_error_is_one_line_and_code_70(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(args: object, console: object) -> int:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(cli, "cmd_inspect", boom)
    code, _, err = run_cli(["inspect", str(tmp_path)], capsys)
    assert code == 70
    assert "internal error (ZeroDivisionError: division by zero)" in one_line(err)


def test_errors_are_one_line_in_a_fresh_process(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "juliabridge", "inspect", str(tmp_path / "missing.bundle")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 10
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "WARNING" not in ln]
    assert len(lines) == 1 and "Traceback" not in proc.stderr


# --- juliabridge vjp -----------------------------------------------------------------------------


def _sort_bundle(path: Path) -> Path:
    """A model Enzyme cannot differentiate: its passes crash on a sort (SIGSEGV in-process)."""
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    w = np.ones(3, np.float32)
    text = jax.jit(lambda x, w: jnp.sort(x, axis=1) * w).lower(x, w).as_text()
    return write_bundle(
        path,
        BundleDescription(
            name="sorted",
            mlir_text=text,
            arguments=[ArgumentSpec("input", [], x, 0), ArgumentSpec("parameter", ["w"], w)],
            result_paths=[[["output"]]],
        ),
    )


def _tmp_mlir() -> set[str]:
    import tempfile

    return set(glob.glob(os.path.join(tempfile.gettempdir(), "tmp*.mlir")))


def _private_tempdir(monkeypatch: pytest.MonkeyPatch, where: Path) -> None:
    """enzyme-ad's dumps go to the temporary folder; a private one keeps those of tests
    running beside this one (pytest-xdist) out of its before/after comparison."""
    import tempfile

    where.mkdir(exist_ok=True)
    monkeypatch.setenv("TMPDIR", str(where))
    monkeypatch.setattr(tempfile, "tempdir", str(where))


def test_vjp_when_enzyme_fails_is_one_line_and_leaves_nothing_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a traceback, ~40 lines of MLIR on stderr and a /tmp/tmp*.mlir per failure (or,
    for this module, a segfault of the whole command)."""
    require_backend("enzyme")
    from juliabridge.backends import vjp_text
    from juliabridge.errors import UnsupportedModuleError

    def refuse(module: object) -> None:
        # The sort lifts onto lax, which would derive the VJP; make vjp reach Enzyme.
        raise UnsupportedModuleError("refused for the test")

    monkeypatch.setattr(vjp_text, "LaxBackend", refuse)
    bundle = _sort_bundle(tmp_path / "s.bundle")
    _private_tempdir(monkeypatch, tmp_path / "tmp")
    before = _tmp_mlir()
    code, _, err = run_cli(["vjp", str(bundle)], capsys)
    line = one_line(err)
    assert code == 6, line
    assert "Enzyme crashed (SIGSEGV)" in line
    assert _tmp_mlir() == before
    assert not (bundle / "vjp.mlir").exists()


def test_vjp_os_errors_are_save_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    require_backend("enzyme")
    bundle = make_dense_bn(tmp_path / "b.bundle")
    (bundle / "vjp.mlir").mkdir()  # not named by the manifest, so the bundle still loads
    code, _, err = run_cli(["vjp", str(bundle)], capsys)
    line = one_line(err)
    assert code == 20 and "vjp.mlir" in line and "cannot write" in line


def test_vjp_overwrite_writes_files_with_umask_permissions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: vjp.mlir and manifest.json became 0600 (mkstemp's mode)."""
    require_backend("enzyme")
    bundle = make_dense_bn(tmp_path / "b.bundle")
    old = os.umask(0o022)
    try:
        assert run_cli(["vjp", str(bundle)], capsys)[0] == 0
        assert run_cli(["vjp", str(bundle), "--overwrite"], capsys)[0] == 0
    finally:
        os.umask(old)
    for name in ("vjp.mlir", "manifest.json"):
        assert stat.S_IMODE((bundle / name).stat().st_mode) == 0o644, name
    assert json.loads((bundle / "manifest.json").read_text())["vjp"]["file"] == "vjp.mlir"
    assert not [p for p in bundle.iterdir() if p.name.startswith(".")]
