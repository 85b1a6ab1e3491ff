"""The .py that Reactant's ``export_to_enzymejax`` generates, read as data and never run.

The file is parsed with `ast` (nothing in it is imported, compiled or executed). The values
the template interpolates (function name, file names, each argument's shape, dtype and path,
the meshes and PartitionSpecs) are taken from it, the template is rendered again from those
values, and the two syntax trees must agree statement by statement: any other statement, call
or value is refused with the line that differs. The template is Reactant.jl
src/serialization/EnzymeJAX.jl:230-422 (docs/reactant-export.md).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BundleError, ManifestError, ResourceLimitError, UnsafeBundleError
from ..stablehlo.budget import host_memory, human
from ..support.shown import shown
from ..support.slots import TUPLE_SLOTS_BASE, TUPLE_SLOTS_PER_PATH, slot_allowance, tuple_slots
from .files import read_bytes

#: Largest .py accepted (bytes): the template is ~400 bytes per argument, so this is far above
#: any real export.
MAX_SCRIPT_BYTES = 64 << 20
#: Tokens allowed per argument (the template writes 49 per argument on CPython 3.11, 65 on
#: 3.13, where f-strings are split into tokens), plus a fixed allowance for the rest of the
#: template. `ast.parse` holds ~450-720 bytes per token (measured with tracemalloc), so the
#: token count, not the byte size, bounds its memory; it is counted by the streaming tokenizer
#: before anything is parsed. The arguments counted are the docstring lines ``argK: Array of
#: shape`` numbered 1, 2, ... in order (a comment or a repeated line adds nothing), at most
#: MAX_ARGUMENTS, so a .py never gets more tokens than a genuine MAX_ARGUMENTS-argument export.
TOKENS_PER_ARGUMENT = 120
TOKENS_BASE = 20_000
#: Bytes `ast.parse` is taken to hold per token (720 measured on CPython 3.11, 540 on 3.13),
#: checked against the memory this process can still get before parsing.
AST_BYTES_PER_TOKEN = 1024
#: Most arguments a .py may list (a Lux model with this many arrays is far beyond any seen).
MAX_ARGUMENTS = 16_384
#: Most steps in one argument's path, and most characters in one named step.
MAX_PATH_DEPTH = 256
MAX_STEP_CHARS = 1024
#: Reactant's NUMPY_SIMPLE_TYPES (src/serialization/Serialization.jl:13-29) -> MLIR element type.
#: ``complex32`` (ComplexF16) has no numpy dtype, so it is absent and refused by name.
NUMPY_TO_MLIR = {
    "bool": "i1",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "ui8",
    "uint16": "ui16",
    "uint32": "ui32",
    "uint64": "ui64",
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
    "complex64": "complex<f32>",
    "complex128": "complex<f64>",
}

_DOC_ARG = re.compile(
    # Bounded digit runs: int() of a longer one is Python's int-string limit (a raw ValueError).
    # The path is whatever Reactant's tracer recorded, joined with "." (EnzymeJAX.jl:160):
    # integers, symbols (:ps, :re, ...) and Dict keys printed with `string`.
    r"^\s*(arg[0-9]{1,9}): Array of shape (\((?:[0-9]{1,18}(?:, [0-9]{1,18})*,?)?\)) "
    r"and dtype (\w+)\. Path: arg\.(\S(?:.*\S)?)\s*$",
    re.ASCII,
)
#: A docstring argument line, as counted for the token budget before anything is parsed.
_DOC_COUNT = re.compile(r"^[ \t]*arg([0-9]{1,9}): Array of shape ", re.ASCII | re.MULTILINE)
_POSITION = re.compile(r"[0-9]+", re.ASCII)
_ARG_NAME = re.compile(r"arg[0-9]{1,9}", re.ASCII)
_MESH_NAME = re.compile(r"mesh[0-9]{1,9}", re.ASCII)
#: Largest mesh axis size, and number of devices a mesh may name.
MAX_MESH_DEVICES = 1 << 31
#: Most axes a mesh may have: numpy 1.26's array rank limit (numpy 2 allows 64).
MAX_MESH_AXES = 32
_RUN = re.compile(r"^run_[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ScriptArgument:
    """One argument as the .py records it (shape row-major, Julia's dims reversed)."""

    name: str
    shape: tuple[int, ...]
    numpy_dtype: str
    #: The steps after ``arg.``: the 1-based position among the traced arguments, then what
    #: the tracer appended below it: 1-based field/tuple/array positions (int) and names
    #: (str: symbols such as ``ps`` or ``re``, Dict keys as Julia prints them).
    path: tuple[int | str, ...]
    line: int

    @property
    def dtype(self) -> str:
        """The MLIR element type, e.g. ``f32``."""
        return NUMPY_TO_MLIR[self.numpy_dtype]

    @property
    def label(self) -> str:
        """The path as Reactant writes it, e.g. ``arg.3.1.1``."""
        return "arg." + ".".join(str(s) for s in self.path)


@dataclass(frozen=True)
class Mesh:
    """A ``jax.make_mesh`` line: axis sizes and names as written (already reversed)."""

    name: str
    axis_sizes: tuple[int, ...]
    axis_names: tuple[str, ...]


@dataclass(frozen=True)
class Placement:
    """How the .py places one argument: NamedSharding on a mesh, or NoSharding."""

    kind: str
    mesh: str | None = None
    #: One entry per dimension of the row-major array: a mesh axis name or None.
    spec: tuple[str | None, ...] = ()


@dataclass(frozen=True)
class ExportScript:
    """What a template .py says: names, files, arguments and shardings."""

    path: Path
    function_name: str
    mlir_file: str
    #: The inputs npz named by ``load_inputs``; None for ``export_data_as_npz=false``.
    npz_file: str | None
    arguments: tuple[ScriptArgument, ...]
    meshes: dict[str, Mesh] = field(default_factory=dict)
    #: Argument index (0-based) -> its placement; only arguments the .py places are listed.
    placements: dict[int, Placement] = field(default_factory=dict)


def _fail(path: Path, line: int | None, message: str) -> ManifestError:
    where = f"{path}:{line}" if line else str(path)
    return ManifestError(
        f"{where}: {message}; this is not the .py Reactant's export_to_enzymejax writes "
        "(Reactant.jl src/serialization/EnzymeJAX.jl:230-422), and juliabridge reads it as data "
        "only, never running it"
    )


def read_text(path: Path, limit: int = MAX_SCRIPT_BYTES) -> str:
    """Read a small regular file (no symlink followed, never blocking on a FIFO) as UTF-8.

    Raises:
        UnsafeBundleError: it is a symlink or not a regular file.
        ManifestError: larger than `limit`, unreadable or not UTF-8.
    """
    try:
        data = read_bytes(path, "the export's .py", limit, ManifestError)
    except (ManifestError, UnsafeBundleError):
        raise
    except BundleError as e:
        raise ManifestError(f"{path}: cannot read it ({e})") from e
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ManifestError(f"{path}: not UTF-8 text ({e})") from e


def declared_arguments(text: str) -> int:
    """How many argument lines the docstring lists: ``argK: Array of shape`` lines numbered 1,
    2, ... in order (what the token budget scales with; comments, repeats and lines out of
    order add nothing), at most MAX_ARGUMENTS + 1."""
    n = 0
    for m in _DOC_COUNT.finditer(text):
        if m.group(1) == str(n + 1):
            n += 1
            if n > MAX_ARGUMENTS:
                break
    return n


def _check_tokens(text: str, path: Path, arguments: int) -> None:
    """Refuse a .py with more tokens than `arguments` explain, before `ast.parse`."""
    if arguments > MAX_ARGUMENTS:
        raise _fail(
            path,
            None,
            f"lists more than {MAX_ARGUMENTS} arguments, more than juliabridge reads from an "
            "export (each costs memory to parse)",
        )
    budget = TOKENS_BASE + TOKENS_PER_ARGUMENT * arguments
    count = 0
    try:
        for count, tok in enumerate(tokenize.generate_tokens(io.StringIO(text).readline), 1):
            if count > budget + 1:
                raise _fail(
                    path,
                    tok.start[0],
                    f"holds more than {budget} tokens, far more than the template writes for "
                    f"its {arguments} arguments; it is not the .py export_to_enzymejax writes",
                )
    except (tokenize.TokenError, SyntaxError, ValueError):
        # Counted up to the error, within the budget: `ast.parse` then reports the error
        # itself, with its line (tokens past it are never parsed).
        pass
    need = count * AST_BYTES_PER_TOKEN
    avail, source = host_memory()
    if need > avail:
        raise ResourceLimitError(
            f"{path}: parsing its {count} tokens needs about {human(need)}, more than "
            f"{human(avail)}, {source}; free memory or read it on a larger machine"
        )


def _parse(text: str, path: Path, arguments: int | None) -> ast.Module:
    """`text` parsed; its tokens counted first unless `arguments` is None (our own render)."""
    if arguments is not None:
        _check_tokens(text, path, arguments)
    try:
        with warnings.catch_warnings():
            # An invalid escape such as "\l" in a Dict key Reactant printed is a warning of
            # the parser (DeprecationWarning, SyntaxWarning on 3.12+), not the reader's concern:
            # the value is compared with the template's all the same.
            warnings.simplefilter("ignore")
            return ast.parse(text, filename=str(path))
    except SyntaxError as e:
        raise _fail(path, e.lineno, f"does not parse as Python ({e.msg})") from e
    except (ValueError, RecursionError, MemoryError) as e:
        raise _fail(path, None, f"cannot be parsed ({type(e).__name__})") from e


def _docstring(node: ast.AST) -> str | None:
    body = getattr(node, "body", None)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        value = body[0].value.value
        return value if isinstance(value, str) else None
    return None


def _string_arg(call: ast.AST, index: int) -> str | None:
    """The `index`-th positional argument of ``os.path.join(...)`` inside `call`, if a string."""
    for node in ast.walk(call):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "join"
            and len(node.args) > index
        ):
            arg = node.args[index]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                return arg.value
    return None


