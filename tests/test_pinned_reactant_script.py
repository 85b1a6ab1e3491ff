"""The export's .py read as data (reactant_export/pyscript.py): what it records, and each way a
.py that is not Reactant's template is refused, with the line that differs.

Independent of the fixtures in ../shared: the directories are written by
tests/reactant_export_writer.py (Reactant's template, EnzymeJAX.jl:230-422) and edited by hand,
and the expected values are written out here. Nothing in a .py is ever run: every hostile
variant carries a statement that would leave a marker file if it were.
"""

from __future__ import annotations

import os
import tokenize
from io import StringIO
from pathlib import Path

import numpy as np
import pytest

from juliabridge.errors import ManifestError, UnsafeBundleError
from juliabridge.reactant_export.pyscript import (
    ExportScript,
    Mesh,
    Placement,
    ScriptArgument,
    read_script,
    read_text,
)
from tests.reactant_export_writer import ArgInfo, Export, write_export


def _write(tmp: Path, *args: ArgInfo, npz: bool = True, name: str = "f") -> Path:
    """An export of `args` (the module text is never parsed by read_script)."""
    return write_export(tmp, Export(name, "module {}\n", list(args), npz))


def _plain(tmp: Path) -> Path:
    return _write(
        tmp,
        ArgInfo([2], np.zeros((2, 3), np.float32)),
        ArgInfo([3, 1, 2], np.zeros((4,), np.int64)),
    )


def _sharded(tmp: Path) -> Path:
    # Julia order: mesh axes (:a, :b) of sizes (2, 1); arg1's Julia dims (3, 2) as (:a, nothing)
    # and arg2 NoSharding on the same mesh; arg3 not placed at all.
    return _write(
        tmp,
        ArgInfo([1], np.zeros((2, 3), np.float32), sharding=("m", (2, 1), ("a", "b"), ("a", None))),
        ArgInfo(
            [2],
            np.zeros((5,), np.float64),
            sharding=("m", (2, 1), ("a", "b"), ()),
            kind="NoSharding",
        ),
        ArgInfo([3], np.zeros((), np.bool_)),
    )


def _line_of(py: Path, text: str) -> int:
    """1-based number of the first line of `py` holding `text`."""
    return next(i for i, line in enumerate(py.read_text().splitlines(), 1) if text in line)


def _edit(py: Path, old: str, new: str) -> Path:
    text = py.read_text()
    assert old in text, old
    py.write_text(text.replace(old, new, 1))
    return py


def _refused(py: Path, match: str, error: type[Exception] = ManifestError) -> str:
    with pytest.raises(error, match=match) as info:
        read_script(py)
    return str(info.value)


# --- what the template records --------------------------------------------------------------


def test_plain_export_values(tmp_path: Path) -> None:
    py = _plain(tmp_path)
    s = read_script(py)
    assert s == ExportScript(
        path=py,
        function_name="f",
        mlir_file="f_0.mlir",
        npz_file="f_0_inputs.npz",
        arguments=(
            ScriptArgument("arg1", (2, 3), "float32", (2,), _line_of(py, "arg1: Array")),
            ScriptArgument("arg2", (4,), "int64", (3, 1, 2), _line_of(py, "arg2: Array")),
        ),
        meshes={},
        placements={0: Placement("NoSharding"), 1: Placement("NoSharding")},
    )
    assert [a.dtype for a in s.arguments] == ["f32", "i64"]
    assert [a.label for a in s.arguments] == ["arg.2", "arg.3.1.2"]


def test_sharded_export_values(tmp_path: Path) -> None:
    py = _sharded(tmp_path)
    assert "jax.make_mesh((1, 2), ('b', 'a'))" in py.read_text()
    s = read_script(py)
    assert s.meshes == {"mesh0": Mesh("mesh0", (1, 2), ("b", "a"))}
    assert s.placements == {
        0: Placement("NamedSharding", "mesh0", (None, "a")),
        1: Placement("NoSharding"),
    }
    assert [(a.shape, a.numpy_dtype, a.dtype) for a in s.arguments] == [
        ((2, 3), "float32", "f32"),
        ((5,), "float64", "f64"),
        ((), "bool", "i1"),
    ]


