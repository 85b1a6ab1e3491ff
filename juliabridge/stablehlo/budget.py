"""What compiling and running a module would cost, computed from the module before XLA sees it.

A module that is valid StableHLO can still take the process down: a 6 KB module whose functions
call each other twice per level expands to 2^40 ops when XLA inlines the calls (it ran out of
memory after minutes); a chain of 30,000 dependent ops overflows XLA's stack (SIGSEGV; 20,000
compiled, measured with an 8 MiB stack); a 16 GiB intermediate on a smaller machine gets the
process killed. So parse_module computes, in one linear pass over each function (callees
first, using the call graph):

- **ops after inlining**: the function's own ops plus, per call site, the callee's count;
- **chain depth**: the longest path of dependent ops within one XLA computation, calls inlined
  (a region of a while/reduce/... is its own computation);
- **largest value** and **peak live bytes**: every value's bytes from its static type, and the
  most bytes live at any point in program order (a value is live from its definition to its
  last use; a call adds the callee's own peak, a region op its regions' peak). XLA fuses and
  reuses buffers, so this is an upper estimate of what one schedule needs, not a measurement;

and refuses past the limits below with a ResourceLimitError naming the figure and the limit.
Memory limits are the memory this process can still get: MemAvailable, the cgroup limit, the
address-space and data rlimits, or the accelerator's free memory when JAX's default device is
one (whichever is smallest); ``JULIABRIDGE_MEMORY_LIMIT`` (bytes, or with K/M/G/T) replaces it.
"""

from __future__ import annotations

import math
import os
import re
import resource
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..errors import ModuleContractError, ResourceLimitError
from ..support.jaxinternals import ir
from .callgraph import Function
from .contracts import check_op, where

#: Ops after inlining every call (JULIABRIDGE_MAX_OPS). Measured (tools/calibrate_budgets.py,
#: a module fanning out through func.call, first call): about 5.7 KB per inlined op on the lax
#: backend and 15.8 KB on xla, so 100,000 ops keep the costlier backend's peak under 2 GB (2 M ops
#: passed 3 GB and took minutes). Real Reactant models stay far below.
#: Ops are weighted by EXPANSION.
MAX_OPS = 100_000
#: HLO instructions one op expands to: the CHLO special functions are one op in the module but
#: XLA legalizes each into a whole computation (3,000 chained chlo.digamma peaked at 7.6 GB;
#: 1,000 polygamma cost ~1.3 MB each against the 5.7-15.8 KB per op above). Each figure is the
#: number of HLO instructions JAX's lowering of the op holds once XLA has legalized it, the
#: most over f16, bf16, f32, f64 and complex64 (`python tools/calibrate_budgets.py
#: --expansions`; the largest of jax 0.10.2, 0.12.0.1 (whose lgamma is JAX's own
#: 549-instruction decomposition) and 0.12.1 (whose bessel_i1e, erf_inv, polygamma and zeta
#: expand to 419, 292, 391 and 214; its lax.digamma and lax.lgamma are one call of a CPU kernel,
#: custom_call cpu_digamma_ffi / cpu_lgamma_ffi, while the xla backend still legalizes the CHLO
#: op into the computation counted here); measured, an expanded instruction costs 3.5-4.4 KB at
#: the first call, within the per-op memory MAX_OPS was set for.
INSTRUCTIONS: dict[str, int] = {
    "chlo.acos": 140,
    "chlo.acosh": 140,
    "chlo.asin": 140,
    "chlo.asinh": 139,
    "chlo.atan": 71,
    "chlo.atanh": 69,
    "chlo.bessel_i1e": 419,
    "chlo.cosh": 121,
    "chlo.digamma": 126,
    "chlo.erf_inv": 292,
    "chlo.erfc": 179,
    "chlo.lgamma": 549,
    "chlo.next_after": 36,
    "chlo.polygamma": 391,
    "chlo.sinh": 121,
    "chlo.zeta": 214,
}
#: Seconds XLA's CPU compiler spends per op, loading and first call included: the most over
#: the lax and xla backends, of 900 ops chained and 300 independent (each on the argument
#: plus its own constant, summed), measured with `python tools/calibrate_budgets.py --times
#: --counts 100,300,900` (jax 0.10.2, the CPU of a 13-core TPU v5e host, 10 measurements at
#: once, 2026-12-06). Memory does not bound these: 800 chained digammas fit in 0.5 GB but
#: took about 2 minutes on the shared 2-core development machine.
COMPILE_SECONDS: dict[str, float] = {
    "chlo.acos": 0.0102,
    "chlo.acosh": 0.0227,
    "chlo.asin": 0.0118,
    "chlo.asinh": 0.0474,
    "chlo.atan": 0.0080,
    "chlo.atanh": 0.0253,
    "chlo.bessel_i1e": 0.0405,
    "chlo.cosh": 0.0152,
    "chlo.digamma": 0.0398,
    "chlo.erf_inv": 0.0312,
    "chlo.erfc": 0.0319,
    "chlo.lgamma": 0.0356,
    "chlo.next_after": 0.0142,
    "chlo.polygamma": 0.0527,
    "chlo.sinh": 0.0201,
    "chlo.zeta": 0.0489,
}
#: The compile time the op budget admits for one kind of weighted op: MAX_OPS // weight of any
#: one of them compiles and runs its first call in at most about this many seconds on the host
#: COMPILE_SECONDS was measured on (where the 10,000 chained sines MAX_CHAIN admits take 23.5 s).
COMPILE_TARGET_S = 15.0