def _shape(text: str) -> tuple[int, ...]:
    inner = text.strip("()").rstrip(",")
    return tuple(int(d) for d in inner.split(", ")) if inner else ()


def _arguments(run: ast.FunctionDef, path: Path) -> tuple[ScriptArgument, ...]:
    doc = _docstring(run)
    if doc is None:
        raise _fail(path, run.lineno, f"{run.name} has no docstring listing its arguments")
    start = run.body[0].lineno
    out = []
    for k, line in enumerate(doc.splitlines()):
        if "Array of shape" not in line:
            continue
        m = _DOC_ARG.match(line)
        if m is None:
            raise _fail(path, start + k, f"argument line {line.strip()!r} is not the template's")
        name, shape, np_dtype, steps = m.groups()
        if np_dtype not in NUMPY_TO_MLIR:
            raise ManifestError(
                f"{path}:{start + k}: {name} has dtype {np_dtype}, which juliabridge cannot "
                f"hold (numpy has no complex32); supported: {', '.join(NUMPY_TO_MLIR)}"
            )
        out.append(
            ScriptArgument(name, _shape(shape), np_dtype, _steps(steps, path, start + k), start + k)
        )
    names = [a.arg for a in run.args.args]
    if names != [a.name for a in out] or names != [f"arg{i + 1}" for i in range(len(names))]:
        raise _fail(
            path,
            run.lineno,
            f"{run.name} takes ({', '.join(names)}) but its docstring lists "
            f"({', '.join(a.name for a in out)}); the template names them arg1..argN",
        )
    _check_slots(out, path)
    return tuple(out)