def test_two_meshes_each_defined_once(tmp_path: Path) -> None:
    py = _write(
        tmp_path,
        ArgInfo([1], np.zeros((4,), np.float32), sharding=("m", (4,), ("x",), ("x",))),
        ArgInfo([2], np.zeros((2, 2), np.float32), sharding=("n", (2, 1), ("p", "q"), ("q", "p"))),
        ArgInfo([3], np.zeros((4,), np.float32), sharding=("m", (4,), ("x",), (None,))),
    )
    s = read_script(py)
    assert s.meshes == {
        "mesh0": Mesh("mesh0", (4,), ("x",)),
        "mesh1": Mesh("mesh1", (1, 2), ("q", "p")),
    }
    assert s.placements == {
        0: Placement("NamedSharding", "mesh0", ("x",)),
        1: Placement("NamedSharding", "mesh1", ("p", "q")),
        2: Placement("NamedSharding", "mesh0", (None,)),
    }


def test_random_inputs_variant_has_no_npz(tmp_path: Path) -> None:
    # export_data_as_npz=false: load_inputs draws random arrays of each (Julia-printed) shape.
    py = _write(
        tmp_path,
        ArgInfo([1], np.zeros((7,), np.float32)),
        ArgInfo([2], np.zeros((), np.float64)),
        ArgInfo([3], np.zeros((2, 1, 3), np.uint8)),
        npz=False,
    )
    text = py.read_text()
    assert "(prng_key, (7,), jnp.dtype('float32'))" in text and "(prng_key, (), " in text
    s = read_script(py)
    assert s.npz_file is None and s.mlir_file == "f_0.mlir"
    assert [a.shape for a in s.arguments] == [(7,), (), (2, 1, 3)]
    assert [a.dtype for a in s.arguments] == ["f32", "f64", "ui8"]


def test_name_with_underscores_and_digits(tmp_path: Path) -> None:
    py = _write(tmp_path, ArgInfo([1], np.zeros((1,), np.int32)), name="my_model_2!")
    s = read_script(py)
    assert (s.function_name, s.mlir_file) == ("my_model_2_", "my_model_2__0.mlir")


def test_mesh_of_exactly_the_device_limit(tmp_path: Path) -> None:
    # 2**31 devices is the most a mesh may name; one more axis doubling it is refused below.
    py = _write(
        tmp_path,
        ArgInfo([1], np.zeros((4,), np.float32), sharding=("m", (1 << 31,), ("x",), ("x",))),
    )
    assert read_script(py).meshes["mesh0"].axis_sizes == (1 << 31,)


# --- hostile .py: refused with the line, nothing run ----------------------------------------


def test_statement_inserted_is_refused_with_its_line(tmp_path: Path) -> None:
    py = _plain(tmp_path)
    marker = tmp_path / "pwned"
    at = _line_of(py, "_script_dir = ")
    _edit(
        py,
        "_script_dir = os.path.dirname(os.path.abspath(__file__))\n",
        f"_script_dir = os.path.dirname(os.path.abspath(__file__))\nopen({str(marker)!r}, 'w')\n",
    )
    msg = _refused(py, rf"f\.py:{at + 1}: unexpected statement \"open\(")
    assert "never running it" in msg
    assert not marker.exists()


def test_statement_missing_is_refused_after_the_line_before(tmp_path: Path) -> None:
    py = _plain(tmp_path)
    before = _line_of(py, "inputs = [npz_data")
    _edit(py, "    return tuple(inputs)\n", "")
    _refused(py, rf"f\.py:{before}: missing 'return tuple\(inputs\)' after this line")


