"""The Julia writer (julia/src, package JuliaBridge) against docs/bundle-format.md format 3 and
the Python reader, which is the reference. No Julia runs here, so the Julia side is read:

- the constants and limits the Julia sources declare equal the Python reader's;
- the artifact procedure julia/src/artifact.jl describes (what it strips, the pass pipeline it
  runs, serializing without other dialects) is carried out here with jaxlib's StableHLO on real
  Reactant modules, and gives the artifact the Python writer gives, CHLO legalized;
- the golden digests of julia/test/digest_golden.json (which runtests.jl checks JuliaBridge
  against) are what the spec's byte layout and the Python reader give, BLAKE3 (format 3) and
  sha256 (format 2, the writer's fallback);
- JuliaBridge's own BLAKE3 (julia/src/blake3.jl) is mirrored here line by line in Python and
  the mirror checked against the blake3 package, and its self-test vectors are blake3's hashes;
- the manifests the Julia writer builds (written out here from julia/src/manifest.jl's
  structures, for a test-mode and a train-mode Dense+BatchNorm, echoed arguments, and a model
  without results) are valid for parse_manifest, use exactly the keys manifest.jl writes, and
  each case the Julia writer now guards against is one the reader refuses; the format-2
  manifest the writer falls back to is valid too.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import json
import operator
import random
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3
import ml_dtypes
import numpy as np
import pytest
from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import stablehlo as _stablehlo

import juliabridge
from juliabridge import dtypes
from juliabridge.bundle import manifest as spec
from juliabridge.bundle.files.digest import dataset_digest
from juliabridge.bundle.manifest import parse_manifest, schema
from juliabridge.bundle.write import writer
from juliabridge.jaxinternals import make_context
from juliabridge.lux import params_io
from juliabridge.stablehlo import artifact, parse_module, sanitize
from juliabridge.stablehlo.sanitize import walk

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "julia" / "src"
FIXTURES = REPO.parent / "shared" / "fixtures" / "reactant"
GOLDEN_DIGESTS = REPO / "julia" / "test" / "digest_golden.json"
RUNTESTS = REPO / "julia" / "test" / "runtests.jl"


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


def test_the_julia_digest_schemes_are_the_formats() -> None:
    """Format 3, what the writer writes, digests datasets with BLAKE3 under "blake3"; format 2,
    what it writes when BLAKE3 failed its self-test, with sha256 under "sha256": the reader's
    per-version keys (format 1 has no per-dataset digest)."""
    assert julia_const("FORMAT_VERSION") == 3
    assert julia_const("FALLBACK_FORMAT_VERSION") == 2
    julia = {
        julia_const("FORMAT_VERSION"): julia_const("DIGEST_KEY"),
        julia_const("FALLBACK_FORMAT_VERSION"): julia_const("FALLBACK_DIGEST_KEY"),
    }
    assert julia == {v: k for v, k in schema.DATASET_DIGEST.items() if k is not None}
    digests = _source("digests.jl")
    assert "const DIGEST_SCHEME = DigestScheme(FORMAT_VERSION, DIGEST_KEY, :blake3)" in digests
    assert (
        "const FALLBACK_DIGEST_SCHEME = DigestScheme(FALLBACK_FORMAT_VERSION, FALLBACK_DIGEST_KEY, :sha256)"
        in digests
    )
    # hex_digest maps the algorithms to the hash functions the keys name.
    hex_digest = julia_function("digests.jl", "hex_digest")
    assert "algorithm === :blake3 && return blake3_hex(bytes)" in hex_digest
    assert "algorithm === :sha256 && return bytes2hex(SHA.sha256(bytes))" in hex_digest


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
    """BLAKE3 (format 3) and sha256 (format 2) of the spec's bytes, and the reader's digests."""
    assert blake3.blake3(_spec_bytes(case)).hexdigest() == case["blake3"]
    assert hashlib.sha256(_spec_bytes(case)).hexdigest() == case["sha256"]
    value = _mlir_array(case)
    assert value.shape == tuple(reversed(case["julia_shape"]))
    assert dataset_digest(value, case["dtype"], "blake3") == case["blake3"]
    assert dataset_digest(value, case["dtype"], "sha256") == case["sha256"]
    assert dataset_digest(value, case["dtype"]) == case["blake3"]  # format 3's is the default


def test_the_golden_file_says_what_it_holds() -> None:
    doc = json.loads(GOLDEN_DIGESTS.read_text())
    assert "BLAKE3" in doc["about"] and "sha256" in doc["about"]
    assert all(
        set(c) == {"dtype", "julia_shape", "column_major", "blake3", "sha256"} for c in doc["cases"]
    )


def _python_round_trip(tmp_path: Path, cases: list[dict[str, Any]]) -> None:
    from juliabridge.bundle.weights import open_weights, write_weights

    arrays = {f"/golden/{i}": (_mlir_array(c), c["dtype"]) for i, c in enumerate(cases)}
    write_weights(tmp_path / "w.h5", arrays)
    with open_weights(tmp_path / "w.h5") as f:
        for i, c in enumerate(cases):
            value = f.read_array(
                f"/golden/{i}", tuple(reversed(c["julia_shape"])), c["dtype"], "golden"
            )
            assert dataset_digest(value, c["dtype"], "blake3") == c["blake3"]
            assert dataset_digest(value, c["dtype"], "sha256") == c["sha256"]


def test_golden_digests_survive_the_python_weights_file(tmp_path: Path) -> None:
    """Written by the Python writer and read by the reader, each golden array keeps its digest:
    the same values runtests.jl writes and reads back with JuliaBridge."""
    _python_round_trip(tmp_path, [c for c in _golden_cases() if c["julia_shape"]])


def test_rank_0_golden_digests_survive_the_python_weights_file(tmp_path: Path) -> None:
    _python_round_trip(tmp_path, [c for c in _golden_cases() if not c["julia_shape"]])


def test_the_julia_digest_hashes_the_stored_encoding_of_the_decoded_values() -> None:
    """canonical_digest hashes encode_for_hdf5 of the values (bits for halves, 0/1 bytes for
    Bool), and read_array takes it over the decoded array, never over the raw dataset, with
    the manifest's algorithm (load.jl: the key of the bundle's format)."""
    weights = _source("weights.jl")
    assert "stored_digest(canonical_encoding(A, dtype), algorithm)" in weights
    read = julia_function("weights.jl", "read_array")
    assert "canonical_digest(A, String(tag), algorithm)" in read
    assert "stored_digest(collect(raw)" not in read
    assert read.index("decode_from_hdf5(raw") < read.index("canonical_digest(A")
    load = julia_function("load.jl", "weights_location")
    assert "scheme = digest_scheme_of(v)" in load
    assert "digest = manifest_value(a, scheme.key, AbstractString, mpath, at)" in load
    assert "digest=e.digest, algorithm=e.algorithm" in julia_function("load.jl", "read_entry")
    # The writer hashes with the algorithm of the format it writes.
    export = _source("export.jl")
    assert "algorithm=scheme.algorithm" in export
    assert export.index("scheme = writer_digest_scheme(target)") < export.index("write_weights(")


# --- JuliaBridge's BLAKE3 (julia/src/blake3.jl) --------------------------------------------
#
# The Python mirror below is julia/src/blake3.jl line by line: every code line of the Julia file
# (docstrings, comments and blank lines left out) is the `# jl:` comment above the Python it
# became, in order, and test_the_mirror_is_blake3_jl_line_by_line holds the two files to that.
# Julia's semantics are spelled out by the helpers just below: UInt32 arithmetic wraps,
# `bitrotate` rotates left (right for a negative count), indexing is 1-based (`at`, `set_at`,
# `copyto`, `view`), `x % UInt32` truncates, and a conversion such as `UInt32(x)` refuses a value
# out of range as Julia's InexactError would.

_M32 = 0xFFFFFFFF


def u32(x: int) -> int:
    """UInt32 `+` in Julia: modulo 2^32."""
    return x & _M32


def uint32(x: int) -> int:
    """Julia's `UInt32(x)`: an InexactError unless x fits."""
    assert 0 <= x <= _M32, x
    return x