def _steps(text: str, path: Path, line: int) -> tuple[int | str, ...]:
    """The steps of ``arg.<text>``: digits are 1-based positions, anything else a name.

    Reactant joins ``string.(path)`` with "." (EnzymeJAX.jl:160), so a Dict key that
    contains "." reads as several names, and a key printed as digits (``1``, or the String
    ``"1"``) as a position.
    """
    parts = text.split(".")
    if len(parts) > MAX_PATH_DEPTH:
        raise _fail(path, line, f"the path has {len(parts)} steps, more than {MAX_PATH_DEPTH}")
    out: list[int | str] = []
    for n, part in enumerate(parts):
        if _POSITION.fullmatch(part):
            if part.startswith("0") or len(part) > 9:
                raise _fail(
                    path,
                    line,
                    f"path step {part[:20]!r} of arg.{text[:200]} is no position Reactant "
                    "records: tuple, field and array positions are 1-based and below 10**9 "
                    "(a Dict key 0 or a zero-padded key cannot be told from a position)",
                )
            out.append(int(part))
        elif n == 0:
            raise _fail(
                path,
                line,
                f"the path arg.{text[:200]} does not start with the argument's position "
                "(Reactant's first step is the 1-based position among the traced arguments)",
            )
        elif not part or len(part) > MAX_STEP_CHARS or "/" in part or "\x00" in part:
            raise _fail(
                path,
                line,
                f"path step {part[:40]!r} of arg.{text[:200]} is empty, longer than "
                f"{MAX_STEP_CHARS} characters or holds '/'; juliabridge names a leaf by its "
                "steps (an HDF5 name in a converted bundle), which cannot be",
            )
        else:
            out.append(part)
    return tuple(out)