def test_block_emptied_is_refused_after_its_header(tmp_path: Path) -> None:
    # Every statement of __main__ but a docstring-like pass: the first missing one is named.
    py = _plain(tmp_path)
    text = py.read_text()
    head = text.index('if __name__ == "__main__":')
    py.write_text(text[:head] + 'if __name__ == "__main__":\n    pass\n')
    _refused(py, rf"f\.py:{_line_of(py, '    pass')}: unexpected statement 'pass'")


def test_last_statement_missing_at_the_end(tmp_path: Path) -> None:
    py = _plain(tmp_path)
    _edit(py, '    print("Result:", result)\n', "")
    _refused(py, rf"f\.py:{_line_of(py, 'result = run_f')}: missing \"print\('Result:'")


def test_else_branch_refused(tmp_path: Path) -> None:
    py = _plain(tmp_path)
    marker = tmp_path / "pwned"
    py.write_text(py.read_text() + f"else:\n    open({str(marker)!r}, 'w')\n")
    _refused(py, rf"f\.py:{_line_of(py, 'pwned')}: unexpected else branch")
    assert not marker.exists()


@pytest.mark.parametrize(
    ("old", "new", "shown"),
    [
        ("@jax.jit\n", "@jax.pmap\n", "'@jax.pmap'"),
        ('if __name__ == "__main__":', "if True:", "'if True:'"),
        ('"f_0.mlir"), "r") as f:', '"f_0.mlir"), "a") as f:', r'"with open\('),
        ("def run_f(arg1, arg2):", "def run_f(arg1, arg2=1):", "'@jax.jit'"),
    ],
)
def test_changed_block_header_refused(tmp_path: Path, old: str, new: str, shown: str) -> None:
    py = _edit(_plain(tmp_path), old, new)
    header = new.splitlines()[0] if not new.startswith("@") else "def run_f"
    _refused(py, rf"f\.py:{_line_of(py, header)}: unexpected {shown}")


def test_block_replaced_by_other_statement(tmp_path: Path) -> None:
    py = _plain(tmp_path)
    text = py.read_text()
    start, end = text.index("def load_inputs():"), text.index("@jax.jit")
    py.write_text(text[:start] + "load_inputs = print\n\n" + text[end:])
    _refused(py, rf"f\.py:{_line_of(py, 'load_inputs = print')}: unexpected statement 'load_inputs")


def test_changed_call_inside_the_function_refused(tmp_path: Path) -> None:
    py = _edit(_plain(tmp_path), "    return hlo_call(", "    return print(")
    _refused(py, rf"f\.py:{_line_of(py, 'return print(')}: unexpected statement 'return print")


@pytest.mark.parametrize("text", ["", "import os\n"])
def test_no_module_docstring_refused(tmp_path: Path, text: str) -> None:
    py = tmp_path / "f.py"
    py.write_text(text)
    _refused(py, r"f\.py:1: expected the template's docstring first")


def test_module_docstring_removed_refused_at_first_statement(tmp_path: Path) -> None:
    py = _plain(tmp_path)
    text = py.read_text()
    py.write_text("\n\n" + text[text.index('"""', 3) + 3 :])
    _refused(py, rf"f\.py:{_line_of(py, 'from enzyme_ad')}: expected the template's docstring")


@pytest.mark.parametrize(("copies", "found"), [(0, 0), (2, 2)])
def test_run_function_count(tmp_path: Path, copies: int, found: int) -> None:
    py = _plain(tmp_path)
    text = py.read_text()
    start, end = text.index("@jax.jit"), text.index("if __name__")
    py.write_text(text[:start] + text[start:end] * copies + text[end:])
    msg = _refused(py, rf"f\.py: expected one run_<name> function, found {found}")
    assert msg.startswith(f"{py}: expected")


