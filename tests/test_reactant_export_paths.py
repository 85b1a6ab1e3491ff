"""Export directories as users have them (issues 40 and 39): every path step Reactant's tracer
records (Dict keys, a StatefulLuxLayer's ``:ps``/``:st``/``:st_any``, a Complex's ``:re``/
``:im``), thousands of arguments, `convert` and `inspect` on each, the routing of `import_lux`,
and the reader's hostile edges (path steps, npz metadata and values, FIFOs, a racing writer),
each refused with a typed error that names the thing.

The directories are written by tests/reactant_export_writer.py (Reactant's template); @main is
lowered from a JAX function that returns what Reactant's exporter returns (the outputs, then
every argument not already returned, in argument order: Reactant.jl src/TracedUtils.jl:677-753),
and every value is compared with numpy written from the layer's semantics.
"""

from __future__ import annotations

import os
import shutil
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import juliabridge
from juliabridge.cli.commands import main
from juliabridge.errors import (
    BundleError,
    ManifestError,
    SignatureMismatchError,
    UnsafeBundleError,
)
from juliabridge.lux.options import LoadOptions
from juliabridge.reactant_export.convert import convert_export
from juliabridge.reactant_export.directory import is_export_dir, open_export
from juliabridge.reactant_export.pyscript import declared_arguments, read_script
from juliabridge.support.exitcodes import OK
from tests.pinned_support import lower
from tests.reactant_export_writer import ArgInfo, Export, render_script, write_export

RNG = np.random.default_rng(40)
X = RNG.standard_normal((5, 4)).astype(np.float32)
W = RNG.standard_normal((4, 3)).astype(np.float32)
B = RNG.standard_normal(3).astype(np.float32)


def _write(d: Path, fn: Callable[..., Any], args: list[tuple[list[Any], np.ndarray]]) -> Path:
    values = [v for _, v in args]
    write_export(d, Export("f", lower(fn, *values), [ArgInfo(p, v) for p, v in args]))
    return d


def _inspect(d: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["inspect", str(d)]) == OK
    return capsys.readouterr().out


def _roundtrip(d: Path, tmp: Path, **kw: Any) -> tuple[Any, Any]:
    """import_lux of the export, and of the bundle `convert` writes from it."""
    direct = juliabridge.import_lux(d, **kw)
    out = convert_export(d, tmp / "m.bundle", LoadOptions(**kw))
    return direct, juliabridge.import_lux(out)


# --- Dict keys ------------------------------------------------------------------------------


def test_dict_argument_keeps_its_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # export_to_enzymejax(f, x, Dict("weight" => W, "bias β" => b)): the Dict's keys are the
    # path steps (Tracing.jl append_path(path, k)), printed as Julia prints them.
    def fn(x: Any, w: Any, b: Any) -> Any:
        return x @ w + b, x, w, b

    d = _write(tmp_path / "exp", fn, [([1], X), ([2, "weight"], W), ([2, "bias β"], B)])
    assert open_export(d).labels == ["arg.1", "arg.2.weight", "arg.2.bias β"]
    for model in _roundtrip(d, tmp_path):
        assert list(model.params) == ["weight", "bias β"]
        np.testing.assert_array_equal(np.asarray(model.params["weight"]), W)
        np.testing.assert_allclose(np.asarray(model(X)), X @ W + B, rtol=1e-5, atol=1e-5)
    text = _inspect(d, capsys)
    assert "params['bias β']" in text and "arg.2.bias β" in text
    assert "records no digests" in text and "--no-verify" not in text


@pytest.mark.parametrize(
    ("paths", "match"),
    [
        # A Dict key "1" and a position 1 print alike.
        ([[1], [2, 1], [2, 1]], r"parameter\[1\] is also argument 1; paths must be unique"),
        ([[1], [2, "a"], [2, "a", "b"]], r"path \['a'\] is a leaf but \['a', 'b'\] continues"),
    ],
)
def test_paths_that_are_no_tree_name_the_py(tmp_path: Path, paths: Any, match: str) -> None:
    d = _write(tmp_path, lambda x, a, b: (x * a * b, x, a, b), [(p, B) for p in paths])
    with pytest.raises(ManifestError, match=rf"f\.py: the arguments' paths do not form .*{match}"):
        juliabridge.import_lux(d)


