"""Echo claims across the space of chains @main can return an argument through (issue 38).

An `echo_of` claim holds only when @main returns the block argument itself (spec §3.4),
through ops that move no value: transposes composing to the identity, same-type reshape,
convert and broadcast_in_dim. The reference here is independent of how the module reader
follows chains: it runs the chain in numpy on an argument whose elements are all distinct, so
the values come back unchanged exactly when every element is where it was; any op that
computes (abs, negate) makes the result computed even where its values equal the argument's.
The claims are checked in both places that decide them: the writer and the reader, with the
claim naming the returned argument, another argument, or none.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import juliabridge
from juliabridge.bundle.bundle import open_bundle
from juliabridge.bundle.write.description import ArgumentSpec, BundleDescription
from juliabridge.bundle.write.writer import write_bundle
from juliabridge.stablehlo.module import parse_module

from .bundle_factory import edit_manifest

SHAPES = [(2, 2, 2), (2, 2, 3), (2, 3, 4), (3, 3)]


def _t(shape: tuple[int, ...]) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + "f32>"


@st.composite
def chains(draw: st.DrawFn) -> tuple[tuple[int, ...], list[tuple[str, tuple[int, ...]]]]:
    """An argument shape and a chain of (op, permutation or dims) applied to it."""
    shape = draw(st.sampled_from(SHAPES))
    ops = []
    cur = shape
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["transpose", "transpose", "broadcast", "reshape",
                                     "convert", "abs", "negate2"]))  # fmt: skip
        if kind == "transpose":
            perm = tuple(draw(st.permutations(range(len(cur)))))
            ops.append((kind, perm))
            cur = tuple(cur[p] for p in perm)
        elif kind == "broadcast":
            # same type: dims map each operand dim to a result dim of the same size
            dims = tuple(draw(st.permutations(range(len(cur)))))
            if all(cur[i] == cur[d] for i, d in enumerate(dims)):
                ops.append((kind, dims))
        else:
            ops.append((kind, ()))
    return shape, ops


def _text(shape: tuple[int, ...], ops: list, n_args: int, returned: int) -> tuple[str, tuple]:
    """@main(n_args arguments of `shape`) returning the chain applied to argument `returned`,
    then a computed result; and the chain's result shape."""
    lines, cur, v, k = [], shape, f"%arg{returned}", 0
    for kind, p in ops:
        src = _t(cur)
        if kind == "transpose":
            cur = tuple(cur[i] for i in p)
            line = f"stablehlo.transpose {v}, dims = {list(p)} : ({src}) -> {_t(cur)}"
        elif kind == "broadcast":
            line = f"stablehlo.broadcast_in_dim {v}, dims = {list(p)} : ({src}) -> {src}"
        elif kind == "reshape":
            line = f"stablehlo.reshape {v} : ({src}) -> {src}"
        elif kind == "convert":
            line = f"stablehlo.convert {v} : ({src}) -> {src}"
        elif kind == "abs":
            line = f"stablehlo.abs {v} : {src}"
        else:
            lines.append(f"  %n{k} = stablehlo.negate {v} : {src}")
            v = f"%n{k}"
            line = f"stablehlo.negate {v} : {src}"
        lines.append(f"  %v{k} = {line}")
        v, k = f"%v{k}", k + 1
    args = ", ".join(f"%arg{i}: {_t(shape)}" for i in range(n_args))
    lines.append(f"  %c = stablehlo.add %arg0, %arg0 : {_t(shape)}")
    text = (
        f"func.func @main({args}) -> ({_t(cur)}, {_t(shape)}) {{\n"
        + "\n".join(lines)
        + f"\n  return {v}, %c : {_t(cur)}, {_t(shape)}\n}}\n"
    )
    return text, cur


def _numpy_chain(x: np.ndarray, ops: list) -> tuple[np.ndarray, bool]:
    """The chain's result in numpy (spec.md semantics) and whether any op computed."""
    computed = False
    for kind, p in ops:
        if kind == "transpose":  # result dim d is operand dim permutation[d]
            x = np.transpose(x, p)
        elif kind == "broadcast":  # operand dim i becomes result dim dims[i]
            x = np.transpose(x, np.argsort(p))
        elif kind in ("abs", "negate2"):
            x = np.abs(x) if kind == "abs" else np.negative(np.negative(x))
            computed = True
    return x, computed