def test_run_without_docstring_refused(tmp_path: Path) -> None:
    py = _plain(tmp_path)
    text = py.read_text()
    start = text.index('    """\n    Call the exported')
    end = text.index('"""\n', start + 8) + 4
    py.write_text(text[:start] + text[end:])
    _refused(
        py, rf"f\.py:{_line_of(py, 'def run_f')}: run_f has no docstring listing its arguments"
    )


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("and dtype float32. Path: arg.2", "and dtype float32 Path: arg.2"),
        ("Array of shape (2, 3)", "Array of shape [2, 3]"),
        ("Path: arg.2\n", "Path: arg\n"),
        ("Path: arg.2\n", "Path: arg.\n"),
        ("arg1: Array", "argument1: Array"),
    ],
)
def test_argument_line_not_the_template(tmp_path: Path, old: str, new: str) -> None:
    py = _edit(_plain(tmp_path), old, new)
    line = _line_of(py, "Array of shape")
    _refused(py, rf"f\.py:{line}: argument line '.*' is not the template's")


def test_complex32_named(tmp_path: Path) -> None:
    py = _edit(_plain(tmp_path), "dtype int64. Path", "dtype complex32. Path")
    msg = _refused(py, rf"f\.py:{_line_of(py, 'complex32')}: arg2 has dtype complex32")
    assert "supported: bool, int8, int16" in msg and "complex128" in msg


def test_argument_names_must_be_arg1_to_argN(tmp_path: Path) -> None:
    py = _edit(_plain(tmp_path), "def run_f(arg1, arg2):", "def run_f(arg2, arg1):")
    _refused(
        py,
        rf"f\.py:{_line_of(py, 'def run_f')}: run_f takes \(arg2, arg1\) but its docstring lists "
        r"\(arg1, arg2\)",
    )
    py = _plain(tmp_path / "b")
    py.write_text(py.read_text().replace("arg1", "arg0").replace("arg2", "arg1"))
    _refused(py, r"run_f takes \(arg0, arg1\) but its docstring lists \(arg0, arg1\)")


def test_no_with_open_refused(tmp_path: Path) -> None:
    py = _plain(tmp_path)
    text = py.read_text()
    start = text.index("with open(")
    end = text.index("f.read()\n") + len("f.read()\n")
    py.write_text(text[:start] + text[end:])
    msg = _refused(py, r"f\.py: no `with open\(\.\.\.\)` of the \.mlir")
    assert msg.startswith(f"{py}: no")


def test_with_open_of_no_string_refused_with_its_line(tmp_path: Path) -> None:
    py = _edit(_plain(tmp_path), '"f_0.mlir"', "name")
    _refused(py, rf"f\.py:{_line_of(py, 'with open')}: no `with open")


def test_npz_name_and_mlir_name_are_the_second_join_argument(tmp_path: Path) -> None:
    py = _edit(_plain(tmp_path), '"f_0_inputs.npz"', '"g_1_inputs.npz"')
    py = _edit(py, '"f_0.mlir"', '"g_1.mlir"')
    s = read_script(py)
    assert (s.mlir_file, s.npz_file) == ("g_1.mlir", "g_1_inputs.npz")


# --- meshes and PartitionSpecs ----------------------------------------------------------------


def _mesh_line(py: Path) -> str:
    return next(line.strip() for line in py.read_text().splitlines() if "make_mesh" in line)


