"""Pinned: what sanitizing reports about @main's arguments agrees with the module text.

Reactant marks a donated argument with ``tf.aliasing_output = R`` (argument -> the result R
whose buffer it may become) and a sharded one with ``mhlo.sharding``; juliabridge removes both
before XLA sees the module and reports them (`StableHLOModule.aliasing`, argument index ->
result index; `arg_shardings`, argument index -> the attribute as written). The modules here
are generated with those attributes on chosen arguments, and the report is compared with the
choice, direction included: the same markings on a private function or on @main's results
are not @main's argument aliasing. An attribute of the wrong kind is refused, typed.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from juliabridge import UnsupportedModuleError
from juliabridge.stablehlo import parse_module

T = "tensor<2xf32>"


def _module(
    n_args: int,
    n_results: int,
    aliasing: dict[int, int],
    shardings: dict[int, int],
    *,
    result_marks: dict[int, int] | None = None,
) -> str:
    """@main(n_args) -> n_results (result k returns argument k % n_args), marked as given."""
    args = []
    for i in range(n_args):
        attrs = []
        if i in aliasing:
            attrs.append(f"tf.aliasing_output = {aliasing[i]} : i32")
        if i in shardings:
            attrs.append(f'mhlo.sharding = "{{maximal device={shardings[i]}}}"')
        args.append(f"%a{i}: {T}" + (f" {{{', '.join(attrs)}}}" if attrs else ""))
    results = []
    for k in range(n_results):
        mark = (result_marks or {}).get(k)
        results.append(T + (f" {{tf.aliasing_output = {mark} : i32}}" if mark is not None else ""))
    returned = ", ".join(f"%a{k % n_args}" for k in range(n_results))
    # A private function carrying the same markings, called from @main: never reported.
    return f"""module {{
  func.func private @f(%p: {T} {{tf.aliasing_output = 0 : i32, mhlo.sharding = "{{replicated}}"}}) -> {T} {{
    return %p : {T}
  }}
  func.func @main({", ".join(args)}) -> ({", ".join(results)}) {{
    %unused = func.call @f(%a0) : ({T}) -> {T}
    return {returned} : {", ".join([T] * n_results)}
  }}
}}"""


@st.composite
def _markings(draw: st.DrawFn) -> tuple[int, int, dict[int, int], dict[int, int]]:
    n_args = draw(st.integers(1, 6))
    n_results = draw(st.integers(1, 6))
    donated = draw(st.lists(st.integers(0, n_args - 1), unique=True, max_size=n_results))
    targets = draw(st.permutations(range(n_results)))
    aliasing = dict(zip(donated, targets, strict=False))
    sharded = draw(st.lists(st.integers(0, n_args - 1), unique=True))
    shardings = {i: draw(st.integers(0, 7)) for i in sharded}
    return n_args, n_results, aliasing, shardings


@settings(max_examples=40, deadline=None)
@given(_markings())
def test_the_reported_aliasing_and_shardings_are_those_of_mains_arguments(
    case: tuple[int, int, dict[int, int], dict[int, int]],
) -> None:
    n_args, n_results, aliasing, shardings = case
    m = parse_module(_module(n_args, n_results, aliasing, shardings))
    assert m.aliasing == aliasing  # argument index -> result index, as written
    assert m.arg_shardings == {i: f'"{{maximal device={d}}}"' for i, d in shardings.items()}
    assert len(m.arguments) == n_args and len(m.results) == n_results
    assert "tf.aliasing_output" not in m.text and "mhlo.sharding" not in m.text
    if aliasing:
        assert "tf.aliasing_output" in m.dropped_attributes


def test_aliasing_is_reported_from_the_argument_to_the_result() -> None:
    # Argument 2 may become result 0's buffer; argument 0 result 1's. Not the other way round.
    m = parse_module(_module(3, 2, {2: 0, 0: 1}, {}))
    assert m.aliasing == {2: 0, 0: 1}


def test_markings_on_mains_results_are_dropped_but_not_reported_as_argument_aliasing() -> None:
    m = parse_module(_module(2, 2, {}, {}, result_marks={1: 0}))
    assert m.aliasing == {}
    assert "tf.aliasing_output" in m.dropped_attributes
    assert "tf.aliasing_output" not in m.text


@pytest.mark.parametrize("value", ['"zero"', "1.5 : f32", "[0, 1]", "unit"])
def test_an_aliasing_attribute_that_is_not_an_integer_is_refused_typed(value: str) -> None:
    # The bindings' IntegerAttr cast fails on it; the user gets a typed refusal, not a raw
    # ValueError from inside module analysis.
    text = f"""module {{
  func.func @main(%x: {T} {{tf.aliasing_output = {value}}}) -> {T} {{
    return %x : {T}
  }}
}}"""
    with pytest.raises(UnsupportedModuleError) as e:
        parse_module(text, origin="m.mlir")
    assert type(e.value) is UnsupportedModuleError
    assert str(e.value).startswith(
        "m.mlir: the module parses but has a structure juliabridge does not expect (ValueError: "
    )
    assert str(e.value).endswith("; it is not a module Reactant emits")


def test_every_attribute_of_an_argument_is_sorted_after_one_that_is_kept() -> None:
    # MLIR keeps an argument's attributes sorted by name: mhlo.custom (kept) comes before
    # mhlo.sharding and tf.aliasing_output (dropped), which must still be reported.
    text = f"""module {{
  func.func @main(%x: {T}, %y: {T} {{mhlo.custom = 7 : i64, mhlo.sharding = "{{replicated}}",
      tf.aliasing_output = 0 : i32, zz.kept = 1 : i64}}) -> {T} {{
    return %x : {T}
  }}
}}"""
    m = parse_module(text, trust=True)
    assert m.aliasing == {1: 0}
    assert m.arg_shardings == {1: '"{replicated}"'}
    assert "mhlo.custom = 7 : i64" in m.text and "zz.kept = 1 : i64" in m.text
    assert "tf.aliasing_output" not in m.text and "mhlo.sharding" not in m.text