def uint64(x: int) -> int:
    """Julia's `UInt64(x)`."""
    assert 0 <= x < 1 << 64, x
    return x


def rem_u32(x: int) -> int:
    """Julia's `x % UInt32`: the low 32 bits."""
    return x & _M32


def rem_u8(x: int) -> int:
    """Julia's `x % UInt8`: the low 8 bits."""
    return x & 0xFF


def bitrotate(x: int, k: int) -> int:
    """Julia's `bitrotate(x::UInt32, k)`: rotate left by k bits, right by -k for negative k."""
    assert 0 <= x <= _M32
    k %= 32
    return ((x << k) | (x >> (32 - k))) & _M32


def xor(a: int, b: int) -> int:
    return a ^ b


def at(v: Any, i: int) -> Any:
    """`v[i]`, 1-based; out of range is Julia's BoundsError."""
    assert 1 <= i <= len(v), (i, len(v))
    return v[i - 1]


def set_at(v: Any, i: int, x: int) -> None:
    """`v[i] = x`, 1-based."""
    assert 1 <= i <= len(v), (i, len(v))
    v[i - 1] = x


def ntuple(f: Callable[[int], Any], n: int) -> tuple[Any, ...]:
    """`ntuple(f, Val(n))`: f(1), ..., f(n)."""
    return tuple(f(i) for i in range(1, n + 1))


def firstindex(v: Any) -> int:
    return 1


def lastindex(v: Any) -> int:
    return len(v)


def fill_zero(v: bytearray) -> None:
    """`fill!(v, 0x00)`."""
    v[:] = bytes(len(v))


def copyto(dest: bytearray, doff: int, src: Any, soff: int, n: int) -> None:
    """`copyto!(dest, doff, src, soff, n)`: n elements, offsets 1-based, bounds checked."""
    assert n >= 0 and doff >= 1 and doff + n - 1 <= len(dest), (doff, n, len(dest))
    assert soff >= 1 and soff + n - 1 <= len(src), (soff, n, len(src))
    dest[doff - 1 : doff - 1 + n] = src[soff - 1 : soff - 1 + n]


def view(v: Any, first: int, last: int) -> memoryview:
    """`view(v, first:last)`, itself indexed from 1 again (a SubArray's firstindex is 1)."""
    assert first >= 1 and last <= len(v), (first, last, len(v))
    return memoryview(v)[first - 1 : last]


def something(x: Any, default: Any) -> Any:
    return default if x is None else x


class Ref:
    """Julia's `Ref`: `r[]` is `r.x`."""

    def __init__(self, x: Any) -> None:
        self.x = x


# --- the Python mirror of julia/src/blake3.jl (begin) ---
# jl: const BLAKE3_OUT_LEN = 32
BLAKE3_OUT_LEN = julia_const("BLAKE3_OUT_LEN")
# jl: const BLAKE3_BLOCK_LEN = 64
BLAKE3_BLOCK_LEN = julia_const("BLAKE3_BLOCK_LEN")
# jl: const BLAKE3_CHUNK_LEN = 1024
BLAKE3_CHUNK_LEN = julia_const("BLAKE3_CHUNK_LEN")
# jl: const BLAKE3_MAX_DEPTH = 54
BLAKE3_MAX_DEPTH = julia_const("BLAKE3_MAX_DEPTH")
# jl: const BLAKE3_CHUNK_START = 0x00000001
BLAKE3_CHUNK_START = julia_const("BLAKE3_CHUNK_START")
# jl: const BLAKE3_CHUNK_END = 0x00000002
BLAKE3_CHUNK_END = julia_const("BLAKE3_CHUNK_END")
# jl: const BLAKE3_PARENT = 0x00000004
BLAKE3_PARENT = julia_const("BLAKE3_PARENT")
# jl: const BLAKE3_ROOT = 0x00000008
BLAKE3_ROOT = julia_const("BLAKE3_ROOT")
# jl: const BLAKE3_IV = (0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19)
BLAKE3_IV = julia_const("BLAKE3_IV")
# jl: const BLAKE3_MSG_PERMUTATION = (2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8)
BLAKE3_MSG_PERMUTATION = julia_const("BLAKE3_MSG_PERMUTATION")
# jl: const Blake3Words8 = NTuple{8,UInt32}
Blake3Words8 = tuple[int, ...]
# jl: const Blake3Words16 = NTuple{16,UInt32}
Blake3Words16 = tuple[int, ...]