@pytest.mark.parametrize(
    ("new", "match"),
    [
        ("mesh0 = jax.make_mesh((1.0, 2), ('b', 'a'))", "a mesh expects int constants"),
        ("mesh0 = jax.make_mesh((1, 2), ('b', 2))", "a mesh expects str constants"),
        ("mesh0 = jax.make_mesh((True, 2), ('b', 'a'))", "a mesh expects int constants"),
        ("mesh0 = jax.make_mesh((0, 2), ('b', 'a'))", "mesh0 has axis size 0; sizes are positive"),
        ("mesh0 = jax.make_mesh((1, -2), ('b', 'a'))", "a mesh expects int constants"),
        (
            "mesh0 = jax.make_mesh((2147483649, 1), ('b', 'a'))",
            "mesh0 has axis size 2147483649",
        ),
        (
            "mesh0 = jax.make_mesh((65536, 65536), ('b', 'a'))",
            "mesh0 names 4294967296 devices, more than any machine has",
        ),
        (  # a 5,000-digit hex size: the message itself once raised (str of a huge int)
            "mesh0 = jax.make_mesh((0x" + "f" * 5000 + ", 1), ('b', 'a'))",
            r"mesh0 has axis size 0x" + "f" * 16 + r"\.\.\. \(an integer of 20000 bits\)",
        ),
        (  # more axes than a numpy array has dims: jax.sharding.Mesh's reshape once raised
            "mesh0 = jax.make_mesh(("
            + "1, " * 64
            + "2), ("
            + ", ".join(f"'x{i}'" for i in range(63))
            + ", 'a', 'b'))",
            "mesh0 has 65 axes; a mesh's device grid is a numpy array, whose rank is at most 32",
        ),
        (
            "mesh0 = jax.make_mesh((1, 2), ('b',))",
            r"mesh0 has sizes \[1, 2\] for axes \['b'\]; a mesh needs one size per axis",
        ),
        (
            "mesh0 = jax.make_mesh((1, 2), ('a', 'a'))",
            r"mesh0 has sizes \[1, 2\] for axes \['a', 'a'\]; .* unique axis names",
        ),
    ],
)
def test_meshes_jax_cannot_build(tmp_path: Path, new: str, match: str) -> None:
    py = _sharded(tmp_path)
    line = _line_of(py, "make_mesh")
    _edit(py, _mesh_line(py), new)
    _refused(py, rf"f\.py:{line}: {match}")


def test_one_axis_mesh_as_parenthesised_scalars(tmp_path: Path) -> None:
    # Reactant prints a one-axis mesh as "(4)" and "('x')": scalars in parentheses.
    py = _write(
        tmp_path, ArgInfo([1], np.zeros((4,), np.float32), sharding=("m", (4,), ("x",), ("x",)))
    )
    assert "jax.make_mesh((4), ('x'))" in py.read_text()
    assert read_script(py).meshes == {"mesh0": Mesh("mesh0", (4,), ("x",))}


_PUT = "arg1 = jax.device_put(arg1, jax.sharding.NamedSharding(mesh0, P(None, 'a')))"


@pytest.mark.parametrize(
    ("new", "match"),
    [
        (
            "arg4 = jax.device_put(arg4, jax.sharding.NamedSharding(mesh0, P(None, 'a')))",
            "arg4 is not an argument of the function",
        ),
        (
            "arg0 = jax.device_put(arg0, jax.sharding.NamedSharding(mesh0, P(None, 'a')))",
            "arg0 is not an argument of the function",
        ),
        (
            "arg1 = jax.device_put(arg1, jax.sharding.NamedSharding(mesh0, P(None, 'a')), 1)",
            "arg1 is not an argument of the function",
        ),
        (
            "arg1 = jax.device_put(arg1, jax.sharding.PositionalSharding(mesh0, P(None, 'a')))",
            r"expected jax\.sharding\.NamedSharding\(meshN, P\(\.\.\.\)\)",
        ),
        (
            "arg1 = jax.device_put(arg1, jax.sharding.NamedSharding(mesh0))",
            r"expected jax\.sharding\.NamedSharding",
        ),
        (
            "arg1 = jax.device_put(arg1, jax.sharding.NamedSharding(m[0], P(None, 'a')))",
            r"expected jax\.sharding\.NamedSharding",
        ),
        (
            "arg1 = jax.device_put(arg1, jax.sharding.NamedSharding(mesh0, None))",
            r"expected jax\.sharding\.NamedSharding",
        ),
        (
            "arg1 = jax.device_put(arg1, jax.sharding.NamedSharding(mesh1, P(None, 'a')))",
            "arg1 is placed on mesh1, which no jax.make_mesh line above defines",
        ),
        (
            "arg1 = jax.device_put(arg1, jax.sharding.NamedSharding(mesh0, P(None, 'c')))",
            r"arg1's PartitionSpec \(None, 'c'\) must name each axis of mesh0 \('b', 'a'\) at most once",
        ),
        (
            "arg1 = jax.device_put(arg1, jax.sharding.NamedSharding(mesh0, P('a', 'a')))",
            r"arg1's PartitionSpec \('a', 'a'\) must name each axis",
        ),
    ],
)
def test_placements_not_the_template(tmp_path: Path, new: str, match: str) -> None:
    py = _sharded(tmp_path)
    line = _line_of(py, _PUT)
    _edit(py, _PUT, new)
    _refused(py, rf"f\.py:{line}: {match}")