def _check_slots(arguments: list[ScriptArgument], path: Path) -> None:
    """Refuse integer steps that would build longer tuples than the arguments justify (the
    bound every tree reader shares: support/slots.py), naming the line of the largest."""
    total, step, where = tuple_slots(a.path for a in arguments)
    allowed = slot_allowance(len(arguments))
    if total > allowed:
        line = next(a.line for a in arguments if a.path == where)
        raise _fail(
            path,
            line,
            f"the paths' positions ask for {total} tuple slots (the largest step is {step}) for "
            f"{len(arguments)} arguments, more than the {allowed} juliabridge allows "
            f"({TUPLE_SLOTS_BASE} plus {TUPLE_SLOTS_PER_PATH} per argument)",
        )


def _consts(node: ast.expr, kind: type, path: Path) -> tuple[object, ...]:
    # Reactant writes "(4)" and "('x')" for a one-axis mesh: a parenthesised scalar.
    items = node.elts if isinstance(node, ast.Tuple) else [node]
    vals = []
    for item in items:
        if not (isinstance(item, ast.Constant) and type(item.value) is kind):
            raise _fail(path, node.lineno, f"a mesh expects {kind.__name__} constants")
        vals.append(item.value)
    return tuple(vals)


def _check_mesh(
    name: str, sizes: tuple[object, ...], names: tuple[object, ...], path: Path, line: int
) -> None:
    """A mesh JAX can build: one positive size per unique axis name, within a device count,
    of at most MAX_MESH_AXES axes (its device grid is a numpy array of that rank)."""
    if len(sizes) > MAX_MESH_AXES:
        raise _fail(
            path,
            line,
            f"{name} has {len(sizes)} axes; a mesh's device grid is a numpy array, whose rank "
            f"is at most {MAX_MESH_AXES}",
        )
    total = 1
    for d in sizes:
        if not isinstance(d, int) or not 1 <= d <= MAX_MESH_DEVICES:
            raise _fail(
                path, line, f"{name} has axis size {shown(d)}; sizes are positive device counts"
            )
        total *= d
    if total > MAX_MESH_DEVICES:
        raise _fail(path, line, f"{name} names {shown(total)} devices, more than any machine has")
    if len(sizes) != len(names) or len(set(names)) != len(names):
        raise _fail(
            path,
            line,
            f"{name} has sizes {shown(list(sizes))} for axes {shown(list(names))}; a mesh needs "
            "one size per axis and unique axis names",
        )


def _check_spec(
    arg: str, mesh: str, spec: list[str | None], meshes: dict[str, Mesh], path: Path, line: int
) -> None:
    """A PartitionSpec naming only axes of a mesh defined above it, each at most once."""
    m = meshes.get(mesh)
    if m is None:
        raise _fail(
            path, line, f"{arg} is placed on {mesh}, which no jax.make_mesh line above defines"
        )
    used = [a for a in spec if a is not None]
    unknown = [a for a in used if a not in m.axis_names]
    if unknown or len(set(used)) != len(used):
        raise _fail(
            path,
            line,
            f"{arg}'s PartitionSpec {tuple(spec)} must name each axis of {mesh} "
            f"{tuple(m.axis_names)} at most once",
        )