def _is_echo(shape: tuple[int, ...], ops: list) -> bool:
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)  # distinct values
    y, computed = _numpy_chain(x, ops)
    return not computed and y.shape == x.shape and bool(np.array_equal(y, x))


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(chain=chains(), n_args=st.integers(1, 3), data=st.data())
def test_returned_arguments_agree_with_a_value_trace(chain: tuple, n_args: int, data) -> None:
    shape, ops = chain
    returned = data.draw(st.integers(0, n_args - 1))
    text, _ = _text(shape, ops, n_args, returned)
    want = {0: returned} if _is_echo(shape, ops) else {}
    assert parse_module(text).returned_arguments == want, (shape, ops)


@pytest.mark.parametrize(
    ("dims", "echo"), [((0, 1, 2), True), ((1, 0, 2), False), ((0, 1), True), ((1, 0), False)]
)
def test_a_same_type_broadcast_is_an_echo_only_with_identity_dims(dims, echo) -> None:
    shape = (2, 2, 3) if len(dims) == 3 else (3, 3)
    ops = [("broadcast", dims)]
    text, _ = _text(shape, ops, 1, 0)
    assert _is_echo(shape, ops) is echo
    assert parse_module(text).returned_arguments == ({0: 0} if echo else {})


@pytest.mark.parametrize(
    ("perms", "echo"),
    [
        (((0, 2, 1), (1, 0, 2), (1, 2, 0)), True),  # composes to the identity
        (((0, 2, 1), (1, 0, 2), (2, 0, 1)), False),  # composed the other way round it would
        (((1, 2, 0), (1, 2, 0), (1, 2, 0)), True),
        (((1, 2, 0), (2, 0, 1), (1, 0, 2)), False),
    ],
)
def test_three_transposes_are_an_echo_exactly_when_they_compose_to_the_identity(
    perms, echo
) -> None:
    ops = [("transpose", p) for p in perms]
    assert _is_echo((2, 2, 2), ops) is echo  # the numpy trace agrees with the table
    text, _ = _text((2, 2, 2), ops, 1, 0)
    assert parse_module(text).returned_arguments == ({0: 0} if echo else {})


def _write(tmp_path: Path, text: str, n_args: int, echo: int | None, name: str) -> Path:
    x = [np.full((3, 3), i, np.float32) for i in range(n_args)]
    return write_bundle(
        tmp_path / f"{name}.bundle",
        BundleDescription(
            name="echoes",
            mlir_text=text,
            arguments=[ArgumentSpec("input", [i + 1], v) for i, v in enumerate(x)],
            result_paths=[[], [["output", 1]]]
            if echo is not None
            else [[["output", 1]], [["output", 2]]],
            result_echoes=[echo, None],
        ),
        overwrite=True,
    )


@pytest.mark.parametrize(("returned", "claimed"), [(0, 0), (1, 1), (0, 1), (1, 0), (1, 2)])
def test_an_echo_claim_must_name_the_argument_returned(tmp_path: Path, returned: int,
                                                       claimed: int) -> None:  # fmt: skip
    # @main(a0, a1, a2) returns a_returned through Reactant's boundary transposes.
    ops = [("transpose", (1, 0)), ("transpose", (1, 0))]
    text, _ = _text((3, 3), ops, 3, returned)
    if claimed == returned:
        path = _write(tmp_path, text, 3, claimed, "ok")
        assert open_bundle(path).manifest.results[0].echo_of == claimed
        return
    with pytest.raises(juliabridge.SignatureMismatchError, match=f"echo_of={claimed}, but"):
        _write(tmp_path, text, 3, claimed, "bad")
    # A manifest edited to make the claim is refused by the reader, naming both arguments.
    path = _write(tmp_path, text, 3, None, "edited")

    def claim(m: dict) -> None:
        m["results"][0]["paths"] = []
        m["results"][0]["echo_of"] = claimed
        m["results"][1]["paths"] = [["output", 1]]

    edit_manifest(path, claim)
    with pytest.raises(juliabridge.SignatureMismatchError) as e:
        open_bundle(path)
    assert f"is argument {claimed}" in str(e.value)
    assert f"returns argument {returned}" in str(e.value)