def test_spec_with_bare_axis_names_names_the_cause(tmp_path: Path) -> None:
    # Reactant prints a dim split over several mesh axes as bare names (EnzymeJAX.jl:303-310).
    py = _sharded(tmp_path)
    line = _line_of(py, _PUT)
    _edit(py, "P(None, 'a')", "P(None, a, b)")
    msg = _refused(
        py, rf"f\.py:{line}: arg1's PartitionSpec has 'a', not a quoted axis name or None"
    )
    assert "EnzymeJAX.jl:303-310" in msg and "re-export with one mesh axis per dimension" in msg


def test_placement_before_its_mesh_refused(tmp_path: Path) -> None:
    py = _sharded(tmp_path)
    text = py.read_text()
    mesh = _mesh_line(py)
    py.write_text(text.replace("    " + mesh + "\n", "").replace(_PUT, _PUT + "\n    " + mesh))
    _refused(py, rf"f\.py:{_line_of(py, _PUT)}: arg1 is placed on mesh0, which no jax.make_mesh")


def test_conversions_of_the_unsharded_form(tmp_path: Path) -> None:
    # Without meshes the template converts each argument with jnp.asarray. A .py converting
    # only some is the sharded form's shape (only placed arguments appear): read as such.
    # Converting a name that is no argument is not the template.
    py = _plain(tmp_path)
    line = _line_of(py, "arg2 = jnp.asarray(arg2)")
    _edit(py, "    arg2 = jnp.asarray(arg2)\n", "")
    assert read_script(py).placements == {0: Placement("NoSharding")}
    py = _edit(_plain(tmp_path / "b"), "arg2 = jnp.asarray(arg2)", "arg3 = jnp.asarray(arg3)")
    _refused(py, rf"f\.py:{line}: unexpected statement 'arg3 = jnp.asarray\(arg3\)'")


def test_asarray_of_an_argument_on_a_mesh_form(tmp_path: Path) -> None:
    # In the sharded form only the placed arguments appear; an extra jnp.asarray line for an
    # argument the template does not place is refused.
    py = _sharded(tmp_path)
    put = _line_of(py, _PUT)
    _edit(py, _PUT, _PUT + "\n    arg3 = jnp.asarray(arg3)")
    _refused(py, rf"f\.py:{put + 1}: unexpected statement 'arg3 = jnp.asarray")


# --- size bounds, read before parsing -------------------------------------------------------


def _tokens(text: str) -> int:
    return sum(1 for _ in tokenize.generate_tokens(StringIO(text).readline))


def _with_list(base: str, tokens: int) -> str:
    """`base` with a list literal after its imports that adds exactly `tokens` tokens."""
    head = base.index("import os\n") + len("import os\n")
    n, odd = divmod(tokens - 4, 2)  # "x = [1, ..., 1]" is 2n + 4 tokens, a trailing comma one more
    items = "1," * n if odd else "1," * (n - 1) + "1"
    return base[:head] + f"x = [{items}]\n" + base[head:]


def test_token_budget_boundary(tmp_path: Path) -> None:
    # 20,000 tokens plus 120 per argument line: a file of budget + 1 tokens (the counter's
    # last index is the budget) is parsed, and refused as not the template; one more token is
    # refused before parsing.
    py = _plain(tmp_path)
    budget = 20_000 + 120 * 2
    base = py.read_text()
    for total, match in ((budget + 1, "unexpected statement 'x = "), (budget + 2, "holds more")):
        text = _with_list(base, total - _tokens(base))
        assert _tokens(text) == total
        py.write_text(text)
        _refused(py, rf"f\.py:\d+: {match}")
    _refused(py, rf"f\.py:\d+: holds more than {budget} tokens, far more than the template")