def _placements(
    main_if: ast.If, n: int, path: Path
) -> tuple[dict[str, Mesh], dict[int, Placement]]:
    meshes: dict[str, Mesh] = {}
    placements: dict[int, Placement] = {}
    for stmt in main_if.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
            continue
        target, value = stmt.targets[0], stmt.value
        if not (isinstance(target, ast.Name) and isinstance(value, ast.Call)):
            continue
        func = ast.unparse(value.func)
        if func == "jax.make_mesh" and len(value.args) == 2 and _MESH_NAME.fullmatch(target.id):
            sizes = _consts(value.args[0], int, path)
            names = _consts(value.args[1], str, path)
            _check_mesh(target.id, sizes, names, path, stmt.lineno)
            meshes[target.id] = Mesh(target.id, sizes, names)  # type: ignore[arg-type]
        elif func == "jax.device_put" and _ARG_NAME.fullmatch(target.id):
            k = int(target.id[3:]) - 1
            if not (0 <= k < n) or len(value.args) != 2:
                raise _fail(path, stmt.lineno, f"{target.id} is not an argument of the function")
            shard = value.args[1]
            if not (
                isinstance(shard, ast.Call)
                and ast.unparse(shard.func) == "jax.sharding.NamedSharding"
                and len(shard.args) == 2
                and isinstance(shard.args[0], ast.Name)
                and isinstance(shard.args[1], ast.Call)
            ):
                raise _fail(path, stmt.lineno, "expected jax.sharding.NamedSharding(meshN, P(...))")
            spec: list[str | None] = []
            for p in shard.args[1].args:
                if isinstance(p, ast.Constant) and (p.value is None or isinstance(p.value, str)):
                    spec.append(p.value)
                else:
                    raise ManifestError(
                        f"{path}:{stmt.lineno}: {target.id}'s PartitionSpec has "
                        f"{ast.unparse(p)!r}, not a quoted axis name or None. Reactant prints a "
                        "dimension split over several mesh axes as bare names "
                        "(EnzymeJAX.jl:303-310), which its own .py cannot run either; "
                        "re-export with one mesh axis per dimension"
                    )
            _check_spec(target.id, shard.args[0].id, spec, meshes, path, stmt.lineno)
            placements[k] = Placement("NamedSharding", shard.args[0].id, tuple(spec))
        elif func == "jnp.asarray" and _ARG_NAME.fullmatch(target.id):
            k = int(target.id[3:]) - 1
            if 0 <= k < n:
                placements[k] = Placement("NoSharding")
    return meshes, placements


def _julia_tuple(shape: tuple[int, ...]) -> str:
    # How Julia prints a tuple of Ints: (), (5,), (2, 3).
    if len(shape) == 1:
        return f"({shape[0]},)"
    return "(" + ", ".join(str(d) for d in shape) + ")"


def render(s: ExportScript, sharded: bool) -> str:
    """The template's Python (without its docstrings' wording) for the values in `s`."""
    args = ", ".join(a.name for a in s.arguments)
    lines = [
        '"""doc"""',
        "from enzyme_ad.jax import hlo_call",
        "import jax",
        "from jax.sharding import PartitionSpec as P",
        "import jax.numpy as jnp",
        "import numpy as np",
        "import os",
        "_script_dir = os.path.dirname(os.path.abspath(__file__))",
        f'with open(os.path.join(_script_dir, {s.mlir_file!r}), "r") as f:',
        "    _hlo_code = f.read()",
    ]
    lines += _render_load_inputs(s)
    lines += _render_run(s, args)
    lines += ['if __name__ == "__main__":', f"    ({args},) = load_inputs()"]
    if sharded:
        lines += _render_placements(s)
    else:
        lines += [f"    {a.name} = jnp.asarray({a.name})" for a in s.arguments]
    lines += [
        f'    print("Running {s.function_name}...")',
        f"    result = run_{s.function_name}({args})",
        '    print("Result:", result)',
    ]
    return "\n".join(lines) + "\n"


