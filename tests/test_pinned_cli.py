"""The `juliabridge` command's exit codes and error line, pinned against the documentation.

docs/reliability.md's table is read here as an independent statement of which error class
ends in which code; every code is then observed through `juliabridge.cli.main` in-process (a
command that raises the error), not looked up in juliabridge/support/exitcodes.py's own table.
"""

from __future__ import annotations

import builtins
import re
from pathlib import Path

import pytest

import juliabridge.errors
from juliabridge.backends.vjp_text import derive_vjp_text
from juliabridge.cli import commands as cli
from juliabridge.lux.options import LoadOptions
from juliabridge.support.exitcodes import EXIT_CODES, safe
from juliabridge.verification import ResultCheck, VerifyReport

REPO = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| (\d+) \| (.+?) \| (?:`(\w+)`)? \|$")


def documented() -> dict[int, str | None]:
    """code -> error class name (None for codes no error class ends in), from the docs."""
    text = (REPO / "docs" / "reliability.md").read_text(encoding="utf-8")
    rows = {int(m[1]): m[3] for m in map(ROW.match, text.splitlines()) if m}
    assert len(rows) >= 20, "docs/reliability.md lost its exit-code table"
    return rows


def error_class(name: str) -> type[BaseException]:
    cls = getattr(juliabridge.errors, name, None) or getattr(builtins, name)
    assert isinstance(cls, type) and issubclass(cls, BaseException), name
    return cls


