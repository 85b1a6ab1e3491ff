"""Hypothesis-generated modules: chains of elementwise ops (and constants, iota, converts,
compares, selects, clamps; reshape/transpose/broadcast_in_dim when the shape family is
registered) over random shapes and element types, run on lax and on XLA, and on a sample
through the reference interpreter.

Hypothesis draws the seeds (derandomized, so every run checks the same modules); each seed
builds its module with numpy's generator, so the modules differ from each other as much as
independent draws do (hypothesis's own draws, derandomized, mostly vary one example). Left out are the forms where XLA and the
spec part ways (tested on their own in test_elementwise.py): ordering complex numbers and
integer power. The interpreter sample leaves out what it cannot take: complex values at
@main, integer division (it dies on division by zero), and TOTALORDER (it reads it as FLOAT).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from juliabridge.backends.lax import RULES

from ._elementwise_util import (
    COMPLEX,
    FLOATS,
    INTS,
    SIGNED,
    TOL,
    dt,
    module,
)
from .oracles import assert_same, interpret, random_array, run_lax, run_xla

# 64-bit types cross @main (the x64 fixture of tests/conftest.py).
pytestmark = pytest.mark.usefixtures("x64")

TYPES = (*FLOATS, "i1", *INTS, *COMPLEX)
#: Argument types, floats weighted up: most ops are theirs.
ARG_TYPES = (*FLOATS, *FLOATS, *FLOATS, *COMPLEX, "i1", *INTS)

FLOAT_UNARY = (
    "abs", "cbrt", "ceil", "cosine", "exponential", "exponential_minus_one", "floor", "log",
    "log_plus_one", "logistic", "negate", "round_nearest_afz", "round_nearest_even", "rsqrt",
    "sign", "sine", "sqrt", "tan", "tanh", "real", "imag",
)  # fmt: skip
COMPLEX_UNARY = (
    "cosine", "exponential", "exponential_minus_one", "log", "log_plus_one", "logistic",
    "negate", "rsqrt", "sign", "sine", "sqrt", "tan", "tanh",
)  # fmt: skip
INT_UNARY = ("negate", "not", "popcnt", "count_leading_zeros")
SIGNED_UNARY = ("abs", "sign")
FLOAT_BINARY = (
    "add", "subtract", "multiply", "divide", "remainder", "power", "maximum", "minimum", "atan2",
)  # fmt: skip
COMPLEX_BINARY = ("add", "subtract", "multiply", "divide", "power")
INT_BINARY = (
    "add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "and", "or",
    "xor", "shift_left", "shift_right_logical", "shift_right_arithmetic",
)  # fmt: skip
BOOL_BINARY = ("and", "or", "xor", "add", "multiply", "maximum", "minimum")
SHAPE_OPS = tuple(
    op for op in ("reshape", "transpose", "broadcast_in_dim") if f"stablehlo.{op}" in RULES
)


def ttype(shape: tuple[int, ...], et: str) -> str:
    """The MLIR tensor type."""
    return f"tensor<{''.join(f'{d}x' for d in shape)}{et}>"


def part(et: str) -> str:
    """The component type of a complex type."""
    return "f32" if et == "complex<f32>" else "f64"


@dataclass
class Builder:
    """A module under construction: values (name -> (shape, element type)) and op lines."""

    rng: np.random.Generator
    values: dict[str, tuple[tuple[int, ...], str]] = field(default_factory=dict)
    body: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    no_interpreter: set[str] = field(default_factory=set)

    used: set[str] = field(default_factory=set)
    #: Values XLA knows at compile time (from constants and iotas alone).
    known: set[str] = field(default_factory=set)

    def new(self, shape: tuple[int, ...], et: str, line: str, op: str) -> str:
        name = f"%v{len(self.values)}"
        operands = re.findall(r"%[av]\d+", line)
        if all(o in self.known for o in operands):
            self.known.add(name)
        self.used.update(operands)
        self.body.append(f"{name} = {line}")
        self.values[name] = (shape, et)
        self.ops.append(op)
        return name

    def results(self, limit: int) -> list[str]:
        """The newest values nothing consumes (so every op reaches a result, as far as
        `limit` allows); complex ones leave through their real part, which the interpreter
        can hand back."""
        leaves = [n for n in self.values if n.startswith("%v") and n not in self.used]
        outs = []
        for name in (leaves or ["%a0"])[-limit:]:
            shape, et = self.values[name]
            if et in COMPLEX:
                t, pt = ttype(shape, et), ttype(shape, part(et))
                name = self.new(shape, part(et), f"stablehlo.real {name} : ({t}) -> {pt}", "real")
            outs.append(name)
        return outs

    def choice(self, options: Any) -> Any:
        """One of `options`, uniformly."""
        options = list(options)
        return options[int(self.rng.integers(len(options)))]

    def coin(self) -> bool:
        return bool(self.rng.integers(2))

    def pick(self, accept: Callable[[tuple[int, ...], str], bool]) -> str | None:
        """A value passing `accept`, the newest more often (so the chain stays live)."""
        names = [n for n, (s, e) in self.values.items() if accept(s, e)]
        if not names:
            return None
        return names[-1] if self.coin() else self.choice(names)

    def like(self, shape: tuple[int, ...], et: str) -> str:
        """A value of this shape and type: an existing one, a convert, or a constant."""
        same = self.pick(lambda s, e: (s, e) == (shape, et))
        if same is not None and self.coin():
            return same
        source = self.pick(lambda s, e: s == shape and e not in COMPLEX and et not in COMPLEX)
        if source is not None and self.coin():
            return self.convert(source, et)
        return self.constant(shape, et)

    def constant(self, shape: tuple[int, ...], et: str) -> str:
        value = {
            "i1": self.choice(["true", "false"]),
        }.get(et)
        if value is None and et in COMPLEX:
            value = f"({self.choice(['1.5', '-0.5', '2.0'])}, -1.0)"
        elif value is None and et in INTS:
            value = str(int(self.rng.integers(0 if et.startswith("u") else -9, 10)))
        elif value is None:
            value = self.choice(["0.5", "-2.0", "3.0", "0.0", "-0.0", "1.0e+00"])
        t = ttype(shape, et)
        return self.new(shape, et, f"stablehlo.constant dense<{value}> : {t}", "constant")

    def convert(self, v: str, et: str) -> str:
        shape, src = self.values[v]
        line = f"stablehlo.convert {v} : ({ttype(shape, src)}) -> {ttype(shape, et)}"
        return self.new(shape, et, line, "convert")

    # --- one random op -------------------------------------------------------------------

    def step(self) -> None:
        kinds = ["unary"] * 4 + ["binary"] * 4 + ["compare", "select", "convert", "clamp", "iota"]
        kinds += ["shape"] * (2 if SHAPE_OPS else 0)
        getattr(self, f"_{self.choice(kinds)}")()

    def _unary(self) -> None:
        v = self.pick(lambda s, e: True)
        assert v is not None
        shape, et = self.values[v]
        t = ttype(shape, et)
        if et in FLOATS:
            op = self.choice((*FLOAT_UNARY, "is_finite"))
            rt = "i1" if op == "is_finite" else et
        elif et in COMPLEX:
            op = self.choice((*COMPLEX_UNARY, "abs", "real", "imag"))
            rt = part(et) if op in ("abs", "real", "imag") else et
        elif et == "i1":
            op, rt = "not", et
        else:
            op = self.choice(INT_UNARY + (SIGNED_UNARY if et in SIGNED else ()))
            rt = et
        self.new(shape, rt, f'"stablehlo.{op}"({v}) : ({t}) -> {ttype(shape, rt)}', op)

    def _binary(self) -> None:
        v = self.pick(lambda s, e: True)
        assert v is not None
        shape, et = self.values[v]
        table = {"i1": BOOL_BINARY}.get(et) or (
            FLOAT_BINARY if et in FLOATS else COMPLEX_BINARY if et in COMPLEX else INT_BINARY
        )
        op = self.choice(table)
        w = self.like(shape, et)
        if et in INTS and op in ("divide", "remainder"):
            if (v in self.known and w in self.known) or v == w:
                # XLA's compiler would fold it, and dies of SIGFPE on a zero divisor
                # (test_elementwise.py checks that lax does not); jaxlib 0.12 also folds
                # x / x to 1 and x % x to 0, which XLA's runtime gives otherwise for x = 0.
                op = "add"
            self.no_interpreter.add("integer division")
        if self.coin():
            v, w = w, v
        self.new(shape, et, f"stablehlo.{op} {v}, {w} : {ttype(shape, et)}", op)

    def _compare(self) -> None:
        v = self.pick(lambda s, e: True)
        assert v is not None
        shape, et = self.values[v]
        w = self.like(shape, et)
        if et in COMPLEX:
            direction, kind = self.choice(["EQ", "NE"]), "FLOAT"
        else:
            direction = self.choice(["EQ", "NE", "LT", "LE", "GT", "GE"])
            kind = (
                self.choice(["FLOAT", "TOTALORDER"])
                if et in FLOATS
                else "SIGNED"
                if et in SIGNED
                else "UNSIGNED"
            )
        if kind == "TOTALORDER":
            self.no_interpreter.add("TOTALORDER")
        t = ttype(shape, et)
        line = (
            f"stablehlo.compare {direction}, {v}, {w}, {kind} : ({t}, {t}) -> {ttype(shape, 'i1')}"
        )
        self.new(shape, "i1", line, "compare")

    def _select(self) -> None:
        v = self.pick(lambda s, e: True)
        assert v is not None
        shape, et = self.values[v]
        scalar = self.coin()
        p = self.like((), "i1") if scalar else self.like(shape, "i1")
        w = self.like(shape, et)
        pt = ttype(() if scalar else shape, "i1")
        self.new(shape, et, f"stablehlo.select {p}, {v}, {w} : {pt}, {ttype(shape, et)}", "select")

    def _convert(self) -> None:
        v = self.pick(lambda s, e: e not in COMPLEX)
        if v is None:
            return
        self.convert(v, self.choice(TYPES))

    def _clamp(self) -> None:
        v = self.pick(lambda s, e: e not in COMPLEX and e != "i1")
        if v is None:
            return
        shape, et = self.values[v]
        lo, hi = self.constant((), et), self.constant((), et)
        s, t = ttype((), et), ttype(shape, et)
        self.new(shape, et, f"stablehlo.clamp {lo}, {v}, {hi} : ({s}, {t}, {s}) -> {t}", "clamp")

    def _iota(self) -> None:
        v = self.pick(lambda s, e: len(s) > 0)
        if v is None:
            return
        shape = self.values[v][0]
        et = self.choice([t for t in TYPES if t != "i1"])
        dim = int(self.rng.integers(len(shape)))
        self.new(shape, et, f"stablehlo.iota dim = {dim} : {ttype(shape, et)}", "iota")

    def _shape(self) -> None:
        op = self.choice(SHAPE_OPS)
        v = self.pick(lambda s, e: True)
        assert v is not None
        shape, et = self.values[v]
        t = ttype(shape, et)
        if op == "reshape":
            new: tuple[int, ...] = (int(np.prod(shape, dtype=int)),)
            if self.coin() and new[0] % 2 == 0 and new[0]:
                new = (2, new[0] // 2)
            self.new(new, et, f"stablehlo.reshape {v} : ({t}) -> {ttype(new, et)}", op)
        elif op == "transpose":
            perm = [int(i) for i in self.rng.permutation(len(shape))]
            new = tuple(shape[i] for i in perm)
            dims = ", ".join(map(str, perm))
            line = f"stablehlo.transpose {v}, dims = [{dims}] : ({t}) -> {ttype(new, et)}"
            self.new(new, et, line, op)
        else:
            new = (2, *shape)
            dims = ", ".join(str(i + 1) for i in range(len(shape)))
            line = f"stablehlo.broadcast_in_dim {v}, dims = [{dims}] : ({t}) -> {ttype(new, et)}"
            self.new(new, et, line, op)


def build(seed: int) -> tuple[str, list[np.ndarray], set[str], list[str]]:
    """The module of `seed`: (text, arguments, reasons to skip the interpreter, ops used)."""
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(4))
    shape = tuple(int(d) for d in rng.choice([2, 3, 4, 1, 3, 0], size=rank))  # 0 now and then
    b = Builder(rng)
    arg_types = [b.choice(ARG_TYPES) for _ in range(int(rng.integers(1, 4)))]
    for i, et in enumerate(arg_types):
        b.values[f"%a{i}"] = (shape, et)
    for _ in range(int(rng.integers(8, 25))):
        b.step()
    outs = b.results(limit=6)
    args = [random_array(rng, shape, et, special=True) for et in arg_types]
    text = module(
        [ttype(shape, et) for et in arg_types],
        b.body,
        [(o, ttype(*b.values[o])) for o in outs],
    )
    boundary = arg_types + [b.values[o][1] for o in outs]
    if any(et in COMPLEX for et in boundary):
        b.no_interpreter.add("complex at @main")
    return text, args, b.no_interpreter, b.ops


def _tolerance(results: list[np.ndarray]) -> tuple[float, float]:
    """The loosest of the results' float tolerances, x10 (XLA may fuse the two programs
    differently); integers and Booleans compare exactly either way."""
    by_dtype = {dt(t): tol for t, tol in TOL.items()}
    tols = [by_dtype[r.dtype] for r in results if r.dtype in by_dtype] or [(0.0, 0.0)]
    return max(t[0] for t in tols) * 10, max(t[1] for t in tols) * 10


@settings(
    derandomize=True,
    max_examples=50,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.integers(0, 2**32 - 1))
def test_random_modules_lax_vs_xla_and_interpreter(seed: int) -> None:
    text, args, no_interpreter, _ = build(seed)
    got = run_lax(text, args)
    rtol, atol = _tolerance(got)
    assert_same(got, run_xla(text, args), rtol=rtol, atol=atol, what=f"lax vs xla\n{text}")
    # Two thirds of the modules it can take also go through the interpreter (a fixed choice,
    # by their text).
    sampled = hashlib.sha256(text.encode()).digest()[0] % 3 != 0
    if sampled and not no_interpreter:
        assert_same(
            got, interpret(text, args), rtol=rtol, atol=atol, what=f"lax vs interpreter\n{text}"
        )


def test_the_generator_reaches_every_op() -> None:
    """Over the first seeds the modules use every op the tables list (no op is left out by
    a table or a type mix that never selects it)."""
    seen: set[str] = set()
    for seed in range(50):
        seen.update(build(seed)[3])
    wanted = {"constant", "convert", "compare", "select", "clamp", "iota", "is_finite"}
    for table in (FLOAT_UNARY, COMPLEX_UNARY, INT_UNARY, SIGNED_UNARY, SHAPE_OPS):
        wanted |= set(table)
    for table in (FLOAT_BINARY, COMPLEX_BINARY, INT_BINARY, BOOL_BINARY):
        wanted |= set(table)
    assert wanted <= seen, wanted - seen