def test_integer_and_named_steps_under_one_parent_refused(tmp_path: Path) -> None:
    # A Dict{Any} with keys 1 and "w" prints both; a tree cannot be a tuple and a dict at once.
    d = _write(
        tmp_path, lambda x, a, b: (x * a * b, x, a, b), [([1], B), ([2, 1], B), ([2, "w"], B)]
    )
    with pytest.raises(ManifestError, match=r"some path steps are integers and some are names"):
        juliabridge.import_lux(d)


# --- StatefulLuxLayer -----------------------------------------------------------------------


def _stateful(x: np.ndarray, w: np.ndarray, b: np.ndarray, r: np.ndarray) -> tuple[Any, Any]:
    """Dense then a running mean of its output (momentum 0.1), as numpy."""
    y = x @ w + b
    return y, 0.9 * r + 0.1 * y.mean(axis=0)


@pytest.mark.parametrize("field", ["st", "st_any"])
@pytest.mark.parametrize("train", [True, False])
def test_stateful_lux_layer_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, train: bool
) -> None:
    # export_to_enzymejax(StatefulLuxLayer(model, ps, st), x): the layer is traced argument 1,
    # its ps and st below :ps and :st (or :st_any), x is argument 2 (Lux
    # ext/ReactantExt/tracing.jl). It returns y only; the new st is in the mutated layer, so
    # it comes back where Reactant traces the arguments after the call, in argument order.
    r = RNG.standard_normal(3).astype(np.float32)

    def fn(w: Any, b: Any, r: Any, x: Any) -> Any:
        y = x @ w + b
        return (y, w, b, 0.9 * r + 0.1 * y.mean(axis=0), x) if train else (y, w, b, r, x)

    paths = [[1, "ps", 1, 1], [1, "ps", 1, 2], [1, field, 1, 1], [2]]
    d = _write(tmp_path / "exp", fn, list(zip(paths, [W, B, r, X])))
    want_y, want_r = _stateful(X, W, B, r)
    for model in _roundtrip(d, tmp_path):
        assert [a.role for a in model.manifest.arguments] == [
            "parameter",
            "parameter",
            "state",
            "input",
        ]
        assert model.manifest.mode == ("train" if train else "test")
        np.testing.assert_array_equal(np.asarray(model.params[0][1]), B)
        y, st = model.apply(model.params, model.state, X)
        np.testing.assert_allclose(np.asarray(y), want_y, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(
            np.asarray(st[0][0]), want_r if train else r, rtol=1e-5, atol=1e-6
        )
    text = _inspect(d, capsys)
    assert "params[0][1]" in text and "arg.1.ps.1.2" in text and f"arg.1.{field}.1.1" in text


def test_inspect_an_export_without_its_npz(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # export_data_as_npz=false: import_lux has no parameter values, inspect still describes it.
    fn = lambda x, w: (x * w, x, w)  # noqa: E731
    args = [ArgInfo([1], X), ArgInfo([2, 1], W[:, 0])]
    write_export(tmp_path, Export("f", lower(fn, X, W[:, 0]), args, export_data_as_npz=False))
    with pytest.raises(BundleError, match="export_data_as_npz=false"):
        juliabridge.import_lux(tmp_path)
    text = _inspect(tmp_path, capsys)
    assert "weights: none (exported with export_data_as_npz=false)" in text
    assert "params[0]" in text and "arg.2.1" in text


# --- Complex numbers, many arguments, bare arrays ---------------------------------------------


def test_complex_number_split_into_re_and_im(tmp_path: Path) -> None:
    # A Complex of traced numbers is traced as its :re and :im (Tracing.jl make_tracer(Complex)).
    re, im = np.float32(1.5), np.float32(-0.25)
    d = _write(
        tmp_path / "exp",
        lambda x, a, b: (x * a + b, x, a, b),
        [([1], X), ([2, 1, "re"], np.asarray(re)), ([2, 1, "im"], np.asarray(im))],
    )
    for model in _roundtrip(d, tmp_path):
        assert float(model.params[0]["re"]) == re and float(model.params[0]["im"]) == im
        np.testing.assert_allclose(np.asarray(model(X)), X * re + im, rtol=1e-6)


@pytest.mark.parametrize("n", [600, 2000])
def test_thousands_of_arguments_load(tmp_path: Path, n: int) -> None:
    # Real Lux models have hundreds of leaves: the .py's token budget scales with them.
    ps = [np.asarray(np.float32(k)) for k in range(n)]

    def fn(x: Any, *ps: Any) -> Any:
        return (x + sum(ps), x, *ps)

    d = _write(tmp_path / "exp", fn, [([1], X)] + [([2, k + 1], p) for k, p in enumerate(ps)])
    model = juliabridge.import_lux(d)
    assert len(model.params) == n and float(model.params[-1]) == n - 1
    if n == 600:  # compiling thousands of arguments is XLA's time, not the reader's
        np.testing.assert_allclose(np.asarray(model(X)), X + np.float32(sum(range(n))), rtol=1e-6)
        bundle = juliabridge.import_lux(convert_export(d, tmp_path / "m.bundle"))
        assert float(bundle.params[-1]) == n - 1 and len(bundle.params) == n


def test_bare_array_parameter_converts(tmp_path: Path) -> None:
    # f(x, w) with w a bare array: leaf 1 of params, so a bundle can name it.
    d = _write(tmp_path / "exp", lambda x, w: (x * w, x, w), [([1], X), ([2], W[:, 0])])
    for model in _roundtrip(d, tmp_path):
        np.testing.assert_array_equal(np.asarray(model.params[0]), W[:, 0])
        np.testing.assert_allclose(np.asarray(model(X)), X * W[:, 0], rtol=1e-6)


def test_batch_axis_on_an_export_that_echoes_its_input(tmp_path: Path) -> None:
    # Reactant's exporter returns every argument, x included; with batch_axis the echo of x
    # keeps x's axis, and the converted bundle serves another batch size.
    d = _write(tmp_path / "exp", lambda x, w: (x @ w, x, w), [([1], X), ([2], W)])
    xs = RNG.standard_normal((7, 4)).astype(np.float32)
    for model in _roundtrip(d, tmp_path, batch_axis=0):
        np.testing.assert_allclose(np.asarray(model(xs)), xs @ W, rtol=1e-5, atol=1e-5)


def test_convert_takes_import_lux_overrides(tmp_path: Path) -> None:
    # outputs= and state_results= mean the same for import_lux and for `juliabridge convert`
    # (--outputs, --state-results): here both results are outputs, st is left unchanged,
    # where the module alone reads result 1 as st's new value.
    r = np.zeros(3, np.float32)

    def fn(x: Any, w: Any, r: Any) -> Any:
        y = x @ w
        return y, y.sum(axis=0), x, w, r

    d = _write(tmp_path / "exp", fn, [([1], X), ([2, 1], W), ([3, 1], r)])
    assert juliabridge.import_lux(d).manifest.mode == "train"
    out = tmp_path / "cli.bundle"
    assert main(["convert", str(d), "--out", str(out), "--outputs", "0,1"]) == OK
    kw: dict[str, Any] = {"outputs": [0, 1], "state_results": {}}
    for model in (*_roundtrip(d, tmp_path, **kw), juliabridge.import_lux(out)):
        assert model.manifest.mode == "test"
        (y, total), st = model.apply(model.params, model.state, X)
        np.testing.assert_allclose(np.asarray(y), X @ W, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(total), (X @ W).sum(axis=0), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(np.asarray(st[0]), r)


# --- routing --------------------------------------------------------------------------------


def test_routing_needs_the_exporters_files_together(tmp_path: Path) -> None:
    d = _write(tmp_path / "exp", lambda x, w: (x * w, x, w), [([1], X), ([2, 1], W[:, 0])])
    (d / "train.py").write_text("print('a training script')\n")
    assert is_export_dir(d) and is_export_dir(d / "f.py") and not is_export_dir(d / "train.py")
    juliabridge.import_lux(d)  # the .py beside f_0.mlir is the export's
    bundle = convert_export(d, tmp_path / "proj" / "m.bundle")
    (bundle / "train.py").write_text("")
    assert not is_export_dir(bundle)
    juliabridge.import_lux(bundle)  # a bundle with a stray .py stays a bundle
    (tmp_path / "proj" / "train.py").write_text("")
    assert not is_export_dir(tmp_path / "proj")
    with pytest.raises(BundleError, match=r"no manifest\.json .* did you mean .*m\.bundle\?"):
        juliabridge.import_lux(tmp_path / "proj")


# --- hostile path steps ---------------------------------------------------------------------


def _line_of(py: Path, text: str) -> int:
    return next(n for n, line in enumerate(py.read_text().splitlines(), 1) if text in line)


@pytest.mark.parametrize(
    ("step", "match"),
    [
        ("2.0", r"path step '0' of arg\.2\.0 is no position Reactant records"),
        ("2.01", r"path step '01' .* is no position"),
        ("2.1234567890", r"path step '1234567890' .* is no position"),
        (
            "2.999999999",
            r"the paths' positions ask for 1000000001 tuple slots \(the largest step is 999999999\)",
        ),
        ("2..1", r"path step '' of arg\.2\.\.1 is empty"),
        ("2.a/b", r"path step 'a/b' .* holds '/'"),
        ("x.1", r"the path arg\.x\.1 does not start with the argument's position"),
        ("2." + ".".join(["1"] * 300), r"the path has 301 steps, more than 256"),
    ],
)
def test_path_steps_refused_naming_the_line(tmp_path: Path, step: str, match: str) -> None:
    d = _write(tmp_path, lambda x, w: (x * w, x, w), [([1], X), ([2, 1], W[:, 0])])
    py = d / "f.py"
    py.write_text(py.read_text().replace("arg.2.1", f"arg.{step}"))
    line = _line_of(py, "arg2: Array of shape")
    with pytest.raises(ManifestError, match=rf"f\.py:{line}: {match}"):
        open_export(d)


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(key=st.text(st.characters(blacklist_categories=("Cs",)), max_size=24))
def test_any_printed_dict_key_is_read_or_refused_typed(tmp_path: Path, key: str) -> None:
    # Reactant prints a Dict key with `string`, whatever it holds, into the docstring and into
    # the f-strings of the asserts. The reader either reads it (names kept, digits as
    # positions) or refuses it with a ManifestError; nothing else, and nothing is run.
    py = tmp_path / "f.py"
    args = [ArgInfo([1], X), ArgInfo([2, key], W)]
    py.write_text(render_script(Export("f", "", args)), encoding="utf-8")
    try:
        script = read_script(py)
    except ManifestError:
        return
    label = script.arguments[1].label
    assert label.startswith("arg.2.") and script.arguments[1].path[0] == 2
    assert all(
        (isinstance(s, int) and s >= 1) or (isinstance(s, str) and s and "/" not in s)
        for s in script.arguments[1].path
    )


def test_token_budget_not_grown_by_comments_nor_past_the_argument_limit(tmp_path: Path) -> None:
    d = _write(tmp_path, lambda x, w: (x * w, x, w), [([1], X), ([2, 1], W[:, 0])])
    py = d / "f.py"
    base = py.read_text()
    fake = "".join(
        f"# arg{k}: Array of shape (2,) and dtype float32. Path: arg.{k}\n" for k in range(1, 2000)
    )
    bomb = "x = [" + "1," * 15_000 + "]\n"
    py.write_text(fake + base.replace("import os\n", "import os\n" + bomb))
    with pytest.raises(
        ManifestError, match=r"f\.py:\d+: holds more than 20240 tokens, .* its 2 arg"
    ):
        open_export(d)
    many = "".join(f"arg{k}: Array of shape (2,)\n" for k in range(1, 16_386))
    py.write_text(f'"""\n{many}"""\n' + base)
    with pytest.raises(ManifestError, match=r"f\.py: lists more than 16384 arguments"):
        open_export(d)


def test_parse_memory_checked_against_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import juliabridge.reactant_export.pyscript as pyscript
    from juliabridge.errors import ResourceLimitError

    d = _write(tmp_path, lambda x, w: (x * w, x, w), [([1], X), ([2, 1], W[:, 0])])
    monkeypatch.setattr(pyscript, "host_memory", lambda: (1000, "a test's limit"))
    with pytest.raises(ResourceLimitError, match=r"f\.py: parsing its \d+ tokens needs about"):
        open_export(d)


def test_token_budget_counts_only_argument_lines_in_order() -> None:
    line = "    arg{}: Array of shape (2,) and dtype float32. Path: arg.{}\n"
    doc = "".join(line.format(k, k) for k in range(1, 4))
    assert declared_arguments(doc) == 3
    # Comments, repeats and lines out of order add nothing.
    assert declared_arguments(doc + "# arg4: Array of shape (2,)\n" + doc + line.format(9, 9)) == 3


# --- hostile npz ----------------------------------------------------------------------------


def _npz_export(tmp: Path) -> Path:
    flags = np.array([True, False, True])
    return _write(tmp, lambda x, m: (x * m, x, m), [([1], X[0, :3]), ([2, 1], flags)])


def test_bool_stored_as_another_byte_refused(tmp_path: Path) -> None:
    # Byte 2 reads as True but computes as False on XLA: refused as bundle weights are.
    d = _npz_export(tmp_path)
    npz = d / "f_0_inputs.npz"
    with zipfile.ZipFile(npz) as z:
        members = {n: z.read(n) for n in z.namelist()}
    raw = bytearray(members["arr_2.npy"])
    assert raw[-3:] == b"\x01\x00\x01"
    raw[-1] = 2
    members["arr_2.npy"] = bytes(raw)
    with zipfile.ZipFile(npz, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)
    with pytest.raises(SignatureMismatchError, match=r"arr_2\.npy\): Bool element 2 is stored as"):
        juliabridge.import_lux(d)


def test_npz_listing_thousands_of_entries_refused_before_parsing(tmp_path: Path) -> None:
    d = _npz_export(tmp_path)
    npz = d / "f_0_inputs.npz"
    with zipfile.ZipFile(npz, "a") as z:
        for k in range(2000):
            z.writestr(f"x{k}", b"")
    with pytest.raises(BundleError, match=r"central directory lists 2002 entries in \d+ bytes"):
        juliabridge.load_reactant_export(d).example_inputs()
    # The same with the end record's sizes forged (the directory itself is short).
    shutil.rmtree(d)
    d = _npz_export(tmp_path)
    raw = bytearray(npz.read_bytes())
    end = raw.rindex(b"PK\x05\x06")
    raw[end + 12 : end + 16] = (0x7FFFFFF0).to_bytes(4, "little")  # central directory size
    npz.write_bytes(bytes(raw))
    with pytest.raises(BundleError, match=r"in 2147483632 bytes, but the export has 2 arguments"):
        juliabridge.load_reactant_export(d).example_inputs()


def test_npy_header_of_nested_unary_minus(tmp_path: Path) -> None:
    # numpy's header parser raises MemoryError on ~7 KB of nested unary minus.
    d = _npz_export(tmp_path)
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + "-" * 7000 + "3,), }"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    npy = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode()
    with zipfile.ZipFile(d / "f_0_inputs.npz", "w") as z:
        z.writestr("arr_1.npy", npy)
        z.writestr("arr_2.npy", b"")
    with pytest.raises(BundleError, match=r"arr_1\.npy\): not a readable \.npy header \(nested"):
        juliabridge.load_reactant_export(d).example_inputs()


# --- special files and a racing writer --------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
@pytest.mark.parametrize("name", ["f.py", "f_0.mlir", "f_0_inputs.npz"])
def test_fifo_refused_without_blocking(tmp_path: Path, name: str) -> None:
    d = _npz_export(tmp_path)
    (d / name).unlink()
    os.mkfifo(d / name)
    caught: list[BaseException] = []

    def read() -> None:
        try:
            juliabridge.import_lux(d)
        except BaseException as e:
            caught.append(e)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(timeout=120)  # a hang guard, not a timing assertion
    if t.is_alive():
        # Release the blocked open (a writer pairs with it), then fail.
        os.close(os.open(d / name, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"opening the FIFO {name} blocked")
    assert len(caught) == 1 and isinstance(caught[0], UnsafeBundleError), caught
    assert f"{name}: is not a regular file" in str(caught[0]) and "a named pipe" in str(caught[0])


def test_convert_writes_the_module_it_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A writer swapping the .mlir for a symlink after the checks: convert copies the text it
    # read and checked through its descriptor, never the file read again by name.
    import juliabridge.reactant_export.luxmodel as luxmodel

    d = _write(tmp_path / "exp", lambda x, w: (x * w, x, w), [([1], X), ([2, 1], W[:, 0])])
    checked = (d / "f_0.mlir").read_text()
    outside = tmp_path / "outside.mlir"
    outside.write_text(checked.replace("multiply", "add"))
    real = luxmodel.open_export

    def racing(*a: Any, **kw: Any) -> Any:
        export = real(*a, **kw)
        (d / "f_0.mlir").unlink()
        os.symlink(outside, d / "f_0.mlir")
        return export

    monkeypatch.setattr(luxmodel, "open_export", racing)
    out = convert_export(d, tmp_path / "m.bundle")
    model = juliabridge.import_lux(out)
    np.testing.assert_allclose(np.asarray(model(X)), X * W[:, 0], rtol=1e-6)