def raising(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    """Make `juliabridge inspect` raise `exc` (the rest of main runs as it is)."""

    def command(args: object, console: object) -> int:
        raise exc

    monkeypatch.setattr(cli, "cmd_inspect", command)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_the_documented_codes_are_the_table_of_the_command() -> None:
    table = {row.code: None if row.error is None else row.error.__name__ for row in EXIT_CODES}
    assert table == documented()


@pytest.mark.parametrize(
    ("code", "name"), [(c, n) for c, n in sorted(documented().items()) if n is not None]
)
def test_each_error_class_ends_in_its_documented_code(
    code: int, name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cls = error_class(name)
    raising(monkeypatch, cls(f"the {name} message"))
    assert run(["inspect", "B"], capsys) == (
        code,
        "",
        f"juliabridge inspect: error: the {name} message\n",
    )
    # A subclass (a refinement a later release may add) ends in its base's code.
    sub = type(f"Refined{name}", (cls,), {})
    raising(monkeypatch, sub("refined"))
    assert run(["inspect", "B"], capsys)[0] == code


def test_success_mismatch_usage_internal_and_interrupt_codes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = documented()
    words = {code: name for code, name in docs.items() if name is None}
    assert set(words) == {0, 1, 2, 70, 130}
    assert run(["--version"], capsys)[:2] == (0, f"juliabridge {juliabridge.__version__}\n")
    assert run(["inspect"], capsys)[0] == 2
    assert run(["frobnicate"], capsys)[0] == 2

    asked: list[dict[str, object]] = []

    def differs(path: str, **kwargs: object) -> VerifyReport:
        asked.append(kwargs)
        checks = [ResultCheck("output", 1.0, 0.5, False)]
        precision = kwargs.get("matmul_precision")
        assert precision is None or isinstance(precision, str)
        return VerifyReport(path, "lax", 1e-5, 1e-6, checks, False, precision)

    monkeypatch.setattr("juliabridge.verification.verify", differs)
    code, out, _ = run(["verify", "B"], capsys)
    lines = [" ".join(re.sub("[│┃]", " ", ln).split()) for ln in out.splitlines()]
    assert code == 1 and "verify B [lax] rtol=1e-05 atol=1e-06 matmul_precision=highest" in lines
    assert "result max abs err max rel err ok" in lines and "output 1 0.5 NO" in lines
    assert lines[-1] == (
        "MISMATCH: outputs differ from the bundle's reference outputs (made without Julia)"
    )
    assert asked.pop() == {
        "backend": "auto",
        "rtol": None,
        "atol": None,
        "verify_checksums": True,
        "matmul_precision": "highest",
    }
    flags = ["--backend", "xla", "--rtol", "0.1", "--atol", "0", "--no-verify"]
    code, out, _ = run(["verify", "B", *flags, "--matmul-precision", "platform"], capsys)
    assert code == 1 and "matmul_precision=platform" in out
    assert asked.pop() == {
        "backend": "xla",
        "rtol": 0.1,
        "atol": 0.0,
        "verify_checksums": False,
        "matmul_precision": None,
    }
    raising(monkeypatch, ZeroDivisionError("division by zero"))
    code, _, err = run(["inspect", "B"], capsys)
    assert code == 70 and err.startswith(
        "juliabridge inspect: error: internal error (ZeroDivisionError: division by zero)"
    )
    raising(monkeypatch, KeyboardInterrupt())
    assert run(["inspect", "B"], capsys) == (130, "", "juliabridge inspect: interrupted\n")


def test_a_message_less_error_is_named_by_its_class(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    raising(monkeypatch, juliabridge.errors.SaveError())
    assert run(["inspect", "B"], capsys)[2] == "juliabridge inspect: error: SaveError\n"


@pytest.mark.parametrize(
    ("api", "flag"),
    [
        ("pass verify_checksums=False", "pass --no-verify"),
        ("pass overwrite=True (--overwrite) to", "pass --overwrite to"),
        ("pass overwrite=True to", "pass --overwrite to"),
        ("use backend='xla' or", "use --backend xla or"),
        ("use backend='enzyme' or", "use --backend enzyme or"),
    ],
)
def test_error_lines_name_the_commands_flags(
    api: str, flag: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    raising(monkeypatch, juliabridge.errors.BundleError(api))
    assert run(["inspect", "B"], capsys)[2] == f"juliabridge inspect: error: {flag}\n"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("tab\there", "tab\\x09here"),
        ("zero\u200bwidth", "zero\\u200bwidth"),  # Cf
        ("tag\U000e0041", "tag\\U000e0041"),  # Cf, outside the BMP
        ("private\U000f0000", "private\\U000f0000"),  # Co, outside the BMP
        ("line\u2028sep", "line\\u2028sep"),  # Zl
        ("kept: é 中 \U0001f600", "kept: é 中 \U0001f600"),
    ],
)
def test_error_lines_escape_what_acts_on_a_terminal(
    text: str, line: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    raising(monkeypatch, juliabridge.errors.BundleError(text))
    assert run(["inspect", "B"], capsys)[2] == f"juliabridge inspect: error: {line}\n"


@pytest.mark.parametrize(("debug", "traceback"), [("1", True), ("0", False), (" ", False)])
def test_debug_shows_the_traceback(
    debug: str,
    traceback: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("JULIABRIDGE_DEBUG", debug)
    raising(monkeypatch, juliabridge.errors.BundleError("broken"))
    code, _, err = run(["inspect", "B"], capsys)
    assert code == 10 and err.endswith("juliabridge inspect: error: broken\n")
    assert ("Traceback (most recent call last)" in err) is traceback


# --- juliabridge export, with the Julia driver replaced (it needs Julia) -------------------------


class FakeDriver:
    """Stands in for juliabridge.driver.export_script: records its call, then raises or returns."""

    def __init__(self, outcome: BaseException | None = None) -> None:
        self.outcome = outcome
        self.calls: list[tuple[tuple[object, ...], dict[str, object]]] = []

    def __call__(self, *args: object, **kwargs: object) -> Path:
        self.calls.append((args, kwargs))
        if self.outcome is not None:
            raise self.outcome
        return Path(str(args[1]))


def export(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    *flags: str,
    outcome: BaseException | None = None,
) -> tuple[int, str, str, FakeDriver]:
    driver = FakeDriver(outcome)
    monkeypatch.setattr("juliabridge.driver.export_script", driver)
    script = tmp_path / "model.jl"
    script.write_text("model = 1\n")
    code, out, err = run(
        ["export", str(script), "--out", str(tmp_path / "m.bundle"), *flags], capsys
    )
    return code, out, err, driver


def test_export_passes_each_option_to_the_driver(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err, driver = export(monkeypatch, tmp_path, capsys)
    assert (code, out, err) == (0, f"juliabridge export: wrote {tmp_path / 'm.bundle'}\n", "")
    ((args, kwargs),) = driver.calls
    assert args == (tmp_path / "model.jl", tmp_path / "m.bundle")
    assert kwargs == {
        "overwrite": False,
        "name": None,
        "mode": "test",
        "reference": True,
        "offline": False,
        "progress": None,  # the driver decides (a bar when stderr is a terminal)
        "verbose": False,
        "timeout": None,
    }
    flags = ("--overwrite", "--name", "net", "--mode", "train", "--no-reference")
    more = ("--offline", "--timeout", "2.5", "-v", "-q")
    driver = export(monkeypatch, tmp_path, capsys, *flags, *more)[3]
    assert driver.calls[0][1] == {
        "overwrite": True,
        "name": "net",
        "mode": "train",
        "reference": False,
        "offline": True,
        "progress": False,
        "verbose": True,
        "timeout": 2.5,
    }


def test_export_script_must_be_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["export", str(tmp_path), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and f"argument script: {tmp_path}: is a directory, not a Julia script" in err


@pytest.mark.parametrize(
    ("outcome", "code"),
    [
        (juliabridge.errors.JuliaUnavailable("no Julia found\ninstall it with juliaup"), 3),
        (juliabridge.errors.JuliaExportError("\n  Julia failed: boom\n\n  at line 3\n"), 4),
        (ValueError("mode must be \x1b[31mtest or train"), 2),
    ],
)
def test_export_errors_are_one_line_with_their_code(
    outcome: BaseException,
    code: int,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first = [ln.strip() for ln in str(outcome).splitlines() if ln.strip()]
    more = " (more with --verbose)" if len(first) > 1 else ""
    got = export(monkeypatch, tmp_path, capsys, outcome=outcome)
    assert got[:3] == (code, "", f"juliabridge export: error: {safe(first[0])}{more}\n")
    if "\x1b" in str(outcome):  # --verbose shows the message as it is
        return
    # --verbose: the whole message, as the driver wrote it
    got = export(monkeypatch, tmp_path, capsys, "--verbose", outcome=outcome)
    assert got[:3] == (code, "", f"juliabridge export: error: {outcome}\n")


def test_export_error_without_a_message_and_with_api_words(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = export(monkeypatch, tmp_path, capsys, outcome=juliabridge.errors.JuliaExportError())[2]
    assert err == "juliabridge export: error: unknown error\n"
    outcome = juliabridge.errors.JuliaExportError("exists; pass overwrite=True to replace it")
    for flags in ((), ("--verbose",)):
        err = export(monkeypatch, tmp_path, capsys, *flags, outcome=outcome)[2]
        assert err == "juliabridge export: error: exists; pass --overwrite to replace it\n"


def test_export_interrupted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got = export(monkeypatch, tmp_path, capsys, outcome=KeyboardInterrupt())
    assert got[:3] == (130, "", "juliabridge export: interrupted\n")


def test_convert_passes_its_options_and_says_what_it_wrote(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = []

    def convert_export(path: str, out: str, *args: object, **kwargs: object) -> Path:
        calls.append((path, out, args, kwargs))
        return Path(out)

    monkeypatch.setattr("juliabridge.reactant_export.convert.convert_export", convert_export)
    for flags, overwrite in (((), False), (("--overwrite",), True)):
        code, out, err = run(["convert", "exp", "--out", "m.bundle", *flags], capsys)
        assert (code, err) == (0, "")
        assert out == "wrote m.bundle (no reference outputs: Reactant's exporter records none)\n"
        assert calls.pop() == ("exp", "m.bundle", (LoadOptions(),), {"overwrite": overwrite})
    # import_lux's overrides, with the same meaning.
    flags = ["--outputs", "0,2", "--state-results", "1:3,4:5", "--positions", "1,2,3"]
    code, out, err = run(
        ["convert", "exp", "--out", "m.bundle", *flags, "--batch-axis", "0"], capsys
    )
    assert (code, err) == (0, "")
    assert calls.pop()[2:] == (
        (
            LoadOptions(
                outputs=[0, 2], state_results={1: 3, 4: 5}, positions=[1, 2, 3], batch_axis=0
            ),
        ),
        {"overwrite": False},
    )
    for bad in (["--outputs", "0,x"], ["--state-results", "1-3"], ["--positions", ""]):
        code, _, err = run(["convert", "exp", "--out", "m.bundle", *bad], capsys)
        assert code == 2 and "expected comma-separated" in err
    assert run(["convert", "exp"], capsys)[0] == 2  # --out is required


def _report(tested: bool) -> object:
    from juliabridge.cli.doctor import Check, Report

    return Report(
        juliabridge="9.8.7",
        python="3.12.1 (CPython)",
        platform="Linux riscv64",
        jax="0.11.0",
        jaxlib="0.11.1",
        jax_tested=tested,
        devices="cpu:cpu, gpu:H100",
        stablehlo={"reads_from": "0.9.0", "future_key": "2"},
        backends=[Check("lax", True, "every transformation"), Check("xla", False, "no jaxlib")],
        julia=[Check("julia", False, "not found")],
        extras=[Check("flax", True, "0.12.8")],
    )


def test_doctor_prints_each_fact_of_its_report(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from juliabridge.stablehlo.artifact import ARTIFACT_TARGET

    for tested, words in ((True, "tested"), (False, "NOT in the tested range")):
        monkeypatch.setattr("juliabridge.cli.doctor.report", lambda t=tested: _report(t))
        code, out, err = run(["doctor"], capsys)
        assert (code, err) == (0, "")
        lines = [" ".join(ln.split()) for ln in out.splitlines()]
        assert lines[:3] == [
            "juliabridge 9.8.7, Python 3.12.1 (CPython), Linux riscv64",
            f"jax 0.11.0 ({words}), jaxlib 0.11.1, devices: cpu:cpu, gpu:H100",
            "StableHLO: this jaxlib reads portable artifacts from StableHLO 0.9.0, future_key 2, "
            f"juliabridge writes artifacts at {ARTIFACT_TARGET}",
        ]
        for row in (
            "│ lax │ yes │ every transformation │",
            "│ xla │ no │ no jaxlib │",
            "│ julia │ no │ not found │",
            "│ flax │ yes │ 0.12.8 │",
        ):
            assert row in lines, (row, lines)
        assert [ln for ln in lines if ln in ("backends", "Julia", "extras")] == [
            "backends",
            "Julia",
            "extras",
        ]
        code, out, _ = run(["doctor", "--json"], capsys)
        facts = json.loads(out)
        assert (
            code == 0 and facts["jax_tested"] is tested and facts["devices"] == "cpu:cpu, gpu:H100"
        )
        assert facts["stablehlo"] == {"reads_from": "0.9.0", "future_key": "2"}
        assert facts["backends"] == [
            {"name": "lax", "ok": True, "detail": "every transformation"},
            {"name": "xla", "ok": False, "detail": "no jaxlib"},
        ]
        assert facts["julia"] == [{"name": "julia", "ok": False, "detail": "not found"}]
        assert facts["extras"] == [{"name": "flax", "ok": True, "detail": "0.12.8"}]


def test_inspect_names_the_bundle_and_sizes_each_array(capsys: pytest.CaptureFixture[str]) -> None:
    """The shipped LeNet: sizes are the shapes' products times 4 bytes (f32), in B below 1 KiB
    and KiB with one decimal above (hand-computed here)."""
    from juliabridge.examples.paths import example_bundle_path

    root = example_bundle_path("lenet")
    code, out, err = run(["inspect", str(root)], capsys)
    lines = [" ".join(re.sub("[│┃]", " ", ln).split()) for ln in out.splitlines()]
    assert (code, err) == (0, "")
    assert lines[0] == f"lenet format 3 mode=test {root}"
    rows = [ln.split() for ln in lines if ln.split()[1:2] in (["input"], ["parameter"])]
    sizes = {row[2]: " ".join(row[-2:]) for row in rows}
    assert sizes == {
        "x": "12.2 KiB",  # 4*1*28*28*4 = 12544 B
        "params.layer_1.weight": "600 B",
        "params.layer_1.bias": "24 B",
        "params.layer_3.weight": "9.4 KiB",  # 9600 B
        "params.layer_3.bias": "64 B",
        "params.layer_6.weight": "128.0 KiB",  # 131072 B
        "params.layer_6.bias": "512 B",
        "params.layer_7.weight": "5.0 KiB",  # 5120 B
        "params.layer_7.bias": "40 B",
    }
    assert "0 output [4, 10] f32" in lines  # the results table: path, shape, dtype
    # the parameters only (not the input x): 147032 B
    assert "parameters and state: 143.6 KiB; module ops: 12 kinds" in lines


@pytest.mark.parametrize(
    ("producer", "line"),
    [
        (
            {"tool": "JuliaBridge.jl", "tool_version": "0.2.0", "made_with_julia": True}
            | {"julia": "1.11.5", "lux": "1.31.4", "reactant": "0.2.280"},
            "producer: JuliaBridge.jl 0.2.0 (Julia 1.11.5, Lux 1.31.4, Reactant 0.2.280)",
        ),
        (
            {"tool": "Reactant.Serialization.export_to_enzymejax", "tool_version": "0.2.280"},
            "producer: Reactant.Serialization.export_to_enzymejax 0.2.280 (Julia, Lux and "
            "Reactant versions not recorded)",
        ),
    ],
)
def test_inspect_says_who_made_the_bundle(
    producer: dict[str, object], line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.bundle_factory import edit_manifest, make_dense_bn

    root = make_dense_bn(tmp_path / "b.bundle")
    edit_manifest(root, lambda m: m["producer"].update(producer))
    code, out, _ = run(["inspect", str(root)], capsys)
    assert code == 0 and line in out.splitlines()


def test_help_carries_the_exit_code_table_and_argument_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(["--help"], capsys)
    docs = documented()
    table = "\n".join(f"  {c:>3}  " for c in docs)  # each code right-aligned, in order
    assert code == 0 and "exit codes (one per error class):\n" in out
    got = [ln[:7] for ln in out.split("exit codes (one per error class):\n", 1)[1].splitlines()]
    assert "\n".join(got[: len(docs)]) == table
    for command in ("verify", "vjp"):
        out = run([command, "--help"], capsys)[1]
        assert re.search(r"\n  path +bundle directory\n", out), out
    assert re.search(
        r"\n  --json +print the report as JSON\n", run(["doctor", "--help"], capsys)[1]
    )
    out = run(["export", "--help"], capsys)[1]
    assert re.search(r"\n  --out( OUT)?, -o OUT +export directory to write\n", out), (
        out
    )  # 3.13: no first OUT


@pytest.mark.parametrize("command", [["verify", "B"], ["demo"]])
@pytest.mark.parametrize("backend", ["auto", "lax", "enzyme", "xla"])
def test_each_documented_backend_is_accepted(
    command: list[str], backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # parsed before --help exits: an unknown backend would be a usage error (2)
    assert run([*command, "--backend", backend, "--help"], capsys)[0] == 0
    assert run([*command, "--backend", "tpu", "--help"], capsys)[0] == 2


def test_vjp_passes_its_options_and_says_what_it_wrote(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = []

    def add_vjp(path: str, **kwargs: object) -> Path:
        calls.append((path, kwargs))
        return Path(path) / "vjp.mlir"

    monkeypatch.setattr("juliabridge.bundle.write.vjp_bundle.add_vjp", add_vjp)
    for flags, kwargs in (
        ((), {"overwrite": False, "verify_checksums": True}),
        (("--overwrite", "--no-verify"), {"overwrite": True, "verify_checksums": False}),
    ):
        code, out, err = run(["vjp", "b.bundle", *flags], capsys)
        assert (code, err) == (0, "")
        assert out == (
            f"wrote {Path('b.bundle') / 'vjp.mlir'}; gradients on backend 'xla' now need no "
            "derivation for this bundle\n"
        )
        path, given = calls.pop()
        assert given.pop("derive") is derive_vjp_text  # the CLI hands the writer the deriver
        assert (path, given) == ("b.bundle", kwargs)


def test_on_a_terminal_plain_lines_are_not_highlighted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """rich would colour the numbers and paths of a plain line on a colour terminal; what a
    command prints is the text as it is."""
    import shutil
    import sys

    from juliabridge.examples.paths import example_bundle_path

    bundle = tmp_path / "lenet.bundle"
    shutil.copytree(example_bundle_path("lenet"), bundle)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code, out, err = run(["upgrade", str(bundle)], capsys)
    assert (code, err, "\x1b" in out) == (0, "", False)
    # Wrapped at the terminal's width, a long path mid-word: compare without the whitespace.
    want = f"{bundle.resolve()}: already format 3 with portable artifacts; nothing to do"
    assert "".join(out.split()) == "".join(want.split())
