"""The Julia writer (julia/src, package JuliaBridge) against docs/bundle-format.md format 2 and
the Python reader, which is the reference. No Julia runs here, so the Julia side is read:

- the constants and limits the Julia sources declare equal the Python reader's;
- the artifact procedure julia/src/artifact.jl describes (what it strips, the pass pipeline it
  runs, serializing without other dialects) is carried out here with jaxlib's StableHLO on real
  Reactant modules, and gives the artifact the Python writer gives, CHLO legalized;
- the golden digests of julia/test/digest_golden.json (which runtests.jl checks JuliaBridge
  against) are what the spec's byte layout and the Python reader give;
- the manifests the Julia writer builds (written out here from julia/src/manifest.jl's
  structures, for a test-mode and a train-mode Dense+BatchNorm, echoed arguments, and a model
  without results) are valid for parse_manifest, use exactly the keys manifest.jl writes, and
  each case the Julia writer now guards against is one the reader refuses.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import json
import operator
import re
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import stablehlo as _stablehlo

import juliabridge
from juliabridge import dtypes
from juliabridge.bundle import manifest as spec
from juliabridge.bundle import schema, writer
from juliabridge.bundle.digest import dataset_digest
from juliabridge.bundle.manifest import parse_manifest
from juliabridge.jaxinternals import make_context
from juliabridge.lux import params_io
from juliabridge.stablehlo import artifact, parse_module, sanitize
from juliabridge.stablehlo.sanitize import walk

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "julia" / "src"
FIXTURES = REPO.parent / "shared" / "fixtures" / "reactant"
GOLDEN_DIGESTS = REPO / "julia" / "test" / "digest_golden.json"


def _source(name: str) -> str:
    return (SRC / name).read_text(encoding="utf-8")


def _all_sources() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(SRC.glob("*.jl")))


_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Mult: operator.mul,
    ast.Pow: operator.pow,
}


def _arith(node: ast.AST) -> int:
    """An integer expression of literals, +, * and ^ (Julia's power), evaluated."""
    if isinstance(node, ast.Expression):
        return _arith(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return int(_OPS[type(node.op)](_arith(node.left), _arith(node.right)))
    raise ValueError(f"not a constant integer expression: {ast.dump(node)}")


def julia_const(name: str) -> Any:
    """The value of `const NAME = ...` in julia/src: a string, v"..."/r"..." text, a tuple of
    strings or an integer expression."""
    found = re.findall(rf"^const {name} = (.+?)\s*(?:#.*)?$", _all_sources(), re.M)
    assert len(found) == 1, (name, found)
    text = found[0]
    if m := re.fullmatch(r'[vr]"(.*)"', text):
        return m.group(1)
    if text.startswith('"'):
        return json.loads(text)
    if text.startswith("("):
        return ast.literal_eval(text)
    return _arith(ast.parse(text.replace("^", "**"), mode="eval"))


def julia_function(file: str, name: str) -> str:
    """The text of `function NAME(...) ... end` (or a one-line `NAME(...) = ...`) in `file`."""
    src = _source(file)
    start = src.index(f"function {name}(")
    return src[start : src.index("\nend\n", start) + 5]


# --- constants and limits ----------------------------------------------------------------

FILE_NAMES = ("MODULE_FILE", "ARTIFACT_FILE", "WEIGHTS_FILE", "VJP_FILE", "VJP_ARTIFACT_FILE")


@pytest.mark.parametrize(
    ("name", "python"),
    [
        ("FORMAT", spec.FORMAT),
        ("FORMAT_VERSION", spec.FORMAT_VERSION),
        ("MANIFEST_FILE", spec.MANIFEST_NAME),
        ("MODULE_FILE", writer.MODULE_FILE),
        ("ARTIFACT_FILE", writer.MODULE_ARTIFACT_FILE),
        ("WEIGHTS_FILE", writer.WEIGHTS_FILE),
        ("WEIGHTS_FORMAT", params_io.WEIGHTS_FORMAT),
        ("WEIGHTS_FORMAT_VERSION", params_io.WEIGHTS_FORMAT_VERSION),
        ("ARTIFACT_TARGET", artifact.ARTIFACT_TARGET),
        ("JULIA_TOOL", spec.JULIA_TOOL),
        ("MAX_PATH_STEP", spec.MAX_PATH_STEP),
        ("MAX_PATH_DEPTH", spec.MAX_DEPTH),
        ("MAX_JSON_DEPTH", spec.MAX_DEPTH),
        ("MAX_RANK", spec.MAX_RANK),
        ("MAX_TENSOR_BYTES", spec.MAX_TENSOR_BYTES),
        ("MAX_STATIC_STRING", spec.MAX_STATIC_STRING),
        ("MAX_JULIA_TYPE", spec.MAX_JULIA_TYPE),
        ("MAX_MANIFEST_BYTES", spec.MAX_MANIFEST_BYTES),
    ],
)
def test_julia_constants_are_the_python_readers(name: str, python: object) -> None:
    assert julia_const(name) == python


def test_the_dimension_limit_is_the_readers() -> None:
    """The reader's bound on dimensions is a literal in _shape; probe it on the spec example."""
    from tests.test_manifest import spec_example

    limit = julia_const("MAX_DIM")
    ok = copy.deepcopy(spec_example())
    ok["arguments"][0].update(shape=[limit, 2], julia_shape=[2, limit], batch_axis=None)
    ok.pop("batch", None)
    ok["results"][0]["batch_axis"] = None
    with pytest.raises(juliabridge.ManifestError, match="256 GiB"):  # in range, but too large
        parse_manifest(ok)
    ok["arguments"][0].update(shape=[limit + 1, 2], julia_shape=[2, limit + 1])
    with pytest.raises(juliabridge.ManifestError, match=r"arguments\[0\]\.shape\[0\]"):
        parse_manifest(ok)


def test_file_names_are_distinct_plain_and_artifacts_named_after_their_text() -> None:
    names = {n: julia_const(n) for n in FILE_NAMES}
    folded = [v.casefold() for v in names.values()]
    assert len(set(folded)) == len(folded)
    assert spec.MANIFEST_NAME.casefold() not in folded
    for n in names.values():
        assert spec.safe_file_name(n, "x") == n
    for art, text in (("ARTIFACT_FILE", "MODULE_FILE"), ("VJP_ARTIFACT_FILE", "VJP_FILE")):
        assert names[art] == Path(names[text]).stem + ".mlirbc"


def test_element_types_are_the_python_readers() -> None:
    block = _source("dtypes.jl")
    block = block[block.index("const DTYPES = (") : block.index("\n)\n")]
    pairs = re.findall(r"^\s*(?:Reactant\.)?(\w+) => \"([^\"]+)\",", block, re.M)
    assert dict((mlir, jl) for jl, mlir in pairs) == dtypes.MLIR_TO_JULIA
    sizes = dict(re.findall(r'"([^"]+)" => (\d+)', julia_const_block("ELEMENT_BYTES")))
    assert {k: int(v) for k, v in sizes.items()} == {
        k: v.itemsize for k, v in dtypes.MLIR_TO_NUMPY.items()
    }


def julia_const_block(name: str) -> str:
    src = _source("conformance.jl")
    start = src.index(f"const {name} = ")
    return src[start : src.index("\n)\n", start)]


def test_reference_tolerances_are_the_readers_defaults() -> None:
    body = julia_function("dtypes.jl", "reference_tolerances")
    rules = re.findall(
        r"any\(d -> d in \(([^)]*)\), dtypes\)\s*return \(([^,]+), ([^)]+)\)", body, re.S
    )
    assert len(rules) == 3
    for kinds, rtol, atol in rules:
        for d in ast.literal_eval(f"({kinds},)"):
            # with an integer output beside it: the float type still decides
            assert spec.default_tolerances([d, "i32"]) == (float(rtol), float(atol))
    assert "return (0.0, 0.0)" in body
    assert spec.default_tolerances(["i1", "ui64"]) == (0.0, 0.0)


def _python_regex(julia: str) -> re.Pattern[str]:
    # PCRE and Python agree on these patterns; \z is Python's \Z.
    return re.compile(julia.replace(r"\z", r"\Z"))


@pytest.mark.parametrize(
    ("name", "samples"),
    [
        ("NAME_RE", ["dense_bn", "a.b-c", "x" * 128, "x" * 129, "", "dense\n", "a b", "é"]),
        ("VERSION_RE", ["1.17.0", "0.9.0", "01.2.3", "1.2", "1.2.3\n", "1.2.3-rc1", "1000000.0.0"]),
        ("HEX64_RE", ["ab" * 32, "AB" * 32, "ab" * 31, "ab" * 32 + "\n"]),
        ("DATASET_RE", ["/params/a", "params/a", "/", "/a\x00b", "/a\n"]),
    ],
)
def test_julia_patterns_accept_what_the_reader_accepts(name: str, samples: list[str]) -> None:
    ours = _python_regex(julia_const(name))
    theirs = {
        "NAME_RE": schema.NAME_RE,
        "VERSION_RE": schema.VERSION_RE,
        "HEX64_RE": schema.SHA_RE,
        "DATASET_RE": schema.DATASET_RE,
    }[name]
    for s in samples:
        assert bool(ours.match(s)) == bool(theirs.match(s)), s


def test_a_trailing_newline_is_refused_by_both() -> None:
    """PCRE's `$` would accept "name\\n", which the reader's `\\Z` refuses (the divergence fixed)."""
    for name in ("NAME_RE", "VERSION_RE", "HEX64_RE", "DATASET_RE"):
        assert julia_const(name).endswith(r"\z"), name


# --- the portable artifact ---------------------------------------------------------------


def test_the_dropped_attributes_are_the_python_sanitizers() -> None:
    assert julia_const("DROPPED_ATTR_PREFIXES") == sanitize.DROPPED_PREFIXES
    julia_arg = julia_const("DROPPED_ARG_ATTRS") + julia_const("DROPPED_ARG_ATTR_PREFIXES")
    assert sorted(julia_arg) == sorted(sanitize.DROPPED_ARG_ATTRS)
    # The prefixes are exactly the entries the sanitizer treats as namespaces (ending in ".").
    assert all(p.endswith(".") for p in julia_const("DROPPED_ARG_ATTR_PREFIXES"))
    assert not any(p.endswith(".") for p in julia_const("DROPPED_ARG_ATTRS"))


def test_the_artifact_is_stripped_legalized_then_serialized_without_other_dialects() -> None:
    """Spec §2.1: StableHLO and func ops only, serialized with allowOtherDialects = false."""
    body = julia_function("artifact.jl", "artifact_bytes")
    order = [
        body.index("strip_for_artifact!(mod, ctx)"),
        body.index("Reactant.Compiler.run_pass_pipeline!(mod, artifact_pipeline(target)"),
        body.index("serialize_module(mod, target)"),
        body.index("artifact_module_text(bytes, ctx)"),
    ]
    assert order == sorted(order)
    serialize = julia_function("artifact.jl", "serialize_module")
    assert "allow_other_dialects = false" in serialize
    assert (
        "stablehloSerializePortableArtifactFromModule(mod, string(target), callback, Ref(io), allow_other_dialects)"
        in serialize
    )
    strip = julia_function("artifact.jl", "strip_for_artifact!")
    assert 'MLIR.IR.rmattr!(top, "sym_name")' in strip
    assert "func.func(chlo-legalize-to-stablehlo)" in julia_pipeline("1.17.0")


def julia_pipeline(target: str) -> str:
    """The pass pipeline string artifact.jl builds, for `target`."""
    body = _source("artifact.jl")
    body = body[body.index("artifact_pipeline(target::VersionNumber) = join(") :]
    body = body[: body.index('",\n)')]
    passes = re.findall(r'^\s*"([^"]+)",\s*$', body, re.M)
    assert passes, body
    return ",".join(p.replace("$target", target) for p in passes)


def _dropped_arg_attr(name: str) -> bool:
    return (
        name.startswith(julia_const("DROPPED_ATTR_PREFIXES"))
        or name in julia_const("DROPPED_ARG_ATTRS")
        or name.startswith(julia_const("DROPPED_ARG_ATTR_PREFIXES"))
    )


def julia_artifact(text: str, target: str = "1.17.0") -> bytes:
    """artifact.jl's procedure carried out with jaxlib's StableHLO: parse Reactant's text,
    remove the module name and the Reactant-only attributes (strip_for_artifact!), run the
    pipeline (reconcile-unrealized-casts, a core MLIR pass jaxlib's bindings do not register,
    is left out; it has nothing to do in these modules) and serialize without other dialects."""
    _stablehlo.register_stablehlo_passes()
    prefixes = julia_const("DROPPED_ATTR_PREFIXES")
    pipeline = ",".join(
        p for p in julia_pipeline(target).split(",") if p != "reconcile-unrealized-casts"
    )
    with make_context(allow_unregistered=True):
        module = ir.Module.parse(text)
        top = module.operation
        if "sym_name" in top.attributes:
            del top.attributes["sym_name"]
        for op in [top, *walk(top)]:
            for name in [op.attributes[i].name for i in range(len(op.attributes))]:
                if name.startswith(prefixes):
                    del op.attributes[name]
            if op.name == "func.func":
                for key in ("arg_attrs", "res_attrs"):
                    if key not in op.attributes:
                        continue
                    dicts = []
                    for d in ir.ArrayAttr(op.attributes[key]):
                        d = ir.DictAttr(d)
                        kept = {
                            d[j].name: d[j].attr
                            for j in range(len(d))
                            if not _dropped_arg_attr(d[j].name)
                        }
                        dicts.append(ir.DictAttr.get(kept))
                    op.attributes[key] = ir.ArrayAttr.get(dicts)
        passmanager.PassManager.parse(f"builtin.module({pipeline})").run(top)
        return bytes(_stablehlo.serialize_portable_artifact(module, target, False))


def _read_back(data: bytes) -> str:
    (text,) = artifact.deserialize([data], ["artifact"], isolated=False)
    assert isinstance(text, str), text
    return text


def _fixtures() -> Iterator[Path]:
    return iter(sorted(FIXTURES.glob("*.mlir")))


@pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"needs the Reactant fixtures in {FIXTURES}")
@pytest.mark.parametrize("fixture", list(_fixtures()), ids=lambda p: p.stem)
def test_the_julia_artifact_is_the_python_writers(fixture: Path) -> None:
    """On real Reactant output (module names, enzymexla attributes and values, aliasing), the
    Julia procedure gives the module the Python writer's artifact holds."""
    raw = fixture.read_text()
    ours = _read_back(julia_artifact(raw))
    theirs = _read_back(artifact.serialize(parse_module(raw, trust=True).text).data)
    assert ours == theirs
    checked = parse_module(ours)  # the reader's policy, untrusted: plain StableHLO
    assert checked.arguments == parse_module(raw, trust=True).arguments
    assert not checked.dropped_attributes


CHLO_MODULE = """module @reactant_erf attributes {mhlo.num_partitions = 1 : i64, mhlo.num_replicas = 1 : i64} {
  func.func @main(%arg0: tensor<4xf32> {enzymexla.memory_effects = [], tf.aliasing_output = 0 : i32}, %arg1: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) attributes {enzymexla.memory_effects = []} {
    %0 = chlo.erf %arg0 : tensor<4xf32> -> tensor<4xf32>
    %1 = chlo.broadcast_add %0, %arg1 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %2 = chlo.erf_inv %0 : tensor<4xf32> -> tensor<4xf32>
    return %1, %2 : tensor<4xf32>, tensor<4xf32>
  }
}
"""


def test_the_julia_artifact_legalizes_chlo() -> None:
    """CHLO becomes StableHLO before serializing (allowOtherDialects = false would refuse it),
    and the artifact computes what the text does: erf against math.erf."""
    import math

    text = _read_back(julia_artifact(CHLO_MODULE))
    assert "chlo." not in text and "enzymexla" not in text and "module @" not in text
    x = np.array([0.1, 0.5, -0.3, 0.9], np.float32)
    y = np.array([1.5, 2.0, 3.0, 0.7], np.float32)
    got = juliabridge.load_mlir(text, backend="xla")(x, y)
    want_sum = np.array([math.erf(v) for v in x.astype(np.float64)]) + y
    np.testing.assert_allclose(np.asarray(got[0]), want_sum, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(got[1]), x, rtol=1e-5, atol=1e-6)  # erf_inv(erf(x))
    # Serialized with other dialects refused, an unlegalized module gets no artifact.
    with make_context(allow_unregistered=True), pytest.raises(Exception):  # noqa: B017
        _stablehlo.serialize_portable_artifact(
            ir.Module.parse(parse_module(CHLO_MODULE, trust=True).text), "1.17.0", False
        )


# --- dataset digests (spec §4.1) -----------------------------------------------------------

_PACK = {
    "f32": "<f", "f64": "<d", "bf16": "<H", "f16": "<H", "i1": "<B", "i8": "<b", "ui8": "<B",
    "i16": "<h", "ui16": "<H", "i32": "<i", "ui32": "<I", "i64": "<q", "ui64": "<Q",
    "complex<f32>": "<ff", "complex<f64>": "<dd",
}  # fmt: skip


def _golden_cases() -> list[dict[str, Any]]:
    return list(json.loads(GOLDEN_DIGESTS.read_text())["cases"])


def _spec_bytes(case: dict[str, Any]) -> bytes:
    """Spec §4.1 from its words: the elements in Julia's column-major order, little-endian."""
    fmt = _PACK[case["dtype"]]
    out = b""
    for v in case["column_major"]:
        out += struct.pack(fmt, *v) if case["dtype"].startswith("complex") else struct.pack(fmt, v)
    return out


def _mlir_array(case: dict[str, Any]) -> np.ndarray:
    """The dataset as the reader returns it: MLIR shape, the Julia array's dims reversed."""
    d = case["dtype"]
    vals = case["column_major"]
    if d in ("bf16", "f16"):
        flat = np.array(vals, np.uint16).view(ml_dtypes.bfloat16 if d == "bf16" else np.float16)
    elif d.startswith("complex"):
        flat = np.array([complex(re_, im) for re_, im in vals], dtypes.to_numpy(d))
    else:
        flat = np.array(vals, dtypes.to_numpy(d))
    julia = flat.reshape(tuple(case["julia_shape"]), order="F")
    return julia.T  # reversing every axis: row-major MLIR order is Julia's column-major order


def test_the_golden_digests_cover_every_element_type_and_the_edge_shapes() -> None:
    cases = _golden_cases()
    assert {c["dtype"] for c in cases} == set(dtypes.MLIR_TO_NUMPY)
    shapes = [c["julia_shape"] for c in cases]
    assert [] in shapes and any(0 in s for s in shapes) and any(len(s) == 2 for s in shapes)


@pytest.mark.parametrize("case", _golden_cases(), ids=lambda c: f"{c['dtype']}{c['julia_shape']}")
def test_golden_digest_is_the_spec_layout_and_the_readers(case: dict[str, Any]) -> None:
    assert hashlib.sha256(_spec_bytes(case)).hexdigest() == case["sha256"]
    value = _mlir_array(case)
    assert value.shape == tuple(reversed(case["julia_shape"]))
    assert dataset_digest(value, case["dtype"]) == case["sha256"]


def _python_round_trip(tmp_path: Path, cases: list[dict[str, Any]]) -> None:
    from juliabridge.bundle.weights import open_weights, write_weights

    arrays = {f"/golden/{i}": (_mlir_array(c), c["dtype"]) for i, c in enumerate(cases)}
    write_weights(tmp_path / "w.h5", arrays)
    with open_weights(tmp_path / "w.h5") as f:
        for i, c in enumerate(cases):
            value = f.read_array(
                f"/golden/{i}", tuple(reversed(c["julia_shape"])), c["dtype"], "golden"
            )
            assert dataset_digest(value, c["dtype"]) == c["sha256"]


def test_golden_digests_survive_the_python_weights_file(tmp_path: Path) -> None:
    """Written by the Python writer and read by the reader, each golden array keeps its digest:
    the same values runtests.jl writes and reads back with JuliaBridge."""
    _python_round_trip(tmp_path, [c for c in _golden_cases() if c["julia_shape"]])


def test_rank_0_golden_digests_survive_the_python_weights_file(tmp_path: Path) -> None:
    _python_round_trip(tmp_path, [c for c in _golden_cases() if not c["julia_shape"]])


def test_the_julia_digest_hashes_the_stored_encoding_of_the_decoded_values() -> None:
    """canonical_sha256 hashes encode_for_hdf5 of the values (bits for halves, 0/1 bytes for
    Bool), and read_array takes it over the decoded array, never over the raw dataset."""
    weights = _source("weights.jl")
    assert "stored_sha256(canonical_encoding(A, dtype))" in weights
    read = julia_function("weights.jl", "read_array")
    assert "canonical_sha256(A, String(tag))" in read
    assert "stored_sha256(collect(raw))" not in read
    assert read.index("decode_from_hdf5(raw") < read.index("canonical_sha256(A")


# --- the manifest the Julia writer builds ------------------------------------------------

HEX = "ab" * 32


def _digest(julia_value: np.ndarray, dtype: str) -> str:
    """The digest of a Julia array given in Julia shape (column-major values)."""
    return dataset_digest(np.asfortranarray(julia_value).T, dtype)


def _argument(
    index: int,
    role: str,
    path: list[Any],
    julia_shape: list[int],
    *,
    value: np.ndarray | None = None,
    batch_axis: int | None = None,
    tied: list[list[Any]] | None = None,
) -> dict[str, Any]:
    """manifest.jl's argument_object: dataset and sha256 for parameters and states,
    batch_axis only (and always, possibly null) for inputs, tied_paths when there are some."""
    o: dict[str, Any] = {
        "index": index,
        "role": role,
        "path": path,
        "dtype": "f32",
        "shape": list(reversed(julia_shape)),
        "julia_shape": julia_shape,
    }
    if role != "input":
        group = "params" if role == "parameter" else "state"
        o["dataset"] = "/" + "/".join([group, *map(str, path)])
        o["sha256"] = HEX if value is None else _digest(value, "f32")
    else:
        o["batch_axis"] = batch_axis
    if tied:
        o["tied_paths"] = tied
    return o


def _result(
    index: int,
    paths: list[list[Any]],
    julia_shape: list[int],
    batch_axis: int | None,
    echo: int | None = None,
) -> dict[str, Any]:
    """manifest.jl's result_object: batch_axis always written (null when none)."""
    o: dict[str, Any] = {
        "index": index,
        "paths": paths,
        "dtype": "f32",
        "shape": list(reversed(julia_shape)),
        "batch_axis": batch_axis,
    }
    if echo is not None:
        o["echo_of"] = echo
    return o


def _producer() -> dict[str, Any]:
    return {
        "tool": "JuliaBridge.jl",
        "tool_version": "0.1.0",
        "julia": "1.11.5",
        "lux": "1.31.4",
        "reactant": "0.2.280",
        "made_with_julia": True,
        "created": "2026-08-21T12:00:00Z",
    }


def _module(file: str, art: str | None) -> dict[str, Any]:
    o: dict[str, Any] = {"file": file, "sha256": HEX}
    if art is not None:
        o["artifact"] = {
            "file": art,
            "sha256": HEX,
            "stablehlo_version": "1.22.0",
            "target": "1.17.0",
        }
    return o


def julia_manifest_dense_bn(mode: str = "test") -> dict[str, Any]:
    """What build_manifest writes for Chain(Dense(2 => 3), BatchNorm(3)) traced with x of
    Julia size (2, 5), vjp=true, reference=true, in `mode`: test mode returns the running
    statistics as aliases, train mode as results; st.layer_2.training is static state."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 2)).astype(np.float32)
    args = [
        _argument(0, "input", [], [2, 5], batch_axis=0),
        _argument(1, "parameter", ["layer_1", "weight"], [3, 2], value=w),
        _argument(2, "parameter", ["layer_1", "bias"], [3], value=np.zeros(3, np.float32)),
        _argument(3, "parameter", ["layer_2", "scale"], [3], value=np.ones(3, np.float32)),
        _argument(4, "parameter", ["layer_2", "bias"], [3], value=np.zeros(3, np.float32)),
        _argument(5, "state", ["layer_2", "running_mean"], [3], value=np.zeros(3, np.float32)),
        _argument(6, "state", ["layer_2", "running_var"], [3], value=np.ones(3, np.float32)),
    ]
    results = [_result(0, [["output"]], [3, 5], 0)]
    aliases: list[dict[str, Any]] = []
    stats = ("running_mean", "running_var")
    if mode == "test":
        aliases = [
            {"path": ["state", "layer_2", s], "argument": 5 + i} for i, s in enumerate(stats)
        ]
    else:
        results += [
            _result(1 + i, [["state", "layer_2", s]], [3], None) for i, s in enumerate(stats)
        ]
    m: dict[str, Any] = {
        "format": "juliabridge.bundle",
        "format_version": 2,
        "name": "dense_bn",
        "producer": _producer(),
        "module": _module("model.mlir", "model.mlirbc"),
        "weights": {"file": "weights.h5"},  # no whole-file sha256 in format 2
        "mode": mode,
        "arguments": args,
        "results": results,
        "aliases": aliases,
        "empty": {"params": [], "state": [["layer_1"]]},
        "static_state": [
            {
                "path": ["layer_2", "training"],
                "value": mode == "train",
                "julia_type": "Val{true}" if mode == "train" else "Val{false}",
            }
        ],
        "batch": {"size": 5, "samples_independent": mode == "test"},
        "examples": {
            "inputs": [{"argument": 0, "dataset": "/examples/inputs/0", "sha256": HEX}],
            "outputs": [
                {"result": r["index"], "dataset": f"/examples/outputs/{r['index']}", "sha256": HEX}
                for r in results
            ],
            "rtol": 1e-4,  # reference_tolerances(["f32", ...])
            "atol": 1e-5,
        },
        "vjp": _module("vjp.mlir", "vjp.mlirbc"),
        "metadata": {"lux_model": "Chain(layer_1 = Dense(2 => 3), layer_2 = BatchNorm(3))"},
    }
    return m


def julia_manifest_echoes() -> dict[str, Any]:
    """Two inputs whose last Julia dims differ (no batch), returned unchanged as echoes with no
    path, beside a real output; the examples store only the real output (reference_results)."""
    args = [
        _argument(0, "input", [1], [2, 6], batch_axis=None),
        _argument(1, "input", [2], [4, 2], batch_axis=None),
    ]
    results = [
        _result(0, [["output"]], [4], None),
        _result(1, [], [2, 6], None, echo=0),
        _result(2, [], [4, 2], None, echo=1),
    ]
    return {
        "format": "juliabridge.bundle",
        "format_version": 2,
        "name": "dense_matvec_slices",
        "producer": _producer(),
        "module": _module("model.mlir", "model.mlirbc"),
        "weights": {"file": "weights.h5"},
        "mode": "test",
        "arguments": args,
        "results": results,
        "aliases": [],
        "examples": {
            "inputs": [
                {"argument": i, "dataset": f"/examples/inputs/{i}", "sha256": HEX} for i in (0, 1)
            ],
            "outputs": [{"result": 0, "dataset": "/examples/outputs/0", "sha256": HEX}],
            "rtol": 1e-4,
            "atol": 1e-5,
        },
        "metadata": {"lux_model": "F()"},
    }


def julia_manifest_identity() -> dict[str, Any]:
    """An identity model: y is x, an alias; no @main result, so no examples section; no
    artifact (a module StableHLO refused: the text is always there)."""
    return {
        "format": "juliabridge.bundle",
        "format_version": 2,
        "name": "identity",
        "producer": _producer(),
        "module": _module("model.mlir", None),
        "weights": {"file": "weights.h5"},
        "mode": "test",
        "arguments": [_argument(0, "input", [], [3, 4], batch_axis=0)],
        "results": [],
        "aliases": [{"path": ["output"], "argument": 0}],
        "batch": {"size": 4, "samples_independent": True},
        "metadata": {"lux_model": "Identity()"},
    }


def julia_manifest_tied() -> dict[str, Any]:
    """`(; a=w, b=w)`: one parameter argument with the other path as `tied_paths`."""
    return {
        "format": "juliabridge.bundle",
        "format_version": 2,
        "name": "tied",
        "producer": _producer(),
        "module": _module("model.mlir", "model.mlirbc"),
        "weights": {"file": "weights.h5"},
        "mode": "test",
        "arguments": [
            _argument(0, "input", [], [3, 2], batch_axis=0),
            _argument(1, "parameter", ["a"], [3, 3], tied=[["b"]]),
        ],
        "results": [_result(0, [["output"]], [3, 2], 0)],
        "aliases": [],
        "batch": {"size": 2, "samples_independent": True},
        "metadata": {"lux_model": "UsesTwice()"},
    }


JULIA_MANIFESTS: dict[str, Callable[[], dict[str, Any]]] = {
    "tied": julia_manifest_tied,
    "dense_bn_test": julia_manifest_dense_bn,
    "dense_bn_train": lambda: julia_manifest_dense_bn("train"),
    "echoes": julia_manifest_echoes,
    "identity": julia_manifest_identity,
}


@pytest.mark.parametrize("name", list(JULIA_MANIFESTS))
def test_the_julia_writers_manifests_are_valid(name: str) -> None:
    m = JULIA_MANIFESTS[name]()
    parsed = parse_manifest(json.loads(json.dumps(m)))
    assert parsed.format_version == 2
    assert parsed.producer.made_with_julia and parsed.producer.tool == "JuliaBridge.jl"
    assert parsed.weights.sha256 is None
    for a in parsed.arguments:
        assert (a.sha256 is not None) == (a.role != "input")


def test_the_dense_bn_manifest_reads_as_the_spec_example_does() -> None:
    from tests.test_manifest import spec_example

    ours = parse_manifest(julia_manifest_dense_bn())
    theirs = parse_manifest(spec_example())
    for field in ("mode", "aliases", "empty", "static_state", "batch"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert [(a.role, a.path, a.shape) for a in ours.arguments] == [
        (a.role, a.path, a.shape) for a in theirs.arguments
    ]
    assert ours.module.artifact is not None and ours.module.artifact.target == "1.17.0"


def _written_keys(file: str, function: str) -> set[str]:
    """The manifest keys a Julia function writes: its `"key" =>` pairs and `o["key"] = ` stores."""
    text = julia_function(file, function)
    return set(re.findall(r'"(\w+)" =>', text)) | set(re.findall(r'\b[om]\["(\w+)"\] =', text))


def _golden_keys_by_writer() -> dict[tuple[str, str], set[str]]:
    """The keys of the golden manifests, grouped by the Julia function that writes each object."""
    out: dict[tuple[str, str], set[str]] = {}

    def add(where: tuple[str, str], obj: dict[str, Any]) -> None:
        out.setdefault(where, set()).update(obj)

    for build in JULIA_MANIFESTS.values():
        m = build()
        add(("manifest.jl", "producer_object"), m["producer"])
        for a in m["arguments"]:
            add(("manifest.jl", "argument_object"), a)
        for r in m["results"]:
            add(("manifest.jl", "result_object"), r)
        for key in ("module", "vjp"):
            if key in m:
                add(("manifest.jl", "module_object"), m[key])
                if "artifact" in m[key]:
                    add(("artifact.jl", "artifact_object"), m[key]["artifact"])
        # build_manifest writes the top level and the small objects inside it
        rest = ("manifest.jl", "build_manifest")
        add(rest, m)
        add(rest, m["weights"])
        for al in m["aliases"]:
            add(rest, al)
        for key in ("empty", "batch"):
            if key in m:
                add(rest, m[key])
        for s_ in m.get("static_state", []):
            add(rest, s_)
        if "examples" in m:
            add(rest, m["examples"])
            for e in m["examples"]["inputs"] + m["examples"]["outputs"]:
                add(rest, e)
    return out


@pytest.mark.parametrize(
    "where",
    [
        ("manifest.jl", "producer_object"),
        ("manifest.jl", "argument_object"),
        ("manifest.jl", "result_object"),
        ("manifest.jl", "module_object"),
        ("artifact.jl", "artifact_object"),
        ("manifest.jl", "build_manifest"),
    ],
    ids=lambda w: w[1],
)
def test_the_golden_manifests_use_exactly_the_keys_the_julia_writer_writes(
    where: tuple[str, str],
) -> None:
    assert _golden_keys_by_writer()[where] == _written_keys(*where)


# Each change is something the Julia writer used to write (or could, from a user's trees) and
# now refuses or avoids; the reader refusing it is why.
REFUSED: list[tuple[str, Callable[[dict[str, Any]], Any], str]] = [
    (
        "examples without outputs (every result an echo, or none)",
        lambda m: m["examples"].update(outputs=[]),
        r"examples\.outputs: expected at least one reference output",
    ),
    ("a batch of 0 samples", lambda m: m["batch"].update(size=0), r"batch\.size"),
    ("a name with a trailing newline", lambda m: m.update(name="dense_bn\n"), r"name: expected"),
    (
        "a tied state array returned at its tied path",
        lambda m: (
            m["arguments"][5].update(tied_paths=[["layer_2", "mean_alias"]]),
            m["aliases"].append({"path": ["state", "layer_2", "mean_alias"], "argument": 5}),
        ),
        r"not the path of a state argument",
    ),
    (
        "a static integer beyond UInt64",
        lambda m: m["static_state"][0].update(value=1 << 70, julia_type="Int128"),
        r"static_state\[0\]\.value: integer .* fits neither",
    ),
    (
        "a static string over 4096 characters",
        lambda m: m["static_state"][0].update(value="x" * 4097, julia_type="String"),
        r"static_state\[0\]\.value: string longer than 4096",
    ),
    (
        "a julia_type over 256 characters",
        lambda m: m["static_state"][0].update(julia_type="Val{:" + "x" * 260 + "}"),
        r"static_state\[0\]\.julia_type",
    ),
    (
        "a path step with a slash",
        lambda m: m["arguments"][1].update(path=["layer_1", "w/b"]),
        r"arguments\[1\]\.path\[1\]",
    ),
    (
        "an echo whose batch_axis differs from its argument's",
        lambda m: m["results"].append(_result(1, [], [2, 5], None, echo=0)),
        r"results\[1\]\.batch_axis: expected 0",
    ),
    (
        "an artifact target newer than the writer's StableHLO",
        lambda m: m["module"]["artifact"].update(target="1.23.0"),
        r"module\.artifact\.target: target 1\.23\.0 is newer",
    ),
    (
        "a version with a leading zero",
        lambda m: m["module"]["artifact"].update(stablehlo_version="1.022.0"),
        r"module\.artifact\.stablehlo_version",
    ),
    (
        "two files with one name up to case",
        lambda m: m["vjp"]["artifact"].update(file="Model.mlirbc"),
        r"vjp\.artifact\.file: 'Model\.mlirbc' is also module\.artifact\.file",
    ),
    (
        "made_with_julia without the julia version",
        lambda m: m["producer"].update(julia=None),
        r"producer\.julia",
    ),
    (
        "samples_independent in train mode",
        lambda m: m.update(mode="train"),
        r"batch\.samples_independent: expected false in train mode",
    ),
]


@pytest.mark.parametrize(("what", "change", "needle"), REFUSED, ids=[r[0] for r in REFUSED])
def test_what_the_julia_writer_guards_against_the_reader_refuses(
    what: str, change: Callable[[dict[str, Any]], Any], needle: str
) -> None:
    m = julia_manifest_dense_bn()
    parse_manifest(copy.deepcopy(m))  # the unchanged manifest is valid
    change(m)
    with pytest.raises((juliabridge.ManifestError, juliabridge.UnsafeBundleError), match=needle):
        parse_manifest(m)


def test_the_julia_guards_exist() -> None:
    """The Julia writer checks these cases itself (conformance.jl, run on every manifest before
    it is written; tracing.jl and export.jl avoid them)."""
    conformance = _source("conformance.jl")
    for needle in (
        "must list at least one result",
        "expected an integer >= 1",
        "fits neither Int64 nor UInt64",
        "more than $MAX_STATIC_STRING",
        "printable characters",
        "is newer than the writer's StableHLO",
        "every file of a bundle has its own name",
        "the format returns a state array at its one path only",
        "an echo of argument $echo has its batch_axis",
    ):
        assert needle in conformance, needle
    # Format 2: no whole-file weights hash (datasets carry digests).
    assert '"weights" => jobject("file" => WEIGHTS_FILE)' in julia_function(
        "manifest.jl", "build_manifest"
    )
    export = _source("export.jl")
    assert export.index("check_manifest(manifest)") < export.index("write_manifest(joinpath(tmp")
    assert "first(dims) < 1" in julia_function("tracing.jl", "batch_size")
    assert "isempty(kept) ? nothing : kept" in julia_function("export.jl", "reference_results")
