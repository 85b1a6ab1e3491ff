"""The op budget's weights over their space (issue 38): a sort's weight per operand, the
special functions' weights and their broadcast_ forms, with the weighted op at every place the
walk could miss it (top level, a while body, a case branch, a while inside a case branch, a
called function, a composite's decomposition).

References, from docs/reliability.md: a sort counts 2 per operand; chlo.broadcast_X weighs as
chlo.X; a weighted op weighs the same wherever it is, and the refusal past MAX_OPS names the
weighted ops, heaviest first, calls inlined.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import juliabridge
from juliabridge.stablehlo import budget
from juliabridge.stablehlo import module as module_mod
from juliabridge.stablehlo.module import parse_module

SPACE = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
S = "tensor<f32>"
PLACES = ["top", "while", "case", "while in case", "call", "composite"]


@contextmanager
def _costs() -> Iterator[list[Any]]:
    """@main's Cost of every module parsed within (what check_budget returns)."""
    got: list[Any] = []
    real = module_mod.check_budget

    def spy(*args: Any, **kwargs: Any) -> Any:
        cost = real(*args, **kwargs)
        got.append(cost)
        return cost

    module_mod.check_budget = spy  # type: ignore[assignment]
    try:
        yield got
    finally:
        module_mod.check_budget = real  # type: ignore[assignment]


def _cost(text: str) -> Any:
    with _costs() as got:
        parse_module(text)
    return got[-1]


def _t(shape: tuple[int, ...], dtype: str = "f32") -> str:
    return f"tensor<{'x'.join(map(str, shape))}{'x' if shape else ''}{dtype}>"


def _placed(payload: list[str], arg: tuple[int, ...], place: str) -> str:
    """A module whose @main takes %x of shape `arg` and %i, runs `payload` (lines reading %x)
    at `place`, and returns %x."""
    t = _t(arg)
    consts = [
        "%zero = stablehlo.constant dense<0> : tensor<i32>",
        "%one = stablehlo.constant dense<1> : tensor<i32>",
        "%three = stablehlo.constant dense<3> : tensor<i32>",
    ]

    def while_(body: list[str], x: str, tag: str) -> list[str]:
        return [
            f"%{tag}:2 = stablehlo.while(%{tag}c = %zero, %{tag}a = {x}) : tensor<i32>, {t}",
            "cond {",
            f"%{tag}b = stablehlo.compare LT, %{tag}c, %three : (tensor<i32>, tensor<i32>) -> "
            "tensor<i1>",
            f"stablehlo.return %{tag}b : tensor<i1>",
            "} do {",
            *[line.replace("%x", f"%{tag}a") for line in body],
            f"%{tag}n = stablehlo.add %{tag}c, %one : tensor<i32>",
            f"stablehlo.return %{tag}n, %{tag}a : tensor<i32>, {t}",
            "}",
        ]

    def case(body: list[str], tag: str) -> list[str]:
        plain = f"stablehlo.return %x : {t}\n"
        mid = "\n".join(body) + f"\nstablehlo.return %x : {t}\n"
        return [f'%{tag} = "stablehlo.case"(%i) ({{\n{plain}}}, {{\n{mid}}}, {{\n{plain}}}) : '
                f"(tensor<i32>) -> {t}"]  # fmt: skip

    funcs = ""
    if place == "top":
        lines = payload
    elif place == "while":
        lines = while_(payload, "%x", "w")
    elif place == "case":
        lines = case(payload, "k")
    elif place == "while in case":
        lines = case(while_(payload, "%x", "w"), "k")
    else:
        lines = [
            f"%y = func.call @f(%x) : ({t}) -> {t}"
            if place == "call"
            else f'%y = stablehlo.composite "jb.f" %x {{decomposition = @f}} : ({t}) -> {t}'
        ]
        funcs = (
            f"  func.func private @f(%x: {t}) -> {t} {{\n    "
            + "\n    ".join([*consts, *payload])
            + f"\n    return %x : {t}\n  }}\n"
        )
    body = "\n    ".join([*consts, *lines])
    return (
        f"module {{\n  func.func @main(%x: {t}, %i: tensor<i32>) -> {t} {{\n    {body}\n"
        f"    return %x : {t}\n  }}\n{funcs}}}\n"
    )


