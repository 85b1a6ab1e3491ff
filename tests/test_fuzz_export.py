"""Property-based fuzzing of the export readers (issue 39): Reactant's export directory
(juliabridge/reactant_export/) and JuliaBridge.jl's (juliabridge/julia_export/), and of the
agreement between the two routes (bundle and export) on the same hostile value.

Every case starts from a valid export of ``f(x, w, m) = x .* w .* m`` (x f32 5x3, w f32 3, m a
Bool 3), mutates it, and reads and calls it in a child process (tests/fuzz_runner.py,
``run_export``) within JB_FUZZ_CASE_TIMEOUT seconds, by ``import_lux(DIR)`` or by ``convert``
then ``import_lux`` of the bundle. Families (cases per CI run in COUNTS):

- ``export_zip``: the inputs npz's zip metadata forged (tests/fuzz_attacks.py
  zip_metadata_attack): entry counts, directory sizes and offsets, member sizes, methods,
  CRCs, name and extra lengths, in the end record, central and local headers; duplicate
  members; names up to 65,535 characters; deflated members claiming sizes up to 2^32;
  junk before or after, truncation;
- ``export_files``: a FIFO, a directory, a character device (where the tests may make one),
  a symlink (inside, outside, dangling, to /dev/zero) in place of the .py, the .mlir or the
  npz, or of a Julia export's description, module or weights;
- ``export_race``: a writer that, right after the reader's k-th file open (a hook on
  ``safefile.open_regular``: deterministic), renames another export's file over one of the
  export's files, swaps it for a symlink to that file, or for a FIFO;
- ``route_parity``: the same hostile value (a Bool stored as a byte 0-255, a path step 0 to
  2^40) in a Reactant export and in the bundle converted from it (a Bool byte also in a Julia
  export's weights);
- ``tree_slots`` (issue 50): a Julia export's description given 1 to 20,000 empty paths
  ``["eK", step]`` with steps from 1 to 2^31 (up to 4*10^8 tuple slots from 360 KB): past the
  shared bound (juliabridge/support/slots.py) a ResourceLimitError on both routes.

A case must end in success with the numbers of the values the reader may have read (numpy's
``x * w * m``; for a race, the original files or, for a plain replace, the writer's; never
what a symlink points at), or in a JuliaBridgeError subclass; a special file must be refused.
A ``route_parity`` case must end the same way on both routes: both succeed with equal
numbers, or both refuse with the same error class. JB_FUZZ_SEED and JB_FUZZ_CASE_TIMEOUT as in
tests/test_fuzz.py; JB_FUZZ_EXPORT_SCALE multiplies COUNTS for a longer run.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from tests.fuzz_attacks import zip_metadata_attack
from tests.julia_export_writer import JArg, JExport, flat, write_julia_export
from tests.pinned_support import lower
from tests.reactant_export_writer import ArgInfo, Export, write_export
from tests.test_fuzz import SEED, Runner

REPO = Path(__file__).resolve().parents[1]
SCALE = float(os.environ.get("JB_FUZZ_EXPORT_SCALE", "1"))
#: Cases per CI run of each family (docs/reliability.md states them; a test checks).
COUNTS = {
    "export_zip": 14,
    "export_files": 12,
    "export_race": 10,
    "route_parity": 8,
    "tree_slots": 8,
}
#: JB_FUZZ_EXPORT_LOG: a path; each case's request and outcome (class) are appended (JSON lines).
LOG = os.environ.get("JB_FUZZ_EXPORT_LOG")

X = np.arange(15, dtype=np.float32).reshape(5, 3) - 7
W = np.array([1.5, -2.0, 3.0], np.float32)
M = np.array([True, False, True])
W_OTHER = W * 3
PY, MLIR, NPZ = "f.py", "f_0.mlir", "f_0_inputs.npz"
JSON, JMLIR, H5 = "juliabridge-export.json", "model.mlir", "weights.h5"


def _f(x: Any, w: Any, m: Any) -> Any:
    return x * w * m


def _g(x: Any, w: Any, m: Any) -> Any:
    return x + w * m


def _ref(fn: Callable[..., Any], w: np.ndarray, m: np.ndarray) -> np.ndarray:
    return np.asarray(fn(X.astype(np.float64), w.astype(np.float64), m), np.float64)


@dataclass
class Base:
    """The exports every case starts from: `exp` (Reactant, f, W), `var` (Reactant, g,
    W_OTHER), `jl`/`jlvar` (Julia, the same two), `bundle` (converted from `exp`), `x`."""

    root: Path
    paths: dict[str, Path] = field(default_factory=dict)

    def __repr__(self) -> str:
        return "<export fuzz base>"


def _reactant(d: Path, fn: Callable[..., Any], w: np.ndarray) -> None:
    def full(x: Any, w: Any, m: Any) -> Any:
        return (fn(x, w, m), x, w, m)

    args = [ArgInfo([1], X), ArgInfo([2, 1], w), ArgInfo([2, 2], M)]
    write_export(d, Export("f", lower(full, X, w, M), args))


def _julia(d: Path, fn: Callable[..., Any], w: np.ndarray) -> None:
    args = [JArg("input", [], X), JArg("parameter", ["w"], w), JArg("parameter", ["m"], M)]
    write_julia_export(d, JExport("m", flat(lambda *a: (fn(*a),), args), args, [["output"]]))


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Base:
    from juliabridge.reactant_export.convert import convert_export

    b = Base(tmp_path_factory.mktemp("fuzz_export"))
    for name, make, fn, w in [
        ("exp", _reactant, _f, W),
        ("var", _reactant, _g, W_OTHER),
        ("jl", _julia, _f, W),
        ("jlvar", _julia, _g, W_OTHER),
    ]:
        make(b.root / name, fn, w)
        b.paths[name] = b.root / name
    b.paths["bundle"] = convert_export(b.paths["exp"], b.root / "m.bundle")
    b.paths["x"] = b.root / "x.npy"
    np.save(b.paths["x"], X)
    return b


@pytest.fixture(scope="module")
def runner() -> Iterator[Runner]:
    r = Runner()
    yield r
    r.close()


def fuzz_settings(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """hypothesis settings for `name`: its COUNTS (times JB_FUZZ_EXPORT_SCALE), no deadline,
    derandomized unless JB_FUZZ_SEED is set."""
    chosen = settings(
        max_examples=max(1, round(COUNTS[name] * SCALE)),
        deadline=None,
        derandomize=SEED is None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    if SEED is None:
        return chosen
    return lambda fn: hypothesis_seed(int(SEED) + len(name))(chosen(fn))


def _call(runner: Runner, base: Base, path: Path, **req: Any) -> dict[str, Any]:
    request = {"export": str(path), "x": str(base.paths["x"]), **req}
    if req.get("route") == "convert":
        request["out"] = str(path.parent / "out.bundle")
    reply = runner.run(request)
    if LOG:
        with open(LOG, "a") as f:
            f.write(json.dumps({"req": req, "outcome": reply["outcome"], "cls": reply.get("cls")}))
            f.write("\n")
    assert reply["outcome"] in ("ok", "error"), (path, req, reply)
    if reply["outcome"] == "error":
        assert reply["message"].strip(), reply
        assert "juliabridge bug" not in reply["message"].lower(), reply
    return reply


def _matches(reply: dict[str, Any], wants: list[np.ndarray]) -> bool:
    got = np.asarray(reply["value"], np.float64)
    return any(got.shape == w.shape and np.allclose(got, w, rtol=1e-5) for w in wants)


@pytest.fixture
def workdir(base: Base) -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(dir=base.root))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _fresh(base: Base, name: str) -> Path:
    d = Path(tempfile.mkdtemp(dir=base.root)) / name
    shutil.copytree(base.paths[name], d)
    return d


# --- zip metadata -------------------------------------------------------------------------------


def test_fuzz_export_zip(base: Base, runner: Runner) -> None:
    with zipfile.ZipFile(base.paths["exp"] / NPZ) as z:
        members = {n: z.read(n) for n in z.namelist()}
    w_dup = np.frombuffer(members["arr_2.npy"][:-4] + b"\x00\x00\x80\x40", np.float32)[-3:]

    @fuzz_settings("export_zip")
    @given(attack=zip_metadata_attack(members), route=st.sampled_from(["direct", "convert"]))
    def one(attack: tuple[bytes, str, bool], route: str) -> None:
        data, what, other = attack
        d = _fresh(base, "exp")
        try:
            (d / NPZ).write_bytes(data)
            reply = _call(runner, base, d, route=route, what=what)
            if reply["outcome"] == "ok":
                wants = [_ref(_f, W, M)] + ([_ref(_f, w_dup, M)] if other else [])
                assert _matches(reply, wants), (what, reply)
        finally:
            shutil.rmtree(d.parent, ignore_errors=True)

    one()


# --- special files ------------------------------------------------------------------------------


def _special(d: Path, name: str, kind: str, outside: Path) -> None:
    target = d / name
    keep = d / f".orig-{name}"
    os.rename(target, keep)
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "directory":
        target.mkdir()
    elif kind == "device":
        try:
            os.mknod(target, 0o600 | 0o020000, os.makedev(1, 3))  # like /dev/null
        except OSError:
            os.mkfifo(target)  # not permitted here: a FIFO stands in
    elif kind == "symlink_inside":
        os.symlink(keep.name, target)
    elif kind == "symlink_outside":
        os.symlink(outside, target)
    elif kind == "dangling":
        os.symlink(d / "nowhere", target)
    else:  # a symlink to an endless device
        os.symlink("/dev/zero", target)


def test_fuzz_export_files(base: Base, runner: Runner) -> None:
    kinds = [
        "fifo",
        "directory",
        "device",
        "symlink_inside",
        "symlink_outside",
        "dangling",
        "dev_zero",
    ]

    @fuzz_settings("export_files")
    @given(
        which=st.sampled_from(
            [("exp", n) for n in (PY, MLIR, NPZ)] + [("jl", n) for n in (JSON, JMLIR, H5)]
        ),
        kind=st.sampled_from(kinds),
        route=st.sampled_from(["direct", "convert"]),
    )
    def one(which: tuple[str, str], kind: str, route: str) -> None:
        src, name = which
        d = _fresh(base, src)
        try:
            other = "var" if src == "exp" else "jlvar"
            _special(d, name, kind, base.paths[other] / name)
            reply = _call(runner, base, d, route=route, what=f"{which} {kind}")
            assert reply["outcome"] == "error", (which, kind, route, reply)
        finally:
            shutil.rmtree(d.parent, ignore_errors=True)

    one()


# --- racing writers -----------------------------------------------------------------------------


def test_fuzz_export_race(base: Base, runner: Runner) -> None:
    @fuzz_settings("export_race")
    @given(
        which=st.sampled_from(
            [("exp", n) for n in (PY, MLIR, NPZ)] + [("jl", n) for n in (JSON, JMLIR, H5)]
        ),
        how=st.sampled_from(["replace", "symlink", "fifo"]),
        after=st.integers(1, 4),
        route=st.sampled_from(["direct", "convert"]),
    )
    def one(which: tuple[str, str], how: str, after: int, route: str) -> None:
        src, name = which
        d = _fresh(base, src)
        try:
            other = "var" if src == "exp" else "jlvar"
            source = d.parent / f"writer-{name}"
            shutil.copyfile(base.paths[other] / name, source)
            race = {"after": after, "target": str(d / name), "how": how, "source": str(source)}
            reply = _call(runner, base, d, route=route, race=race)
            if reply["outcome"] == "ok":
                # What a plain replace may legitimately give: the writer's file, if the reader
                # opened it after the rename. Never what a symlink points at.
                swapped = how == "replace"
                fns = [_f, _g] if swapped and name in (MLIR, JMLIR) else [_f]
                ws = [W, W_OTHER] if swapped and name in (NPZ, H5) else [W]
                wants = [_ref(fn, w, M) for fn, w in itertools.product(fns, ws)]
                assert _matches(reply, wants), (which, how, after, route, reply)
        finally:
            shutil.rmtree(d.parent, ignore_errors=True)

    one()


# --- the two routes judge a value alike ---------------------------------------------------------


def _bool_byte_npz(path: Path, byte: int) -> None:
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    raw = bytearray(members["arr_3.npy"])
    raw[-1] = byte
    members["arr_3.npy"] = bytes(raw)
    with zipfile.ZipFile(path, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)


def test_fuzz_route_parity(base: Base, runner: Runner) -> None:
    steps = [0, 1, 3, 4, 100, 65_537, 1_000_000, 2**31 - 1, 2**31, 2**31 + 1, 2**40]

    @fuzz_settings("route_parity")
    @given(
        value=st.one_of(
            st.tuples(st.just("bool_byte"), st.sampled_from([0, 1, 2, 3, 127, 128, 255])),
            st.tuples(st.just("path_step"), st.sampled_from(steps)),
        )
    )
    def one(value: tuple[str, int]) -> None:
        kind, v = value
        d, b, j = _fresh(base, "exp"), _fresh(base, "bundle"), _fresh(base, "jl")
        try:
            manifest = json.loads((b / "manifest.json").read_text())
            if kind == "bool_byte":
                _bool_byte_npz(d / NPZ, v)
                with h5py.File(b / "weights.h5", "a") as f:
                    ds = f[manifest["arguments"][2]["dataset"]]
                    raw = ds[()]
                    raw[-1] = v
                    ds[...] = raw
            else:
                py = d / PY
                py.write_text(re.sub(r"arg\.2\.1\b", f"arg.2.{v}", py.read_text()))
                manifest["arguments"][1]["path"] = [v]
                (b / "manifest.json").write_text(json.dumps(manifest))
            # The bundle's digests would catch the edit first: the value itself is judged.
            export = _call(runner, base, d, what=value)
            bundle = _call(runner, base, b, verify_checksums=False, what=value)
            replies = [export, bundle]
            if kind == "bool_byte":  # and JuliaBridge.jl's export directory, a third route
                with h5py.File(j / H5, "a") as f:
                    raw = f["/params/m"][()]
                    raw[-1] = v
                    f["/params/m"][...] = raw
                replies.append(_call(runner, base, j, what=value))
            for other in replies[1:]:
                assert export["outcome"] == other["outcome"], (value, replies)
                if export["outcome"] == "ok":
                    assert np.array_equal(np.asarray(export["value"]), np.asarray(other["value"]))
                else:
                    assert export["cls"] == other["cls"], (value, replies)
        finally:
            for path in (d, b, j):
                shutil.rmtree(path.parent, ignore_errors=True)

    one()


# --- sizes that multiply: the tuple slots a tree may build -------------------------------------


def test_fuzz_tree_slots(base: Base, runner: Runner) -> None:
    from juliabridge.support.slots import slot_allowance, tuple_slots

    @fuzz_settings("tree_slots")
    @given(
        parents=st.sampled_from([1, 3, 300, 20_000]),
        step=st.sampled_from([1, 2, 300, 20_000, 2**31]),
        route=st.sampled_from(["direct", "convert"]),
    )
    def one(parents: int, step: int, route: str) -> None:
        d = _fresh(base, "jl")
        try:
            desc = d / JSON
            doc = json.loads(desc.read_text())
            empty = [[f"e{k}", step] for k in range(parents)]
            doc["empty"] = {"params": empty, "state": []}
            desc.write_text(json.dumps(doc, separators=(",", ":")))
            paths = [tuple(p) for p in empty] + [("w",), ("m",)]
            over = tuple_slots(paths)[0] > slot_allowance(len(paths))
            reply = _call(runner, base, d, route=route, what=(parents, step))
            if over:  # refused by the shared bound, before any tuple is built
                assert reply["outcome"] == "error", (parents, step, reply)
                assert reply["cls"] == "ResourceLimitError", (parents, step, reply)
            elif reply["outcome"] == "ok":
                assert _matches(reply, [_ref(_f, W, M)]), (parents, step, reply)
        finally:
            shutil.rmtree(d.parent, ignore_errors=True)

    one()


def test_reliability_states_the_export_families_counts() -> None:
    doc = (REPO / "docs" / "reliability.md").read_text(encoding="utf-8")
    for family, n in COUNTS.items():
        assert f"| `{family}` | {n} |" in doc, family