def _render_load_inputs(s: ExportScript) -> list[str]:
    """The template's ``load_inputs``: from the npz, or random inputs when there is none."""
    if s.npz_file is not None:
        keys = ", ".join(f"npz_data['arr_{i + 1}']" for i in range(len(s.arguments)))
        return [
            "def load_inputs():",
            '    """doc"""',
            f"    npz_data = np.load(os.path.join(_script_dir, {s.npz_file!r}))",
            f"    inputs = [{keys}]",
            "    return tuple(inputs)",
        ]
    lines = [
        "def generate_random_inputs(key, shape, dtype):",
        "    key1, key2 = jax.random.split(key)",
        "    return jax.random.normal(key1, shape, dtype), key2",
        "def load_inputs(prng_key = None):",
        '    """doc"""',
        "    if prng_key is None:",
        "        prng_key = jax.random.PRNGKey(0)",
        "    inputs = []",
    ]
    for a in s.arguments:
        lines += [
            f"    tmp, prng_key = generate_random_inputs(prng_key, {_julia_tuple(a.shape)}, "
            f"jnp.dtype('{a.numpy_dtype}'))",
            "    inputs.append(tmp)",
        ]
    lines.append("    return tuple(inputs)")
    return lines


def _render_run(s: ExportScript, args: str) -> list[str]:
    """The template's jitted ``run_NAME``: each argument's dtype and shape asserted, then
    ``hlo_call``."""
    lines = ["@jax.jit", f"def run_{s.function_name}({args}):", '    """doc"""']
    for a in s.arguments:
        lines.append(
            f"    assert {a.name}.dtype == np.dtype('{a.numpy_dtype}'), f\"Expected dtype of "
            f'{a.name} to be {a.numpy_dtype}. Got {{{a.name}.dtype}} (path: {a.label})"'
        )
    for a in s.arguments:
        t = _julia_tuple(a.shape)
        lines.append(
            f'    assert {a.name}.shape == {t}, f"Expected shape of {a.name} to be {t}. '
            f'Got {{{a.name}.shape}} (path: {a.label})"'
        )
    lines.append(f"    return hlo_call({args}, source=_hlo_code)")
    return lines


def _render_placements(s: ExportScript) -> list[str]:
    """The sharded template's placement of each argument, each mesh made before its first use."""
    lines: list[str] = []
    defined: set[str] = set()
    for k, a in enumerate(s.arguments):
        p = s.placements.get(k)
        if p is None:
            continue
        if p.kind == "NoSharding":
            lines.append(f"    {a.name} = jnp.asarray({a.name})")
            continue
        mesh = s.meshes.get(p.mesh or "")
        if mesh is not None and mesh.name not in defined:
            defined.add(mesh.name)
            sizes = ", ".join(str(d) for d in mesh.axis_sizes)
            names = ", ".join(repr(x) for x in mesh.axis_names)
            lines.append(f"    {mesh.name} = jax.make_mesh(({sizes}), ({names}))")
        spec = ", ".join("None" if x is None else repr(x) for x in p.spec)
        lines.append(
            f"    {a.name} = jax.device_put({a.name}, "
            f"jax.sharding.NamedSharding({p.mesh}, P({spec})))"
        )
    return lines


def _strip_doc(body: list[ast.stmt]) -> list[ast.stmt]:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        return body[1:]
    return body