def _weight(op: str) -> int:
    return max(INSTRUCTIONS[op], math.ceil(MAX_OPS * COMPILE_SECONDS[op] / COMPILE_TARGET_S))


#: What one op counts in MAX_OPS: the larger of the HLO instructions it expands to (memory) and
#: the ops of weight 1 that share COMPILE_TARGET_S as it does MAX_OPS // weight (time). The
#: broadcast_ forms count as their base op. Ops not listed count 1.
EXPANSION: dict[str, int] = {op: _weight(op) for op in INSTRUCTIONS}
EXPANSION.update(
    {f"chlo.broadcast_{n}": EXPANSION[f"chlo.{n}"] for n in ("next_after", "polygamma", "zeta")}
)
#: Ops on complex elements whose chains XLA compiles in quadratic time (issue 50), and what one
#: counts in MAX_OPS: measured (jax 0.10.2, XLA's CPU compiler, the shared 2-core development
#: machine, load average 8, 2026-12-06), a chain of n complex sqrt took 3.6 s at n = 5 and
#: 18.9 s at n = 10 (f32: 0.28 s at 10; 40 complex multiplies 0.3 s), and of complex acos
#: 2.7 s at 3 and 7.1 s at 6; so each counts MAX_OPS // 12, admitting the about ten that
#: compile within COMPILE_TARGET_S. Kinds not measured count as their real form; the compile
#: limit (backends/deadline.py) bounds the time of whatever no weight predicts.
COMPLEX_EXPANSION: dict[str, int] = {"stablehlo.sqrt": MAX_OPS // 12, "chlo.acos": MAX_OPS // 12}
#: The suffix that names the complex form of a kind in EXPANSION and in budget messages.
COMPLEX_KIND = " on complex"
EXPANSION.update({f"{n}{COMPLEX_KIND}": w for n, w in COMPLEX_EXPANSION.items()})
#: Ops whose cost grows with their operand count, which the module's size does not bound (one
#: value may be passed any number of times), and what each operand counts in MAX_OPS: a sort's
#: comparator takes two scalars per operand, and 16,384 operands (one value repeated: one op
#: in the text) took 13 s to load and first call on lax and 7 s on xla, linear from 4,096
#: (the shared 2-core development machine, load average 7, 2026-12-06); at 2 per operand the
#: largest sort the op budget admits compiles about as long as its largest special functions.
PER_OPERAND: dict[str, int] = {"stablehlo.sort": 2}


def weight_kind(op: ir.Operation) -> str:
    """The kind `op` is weighed as: its name, with COMPLEX_KIND for a COMPLEX_EXPANSION op
    whose result has complex elements."""
    name = op.name
    if name in COMPLEX_EXPANSION and op.results and "complex<" in str(op.results[0].type):
        return name + COMPLEX_KIND
    return name


def op_weight(op: ir.Operation) -> int:
    """What `op` itself counts in MAX_OPS (its callees not included)."""
    name = op.name
    per = PER_OPERAND.get(name)
    if per is not None:
        return max(1, per * len(op.operands))
    return EXPANSION.get(weight_kind(op), 1)


#: Window elements visited by every reduce_window and select_and_scatter once calls are inlined
#: (JULIABRIDGE_MAX_WINDOW_WORK): result (select_and_scatter: source) elements times window
#: elements. One op in the text, but XLA visits each window of each output at every call: a
#: 1024x1024 max-pool with 512x512 windows (7e10) took 7.7 s on lax, so 10^12 is about two
#: minutes per call on the shared 2-core development machine (2026-12-06). Reactant writes a
#: cumulative sum over n elements as a window of n padded by n - 1 (n^2 visits; the shared
#: fixture reactant/cumsum_reduce_window.mlir): 10^12 admits n = 1,000,000.
MAX_WINDOW_WORK = 10**12
#: Longest chain of dependent ops in one computation (JULIABRIDGE_MAX_CHAIN); 30,000 crashed
#: XLA's compiler with an 8 MiB stack, 20,000 compiled.
MAX_CHAIN = 10_000
#: `stablehlo.case` branches once every call is inlined (JULIABRIDGE_MAX_CASE_BRANCHES). XLA's
#: CPU compiler spends more than linear time and memory per branch: 1,000 one-op branches peaked
#: at 1.9 GB on the lax backend and 1,500 at 2.2 GB on xla (150 s); see tools/calibrate_budgets.py.
MAX_CASE_BRANCHES = 1_000
#: Bytes the backends spend per byte of attribute data while loading and compiling (the text,
#: the parsed attribute, the host array, XLA's literal): measured 10.7 (lax) and 13.7 (xla)
#: for f32 constants, 4.3-4.5 for complex constants and other attributes (tools/
#: calibrate_budgets.py); the data of every attribute, counted at every op that carries it,
#: times this must fit in the memory budget.
CONSTANT_COST = 14
#: Largest single value whatever the machine: the manifest's per-array limit (256 GiB).
MAX_VALUE_BYTES = 1 << 38

_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


_SIZE = re.compile(r"(\d+)([KMGT]?)")


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip().upper().removesuffix("B").removesuffix("I")
    m = _SIZE.fullmatch(raw)
    return int(m.group(1)) * _SUFFIX[m.group(2)] if m else default


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read(1 << 16)
    except OSError:
        return None


_MEMINFO = {
    key: re.compile(rf"^{key}:\s+(\d+) kB", re.MULTILINE)
    for key in ("MemAvailable", "VmSize", "VmData")
}


def _meminfo(key: str, text: str | None) -> int | None:
    m = _MEMINFO[key].search(text or "")
    return int(m.group(1)) << 10 if m else None


def host_memory() -> tuple[int, str]:
    """Bytes this process can still allocate on the host, and where the figure comes from."""
    found: list[tuple[int, str]] = []
    avail = _meminfo("MemAvailable", _read("/proc/meminfo"))
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            avail = None
    if avail is not None:
        found.append((avail, "the machine's available memory"))
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        limit, usage = _read(limit_file), _read(usage_file)
        if limit and usage and limit.strip().isdigit() and usage.strip().isdigit():
            lim = int(limit)
            if lim < 1 << 60:
                found.append((max(0, lim - int(usage)), "the cgroup memory limit"))
    status = None  # read only when an rlimit is set (most processes have none)
    for rl, key, what in (
        (resource.RLIMIT_AS, "VmSize", "the address-space rlimit (ulimit -v)"),
        (resource.RLIMIT_DATA, "VmData", "the data rlimit (ulimit -d)"),
    ):
        soft = resource.getrlimit(rl)[0]
        if soft != resource.RLIM_INFINITY:
            status = status or _read("/proc/self/status")
            found.append((max(0, soft - (_meminfo(key, status) or 0)), what))
    if not found:
        return 1 << 62, "no limit found"
    return min(found)


def device_memory() -> tuple[int, str]:
    """Memory for the module's values: the default accelerator's free memory, else the host's."""
    import jax

    try:
        dev = jax.devices()[0]
        stats = dev.memory_stats() if dev.platform != "cpu" else None
    except Exception:  # a backend without memory statistics
        stats = None
    if stats and stats.get("bytes_limit"):
        free = int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
        return free, f"the free memory of {dev.platform} device {dev.id}"
    return host_memory()


@dataclass(frozen=True)
class Limits:
    """The budgets one module is checked against."""

    max_ops: int
    max_chain: int
    value_bytes: int
    live_bytes: int
    memory_source: str
    max_case_branches: int = MAX_CASE_BRANCHES
    max_window_work: int = MAX_WINDOW_WORK

    @staticmethod
    def current() -> Limits:
        """Limits for this process now (environment overrides applied)."""
        override = _env_int("JULIABRIDGE_MEMORY_LIMIT", 0)
        mem, source = (override, "JULIABRIDGE_MEMORY_LIMIT") if override else device_memory()
        return Limits(
            max_ops=_env_int("JULIABRIDGE_MAX_OPS", MAX_OPS),
            max_chain=_env_int("JULIABRIDGE_MAX_CHAIN", MAX_CHAIN),
            value_bytes=min(MAX_VALUE_BYTES, mem),
            live_bytes=mem,
            memory_source=source,
            max_case_branches=_env_int("JULIABRIDGE_MAX_CASE_BRANCHES", MAX_CASE_BRANCHES),
            max_window_work=_env_int("JULIABRIDGE_MAX_WINDOW_WORK", MAX_WINDOW_WORK),
        )


@dataclass(frozen=True)
class Cost:
    """What one function costs, with every call it makes inlined."""

    ops: int
    chain: int  # depth of its results (arguments at 0)
    peak: int  # most bytes live at once, its arguments included
    args: int  # bytes of its arguments
    branches: int = 0  # stablehlo.case branches, calls inlined
    window_work: int = 0  # window elements reduce_window/select_and_scatter visit, calls inlined
    #: ops weighing more than 1 (EXPANSION, PER_OPERAND), calls inlined: name -> [count, weight]
    weighted: dict[str, list[int]] = field(default_factory=dict)

    @property
    def inner_peak(self) -> int:
        """Bytes the function adds at a call site (its arguments are the caller's values)."""
        return max(0, self.peak - self.args)


def human(n: int) -> str:
    """Bytes as KiB/MiB/GiB/TiB."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


class _Types:
    """Bytes of a value's type (cached per type); refuses tokens and dynamic shapes."""

    def __init__(self, origin: str, limits: Limits, strict: bool) -> None:
        self.origin = origin
        self.limits = limits
        self.strict = strict  # refuse tokens and dynamic shapes (not for trusted modules)
        self.cache: dict[ir.Type, int] = {}

    def bytes(self, t: ir.Type, op: ir.Operation) -> int:
        n = self.cache.get(t)
        if n is None:
            n = self._measure(t, op)
            self.cache[t] = n
        if n > self.limits.value_bytes:
            raise ResourceLimitError(
                f"{where(op, self.origin)}: {op.name} produces {t}, {human(n)}, more than "
                f"{human(self.limits.value_bytes)} ({self._limit_name()}); the module is "
                "corrupt, forged, or too large for this machine"
            )
        return n

    def _limit_name(self) -> str:
        if self.limits.value_bytes == MAX_VALUE_BYTES:
            return "the 256 GiB juliabridge accepts for one array"
        return self.limits.memory_source

    def _measure(self, t: ir.Type, op: ir.Operation) -> int:
        if isinstance(t, ir.TupleType):
            return sum(self._measure(t.get_type(i), op) for i in range(t.num_types))
        if isinstance(t, ir.RankedTensorType):
            if not t.has_static_shape and not self.strict:
                return 0
            if not t.has_static_shape:
                raise ModuleContractError(
                    f"{where(op, self.origin)}: {op.name} has a dynamic shape ({t}); "
                    "Reactant exports static shapes, and juliabridge needs them to bound the "
                    "module's memory before compiling it"
                )
            n = 1
            for d in t.shape:
                n *= int(d)
            return n * _element_bytes(t.element_type)
        text = str(t)
        if "token" in text:
            # A token holds no data. The host I/O a token can order (infeed, outfeed, send,
            # recv) is what hangs, and contracts.check_op refuses those ops by name.
            return 0
        if not self.strict:
            return 0 if isinstance(t, ir.UnrankedTensorType) else 8
        if isinstance(t, ir.UnrankedTensorType):
            raise ModuleContractError(
                f"{where(op, self.origin)}: {op.name} has the unranked type {t}; export with "
                "static shapes"
            )
        return 8  # scalars of other kinds (none in modules Reactant writes)


def _element_bytes(et: ir.Type) -> int:
    # For every type numpy holds (dtypes.MLIR_TO_NUMPY) this is numpy's itemsize.
    if isinstance(et, ir.ComplexType):
        return 2 * _element_bytes(et.element_type)
    width = getattr(et, "width", None)
    return max(1, (int(width) + 7) // 8) if width else 8


@dataclass
class _Frame:
    """One block being walked: one XLA computation."""

    ops: Iterator[ir.Operation]
    defs: list[tuple[ir.Value, int, int]] = field(default_factory=list)
    extra: dict[int, int] = field(default_factory=dict)  # position -> bytes a nested part adds
    pos: int = -1
    pending: list[ir.Block] = field(default_factory=list)  # regions of the op at `pos`
    pending_peak: int = 0
    result_chain: int = 0


def _blocks_of(op: ir.Operation, origin: str) -> list[ir.Block]:
    blocks = []
    for region in op.regions:
        n = len(region.blocks)
        if n > 1:
            raise ModuleContractError(
                f"{where(op, origin)}: {op.name} has a region with {n} blocks; XLA takes one "
                "block per region (Reactant emits no control-flow graphs)"
            )
        if n:
            blocks.append(region.blocks[0])
    return blocks


def _ops(block: ir.Block) -> Iterator[ir.Operation]:
    for child in block.operations:
        yield child.operation


class _Analysis:
    """The walk over one function; see the module docstring."""

    def __init__(
        self, costs: dict[str, Cost], types: _Types, origin: str, check_contracts: bool
    ) -> None:
        self.costs = costs
        self.types = types
        self.origin = origin
        self.check_contracts = check_contracts
        self.level: dict[ir.Value, int] = {}  # frame index that defines the value
        self.chain: dict[ir.Value, int] = {}
        self.last: dict[ir.Value, int] = {}  # last use, as a position in the defining frame
        self.max_chain = 0
        self.max_chain_op: ir.Operation | None = None
        self.constant_bytes = 0  # attribute data of every op (each function once)
        self.attribute_data = AttributeData()

    def run(self, fn: Function) -> Cost:
        body = fn.op.regions[0].blocks[0]
        frames = [self._open(body, fn.op, 0)]
        args_defs = list(frames[0].defs)
        args = sum(b for _, _, b in args_defs)
        ops = 0
        branches = 0
        weighted: dict[str, list[int]] = {}
        work = 0
        ret_chain = 0
        peak = 0
        while frames:
            top = frames[-1]
            if top.pending:
                frames.append(self._open(top.pending.pop(), None, len(frames)))
                continue
            op = next(top.ops, None)
            if op is None:
                # @main's arguments are the caller's buffers (never donated): live throughout.
                keep = len(args_defs) if len(frames) == 1 and fn.name == "main" else 0
                done = self._close(frames.pop(), keep)
                if frames:
                    parent = frames[-1]
                    parent.pending_peak = max(parent.pending_peak, done)
                    if not parent.pending:
                        parent.extra[parent.pos] = parent.pending_peak
                else:
                    peak = done
                continue
            weight = op_weight(op)
            ops += weight
            if weight > 1:
                _tally(weighted, weight_kind(op), 1, weight)
            work += window_work(op)
            for callee in _callees(op):
                for name, (n, w) in self.costs[callee].weighted.items():
                    _tally(weighted, name, n, w)
                work += self.costs[callee].window_work
            ops_inlined, chain = self._op(op, frames)
            ops += ops_inlined
            if op.name == "stablehlo.case":
                branches += len(op.regions)
            self._count_attributes(op)
            branches += sum(self.costs[c].branches for c in _callees(op))
            if op.name == "func.return" and len(frames) == 1:
                ret_chain = chain
            blocks = _blocks_of(op, self.origin)
            if blocks:
                top.pending = blocks[::-1]
                top.pending_peak = 0
        return Cost(ops, ret_chain, peak, args, branches, work, weighted)

    def _open(self, block: ir.Block, owner: ir.Operation | None, level: int) -> _Frame:
        frame = _Frame(_ops(block))
        for a in block.arguments:
            self.level[a] = level
            self.chain[a] = 0
            frame.defs.append((a, 0, self.types.bytes(a.type, owner or block.owner.operation)))
        return frame

    def _count_attributes(self, op: ir.Operation) -> None:
        """Add the data of `op`'s attributes, refusing as soon as the total is past the budget
        (so the work of counting is bounded by the budget too)."""
        self.constant_bytes += self.attribute_data.of(op)
        spent = self.constant_bytes * CONSTANT_COST
        if spent > self.types.limits.live_bytes:
            limits = self.types.limits
            raise ResourceLimitError(
                f"{where(op, self.origin)}: the module's constants hold "
                f"{human(self.constant_bytes)} of data by here (every attribute counted at every "
                "op that carries it: the printed module and XLA's literals hold a copy per use), "
                f"which loading and compiling spend about {CONSTANT_COST} times over "
                f"({human(spent)}), more than {human(limits.live_bytes)}, "
                f"{limits.memory_source}. Pass large arrays as arguments (the bundle's weights "
                "file), run it on a larger machine, or set JULIABRIDGE_MEMORY_LIMIT"
            )

    def _op(self, op: ir.Operation, frames: list[_Frame]) -> tuple[int, int]:
        """Record one op; return (ops it adds by inlining, chain depth of its results)."""
        if self.check_contracts:
            check_op(op, self.origin)
        top = frames[-1]
        top.pos += 1
        here = len(frames) - 1
        deepest = 0
        for v in op.operands:
            lvl = self.level.get(v)
            if lvl is None:  # defined in another function: cannot happen in valid IR
                continue
            self.last[v] = frames[lvl].pos
            if lvl == here:
                deepest = max(deepest, self.chain[v])
        # A terminator is no XLA instruction: it adds no link to the chain.
        chain = deepest + (0 if op.name in ("func.return", "stablehlo.return") else 1)
        inlined = 0
        for callee in _callees(op):
            cost = self.costs[callee]
            inlined += cost.ops
            chain = deepest + max(1, cost.chain)
            top.extra[top.pos] = max(top.extra.get(top.pos, 0), cost.inner_peak)
        for r in op.results:
            self.level[r] = here
            self.chain[r] = chain
            top.defs.append((r, top.pos, self.types.bytes(r.type, op)))
        if op.name == "chlo.ragged_dot":
            top.extra[top.pos] = max(top.extra.get(top.pos, 0), self._ragged_dense_bytes(op))
        if chain > self.max_chain:
            self.max_chain, self.max_chain_op = chain, op
        return inlined, chain

    def _ragged_dense_bytes(self, op: ir.Operation) -> int:
        """Bytes a chlo.ragged_dot adds while it runs: JAX's lowering outside TPU and GPU
        (the lax backend's) makes the ragged operand dense per group, one masked copy of
        the lhs per group (and of the rhs and the result too when the ragged dimension is
        contracted): 256 groups of a 1 MiB lhs took 256 MB more."""
        operands = list(op.operands)
        if len(operands) != 3 or "ragged_dot_dimension_numbers" not in op.attributes:
            return 0  # MLIR's verifier refuses such an op before this walk
        groups = ir.ShapedType(operands[2].type)
        if not groups.has_static_shape or groups.rank == 0:
            return 0
        g = int(groups.shape[-1])
        numbers = str(op.attributes["ragged_dot_dimension_numbers"])
        ragged = _dims(numbers, "lhs_ragged_dimensions")
        if ragged & _dims(numbers, "lhs_batching_dimensions"):
            return 0  # ragged batch: a plain dot_general
        lhs = self.types.bytes(operands[0].type, op)
        if not ragged & _dims(numbers, "lhs_contracting_dimensions"):
            return g * lhs
        rhs = self.types.bytes(operands[1].type, op)
        return g * (lhs + rhs + sum(self.types.bytes(r.type, op) for r in op.results))

    def _close(self, frame: _Frame, keep: int) -> int:
        """Peak live bytes of a finished block (its first `keep` values live to the end);
        forget its values."""
        n = frame.pos + 2
        diff = [0] * (n + 1)
        for i, (v, d, b) in enumerate(frame.defs):
            end = max(self.last.pop(v, d), d)
            if i < keep:
                end = n - 1
            diff[d] += b
            diff[end + 1] -= b
            self.level.pop(v, None)
            self.chain.pop(v, None)
        live = peak = 0
        for p in range(n):
            live += diff[p]
            peak = max(peak, live + frame.extra.get(p, 0))
        return peak


def window_work(op: ir.Operation) -> int:
    """Window elements `op` visits per call: result elements (select_and_scatter: source
    elements) times window elements, for reduce_window and select_and_scatter; else 0."""
    if op.name not in ("stablehlo.reduce_window", "stablehlo.select_and_scatter"):
        return 0
    if "window_dimensions" not in op.attributes:
        return 0
    window = 1
    for d in ir.DenseI64ArrayAttr(op.attributes["window_dimensions"]):
        window *= max(int(d), 0)
    visited = op.operands[1] if op.name == "stablehlo.select_and_scatter" else op.results[0]
    shaped = ir.ShapedType(visited.type)
    if not shaped.has_static_shape:
        return 0
    n = 1
    for d in shaped.shape:
        n *= int(d)
    return n * window


def _dims(numbers: str, key: str) -> set[int]:
    """The dimensions `key = [..]` lists in a printed #chlo.ragged_dot attribute."""
    m = re.search(rf"{key} = \[([\d, ]*)\]", numbers)
    return {int(d) for d in m.group(1).split(",") if d.strip()} if m else set()


def _tally(weighted: dict[str, list[int]], name: str, count: int, weight: int) -> None:
    entry = weighted.setdefault(name, [0, 0])
    entry[0] += count
    entry[1] += weight


class AttributeData:
    """Bytes of data an op's attributes hold, counted at every use.

    MLIR stores an attribute once however many ops carry it (an alias ``#a = dense<...>``
    written once in the text, used by 400 ops), but the module is printed with the attribute in
    full at every use, parsed again, and XLA makes one literal per constant op: so each use
    costs its data again, and is counted again. Sizes come from the attribute's type (a splat:
    one element), computed once per distinct attribute. A ``dense_resource`` blob is printed
    once (in the resource section) and decoded once by the lax backend, so it is counted once.
    A dense attribute the bindings cannot wrap (complex elements) fails with its printed form
    in the message; that text is what it costs, counted per use (about 2 characters a byte).
    """

    def __init__(self) -> None:
        self._sizes: dict[ir.Attribute, int] = {}
        self._blobs: set[ir.Attribute] = set()

    def of(self, op: ir.Operation) -> int:
        """Bytes of data of every attribute `op` carries."""
        found = op.attributes
        total = 0
        for i in range(len(found)):
            try:
                attr = found[found[i].name]
            except TypeError as e:  # dense complex: the message holds the printed attribute
                total += len(str(e)) // 2
                continue
            total += self.size(attr)
        return total

    def size(self, attr: ir.Attribute) -> int:
        """Bytes of data of one attribute at one use (nested attributes included)."""
        known = self._sizes.get(attr)
        if known is not None:
            return known
        blob = _blob_bytes(attr)
        if blob is not None:  # a dense_resource (or other elements without a Python class)
            self._sizes[attr] = 0  # every later use: the blob is held once
            return blob
        n = self._measure(attr)
        self._sizes[attr] = n
        return n

    def _measure(self, attr: ir.Attribute) -> int:
        # The bindings hand out attributes as their most specific class.
        if isinstance(attr, ir.DenseElementsAttr):
            if attr.is_splat:
                return _element_bytes(ir.ShapedType(attr.type).element_type)
            return _shaped_bytes(attr.type)
        if isinstance(attr, ir.StringAttr):
            return len(attr.value_bytes)
        if isinstance(attr, (ir.ArrayAttr, ir.DictAttr)):
            return sum(self._nested(attr, i) for i in range(len(attr)))
        for cls, width in _DENSE_ARRAYS:
            if isinstance(attr, cls):
                return width * len(attr)  # type: ignore[arg-type]
        if type(attr) is ir.Attribute:
            # No Python class (an opaque attribute of a dialect JAX lacks...): its printed
            # form, printed once here, is what every use prints again.
            return len(str(attr))
        return 0  # a scalar (integer, float, enum, type, symbol): no data to speak of

    def _nested(self, container: ir.ArrayAttr | ir.DictAttr, i: int) -> int:
        try:
            item = container[i]
        except TypeError as e:  # dense complex, as in `of`
            return len(str(e)) // 2
        if isinstance(item, ir.NamedAttribute):  # by name: NamedAttribute.attr aborts on
            try:  # dense complex data
                item = container[item.name]  # type: ignore[index]
            except TypeError as e:
                return len(str(e)) // 2
        return self.size(item)


_DENSE_ARRAYS: tuple[tuple[type, int], ...] = (
    (ir.DenseI64ArrayAttr, 8),
    (ir.DenseI32ArrayAttr, 4),
    (ir.DenseI16ArrayAttr, 2),
    (ir.DenseI8ArrayAttr, 1),
    (ir.DenseBoolArrayAttr, 1),
    (ir.DenseF64ArrayAttr, 8),
    (ir.DenseF32ArrayAttr, 4),
)


def _blob_bytes(attr: ir.Attribute) -> int | None:
    """Bytes of an elements attribute the bindings hand out without a class of its own
    (`dense_resource<...>`), else None."""
    if type(attr) is not ir.Attribute:
        return None
    try:
        t = attr.type
    except (ValueError, TypeError, AttributeError):
        return None
    return _shaped_bytes(t) if isinstance(t, ir.RankedTensorType) else None


def _shaped_bytes(t: ir.Type) -> int:
    shaped = ir.ShapedType(t)
    if not shaped.has_static_shape:
        return 8
    n = 1
    for d in shaped.shape:
        n *= int(d)
    return n * _element_bytes(shaped.element_type)


def _callees(op: ir.Operation) -> list[str]:
    from .callgraph import _references

    return _references(op) if op.name in ("func.call", "stablehlo.composite") else []


def _too_many_ops(op: ir.Operation, name: str, cost: Cost, limits: Limits, origin: str) -> str:
    """The refusal of a function past MAX_OPS, naming the weighted ops that weigh most."""
    head = f"{where(op, origin)}: @{name} expands to {cost.ops:,} ops once its calls are inlined"
    if not cost.weighted:
        return (
            f"{head}, more than the {limits.max_ops:,} juliabridge compiles "
            "(JULIABRIDGE_MAX_OPS raises the limit); XLA would run out of time or memory "
            "compiling it"
        )
    heaviest = sorted(cost.weighted.items(), key=lambda kv: (-kv[1][1], kv[0]))
    parts = ", ".join(
        f"{n:,} {kind} weighing {EXPANSION[kind]} each ({w:,})"
        if kind in EXPANSION
        else f"{n:,} {kind} weighing {w:,} ({PER_OPERAND[kind]} per operand)"
        for kind, (n, w) in heaviest[:3]
    )
    return (
        f"{head}, more than the {limits.max_ops:,} juliabridge compiles: {parts}. A special "
        "function weighs the HLO instructions XLA expands it to or, if more, the plain ops that "
        "take as long to compile, and a sort counts its operands (the most the default admits "
        f"of any one kind compile in about {COMPILE_TARGET_S:.0f} s on the calibration host, "
        "and compile time grows with the count). If you trust the file, set JULIABRIDGE_MAX_OPS to "
        f"{cost.ops:,} or more, or load it with trust=True, and expect compiling to take longer"
    )


def check_budget(
    funcs: dict[str, Function],
    order: list[str],
    origin: str,
    *,
    check_contracts: bool,
    limits: Limits | None,
) -> Cost | None:
    """Check every op's contract (if asked) and, with `limits`, the module's budgets.

    Returns @main's cost when limits were given.
    """
    limits = limits or Limits(1 << 62, 1 << 62, MAX_VALUE_BYTES, 1 << 62, "", 1 << 62, 1 << 62)
    types = _Types(origin, limits, strict=check_contracts)
    costs: dict[str, Cost] = {}
    analysis = _Analysis(costs, types, origin, check_contracts)
    for name in order:
        cost = analysis.run(funcs[name])
        costs[name] = cost
        if cost.ops > limits.max_ops:
            raise ResourceLimitError(_too_many_ops(funcs[name].op, name, cost, limits, origin))
        if cost.branches > limits.max_case_branches:
            raise ResourceLimitError(
                f"{where(funcs[name].op, origin)}: @{name} holds {cost.branches:,} "
                f"stablehlo.case branches once its calls are inlined, more than the "
                f"{limits.max_case_branches:,} juliabridge compiles "
                "(JULIABRIDGE_MAX_CASE_BRANCHES raises the limit); XLA's compiler spends more "
                "than linear time and memory per branch (1,000 one-op branches peaked near 2 GB)"
            )
        if cost.window_work > limits.max_window_work:
            raise ResourceLimitError(
                f"{where(funcs[name].op, origin)}: @{name}'s reduce_window and "
                f"select_and_scatter ops visit {cost.window_work:,} window elements per call "
                f"(output elements x window elements, calls inlined), more than the "
                f"{limits.max_window_work:,} juliabridge runs (about two minutes on a 2-core "
                "machine); if you trust the file, set JULIABRIDGE_MAX_WINDOW_WORK to "
                f"{cost.window_work:,} or more, or load it with trust=True"
            )
        if analysis.max_chain > limits.max_chain:
            op = analysis.max_chain_op
            raise ResourceLimitError(
                f"{where(op, origin) if op is not None else origin}: a chain of "
                f"{analysis.max_chain:,} dependent ops (calls inlined), more than the "
                f"{limits.max_chain:,} juliabridge compiles (JULIABRIDGE_MAX_CHAIN raises the "
                "limit); XLA's compiler recurses along such chains and overflows its stack"
            )
    main = costs.get("main")
    if main is not None and main.peak > limits.live_bytes:
        raise ResourceLimitError(
            f"{origin}: running @main needs about {human(main.peak)} of live values (arguments, "
            f"results and intermediates in program order), more than {human(limits.live_bytes)}"
            f", {limits.memory_source}. Free memory, run it on a larger machine, or set "
            "JULIABRIDGE_MEMORY_LIMIT if the estimate is too pessimistic for this model"
        )
    return main
