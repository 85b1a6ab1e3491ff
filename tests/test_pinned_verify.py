"""Pinned: `verify` and `juliabridge verify` judge every result, per element, with the caller's
tolerances (docs/bundle-format.md §3.7: |got - want| <= atol + rtol * |want| elementwise).

The bundles are written by hand with reference outputs chosen to sit just inside or outside the
tolerance, so the verdicts below follow from the numbers, not from the code under test.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import juliabridge
from juliabridge import BundleError
from juliabridge.cli import main as cli_main

from .pinned_support import Arg, Res, Spec, edit, lower, write

X = np.array([1000.0, 1.0], np.float32)
W = np.array([1.0, 2.0], np.float32)
K = np.array([3, -4], np.int32)


def fn(x: Any, w: Any, k: Any) -> Any:
    return x * w, x + w, k * 2


EXACT = {0: X * W, 1: X + W, 2: K * 2}


def bundle(tmp_path: Path, outputs: dict[int, np.ndarray], **kw: Any) -> Path:
    spec = Spec(
        name="v",
        mlir=lower(fn, X, W, K),
        args=[Arg("input", [], X), Arg("parameter", ["w"], W), Arg("parameter", ["k"], K)],
        results=[
            Res([["output", 1]], (2,), "f32"),
            Res([["output", 2]], (2,), "f32"),
            Res([["output", 3]], (2,), "i32"),
        ],
        example_outputs={k: np.asarray(v) for k, v in outputs.items()},
        **kw,
    )
    return write(tmp_path / "v.bundle", spec)


def test_exact_reference_outputs_verify(tmp_path: Path) -> None:
    report = juliabridge.verify(bundle(tmp_path, EXACT))
    assert report.ok
    assert [c.ok for c in report.checks] == [True, True, True]
    assert report.max_abs == 0.0 and report.max_rel == 0.0
    assert (report.rtol, report.atol) == (1e-4, 1e-5)  # the manifest's


@pytest.mark.parametrize("bad", [0, 1, 2])
def test_one_result_out_of_tolerance_fails_the_whole_report(tmp_path: Path, bad: int) -> None:
    outputs = dict(EXACT)
    outputs[bad] = outputs[bad] + np.ones_like(outputs[bad])  # off by one everywhere
    report = juliabridge.verify(bundle(tmp_path, outputs))
    assert not report.ok
    assert [c.ok for c in report.checks] == [k != bad for k in range(3)]
    assert report.max_abs == pytest.approx(1.0)


def test_the_tolerance_is_per_element_not_scaled_by_the_largest_output(tmp_path: Path) -> None:
    # Element 1 is 2 but the reference says 2.02: 1% off, far outside rtol 1e-4 there, although
    # 0.02 is tiny next to the other element (1000).
    outputs = dict(EXACT)
    outputs[0] = np.array([1000.0, 2.02], np.float32)
    report = juliabridge.verify(bundle(tmp_path, outputs))
    assert not report.ok and not report.checks[0].ok
    got, want = np.float64(2.0), np.float64(np.float32(2.02))
    assert report.checks[0].max_abs == pytest.approx(want - got, rel=1e-6)
    assert report.checks[0].max_rel == pytest.approx((want - got) / want, rel=1e-6)


def test_the_callers_tolerances_replace_the_manifests(tmp_path: Path) -> None:
    outputs = dict(EXACT)
    outputs[1] = (X + W) * np.float32(1 + 1e-3)  # 0.1% off
    root = bundle(tmp_path, outputs)
    assert not juliabridge.verify(root).ok  # manifest rtol 1e-4
    loose = juliabridge.verify(root, rtol=1e-2)
    assert loose.ok and loose.rtol == 1e-2 and loose.atol == 1e-5
    assert not juliabridge.verify(root, rtol=1e-4, atol=0.0).ok
    # atol alone: the largest error is about 1.0 (1001 * 1e-3).
    assert juliabridge.verify(root, rtol=0.0, atol=2.0).ok
    assert not juliabridge.verify(root, rtol=0.0, atol=0.5).ok


def test_the_manifests_tolerances_are_used_when_none_are_given(tmp_path: Path) -> None:
    outputs = dict(EXACT)
    outputs[1] = (X + W) * np.float32(1 + 1e-3)
    report = juliabridge.verify(bundle(tmp_path, outputs, rtol=1e-2, atol=0.0))
    assert report.ok and (report.rtol, report.atol) == (1e-2, 0.0)


def _nan_bundle(tmp_path: Path, outputs: dict[int, np.ndarray]) -> Path:
    spec = Spec(
        name="n",
        mlir=lower(fn, XN, W, K),
        args=[Arg("input", [], XN), Arg("parameter", ["w"], W), Arg("parameter", ["k"], K)],
        results=[
            Res([["output", 1]], (2,), "f32"),
            Res([["output", 2]], (2,), "f32"),
            Res([["output", 3]], (2,), "i32"),
        ],
        example_outputs=outputs,
    )
    return write(tmp_path / "n.bundle", spec)


XN = np.array([np.nan, 1.0], np.float32)


def test_nan_where_the_reference_has_nan_verifies(tmp_path: Path) -> None:
    assert juliabridge.verify(_nan_bundle(tmp_path, {0: XN * W, 1: XN + W, 2: K * 2})).ok


@pytest.mark.parametrize("where", ["got", "want"])
def test_nan_on_one_side_only_never_verifies(tmp_path: Path, where: str) -> None:
    if where == "got":  # the module computes NaN, the reference says 0
        outputs = {0: np.array([0.0, 2.0], np.float32), 1: XN + W, 2: K * 2}
    else:  # the reference says NaN where the module computes a number
        outputs = {0: XN * W, 1: np.array([np.nan, np.nan], np.float32), 2: K * 2}
        outputs[0] = XN * W
    report = juliabridge.verify(_nan_bundle(tmp_path, outputs), rtol=1e9, atol=1e9)
    assert not report.ok
    bad = 0 if where == "got" else 1
    assert not report.checks[bad].ok


def test_cli_verify_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = bundle(tmp_path / "g", EXACT)
    assert cli_main(["verify", str(good)]) == 0
    assert "OK" in capsys.readouterr().out
    outputs = dict(EXACT)
    outputs[2] = outputs[2] + 1
    bad = bundle(tmp_path / "b", outputs)
    assert cli_main(["verify", str(bad)]) == 1
    assert "MISMATCH" in capsys.readouterr().out
    assert cli_main(["verify", str(bad), "--rtol", "1", "--atol", "1"]) == 1  # integers: exact


def test_verify_without_examples_is_a_bundle_error(tmp_path: Path) -> None:
    spec = Spec(
        name="e",
        mlir=lower(fn, X, W, K),
        args=[Arg("input", [], X), Arg("parameter", ["w"], W), Arg("parameter", ["k"], K)],
        results=[
            Res([["output", 1]], (2,), "f32"),
            Res([["output", 2]], (2,), "f32"),
            Res([["output", 3]], (2,), "i32"),
        ],
    )
    with pytest.raises(BundleError, match="no examples"):
        juliabridge.verify(write(tmp_path / "e.bundle", spec))


def test_equal_infinities_verify_and_nan_errors_are_not_counted(tmp_path: Path) -> None:
    # x = [inf, 1]: x * w = [inf, 2] and x + w = [inf, 3]; Julia's isapprox accepts equal
    # infinities (x == y), and so must verify, while inf against a finite value never passes.
    xi = np.array([np.inf, 1.0], np.float32)
    spec = Spec(
        name="i",
        mlir=lower(fn, xi, W, K),
        args=[Arg("input", [], xi), Arg("parameter", ["w"], W), Arg("parameter", ["k"], K)],
        results=[
            Res([["output", 1]], (2,), "f32"),
            Res([["output", 2]], (2,), "f32"),
            Res([["output", 3]], (2,), "i32"),
        ],
        example_outputs={0: xi * W, 1: np.array([1e30, 3.0], np.float32), 2: K * 2},
    )
    report = juliabridge.verify(write(tmp_path / "i.bundle", spec), rtol=1e9, atol=1e9)
    assert [c.ok for c in report.checks] == [True, False, True]
    assert report.checks[0].max_abs == 0.0 and report.checks[0].max_rel == 0.0
    assert report.checks[1].max_abs == np.inf


def test_nan_matching_nan_counts_as_no_error(tmp_path: Path) -> None:
    report = juliabridge.verify(_nan_bundle(tmp_path, {0: XN * W, 1: XN + W, 2: K * 2}))
    assert report.ok and report.max_abs == 0.0 and report.max_rel == 0.0


def test_integer_results_report_the_largest_difference(tmp_path: Path) -> None:
    # K * 2 = [6, -8]; the reference [6, -5] is 3 off in one element. Integers compare exactly
    # whatever the tolerances, and the error is computed in int64 (no wrap-around).
    outputs = dict(EXACT)
    outputs[2] = np.array([6, -5], np.int32)
    report = juliabridge.verify(bundle(tmp_path, outputs), rtol=10.0, atol=10.0)
    assert [c.ok for c in report.checks] == [True, True, False]
    assert (report.checks[2].max_abs, report.checks[2].max_rel) == (3.0, 3.0)
    assert report.max_abs == 3.0 and report.max_rel == 3.0


def test_relative_error_divides_by_the_reference(tmp_path: Path) -> None:
    # x + w = [1001, 3]; reference [1001, 4]: |3 - 4| / 4 = 0.25 (not / 3, not / 1001);
    # x * w = [1000, 2] against [1000, 0]: /0 uses the smallest normal double, so the relative
    # error is huge but finite.
    outputs = dict(EXACT)
    outputs[1] = np.array([1001.0, 4.0], np.float32)
    outputs[0] = np.array([1000.0, 0.0], np.float32)
    report = juliabridge.verify(bundle(tmp_path, outputs), rtol=0.3, atol=0.0)
    assert report.checks[1].max_abs == 1.0
    assert report.checks[1].max_rel == pytest.approx(0.25)
    assert report.checks[1].ok  # 1 <= 0 + 0.3 * 4
    assert not report.checks[0].ok
    assert report.checks[0].max_rel == pytest.approx(2.0 / np.finfo(np.float64).tiny)
    assert np.isfinite(report.max_rel) and report.max_abs == 2.0


def test_a_tolerance_exactly_at_the_error_passes(tmp_path: Path) -> None:
    # |got - want| <= atol + rtol * |want| with equality: 2 vs 2.5 has error 0.5 exactly.
    outputs = dict(EXACT)
    outputs[0] = np.array([1000.0, 2.5], np.float32)
    root = bundle(tmp_path, outputs)
    assert juliabridge.verify(root, rtol=0.0, atol=0.5).ok
    assert juliabridge.verify(root, rtol=0.2, atol=0.0).ok  # 0.2 * 2.5 = 0.5
    assert not juliabridge.verify(root, rtol=0.0, atol=0.49).ok


def test_the_report_names_the_bundle_backend_and_results(tmp_path: Path) -> None:
    root = bundle(tmp_path, EXACT)
    report = juliabridge.verify(root, backend="xla")
    assert report.backend == "xla" and report.bundle == str(root)
    assert [c.name for c in report.checks] == [
        juliabridge.import_lux(root).manifest.results[k].label for k in range(3)
    ]
    assert juliabridge.verify(root, backend="lax").backend == "lax"


def test_verify_checks_checksums_unless_told_not_to(tmp_path: Path) -> None:
    root = bundle(tmp_path, EXACT)
    with open(root / "model.mlir", "a") as f:
        f.write("\n// edited\n")
    with pytest.raises(juliabridge.JuliaBridgeError, match="sha256"):
        juliabridge.verify(root)
    assert juliabridge.verify(root, verify_checksums=False).ok


def test_an_example_input_missing_is_a_bundle_error(tmp_path: Path) -> None:
    root = bundle(tmp_path, EXACT)

    def drop_inputs(m: dict[str, Any]) -> None:
        m["examples"]["inputs"] = []

    edit(root, drop_inputs)
    with pytest.raises(BundleError, match="no value for input"):
        juliabridge.verify(root)


def test_a_failing_run_is_an_execution_error_naming_the_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The backends type their own failures; an untyped one (a backend bug) must still reach
    # the user as an ExecutionError naming the bundle and the first line of the cause.
    root = bundle(tmp_path, EXACT)
    model = juliabridge.import_lux(root)

    class Boom:
        backend_name = "boom"

        def __call__(self, *args: Any) -> Any:
            raise RuntimeError("kaput\nsecond line")

    model.fn = Boom()  # type: ignore[assignment]
    # juliabridge.verify is the function; its module is where import_lux is looked up.
    monkeypatch.setattr(
        sys.modules[juliabridge.verify.__module__], "import_lux", lambda *a, **k: model
    )
    with pytest.raises(juliabridge.ExecutionError) as e:
        juliabridge.verify(root)
    assert str(root) in str(e.value) and "(RuntimeError: kaput)" in str(e.value)
    assert "second line" not in str(e.value)
    assert isinstance(e.value.__cause__, RuntimeError)


def test_64_bit_integer_errors_are_exact(tmp_path: Path) -> None:
    # 2**53 + 1 against 2**53: exactly 1 apart, which a float64 difference would round to 0.
    import jax

    big = np.array([2**53 + 1, -(2**62)], np.int64)
    with jax.enable_x64(True):
        spec = Spec(
            name="b",
            mlir=lower(lambda k: k + 0, big),
            args=[Arg("parameter", ["k"], big)],
            results=[Res([["output"]], (2,), "i64")],
            example_outputs={0: np.array([2**53, -(2**62)], np.int64)},
        )
        report = juliabridge.verify(write(tmp_path / "b.bundle", spec), backend="xla")
    assert not report.ok
    assert (report.checks[0].max_abs, report.checks[0].max_rel) == (1.0, 1.0)


@pytest.mark.parametrize("dtype", [np.int32, np.float32])
def test_empty_results_verify(tmp_path: Path, dtype: Any) -> None:
    # A zero-size result has no element out of tolerance: it verifies, with zero errors.
    empty = np.zeros((0,), dtype)
    spec = Spec(
        name="z",
        mlir=lower(lambda a: a * 2, empty),
        args=[Arg("parameter", ["a"], empty)],
        results=[Res([["output"]], (0,), "i32" if dtype == np.int32 else "f32")],
        example_outputs={0: empty},
    )
    report = juliabridge.verify(write(tmp_path / "z.bundle", spec))
    assert report.ok and report.max_abs == 0.0 and report.max_rel == 0.0


def test_complex_results_compare_both_parts(tmp_path: Path) -> None:
    # |got - want| is the complex modulus: a reference off in the imaginary part only fails.
    z = np.array([1 + 2j, -3 + 0.5j], np.complex64)
    spec = Spec(
        name="c",
        mlir=lower(lambda z: z * 2, z),
        args=[Arg("parameter", ["z"], z)],
        results=[Res([["output"]], (2,), "complex<f32>")],
        example_outputs={0: z * 2},
    )
    assert juliabridge.verify(write(tmp_path / "ok.bundle", spec)).ok
    spec.example_outputs = {0: (z * 2 + np.complex64(3j)).astype(np.complex64)}
    report = juliabridge.verify(write(tmp_path / "im.bundle", spec))
    assert not report.ok
    assert report.max_abs == pytest.approx(3.0)
    assert report.max_rel == pytest.approx(3.0 / abs(2 * z[1] + 3j), rel=1e-6)