def _compare(got: list[ast.stmt], want: list[ast.stmt], path: Path, parent_line: int) -> None:
    """Statement by statement; the first that differs is refused with its line."""
    for g, w in zip(got, want):
        if type(g) is not type(w):
            raise _fail(path, g.lineno, f"unexpected statement {ast.unparse(g)[:80]!r}")
        if isinstance(g, (ast.FunctionDef, ast.If, ast.With)) and isinstance(
            w, (ast.FunctionDef, ast.If, ast.With)
        ):
            head_g, head_w = _head(g), _head(w)
            if head_g != head_w:
                raise _fail(path, g.lineno, f"unexpected {ast.unparse(g).splitlines()[0][:80]!r}")
            gb = _strip_doc(g.body) if isinstance(g, ast.FunctionDef) else g.body
            wb = _strip_doc(w.body) if isinstance(w, ast.FunctionDef) else w.body
            if isinstance(g, ast.If) and g.orelse:
                raise _fail(path, g.orelse[0].lineno, "unexpected else branch")
            _compare(gb, wb, path, g.lineno)
        elif ast.dump(g) != ast.dump(w):
            raise _fail(path, g.lineno, f"unexpected statement {ast.unparse(g)[:80]!r}")
    if len(got) > len(want):
        extra = got[len(want)]
        raise _fail(path, extra.lineno, f"unexpected statement {ast.unparse(extra)[:80]!r}")
    if len(got) < len(want):
        last = got[-1].end_lineno if got else parent_line
        raise _fail(path, last, f"missing {ast.unparse(want[len(got)])[:80]!r} after this line")


def _head(node: ast.FunctionDef | ast.If | ast.With) -> str:
    if isinstance(node, ast.FunctionDef):
        return ast.dump(node.args) + node.name + "".join(ast.dump(d) for d in node.decorator_list)
    if isinstance(node, ast.If):
        return ast.dump(node.test)
    return "".join(ast.dump(i) for i in node.items)


def read_script(path: Path) -> ExportScript:
    """Read an ``export_to_enzymejax`` .py as data.

    Args:
        path: the generated .py.

    Returns:
        The names, files, arguments and shardings it records.

    Raises:
        ManifestError: it does not parse, or is not the template (the message names the line).
        UnsafeBundleError: it is a symlink or not a regular file.
    """
    text = read_text(path)
    tree = _parse(text, path, declared_arguments(text))
    try:
        return _read_tree(tree, path)
    except RecursionError as e:
        # ast.dump/unparse recurse: an expression nested deeper than any template line.
        raise _fail(path, None, "holds an expression nested too deeply to be the template") from e


def _read_tree(tree: ast.Module, path: Path) -> ExportScript:
    body = tree.body
    if not body or _docstring(tree) is None:
        raise _fail(path, body[0].lineno if body else 1, "expected the template's docstring first")
    runs = [n for n in body if isinstance(n, ast.FunctionDef) and _RUN.match(n.name)]
    if len(runs) != 1:
        raise _fail(path, None, f"expected one run_<name> function, found {len(runs)}")
    run = runs[0]
    arguments = _arguments(run, path)
    withs = [n for n in body if isinstance(n, ast.With)]
    mlir = _string_arg(withs[0], 1) if withs else None
    if mlir is None:
        raise _fail(path, withs[0].lineno if withs else None, "no `with open(...)` of the .mlir")
    loaders = [n for n in body if isinstance(n, ast.FunctionDef) and n.name == "load_inputs"]
    npz = _string_arg(loaders[0], 1) if loaders and not loaders[0].args.args else None
    mains = [n for n in body if isinstance(n, ast.If)]
    meshes, placements = _placements(mains[0], len(arguments), path) if mains else ({}, {})
    script = ExportScript(
        path, run.name[4:], mlir, npz, arguments, meshes=meshes, placements=placements
    )
    sharded = bool(meshes) or any(p.kind != "NoSharding" for p in placements.values())
    if not sharded and len(placements) != len(arguments):
        sharded = True  # only placed arguments are converted: the sharded form's shape
    want = _parse(render(script, sharded), Path("<template>"), None).body
    _compare(_strip_doc(body), _strip_doc(want), path, 1)
    for p in placements.values():
        if p.mesh is not None and p.mesh not in meshes:
            raise _fail(path, None, f"{p.mesh} is used before a jax.make_mesh line defines it")
    return script


__all__ = [
    "MAX_SCRIPT_BYTES",
    "NUMPY_TO_MLIR",
    "ExportScript",
    "Mesh",
    "Placement",
    "ScriptArgument",
    "read_script",
    "read_text",
]