# --- weights ------------------------------------------------------------------------------------


def _sort(n: int) -> list[str]:
    t = _t((4,))
    args = ", ".join(["%x"] * n)
    block = ", ".join(f"%a{k}: {S}" for k in range(2 * n))
    return [f'%srt:{n} = "stablehlo.sort"({args}) <{{dimension = 0 : i64}}> ({{\n'
            f"^bb0({block}):\n  %c = stablehlo.compare LT, %a0, %a1 : ({S}, {S}) -> tensor<i1>\n"
            f"  stablehlo.return %c : tensor<i1>\n}}) : ({', '.join([t] * n)}) -> "
            f"({', '.join([t] * n)})"]  # fmt: skip


@pytest.mark.parametrize("place", PLACES)
def test_a_sort_counts_two_per_operand_wherever_it_is(place: str) -> None:
    # The comparator is the same for every n: the difference is the sort's own weight.
    one = _cost(_placed(_sort(1), (4,), place)).ops
    for n in (2, 3, 7):
        assert _cost(_placed(_sort(n), (4,), place)).ops - one == 2 * (n - 1), (place, n)


@pytest.mark.parametrize("base", ["next_after", "polygamma", "zeta"])
@pytest.mark.parametrize("place", ["top", "case", "composite"])
def test_a_broadcast_special_function_weighs_as_its_base_op(base: str, place: str) -> None:
    t = _t((3,))

    def text(name: str) -> str:
        return _placed([f'%s = "{name}"(%x, %x) : ({t}, {t}) -> {t}'], (3,), place)

    plain, broadcast = _cost(text(f"chlo.{base}")), _cost(text(f"chlo.broadcast_{base}"))
    assert broadcast.ops == plain.ops and plain.ops > 20


BINARY = ("chlo.next_after", "chlo.polygamma", "chlo.zeta")
WEIGHTED = sorted(budget.INSTRUCTIONS)


def _ops_text(names: list[str]) -> list[str]:
    """One line per op of `names` on %x (tensor<3xf32>)."""
    t = _t((3,))
    return [
        f'%o{k} = "{name}"(%x, %x) : ({t}, {t}) -> {t}'
        if name in BINARY or name.startswith("chlo.broadcast_") or name == "stablehlo.add"
        else f'%o{k} = "{name}"(%x) : ({t}) -> {t}'
        for k, name in enumerate(names)
    ]


@SPACE
@given(
    names=st.lists(st.sampled_from(WEIGHTED), min_size=1, max_size=5),
    place=st.sampled_from(PLACES),
)
def test_special_functions_weigh_their_weight_wherever_they_are(
    monkeypatch: pytest.MonkeyPatch, names: list[str], place: str
) -> None:
    monkeypatch.setenv("JULIABRIDGE_MAX_OPS", str(budget.MAX_OPS))
    # The same module with each weighted op replaced by a plain op of the same operands.
    plain = ["stablehlo.add" if n in BINARY else "stablehlo.negate" for n in names]
    base = _cost(_placed(_ops_text(plain), (3,), place)).ops
    text = _placed(_ops_text(names), (3,), place)
    total = _cost(text).ops
    assert total - base == sum(budget.EXPANSION[n] - 1 for n in names), (names, place)
    # Past the limit, the refusal names each kind with its count and weight, heaviest first.
    monkeypatch.setenv("JULIABRIDGE_MAX_OPS", str(total - 1))
    with pytest.raises(juliabridge.ResourceLimitError) as info:
        parse_module(text)
    counts = {n: names.count(n) for n in set(names)}
    order = sorted(counts, key=lambda n: (-counts[n] * budget.EXPANSION[n], n))[:3]
    message = str(info.value)
    at = [message.index(f"{counts[n]:,} {n} weighing {budget.EXPANSION[n]} each "
                        f"({counts[n] * budget.EXPANSION[n]:,})") for n in order]  # fmt: skip
    assert at == sorted(at), (order, message)
    monkeypatch.setenv("JULIABRIDGE_MAX_OPS", str(total))
    parse_module(text)
