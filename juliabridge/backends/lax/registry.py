"""The op registry: MLIR op name -> lift function, and the view a lift function reads.

A lift function runs once per op at load time. It reads the op's attributes and types through an
`OpView` and returns the op's *implementation*: a Python function of the operand values (JAX
arrays, Python tuples for MLIR tuples, `TOKEN` for tokens) returning the list of result values.
An op with regions gets its regions as Python callables first: ``impl(regions, *operands)``,
each region taking its block arguments and returning the values of its terminator.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import UnsupportedOpError
from ...support.jaxinternals import ir
from . import attrs
from .valtypes import TensorType, TupleType, TypeNotSupported, ValueType, value_type

Impl = Callable[..., Sequence[Any]]
LiftFn = Callable[["OpView"], Impl]


@dataclass(frozen=True)
class Rule:
    """How one op is lifted: the function, and whether its impl takes region callables."""

    lift: LiftFn
    with_regions: bool


#: Every op the lax backend lifts. Filled by the modules of `juliabridge.backends.lax.ops`.
RULES: dict[str, Rule] = {}


def lifts(*names: str, regions: bool = False) -> Callable[[LiftFn], LiftFn]:
    """Register a lift function for the op names given (``regions=True``: impl takes regions)."""

    def register(fn: LiftFn) -> LiftFn:
        for name in names:
            if name in RULES:
                raise RuntimeError(f"two lift functions for {name}")  # a programming error
            RULES[name] = Rule(fn, regions)
        return fn

    return register


class TOKEN_T:
    """The single value every `!stablehlo.token` has during evaluation."""

    def __repr__(self) -> str:
        return "TOKEN"


TOKEN = TOKEN_T()

#: Default of the OpView getters meaning "the attribute must be present".
REQUIRED: Any = object()

_LINE = re.compile(r'"(?P<file>[^"]*)":(?P<line>\d+):(?P<col>\d+)')


def location_of(op: ir.Operation) -> str:
    """'line L' (or 'FILE:L' for a location from another file) for messages."""
    m = _LINE.search(str(op.location))
    if m is None:
        return "unknown line"
    if m.group("file") in ("-", ""):
        return f"line {m.group('line')}"
    return f"{m.group('file')}:{m.group('line')}"


class OpView:
    """Read access to one op for its lift function; errors name the op and its line."""

    def __init__(
        self, op: ir.Operation, *, origin: str, regions: Sequence[Any], program: Any
    ) -> None:
        self.op = op
        self.name: str = op.name
        self.origin = origin
        self.where = location_of(op)
        self.regions = tuple(regions)
        self.program = program
        self.operand_types: tuple[ValueType, ...] = tuple(
            self._type(v.type, f"operand {i}") for i, v in enumerate(op.operands)
        )
        self.result_types: tuple[ValueType, ...] = tuple(
            self._type(r.type, f"result {i}") for i, r in enumerate(op.results)
        )

    # --- errors --------------------------------------------------------------------------

    def error(self, what: str, *, hint: str = "") -> UnsupportedOpError:
        """A typed error for this op: raise the return value."""
        advice = hint or (
            "Load it with backend='xla' (or 'auto', which falls back to it), or report the op "
            "so the lax backend learns it"
        )
        return UnsupportedOpError(
            f"{self.origin}: {self.name} at {self.where}: {what}. {advice}.",
            op=self.name,
            where=self.where,
        )

    def _type(self, t: ir.Type, what: str) -> ValueType:
        try:
            return value_type(t)
        except TypeNotSupported as e:
            raise self.error(f"{what} has type {e}, which the lax backend cannot represent") from e

    # --- types ---------------------------------------------------------------------------

    def tensor(self, t: ValueType, what: str = "value") -> TensorType:
        """`t` as a TensorType, or a typed error if it is a tuple or token."""
        if not isinstance(t, TensorType):
            raise self.error(f"{what} is {t}, expected a tensor")
        return t

    @property
    def result(self) -> TensorType:
        """The single tensor result's type."""
        if len(self.result_types) != 1:
            raise self.error(f"expected one result, found {len(self.result_types)}")
        return self.tensor(self.result_types[0], "the result")

    @property
    def operand(self) -> TensorType:
        """The first operand's tensor type."""
        if not self.operand_types:
            raise self.error("expected at least one operand")
        return self.tensor(self.operand_types[0], "operand 0")

    # --- attributes ----------------------------------------------------------------------

    def has(self, name: str) -> bool:
        """Whether the op carries attribute `name`."""
        return name in self.op.attributes

    def raw(self, name: str) -> ir.Attribute:
        """The attribute itself, or a typed error when it is missing."""
        if name not in self.op.attributes:
            raise self.error(f"attribute {name} is missing")
        return self.op.attributes[name]

    def _decode(self, name: str, fn: Callable[[ir.Attribute], Any], default: Any) -> Any:
        if name not in self.op.attributes:
            if default is REQUIRED:
                raise self.error(f"attribute {name} is missing")
            return default
        try:
            return fn(self.op.attributes[name])
        except (ValueError, TypeError, attrs.AttributeError_) as e:
            shown = str(self.op.attributes[name])[:200]
            raise self.error(f"attribute {name} = {shown}: {e}") from e

    def get_int(self, name: str, default: Any = REQUIRED) -> Any:
        """An integer attribute (`default` when absent; required when no default is given)."""
        return self._decode(name, attrs.integer, default)

    def get_ints(self, name: str, default: Any = REQUIRED) -> Any:
        """An integer-array attribute as a tuple."""
        return self._decode(name, attrs.integers, default)

    def get_bools(self, name: str, default: Any = REQUIRED) -> Any:
        """A boolean-array attribute as a tuple."""
        return self._decode(name, attrs.bools, default)

    def get_float(self, name: str, default: Any = REQUIRED) -> Any:
        """A float attribute."""
        return self._decode(name, attrs.floating, default)

    def get_str(self, name: str, default: Any = REQUIRED) -> Any:
        """A string attribute."""
        return self._decode(name, attrs.string, default)

    def get_symbol(self, name: str) -> str:
        """A symbol-reference attribute's name."""
        return str(self._decode(name, attrs.symbol, REQUIRED))

    def get_enum(self, name: str, default: Any = REQUIRED) -> Any:
        """A dialect enum attribute's case name, e.g. 'LT'."""
        return self._decode(name, attrs.enum, default)

    def get_enums(self, name: str, default: Any = REQUIRED) -> Any:
        """An array of dialect enum attributes."""
        return self._decode(name, attrs.enums, default)

    def get_typed(self, name: str, cls: type, default: Any = REQUIRED) -> Any:
        """A structured attribute through its binding class (e.g. GatherDimensionNumbers)."""
        return self._decode(name, cls, default)

    def get_dense(self, name: str, ttype: TensorType | None = None) -> Any:
        """A dense elements attribute as a numpy array (of `ttype`, default its own type)."""
        attr: Any
        try:
            attr = self.raw(name)
        except TypeError as e:
            # The bindings have no Python class for dense complex attributes and raise while
            # wrapping one (reading NamedAttribute.attr even aborts the process), so these are
            # decoded from their printed form, which needs the type from the caller.
            attr = self._printed(name)
            if ttype is None:
                raise self.error(f"attribute {name}: the bindings cannot read its type") from e
        if ttype is None:
            ttype = self.tensor(self._type(attr.type, f"attribute {name}"), name)
        # One array per distinct attribute and type: MLIR stores an attribute once however many
        # ops carry it (an alias, a dense_resource blob), and so does this (400 constants of
        # one blob were 400 copies). Printed forms (dense complex) are keyed by their text.
        key = (attr, ttype.dtype.str, ttype.shape)
        shared = self.program.constants.get(key)
        if shared is not None:
            return shared
        try:
            value = attrs.dense(attr, ttype, self.program.resources)
        except (ValueError, TypeError, attrs.AttributeError_) as e:
            raise self.error(f"attribute {name}: {e}") from e
        self.program.constants[key] = value
        return value

    def _printed(self, name: str) -> str:
        """The printed form of attribute `name`, read without wrapping it in a Python class."""
        for i, key in enumerate(self.op.attributes.keys()):
            if key == name:
                text = str(self.op.attributes[i])  # "NamedAttribute(name=<attribute>)"
                return text[len(f"NamedAttribute({name}=") : -1]
        raise self.error(f"attribute {name} is missing")

    # --- regions -------------------------------------------------------------------------

    def region_op(self, k: int) -> str | None:
        """The op name when region `k` is exactly ``return op(arg0, arg1, ...)``, else None.

        Used to recognise the monoid bodies (add, max, ...) JAX has differentiable forms for.
        """
        return self.regions[k].single_op_over_args() if k < len(self.regions) else None


def tuple_elements(t: ValueType) -> tuple[ValueType, ...]:
    """Elements of a tuple type (for get_tuple_element)."""
    if not isinstance(t, TupleType):
        raise TypeError(f"{t} is not a tuple")
    return t.elements