def test_unparsable_text_names_its_line(tmp_path: Path) -> None:
    py = _plain(tmp_path)
    line = _line_of(py, "def load_inputs():")
    _edit(py, "def load_inputs():", "def load_inputs(:")
    _refused(py, rf"f\.py:{line}: does not parse as Python \(")


def test_null_byte_refused(tmp_path: Path) -> None:
    # CPython 3.11 raises ValueError for it, 3.12 and later SyntaxError: typed either way.
    py = _edit(_plain(tmp_path), "import os\n", "import os\0\n")
    _refused(py, r"f\.py(:\d+)?: (cannot be parsed \(ValueError\)|does not parse as Python)")


def test_parser_memory_error_is_typed(tmp_path: Path) -> None:
    # 9,000 unary minus signs: within the token budget, but CPython's parser gives up.
    py = _edit(_plain(tmp_path), "import os\n", "import os\nx = " + "-" * 9000 + "1\n")
    _refused(py, r"f\.py: cannot be parsed \(MemoryError\)")


def test_expression_nested_too_deeply_to_compare(tmp_path: Path) -> None:
    # Parses, but comparing it would recurse past Python's limit.
    py = _edit(_plain(tmp_path), "import os\n", "import os\nx = y" + ".a" * 1500 + "\n")
    _refused(py, r"f\.py: holds an expression nested too deeply to be the template")


def test_read_text_bounds(tmp_path: Path) -> None:
    p = tmp_path / "a.py"
    p.write_bytes(b"x" * 10)
    assert read_text(p, limit=10) == "x" * 10
    with pytest.raises(ManifestError, match=r"a\.py: 10 bytes, more than the 9 allowed"):
        read_text(p, limit=9)
    # A file whose size stat does not tell (procfs reports 0): bounded by what is read.
    with pytest.raises(ManifestError, match=r"status: more than the 8 bytes allowed"):
        read_text(Path("/proc/self/status"), limit=8)
    p.write_bytes(b"\xff\xfe")
    with pytest.raises(ManifestError, match=r"a\.py: not UTF-8 text \("):
        read_text(p)
    with pytest.raises(ManifestError, match=r"missing\.py: cannot read it \(.*is missing"):
        read_text(tmp_path / "missing.py")
    with pytest.raises(UnsafeBundleError, match=r"d: is not a regular file \(.*a directory"):
        (tmp_path / "d").mkdir()
        read_text(tmp_path / "d")


def test_symlinked_script_refused(tmp_path: Path) -> None:
    py = _plain(tmp_path / "real")
    link = tmp_path / "f.py"
    os.symlink(py, link)
    with pytest.raises(UnsafeBundleError, match=r"f\.py: is a symlink"):
        read_script(link)
    assert read_script(py).function_name == "f"


def test_docstring_replaced_by_an_assignment(tmp_path: Path) -> None:
    # Only a docstring is skipped at the top of a function; a constant assigned in its place is
    # a statement the template does not have.
    py = _plain(tmp_path)
    _edit(py, '    """Load the example inputs that were exported from Julia."""', '    _ = "x"')
    _refused(py, rf"f\.py:{_line_of(py, '_ = ')}: unexpected statement \"_ = 'x'\"")


def test_script_opened_without_following_links_or_leaking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from juliabridge.bundle.files import safefile

    py = _plain(tmp_path)
    flags: list[int] = []
    real = os.open

    def spy(p: object, f: int, *a: object, **kw: object) -> int:
        flags.append(f)
        return real(p, f, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(safefile.os, "open", spy)
    read_script(py)
    assert flags and all(
        f & os.O_NOFOLLOW and f & os.O_CLOEXEC and f & os.O_NONBLOCK for f in flags
    )
