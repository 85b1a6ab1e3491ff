"""The one bound on the tuple slots a tree may build (juliabridge/support/slots.py, issue 50):
sizes that multiply past every per-step bound are refused before any tuple is built, on every
route that builds a tree (import_lux and convert of a Julia export directory, import_lux of a
bundle, load_params and load_into of a weights file's tree record, a Reactant export)."""

from __future__ import annotations

import json
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import juliabridge
from juliabridge.errors import ResourceLimitError
from juliabridge.lux.trees import build_tree
from juliabridge.support.slots import slot_allowance, tuple_slots
from tests.bundle_factory import edit_manifest, make_dense_bn
from tests.julia_export_writer import JArg, JExport, flat, write_julia_export

X = np.arange(6, dtype=np.float32).reshape(2, 3)
W = np.array([1.5, -2.0, 3.0], np.float32)
#: The issue's description: 20,000 parents, each a 20,000-slot tuple (4*10^8 slots, 360 KB).
MULTIPLYING = [[f"e{k}", 20_000] for k in range(20_000)]
#: Seconds and bytes a refusal may take: far below what building 4*10^8 slots needs.
FAST_S = 20.0
SMALL_BYTES = 256 << 20


def _bounded(fn: Callable[[], Any], match: str) -> None:
    """`fn` raises ResourceLimitError matching `match`, quickly and in bounded memory."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(ResourceLimitError, match=match):
            fn()
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert time.perf_counter() - t0 < FAST_S
    assert peak < SMALL_BYTES, peak


def _reference_slots(paths: list[tuple[Any, ...]]) -> int:
    """Tuple slots by building the containers' lengths from the paths, written independently."""
    children: dict[tuple[Any, ...], set[Any]] = {}
    for p in paths:
        for n in range(len(p)):
            children.setdefault(p[:n], set()).add(p[n])
    return sum(max(c) for c in children.values() if all(isinstance(s, int) for s in c))


step = st.one_of(st.integers(1, 40), st.sampled_from(["a", "b", "c"]))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(1, 40), min_size=1, max_size=4).map(tuple), max_size=30))
def test_tuple_slots_match_the_containers_lengths(paths: list[tuple[int, ...]]) -> None:
    total, largest, where = tuple_slots(paths)
    assert total == _reference_slots(paths)
    assert largest == max((s for p in paths for s in p), default=0)
    assert (largest == 0) or largest in where


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple), max_size=12))
def test_a_tree_within_the_bound_has_the_counted_slots(paths: list[tuple[int, ...]]) -> None:
    # Keep only leaf paths (none a prefix of another), as a tree has.
    leaves = [p for p in set(paths) if not any(q != p and q[: len(p)] == p for q in paths)]
    tree = build_tree([(p, 0) for p in leaves])

    def count(node: Any) -> int:
        if isinstance(node, tuple):
            return len(node) + sum(count(c) for c in node)
        if isinstance(node, dict):
            return sum(count(c) for c in node.values())
        return 0

    assert count(tree) == tuple_slots(leaves)[0]


def test_build_tree_refuses_before_building() -> None:
    empty = [tuple(p) for p in MULTIPLYING]
    _bounded(lambda: build_tree([], empty=empty, what="T"), r"T: .* ask for 400000000 tuple")
    at_limit = [(slot_allowance(1),)]
    assert len(build_tree([], empty=at_limit)) == slot_allowance(1)
    with pytest.raises(ResourceLimitError, match=str(slot_allowance(1))):
        build_tree([], empty=[(slot_allowance(1) + 1,)])


def _julia_export(d: Path, empty: list[list[Any]]) -> Path:
    args = [JArg("input", [], X), JArg("parameter", ["w"], W)]
    return write_julia_export(
        d,
        JExport(
            "m",
            flat(lambda x, w: (x * w,), args),
            args,
            [["output"]],
            empty={
                "params": empty,
                "state": [],
            },
        ),
    )


def test_a_julia_export_with_multiplying_empties_is_refused_on_each_route(
    tmp_path: Path,
) -> None:
    from juliabridge.julia_export.convert import convert_julia_export

    d = _julia_export(tmp_path / "exp", MULTIPLYING)
    desc = d / "juliabridge-export.json"
    desc.write_text(json.dumps(json.loads(desc.read_text()), separators=(",", ":")))
    assert 300_000 < (d / "juliabridge-export.json").stat().st_size < 500_000
    match = r"juliabridge-export.json: the params tree: .* 400000000 tuple slots"
    _bounded(lambda: juliabridge.import_lux(d), match)
    _bounded(lambda: convert_julia_export(d, tmp_path / "out.bundle"), match)
    assert not (tmp_path / "out.bundle").exists()


def test_a_julia_export_within_the_bound_loads(tmp_path: Path) -> None:
    d = _julia_export(tmp_path / "exp", [["e", 1], ["e", 2]])
    model = juliabridge.import_lux(d)
    assert model.params["e"] == ({}, {})
    np.testing.assert_allclose(np.asarray(model(X)), X * W)


def test_a_bundle_manifest_with_multiplying_empties_is_refused(tmp_path: Path) -> None:
    bundle = make_dense_bn(tmp_path / "m.bundle")
    edit_manifest(bundle, lambda m: m.update(empty={"params": MULTIPLYING, "state": []}))
    _bounded(
        lambda: juliabridge.import_lux(bundle, verify_checksums=False),
        r"manifest.json: the params tree: .* 400000000 tuple slots",
    )


def _forged_record(tmp_path: Path) -> Path:
    path = juliabridge.save_params({"a": np.ones(2, np.float32)}, tmp_path / "w.h5")
    empties = [[f"e{k}", 2**31] for k in range(500)]
    record = {"params": {"leaves": [["a"]], "empty": empties}, "state": {"leaves": [], "empty": []}}
    raw = json.dumps(record).encode()
    assert 10_000 < len(raw) < 12_000
    with h5py.File(path, "r+") as f:
        del f["juliabridge/tree"]
        f.create_dataset("juliabridge/tree", data=np.frombuffer(raw, np.uint8))
        f["juliabridge/tree"].attrs["dtype"] = "ui8"
    return path


def test_a_tree_record_with_huge_positions_is_refused_by_load_params_and_load_into(
    tmp_path: Path,
) -> None:
    path = _forged_record(tmp_path)
    match = r"w.h5: the tree record of params: .* tuple slots \(the largest step is 2147483648"
    _bounded(lambda: juliabridge.load_params(path), match)
    model = juliabridge.import_lux(make_dense_bn(tmp_path / "m.bundle"))
    _bounded(lambda: juliabridge.load_into(model, path), match)