# jl: @inline function blake3_g(a::UInt32, b::UInt32, c::UInt32, d::UInt32, mx::UInt32, my::UInt32)
def blake3_g(a: int, b: int, c: int, d: int, mx: int, my: int) -> tuple[int, int, int, int]:
    # jl: a = a + b + mx
    a = u32(a + b + mx)
    # jl: d = bitrotate(xor(d, a), -16)
    d = bitrotate(xor(d, a), -16)
    # jl: c = c + d
    c = u32(c + d)
    # jl: b = bitrotate(xor(b, c), -12)
    b = bitrotate(xor(b, c), -12)
    # jl: a = a + b + my
    a = u32(a + b + my)
    # jl: d = bitrotate(xor(d, a), -8)
    d = bitrotate(xor(d, a), -8)
    # jl: c = c + d
    c = u32(c + d)
    # jl: b = bitrotate(xor(b, c), -7)
    b = bitrotate(xor(b, c), -7)
    # jl: return (a, b, c, d)
    return (a, b, c, d)
    # jl: end


# jl: @inline function blake3_round(s::Blake3Words16, m::Blake3Words16)::Blake3Words16
def blake3_round(s: Blake3Words16, m: Blake3Words16) -> Blake3Words16:
    # jl: s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15 = s
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15 = s
    # jl: s0, s4, s8, s12 = blake3_g(s0, s4, s8, s12, m[1], m[2])
    s0, s4, s8, s12 = blake3_g(s0, s4, s8, s12, at(m, 1), at(m, 2))
    # jl: s1, s5, s9, s13 = blake3_g(s1, s5, s9, s13, m[3], m[4])
    s1, s5, s9, s13 = blake3_g(s1, s5, s9, s13, at(m, 3), at(m, 4))
    # jl: s2, s6, s10, s14 = blake3_g(s2, s6, s10, s14, m[5], m[6])
    s2, s6, s10, s14 = blake3_g(s2, s6, s10, s14, at(m, 5), at(m, 6))
    # jl: s3, s7, s11, s15 = blake3_g(s3, s7, s11, s15, m[7], m[8])
    s3, s7, s11, s15 = blake3_g(s3, s7, s11, s15, at(m, 7), at(m, 8))
    # jl: s0, s5, s10, s15 = blake3_g(s0, s5, s10, s15, m[9], m[10])
    s0, s5, s10, s15 = blake3_g(s0, s5, s10, s15, at(m, 9), at(m, 10))
    # jl: s1, s6, s11, s12 = blake3_g(s1, s6, s11, s12, m[11], m[12])
    s1, s6, s11, s12 = blake3_g(s1, s6, s11, s12, at(m, 11), at(m, 12))
    # jl: s2, s7, s8, s13 = blake3_g(s2, s7, s8, s13, m[13], m[14])
    s2, s7, s8, s13 = blake3_g(s2, s7, s8, s13, at(m, 13), at(m, 14))
    # jl: s3, s4, s9, s14 = blake3_g(s3, s4, s9, s14, m[15], m[16])
    s3, s4, s9, s14 = blake3_g(s3, s4, s9, s14, at(m, 15), at(m, 16))
    # jl: return (s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
    return (s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
    # jl: end


# jl: @inline blake3_permute(m::Blake3Words16)::Blake3Words16 = ntuple(i -> m[BLAKE3_MSG_PERMUTATION[i] + 1], Val(16))
def blake3_permute(m: Blake3Words16) -> Blake3Words16:
    return ntuple(lambda i: at(m, at(BLAKE3_MSG_PERMUTATION, i) + 1), 16)


# jl: @inline blake3_feed_forward(s::Blake3Words16, cv::Blake3Words8)::Blake3Words16 =
# jl: ntuple(i -> i <= 8 ? xor(s[i], s[i + 8]) : xor(s[i], cv[i - 8]), Val(16))
def blake3_feed_forward(s: Blake3Words16, cv: Blake3Words8) -> Blake3Words16:
    return ntuple(
        lambda i: xor(at(s, i), at(s, i + 8)) if i <= 8 else xor(at(s, i), at(cv, i - 8)), 16
    )


# jl: function blake3_compress(cv::Blake3Words8, m::Blake3Words16, counter::UInt64, block_len::UInt32, flags::UInt32)::Blake3Words16
def blake3_compress(
    cv: Blake3Words8, m: Blake3Words16, counter: int, block_len: int, flags: int
) -> Blake3Words16:
    assert len(cv) == 8 and len(m) == 16  # the argument types NTuple{8,UInt32}, NTuple{16,UInt32}
    _ = (uint64(counter), uint32(block_len), uint32(flags))  # the argument types' ranges
    # jl: s = (
    # jl: cv[1], cv[2], cv[3], cv[4], cv[5], cv[6], cv[7], cv[8],
    # jl: BLAKE3_IV[1], BLAKE3_IV[2], BLAKE3_IV[3], BLAKE3_IV[4],
    # jl: counter % UInt32, (counter >> 32) % UInt32, block_len, flags,
    # jl: )
    s = (
        *(at(cv, 1), at(cv, 2), at(cv, 3), at(cv, 4), at(cv, 5), at(cv, 6), at(cv, 7), at(cv, 8)),
        *(at(BLAKE3_IV, 1), at(BLAKE3_IV, 2), at(BLAKE3_IV, 3), at(BLAKE3_IV, 4)),
        *(rem_u32(counter), rem_u32(counter >> 32), block_len, flags),
    )
    # jl: for r in 1:7
    for r in range(1, 8):
        # jl: s = blake3_round(s, m)
        s = blake3_round(s, m)
        # jl: r < 7 && (m = blake3_permute(m))
        if r < 7:
            m = blake3_permute(m)
        # jl: end
    # jl: return blake3_feed_forward(s, cv)
    return blake3_feed_forward(s, cv)
    # jl: end


# jl: @inline blake3_first8(t::Blake3Words16)::Blake3Words8 = ntuple(i -> t[i], Val(8))
def blake3_first8(t: Blake3Words16) -> Blake3Words8:
    return ntuple(lambda i: at(t, i), 8)


# jl: @inline blake3_load_word(block::Vector{UInt8}, o::Int)::UInt32 =
# jl: UInt32(block[o + 1]) | (UInt32(block[o + 2]) << 8) | (UInt32(block[o + 3]) << 16) | (UInt32(block[o + 4]) << 24)
def blake3_load_word(block: bytearray, o: int) -> int:
    return uint32(
        uint32(at(block, o + 1))
        | u32(uint32(at(block, o + 2)) << 8)
        | u32(uint32(at(block, o + 3)) << 16)
        | u32(uint32(at(block, o + 4)) << 24)
    )


# jl: @inline blake3_block_words(block::Vector{UInt8})::Blake3Words16 = ntuple(i -> blake3_load_word(block, 4 * (i - 1)), Val(16))
def blake3_block_words(block: bytearray) -> Blake3Words16:
    return ntuple(lambda i: blake3_load_word(block, 4 * (i - 1)), 16)


# jl: struct Blake3Output
@dataclass(frozen=True)
class Blake3Output:
    # jl: cv::Blake3Words8
    cv: Blake3Words8
    # jl: block_words::Blake3Words16
    block_words: Blake3Words16
    # jl: counter::UInt64
    counter: int
    # jl: block_len::UInt32
    block_len: int
    # jl: flags::UInt32
    flags: int
    # jl: end


# jl: blake3_chaining_value(o::Blake3Output)::Blake3Words8 = blake3_first8(blake3_compress(o.cv, o.block_words, o.counter, o.block_len, o.flags))
def blake3_chaining_value(o: Blake3Output) -> Blake3Words8:
    return blake3_first8(blake3_compress(o.cv, o.block_words, o.counter, o.block_len, o.flags))


# jl: blake3_parent_output(left::Blake3Words8, right::Blake3Words8)::Blake3Output =
# jl: Blake3Output(BLAKE3_IV, (left..., right...), UInt64(0), UInt32(BLAKE3_BLOCK_LEN), BLAKE3_PARENT)
def blake3_parent_output(left: Blake3Words8, right: Blake3Words8) -> Blake3Output:
    return Blake3Output(
        BLAKE3_IV, (*left, *right), uint64(0), uint32(BLAKE3_BLOCK_LEN), BLAKE3_PARENT
    )


# jl: mutable struct Blake3Hasher
@dataclass
class Blake3Hasher:
    # jl: cv::Blake3Words8
    cv: Blake3Words8
    # jl: chunk_counter::UInt64
    chunk_counter: int
    # jl: block::Vector{UInt8}
    block: bytearray
    # jl: block_len::Int
    block_len: int
    # jl: blocks_compressed::Int
    blocks_compressed: int
    # jl: cv_stack::Vector{Blake3Words8}
    cv_stack: list[Blake3Words8]
    # jl: end

    # jl: function Blake3Hasher()
    @classmethod
    def new(cls) -> Blake3Hasher:
        # jl: stack = sizehint!(Blake3Words8[], BLAKE3_MAX_DEPTH)
        stack: list[Blake3Words8] = []
        # jl: return Blake3Hasher(BLAKE3_IV, UInt64(0), zeros(UInt8, BLAKE3_BLOCK_LEN), 0, 0, stack)
        return cls(BLAKE3_IV, uint64(0), bytearray(BLAKE3_BLOCK_LEN), 0, 0, stack)
        # jl: end


# jl: blake3_chunk_len(h::Blake3Hasher)::Int = BLAKE3_BLOCK_LEN * h.blocks_compressed + h.block_len
def blake3_chunk_len(h: Blake3Hasher) -> int:
    return BLAKE3_BLOCK_LEN * h.blocks_compressed + h.block_len


# jl: blake3_start_flag(h::Blake3Hasher)::UInt32 = h.blocks_compressed == 0 ? BLAKE3_CHUNK_START : 0x00000000
def blake3_start_flag(h: Blake3Hasher) -> int:
    return BLAKE3_CHUNK_START if h.blocks_compressed == 0 else 0x00000000


# jl: blake3_chunk_output(h::Blake3Hasher)::Blake3Output =
# jl: Blake3Output(h.cv, blake3_block_words(h.block), h.chunk_counter, UInt32(h.block_len), blake3_start_flag(h) | BLAKE3_CHUNK_END)
def blake3_chunk_output(h: Blake3Hasher) -> Blake3Output:
    return Blake3Output(
        h.cv,
        blake3_block_words(h.block),
        h.chunk_counter,
        uint32(h.block_len),
        blake3_start_flag(h) | BLAKE3_CHUNK_END,
    )


# jl: function blake3_start_chunk!(h::Blake3Hasher, counter::UInt64)
def blake3_start_chunk_(h: Blake3Hasher, counter: int) -> None:
    # jl: h.cv = BLAKE3_IV
    h.cv = BLAKE3_IV
    # jl: h.chunk_counter = counter
    h.chunk_counter = uint64(counter)
    # jl: fill!(h.block, 0x00)
    fill_zero(h.block)
    # jl: h.block_len = 0
    h.block_len = 0
    # jl: h.blocks_compressed = 0
    h.blocks_compressed = 0
    # jl: return nothing
    return None
    # jl: end


# jl: function blake3_chunk_update!(h::Blake3Hasher, data::AbstractVector{UInt8}, i::Int, n::Int)
def blake3_chunk_update_(h: Blake3Hasher, data: Any, i: int, n: int) -> None:
    # jl: stop = i + n - 1
    stop = i + n - 1
    # jl: while i <= stop
    while i <= stop:
        # jl: if h.block_len == BLAKE3_BLOCK_LEN
        if h.block_len == BLAKE3_BLOCK_LEN:
            # jl: words = blake3_block_words(h.block)
            words = blake3_block_words(h.block)
            # jl: h.cv = blake3_first8(blake3_compress(h.cv, words, h.chunk_counter, UInt32(BLAKE3_BLOCK_LEN), blake3_start_flag(h)))
            h.cv = blake3_first8(
                blake3_compress(
                    h.cv, words, h.chunk_counter, uint32(BLAKE3_BLOCK_LEN), blake3_start_flag(h)
                )
            )
            # jl: h.blocks_compressed += 1
            h.blocks_compressed += 1
            # jl: fill!(h.block, 0x00)
            fill_zero(h.block)
            # jl: h.block_len = 0
            h.block_len = 0
            # jl: end
        # jl: take = min(BLAKE3_BLOCK_LEN - h.block_len, stop - i + 1)
        take = min(BLAKE3_BLOCK_LEN - h.block_len, stop - i + 1)
        # jl: copyto!(h.block, h.block_len + 1, data, i, take)
        copyto(h.block, h.block_len + 1, data, i, take)
        # jl: h.block_len += take
        h.block_len += take
        # jl: i += take
        i += take
        # jl: end
    # jl: return nothing
    return None
    # jl: end


# jl: function blake3_add_chunk_cv!(h::Blake3Hasher, cv::Blake3Words8, total_chunks::UInt64)
def blake3_add_chunk_cv_(h: Blake3Hasher, cv: Blake3Words8, total_chunks: int) -> None:
    # jl: while (total_chunks & 0x0000000000000001) == 0
    while (total_chunks & 0x0000000000000001) == 0:
        # jl: cv = blake3_chaining_value(blake3_parent_output(pop!(h.cv_stack), cv))
        cv = blake3_chaining_value(blake3_parent_output(h.cv_stack.pop(), cv))
        # jl: total_chunks >>= 1
        total_chunks >>= 1
        # jl: end
    # jl: push!(h.cv_stack, cv)
    h.cv_stack.append(cv)
    assert len(h.cv_stack) <= BLAKE3_MAX_DEPTH  # what sizehint! reserved
    # jl: return nothing
    return None
    # jl: end


# jl: function update!(h::Blake3Hasher, data::AbstractVector{UInt8})
def update_(h: Blake3Hasher, data: Any) -> Blake3Hasher:
    # jl: i = firstindex(data)
    i = firstindex(data)
    # jl: stop = lastindex(data)
    stop = lastindex(data)
    # jl: while i <= stop
    while i <= stop:
        # jl: if blake3_chunk_len(h) == BLAKE3_CHUNK_LEN
        if blake3_chunk_len(h) == BLAKE3_CHUNK_LEN:
            # jl: chunk_cv = blake3_chaining_value(blake3_chunk_output(h))
            chunk_cv = blake3_chaining_value(blake3_chunk_output(h))
            # jl: total_chunks = h.chunk_counter + UInt64(1)
            total_chunks = uint64(h.chunk_counter + uint64(1))
            # jl: blake3_add_chunk_cv!(h, chunk_cv, total_chunks)
            blake3_add_chunk_cv_(h, chunk_cv, total_chunks)
            # jl: blake3_start_chunk!(h, total_chunks)
            blake3_start_chunk_(h, total_chunks)
            # jl: end
        # jl: take = min(BLAKE3_CHUNK_LEN - blake3_chunk_len(h), stop - i + 1)
        take = min(BLAKE3_CHUNK_LEN - blake3_chunk_len(h), stop - i + 1)
        # jl: blake3_chunk_update!(h, data, i, take)
        blake3_chunk_update_(h, data, i, take)
        # jl: i += take
        i += take
        # jl: end
    # jl: return h
    return h
    # jl: end


# jl: function blake3_digest(h::Blake3Hasher)::Vector{UInt8}
def blake3_digest(h: Blake3Hasher) -> bytearray:
    # jl: out = blake3_chunk_output(h)
    out = blake3_chunk_output(h)
    # jl: n = length(h.cv_stack)
    n = len(h.cv_stack)
    # jl: while n > 0
    while n > 0:
        # jl: out = blake3_parent_output(h.cv_stack[n], blake3_chaining_value(out))
        out = blake3_parent_output(at(h.cv_stack, n), blake3_chaining_value(out))
        # jl: n -= 1
        n -= 1
        # jl: end
    # jl: words = blake3_compress(out.cv, out.block_words, UInt64(0), out.block_len, out.flags | BLAKE3_ROOT)
    words = blake3_compress(
        out.cv, out.block_words, uint64(0), out.block_len, out.flags | BLAKE3_ROOT
    )
    # jl: bytes = Vector{UInt8}(undef, BLAKE3_OUT_LEN)
    bytes_ = bytearray(BLAKE3_OUT_LEN)
    # jl: for k in 1:8
    for k in range(1, 9):
        # jl: for j in 1:4
        for j in range(1, 5):
            # jl: bytes[4 * (k - 1) + j] = (words[k] >> (8 * (j - 1))) % UInt8
            set_at(bytes_, 4 * (k - 1) + j, rem_u8(at(words, k) >> (8 * (j - 1))))
            # jl: end
        # jl: end
    # jl: return bytes
    return bytes_
    # jl: end


# jl: blake3_hexdigest(h::Blake3Hasher)::String = bytes2hex(blake3_digest(h))
def blake3_hexdigest(h: Blake3Hasher) -> str:
    return blake3_digest(h).hex()


# jl: blake3_hex(data::AbstractVector{UInt8})::String = blake3_hexdigest(update!(Blake3Hasher(), data))
def blake3_hex(data: Any) -> str:
    return blake3_hexdigest(update_(Blake3Hasher.new(), data))


# jl: blake3_test_input(len::Integer)::Vector{UInt8} = UInt8[i % 251 for i in 0:(len - 1)]
def blake3_test_input(len_: int) -> bytearray:
    return bytearray(i % 251 for i in range(0, (len_ - 1) + 1))


# jl: const BLAKE3_KNOWN_ANSWERS = (...)
def _known_answers(text: str, name: str) -> tuple[tuple[int, str], ...]:
    """The `len => "hex"` pairs of the tuple `name` in Julia source `text`."""
    start = text.index(f"{name} = (")
    block = text[start : text.index("\n)\n", start)]
    return tuple((int(n), h) for n, h in re.findall(r'(\d+) => "([0-9a-f]{64})"', block))


BLAKE3_KNOWN_ANSWERS = _known_answers(_source("blake3.jl"), "const BLAKE3_KNOWN_ANSWERS")
# jl: const BLAKE3_SELFTEST_PIECES = (1, 63, 64, 65, 1023, 1024, 1025, 7)
BLAKE3_SELFTEST_PIECES = julia_const("BLAKE3_SELFTEST_PIECES")


# jl: function blake3_selftest_failure()::Union{Nothing,String}
def blake3_selftest_failure() -> str | None:
    # jl: try
    try:
        # jl: for (len, want) in BLAKE3_KNOWN_ANSWERS
        for len_, want in BLAKE3_KNOWN_ANSWERS:
            # jl: input = blake3_test_input(len)
            input_ = blake3_test_input(len_)
            # jl: got = blake3_hex(input)
            got = blake3_hex(input_)
            # jl: got == want || return "BLAKE3 of the $len-byte test input is $got, expected $want"
            if got != want:
                return f"BLAKE3 of the {len_}-byte test input is {got}, expected {want}"
            # jl: h = Blake3Hasher()
            h = Blake3Hasher.new()
            # jl: i, k = 1, 0
            i, k = 1, 0
            # jl: while i <= len
            while i <= len_:
                # jl: n = min(BLAKE3_SELFTEST_PIECES[k % length(BLAKE3_SELFTEST_PIECES) + 1], len - i + 1)
                n = min(
                    at(BLAKE3_SELFTEST_PIECES, k % len(BLAKE3_SELFTEST_PIECES) + 1), len_ - i + 1
                )
                # jl: update!(h, view(input, i:(i + n - 1)))
                update_(h, view(input_, i, i + n - 1))
                # jl: i += n
                i += n
                # jl: k += 1
                k += 1
                # jl: end
            # jl: got = blake3_hexdigest(h)
            got = blake3_hexdigest(h)
            # jl: got == want || return "BLAKE3 of the $len-byte test input hashed in pieces is $got, expected $want"
            if got != want:
                return f"BLAKE3 of the {len_}-byte test input hashed in pieces is {got}, expected {want}"
            # jl: end
    # jl: catch err
    except Exception as err:
        # jl: return "the BLAKE3 code threw $(sprint(showerror, err))"
        return f"the BLAKE3 code threw {err!r}"
        # jl: end
    # jl: return nothing
    return None
    # jl: end


# jl: blake3_selftest()::Bool = blake3_selftest_failure() === nothing
def blake3_selftest() -> bool:
    return blake3_selftest_failure() is None


# jl: const BLAKE3_SELFTEST_RESULT = Ref{Union{Nothing,String}}(nothing)
BLAKE3_SELFTEST_RESULT = Ref(None)


# jl: function blake3_selftest_problem()::Union{Nothing,String}
def blake3_selftest_problem() -> str | None:
    # jl: r = BLAKE3_SELFTEST_RESULT[]
    r = BLAKE3_SELFTEST_RESULT.x
    # jl: if r === nothing
    if r is None:
        # jl: r = something(blake3_selftest_failure(), "")
        r = something(blake3_selftest_failure(), "")
        # jl: BLAKE3_SELFTEST_RESULT[] = r
        BLAKE3_SELFTEST_RESULT.x = r
        # jl: end
    # jl: return isempty(r) ? nothing : r
    return None if r == "" else r
    # jl: end


# --- the Python mirror of julia/src/blake3.jl (end) ---


def _strip_julia_comment(line: str) -> str:
    in_string = False
    for k, ch in enumerate(line):
        if ch == '"':
            in_string = not in_string
        elif ch == "#" and not in_string:
            return line[:k].rstrip()
    return line


def julia_code_lines(text: str) -> list[str]:
    """The code lines of a Julia file, stripped: no docstrings, comments or blank lines; the
    known-answer table stands as one line (its values are pinned by their own test)."""
    out: list[str] = []
    in_doc = in_table = False
    for raw in text.splitlines():
        line = raw.strip()
        if in_doc:
            in_doc = line != '"""' and not line.endswith('"""')
            continue
        if line.startswith('"""'):
            in_doc = line == '"""' or not line.endswith('"""')
            continue
        line = _strip_julia_comment(line)
        if not line:
            continue
        if in_table:
            in_table = line != ")"
            continue
        if line == "const BLAKE3_KNOWN_ANSWERS = (":
            in_table = True
            line = "const BLAKE3_KNOWN_ANSWERS = (...)"
        out.append(line)
    return out


def mirror_lines() -> list[str]:
    """The `# jl:` lines of the mirror above, in order."""
    own = Path(__file__).read_text(encoding="utf-8")
    own = own[
        own.index("# --- the Python mirror of julia/src/blake3.jl (begin) ---") : own.index(
            "# --- the Python mirror of julia/src/blake3.jl (end) ---"
        )
    ]
    return [
        line.strip()[len("# jl: ") :]
        for line in own.splitlines()
        if line.strip().startswith("# jl: ")
    ]


def test_the_mirror_is_blake3_jl_line_by_line() -> None:
    """Every code line of julia/src/blake3.jl, in order, is a `# jl:` line of the mirror, so a
    change to the Julia code fails here until the mirror is changed the same way."""
    assert mirror_lines() == julia_code_lines(_source("blake3.jl"))


def _random_bytes(rng: random.Random, n: int) -> bytes:
    return rng.randbytes(n)


# Lengths around every block (64) and chunk (1024) boundary of the first chunks, where the
# code's edge cases are, then random lengths up to 10,000 and a few around 100 KB.
_EDGE_LENGTHS = sorted(
    {n for n in range(0, 200)}
    | {b * 64 + d for b in range(1, 20) for d in (-1, 0, 1)}
    | {c * 1024 + d for c in range(1, 10) for d in (-65, -64, -63, -1, 0, 1, 63, 64, 65)}
)


def test_the_julia_blake3_algorithm_is_blake3() -> None:
    """The Python mirror of julia/src/blake3.jl equals the blake3 package on random inputs of
    many lengths: 0 to 10,000 bytes (every block and chunk boundary of the first ten chunks)
    and a few of about 100 KB (trees up to seven levels deep, incomplete subtrees).

    This checks the algorithm julia/src/blake3.jl writes down (constants, index arithmetic,
    chunk and tree logic), not Julia's execution of it: what Julia does with these lines (UInt32
    wrapping, bitrotate, 1-based indexing) is what the mirror's helpers state, and
    runtests.jl's known answers (blake3_selftest) check it where Julia runs."""
    rng = random.Random(20260821)
    lengths = [*_EDGE_LENGTHS, *(rng.randrange(0, 10_001) for _ in range(60))]
    lengths += [102_400, 100_000 + rng.randrange(0, 4096), 131_072 + 1]
    for n in lengths:
        data = _random_bytes(rng, n)
        assert blake3_hex(data) == blake3.blake3(data).hexdigest(), n


def test_the_julia_blake3_algorithm_hashes_in_pieces() -> None:
    """update! in pieces (byte vectors and views, split at awkward places: inside and at block
    and chunk boundaries, empty pieces) gives the one-shot hash, and blake3_digest leaves the
    hasher as it was (more updates may follow)."""
    rng = random.Random(7)
    for n in (0, 1, 64, 65, 1024, 1025, 2048, 3000, 5121, 9999, 33 * 1024 + 7):
        data = bytearray(_random_bytes(rng, n))
        want = blake3.blake3(data).hexdigest()
        for sizes in ((1,), (63, 1, 64), (1023, 2), (1024,), (1025, 0, 7), (0, 100, 4096)):
            h = Blake3Hasher.new()
            i, k = 0, 0
            while i < n:
                take = min(sizes[k % len(sizes)], n - i)
                piece = view(data, i + 1, i + take) if k % 2 else bytearray(data[i : i + take])
                update_(h, piece)
                i += take
                k += 1
            assert blake3_hexdigest(h) == want, (n, sizes)
        h = Blake3Hasher.new()
        cut = rng.randrange(0, n + 1)
        update_(h, data[:cut])
        assert blake3_hexdigest(h) == blake3.blake3(data[:cut]).hexdigest()
        update_(h, data[cut:])
        assert blake3_hexdigest(h) == want == blake3_hexdigest(h)


def test_the_julia_self_test_passes_in_the_mirror() -> None:
    """blake3_selftest_failure, as blake3.jl writes it, finds nothing wrong: a mistake in the
    self-test itself would make every export fall back to format 2."""
    assert blake3_selftest_failure() is None
    assert blake3_selftest()
    BLAKE3_SELFTEST_RESULT.x = None
    assert blake3_selftest_problem() is None and BLAKE3_SELFTEST_RESULT.x == ""
    BLAKE3_SELFTEST_RESULT.x = "simulated"
    assert blake3_selftest_problem() == "simulated"
    BLAKE3_SELFTEST_RESULT.x = None


REQUIRED_SELFTEST_LENGTHS = (
    *(0, 1, 63, 64, 65, 1023, 1024, 1025, 2048, 2049, 3072, 3073, 4096, 4097, 5120, 5121),
    *(6144, 6145, 7168, 7169, 8192, 8193, 16384, 31744, 102400),
)


def test_the_julia_self_test_vectors_are_blake3s() -> None:
    """BLAKE3_KNOWN_ANSWERS (blake3.jl) and the known answers runtests.jl checks are the blake3
    package's hashes of the official test-vector inputs (byte i is i % 251), at lengths that
    exercise single blocks, block and chunk boundaries and multi-level trees."""
    ours = dict(BLAKE3_KNOWN_ANSWERS)
    assert len(ours) == len(BLAKE3_KNOWN_ANSWERS)  # no length twice
    assert set(REQUIRED_SELFTEST_LENGTHS) <= set(ours)
    for n, want in ours.items():
        assert blake3.blake3(bytes(i % 251 for i in range(n))).hexdigest() == want, n
    tests = _known_answers(RUNTESTS.read_text(encoding="utf-8"), "const KNOWN_ANSWERS")
    assert dict(tests) == ours


# --- the manifest the Julia writer builds ------------------------------------------------

HEX = "ab" * 32


def _digest(julia_value: np.ndarray, dtype: str) -> str:
    """The format-3 digest (BLAKE3) of a Julia array given in Julia shape (column-major values)."""
    return dataset_digest(np.asfortranarray(julia_value).T, dtype, "blake3")


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
    """manifest.jl's argument_object: dataset and its digest (format 3: blake3) for parameters
    and states, batch_axis only (and always, possibly null) for inputs, tied_paths when there
    are some."""
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
        o["blake3"] = HEX if value is None else _digest(value, "f32")
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
    Julia size (2, 5), vjp=true, reference=true, in `mode`: the running statistics are results
    in both modes (spec §7); st.layer_2.training is static state."""
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
    # Lux 1.31.4 traces BatchNorm as a function of its own (src/layers/normalize.jl:149), so the
    # running statistics are @main results in both modes (equal to the arguments in test mode).
    stats = ("running_mean", "running_var")
    results = [_result(0, [["output"]], [3, 5], 0)] + [
        _result(1 + i, [["state", "layer_2", s]], [3], None) for i, s in enumerate(stats)
    ]
    aliases: list[dict[str, Any]] = []
    m: dict[str, Any] = {
        "format": "juliabridge.bundle",
        "format_version": 3,
        "name": "dense_bn",
        "producer": _producer(),
        "module": _module("model.mlir", "model.mlirbc"),
        "weights": {"file": "weights.h5"},  # no whole-file sha256 in formats 2 and 3
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
            "inputs": [{"argument": 0, "dataset": "/examples/inputs/0", "blake3": HEX}],
            "outputs": [
                {"result": r["index"], "dataset": f"/examples/outputs/{r['index']}", "blake3": HEX}
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
        "format_version": 3,
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
                {"argument": i, "dataset": f"/examples/inputs/{i}", "blake3": HEX} for i in (0, 1)
            ],
            "outputs": [{"result": 0, "dataset": "/examples/outputs/0", "blake3": HEX}],
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
        "format_version": 3,
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
        "format_version": 3,
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


def julia_fallback_manifest(m: dict[str, Any]) -> dict[str, Any]:
    """What the Julia writer writes instead of format-3 manifest `m` when BLAKE3 failed its
    self-test (digests.jl, FALLBACK_DIGEST_SCHEME): format 2, every per-dataset digest sha256
    under "sha256" (here a stand-in value), everything else the same."""
    m = copy.deepcopy(m)
    m["format_version"] = 2
    entries = [a for a in m["arguments"] if "dataset" in a]
    if "examples" in m:
        entries += m["examples"]["inputs"] + m["examples"]["outputs"]
    for e in entries:
        del e["blake3"]
        e["sha256"] = "cd" * 32
    return m


@pytest.mark.parametrize("name", list(JULIA_MANIFESTS))
def test_the_julia_writers_manifests_are_valid(name: str) -> None:
    m = JULIA_MANIFESTS[name]()
    parsed = parse_manifest(json.loads(json.dumps(m)))
    assert parsed.format_version == 3
    assert parsed.dataset_digest == "blake3"
    assert parsed.producer.made_with_julia and parsed.producer.tool == "JuliaBridge.jl"
    assert parsed.weights.sha256 is None
    by_index = {a["index"]: a for a in m["arguments"]}
    for a in parsed.arguments:
        assert (a.digest is not None) == (a.role != "input")
        assert a.digest == by_index[a.index].get("blake3")


@pytest.mark.parametrize("name", list(JULIA_MANIFESTS))
def test_the_julia_writers_format_2_fallback_manifests_are_valid(name: str) -> None:
    parsed = parse_manifest(julia_fallback_manifest(JULIA_MANIFESTS[name]()))
    assert parsed.format_version == 2
    assert parsed.dataset_digest == "sha256"
    assert parsed.weights.sha256 is None
    for a in parsed.arguments:
        assert a.digest == ("cd" * 32 if a.role != "input" else None)


def test_format_3_needs_the_blake3_digests_and_ignores_sha256() -> None:
    """What conformance.jl's check_digest requires of the writer, the reader requires too: a
    format-3 dataset entry without its blake3 is refused, a per-dataset sha256 is not part of
    format 3 (ignored), and a format-2 entry needs its sha256."""
    m = julia_manifest_dense_bn()
    m["arguments"][1]["sha256"] = "ef" * 32
    assert parse_manifest(copy.deepcopy(m)).arguments[1].digest == m["arguments"][1]["blake3"]
    del m["arguments"][1]["blake3"]
    with pytest.raises(juliabridge.ManifestError, match=r"arguments\[1\]"):
        parse_manifest(copy.deepcopy(m))
    m = julia_manifest_dense_bn()
    del m["examples"]["inputs"][0]["blake3"]
    with pytest.raises(juliabridge.ManifestError, match=r"examples\.inputs\[0\]"):
        parse_manifest(m)
    m = julia_fallback_manifest(julia_manifest_dense_bn())
    del m["arguments"][2]["sha256"]
    with pytest.raises(juliabridge.ManifestError, match=r"arguments\[2\]"):
        parse_manifest(m)


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
    """The manifest keys a Julia function writes: its `"key" =>` pairs and `o["key"] = ` stores,
    and the digest key (`scheme.key`: "blake3" in format 3, which the golden manifests are)."""
    text = julia_function(file, function)
    keys = set(re.findall(r'"(\w+)" =>', text)) | set(re.findall(r'\b[om]\["(\w+)"\] =', text))
    if re.search(r"\bo\[scheme\.key\] =|\bscheme\.key =>", text):
        keys.add(julia_const("DIGEST_KEY"))
    return keys


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
        lambda m: m["results"].append(_result(3, [], [2, 5], None, echo=0)),
        r"results\[3\]\.batch_axis: expected 0",
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
    # Formats 2 and 3: no whole-file weights hash (datasets carry digests).
    build = julia_function("manifest.jl", "build_manifest")
    assert '"weights" => jobject("file" => WEIGHTS_FILE)' in build
    assert '"format_version" => scheme.format_version' in build
    # The writer's own check accepts format 3 and the format-2 fallback, each with its digests.
    rules = julia_function("conformance.jl", "check_manifest_rules")
    assert (
        "version in (FORMAT_VERSION, FALLBACK_FORMAT_VERSION) ? digest_scheme_of(version)" in rules
    )
    assert "check_digest(a, scheme, w)" in julia_function("conformance.jl", "check_arguments")
    assert "check_digest(e, scheme, ew)" in julia_function("conformance.jl", "check_examples")
    export = _source("export.jl")
    assert export.index("check_manifest(manifest; returned=traced.returned)") < export.index(
        "write_manifest(joinpath(tmp"
    )
    assert "first(dims) < 1" in julia_function("tracing.jl", "batch_size")
    assert "isempty(kept) ? nothing : kept" in julia_function("export.jl", "reference_results")
