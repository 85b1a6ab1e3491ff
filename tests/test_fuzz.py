"""Property-based fuzzing of bundle loading, on every backend, and of the command line (hypothesis).

Every case starts from a valid bundle (tests/bundle_factory.make_dense_bn: Dense + test-mode
BatchNorm, with examples), mutates it, and loads and calls it in a child process
(tests/fuzz_runner.py) on one backend (FUZZ_BACKENDS; a new backend is one entry in
BACKEND_SPLIT). It must end in one of two ways:

- success with correct numbers: the output equals tests/bundle_factory.dense_bn_reference of
  the values the model was given (and of the original values when the mutation cannot change
  them); when the module itself was mutated, the output must still have the declared shape and
  dtype;
- a juliabridge.JuliaBridgeError subclass with a non-empty message.

Cases of the `host_eval` family (issue 27: integer division of constants by 0 or INT_MIN by -1,
paddings and dilations near 2^63) must either be refused by the rule or run with the base's
numbers (each adds to the output how many of its values differ from numpy's). Cases of the
`module_attacks` family (tests/fuzz_attacks.py: the attack classes of issue 11 as strategies) also say whether the module breaks a rule; those must end in the error classes the
rule names, never load. Cases of the `cli` family run ``juliabridge inspect/verify`` in the
child on a bundle with hostile strings (terminal control sequences, rich markup) plus another
family's mutation; the command must exit with the code the library's outcome maps to
(juliabridge/support/exitcodes.py, never 70), print one error line, and print nothing a terminal acts
on.

Anything else fails the test: another exception type, a reply that says "juliabridge bug", a
child that does not answer within JB_FUZZ_CASE_TIMEOUT seconds (a hang) or that dies (a
crash). The child uses juliabridge exactly as a user would (HDF5 read in juliabridge's own
reader process); running it in a child is what lets a crash or hang be caught and reported.

Knobs (environment variables):

- JB_FUZZ_EXAMPLES: total number of cases, split over the families and backends below
  (default 2000).
- JB_FUZZ_LONG: set to 1 for attacks too slow for CI (chains of 30,000-50,000 ops).
- JULIABRIDGE_TEST_SHARE=k/n (tests/ci_share.py): this run takes sample k, of an
  n-th of the lax and xla cases each, from a seed of its own (split_cases), as each of CI's
  environments does.
- JB_FUZZ_SEED: unset runs the same cases every time (derandomized; with a share, that share's
  fixed seed); an integer runs a fresh random sample from that seed.
- JB_FUZZ_REPORT: a path; outcome counts per strategy and error class are written there as JSON.
- JB_FUZZ_CASE_TIMEOUT: seconds one case may take before it counts as a hang (default 60).
- JB_FUZZ_MESSAGES: a path; every error message is appended there (JSON lines), to review.

A longer run, as recorded in docs/logs/fuzz-runs.md:

    JB_FUZZ_EXAMPLES=100000 JB_FUZZ_SEED=1 JB_FUZZ_REPORT=fuzz.json \\
        python -m pytest tests/test_fuzz.py -q -p no:cacheprovider
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import selectors
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
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

from juliabridge.support.exitcodes import EXIT_CODES
from tests import ci_share
from tests.bundle_factory import make_dense_bn
from tests.conftest import require_backend
from tests.fuzz_attacks import (
    MEMORY_LIMIT,
    Attack,
    assert_no_terminal_codes,
    host_eval_attack,
    hostile_text,
    module_attacks,
)

REPO = Path(__file__).resolve().parents[1]
TOTAL = int(os.environ.get("JB_FUZZ_EXAMPLES", "2000"))
SEED = os.environ.get("JB_FUZZ_SEED")
CASE_TIMEOUT = float(os.environ.get("JB_FUZZ_CASE_TIMEOUT", "60"))
TOL = 1e-5

LONG = os.environ.get("JB_FUZZ_LONG", "") not in ("", "0")

#: Share of the cases each family gets.
SHARES = {
    "manifest_tree": 0.15,
    "manifest_semantic": 0.12,
    "manifest_text": 0.05,
    "hdf5_bytes": 0.14,
    "hdf5_struct": 0.05,
    "mlir": 0.14,
    "files": 0.05,
    "module_attacks": 0.16,
    "host_eval": 0.04,
    "cli": 0.10,
}
#: Share of each family's cases per backend. A new backend is one more entry here.
BACKEND_SPLIT = {"lax": 0.4, "xla": 0.35, "enzyme": 0.25}
FUZZ_BACKENDS = tuple(BACKEND_SPLIT)
#: Families whose outcome the backend cannot change (the weights are read before any backend
#: runs): all their cases go to the first backend.
LOADER_ONLY = frozenset({"manifest_text", "hdf5_bytes", "hdf5_struct"})


def _counts() -> dict[tuple[str, str], int]:
    n: dict[tuple[str, str], int] = {}
    for family, share in SHARES.items():
        split = {FUZZ_BACKENDS[0]: 1.0} if family in LOADER_ONLY else BACKEND_SPLIT
        for backend in FUZZ_BACKENDS:
            n[family, backend] = (
                max(1, round(TOTAL * share * split[backend])) if backend in split else 0
            )
    n["manifest_tree", FUZZ_BACKENDS[0]] += max(0, TOTAL - sum(n.values()))
    return n


COUNTS = _counts()
OUTCOMES: Counter[str] = Counter()
TIMINGS: dict[str, float] = {}


def split_cases(name: str, backend: str) -> tuple[int, int | None]:
    """How many of `name`'s cases on `backend` this run takes, and the seed offset of its
    sample (None: the derandomized cases).

    With JULIABRIDGE_TEST_SHARE=k/n (tests/ci_share.py) the lax and xla cases are split into n
    samples of an n-th each, drawn from seeds of their own, so CI's environments together run as
    many cases as one whole run (independent samples, which may share a few); enzyme's run
    whole, in the one environment that has enzyme-ad.
    """
    k, n = ci_share.share()
    count = COUNTS[name, backend]
    if n == 1 or backend == "enzyme" or count == 0:
        return count, None
    return max(1, -(-count // n)), 1_000_003 * k


def fuzz_settings(name: str, backend: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """hypothesis settings for one family on one backend: its share, no deadline."""
    count, offset = split_cases(name, backend)
    base = settings(
        max_examples=count,
        deadline=None,
        derandomize=SEED is None and offset is None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = base(fn)
        if SEED is not None or offset is not None:
            start = int(SEED or 0) + (offset or 0)
            fn = hypothesis_seed(start + zlib.crc32(f"{name}:{backend}".encode()))(fn)
        return fn

    return wrap


# --- the child process ----------------------------------------------------------------------


def _drop_file_capabilities() -> None:
    """In the child before exec: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (Linux).

    Root ignores permission bits only through these two capabilities; without them (removed
    from the bounding set, so exec does not grant them back) chmod 000 stops root as well.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop, cap_dac_override, cap_dac_read_search = 24, 1, 2
    for cap in (cap_dac_override, cap_dac_read_search):
        if libc.prctl(pr_capbset_drop, cap, 0, 0, 0) != 0:
            os._exit(97)


class Runner:
    """tests/fuzz_runner.py in a child; replies within CASE_TIMEOUT or the case is a hang."""

    def __init__(self, unprivileged: bool = False) -> None:
        self.unprivileged = unprivileged
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr: Any = None

    def _start(self) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        env.setdefault("JULIABRIDGE_HDF5_TIMEOUT", "5")
        # Budgets against a known limit, so no case can allocate the machine's memory.
        env.setdefault("JULIABRIDGE_MEMORY_LIMIT", str(MEMORY_LIMIT))
        env.setdefault("JAX_PLATFORMS", "cpu")
        # A complex chain that compiles for minutes ends at this limit, within CASE_TIMEOUT.
        env.setdefault("JULIABRIDGE_COMPILE_LIMIT", "20")
        env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=1"
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the child
        preexec = _drop_file_capabilities if self.unprivileged else None
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fuzz_runner"],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
            preexec_fn=preexec,  # only to drop root for the permission tests
        )
        return self.proc

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        """One case; a dead or silent child is reported as crash or hang and restarted."""
        proc = self.proc if self.proc is not None and self.proc.poll() is None else self._start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write((json.dumps(request) + "\n").encode())
            proc.stdin.flush()
        except OSError:
            return self._dead("crash")
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        ready = sel.select(CASE_TIMEOUT)
        sel.close()
        if not ready:
            proc.kill()
            return self._dead("hang")
        line = proc.stdout.readline()
        if not line:
            return self._dead("crash")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def _dead(self, what: str) -> dict[str, Any]:
        assert self.proc is not None
        rc = self.proc.wait()
        self.stderr.seek(0)
        tail = self.stderr.read()[-3000:].decode("utf-8", "replace")
        self.proc = None
        return {"outcome": what, "rc": rc, "stderr": tail}

    def close(self) -> None:
        """Stop the child."""
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


# --- the base bundle --------------------------------------------------------------------------


@dataclass
class Base:
    """The valid bundle every case starts from, as bytes."""

    manifest: dict[str, Any]
    mlir: bytes
    weights: bytes
    arrays: dict[str, np.ndarray]

    def __repr__(self) -> str:
        return "<dense_bn base bundle>"


def _load_base(path: Path) -> Base:
    # Without a portable artifact: the cases write model.mlir, weights.h5 and manifest.json only.
    make_dense_bn(path, portable_artifact=False)
    arrays = {}
    with h5py.File(path / "weights.h5", "r") as f:
        f.visititems(
            lambda n, o: arrays.__setitem__("/" + n, o[()]) if isinstance(o, h5py.Dataset) else None
        )
    return Base(
        json.loads((path / "manifest.json").read_text()),
        (path / "model.mlir").read_bytes(),
        (path / "weights.h5").read_bytes(),
        arrays,
    )


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Base:
    return _load_base(tmp_path_factory.mktemp("fuzz_base") / "dense_bn.bundle")


@pytest.fixture(scope="module")
def runner() -> Iterator[Runner]:
    r = Runner()
    yield r
    r.close()
    report = os.environ.get("JB_FUZZ_REPORT")
    if report:
        data = {
            "examples_requested": TOTAL,
            "seed": SEED,
            "share": "/".join(map(str, ci_share.share())),
            "per_strategy": {f"{f}[{b}]": split_cases(f, b)[0] for f, b in COUNTS},
            "cases_run": sum(v for k, v in OUTCOMES.items() if k.count(":") == 1),
            "long": LONG,
            "outcomes": dict(sorted(OUTCOMES.items())),
            "seconds": TIMINGS,
        }
        Path(report).write_text(json.dumps(data, indent=2) + "\n")


# --- cases ------------------------------------------------------------------------------------


@dataclass
class Case:
    """A mutated bundle to write: manifest object or raw bytes, module and weights bytes."""

    strategy: str
    what: str
    manifest: dict[str, Any] | None = None
    manifest_bytes: bytes | None = None
    mlir: bytes | None = None
    weights: bytes | None = None
    reseal: bool = False
    verify_checksums: bool = True
    module_same: bool = True
    weights_same: bool = True
    benign: bool = False  # cannot change the numbers: success must match the original
    post: list[Callable[[Path], None]] = field(default_factory=list)
    must_fail: tuple[str, ...] | None = None  # the attack breaks a rule: these errors only
    grad: bool = False  # also differentiate (enzyme: Enzyme's derivation, out of process)
    cli: list[str] | None = None  # run `juliabridge ARGV` ("{path}" is the bundle)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_case(case: Case, base: Base, root: Path) -> Path:
    bundle = root / "case.bundle"
    bundle.mkdir(parents=True)
    mlir = base.mlir if case.mlir is None else case.mlir
    weights = base.weights if case.weights is None else case.weights
    (bundle / "model.mlir").write_bytes(mlir)
    (bundle / "weights.h5").write_bytes(weights)
    if case.manifest_bytes is not None:
        data = case.manifest_bytes
    else:
        m = copy.deepcopy(base.manifest if case.manifest is None else case.manifest)
        if case.reseal:  # the attacker's move: make the checksums match the altered files
            contents = {"model.mlir": mlir, "weights.h5": weights}
            for key in ("module", "weights"):
                ref = m.get(key)
                if isinstance(ref, dict) and ref.get("file") in contents:
                    ref["sha256"] = _sha(contents[ref["file"]])
        data = json.dumps(m, allow_nan=True).encode()
    (bundle / "manifest.json").write_bytes(data)
    for fn in case.post:
        # Two file changes can collide (e.g. linking to a file the first one removed); the
        # second then simply does not happen.
        with contextlib.suppress(OSError, shutil.Error):
            fn(bundle)
    return bundle


def _rmtree(path: Path) -> None:
    def unlock(func: Any, p: str, _: Any) -> None:
        os.chmod(p, 0o700)
        func(p)

    shutil.rmtree(path, onerror=unlock)


def _is_bug(message: str) -> bool:
    return "juliabridge bug" in message or "Traceback" in message


_CODES = {row.code for row in EXIT_CODES} - {70}


def check_cli(case: Case, reply: dict[str, Any], where: str) -> None:
    """The command's property: the library's code, one escaped line, nothing for a terminal."""
    code, out, err = reply["code"], reply["stdout"], reply["stderr"]
    assert code in _CODES, f"exit code {code}: {where}"
    assert code == reply["api_code"], f"CLI code {code}, library's {reply['api_code']}: {where}"
    assert "Traceback" not in out + err, f"traceback: {where}"
    assert_no_terminal_codes(out)
    assert_no_terminal_codes(err)
    assert "verify_checksums" not in err, f"the API's keyword in a CLI message: {where}"
    if code not in (0, 1):
        lines = [ln for ln in err.splitlines() if ln.strip()]
        # A note the command printed before failing (e.g. that it turned x64 on for a bundle
        # declaring 64-bit types) may precede it; the error itself is one line, the last.
        note = f"juliabridge {case.cli[0]}: note: "  # type: ignore[index]
        errors = [ln for ln in lines if not ln.startswith(note)]
        assert len(errors) == 1, f"{len(errors)} error lines: {where}"
        assert lines[-1] == errors[0], f"a line after the error: {where}"
        assert errors[0].startswith(f"juliabridge {case.cli[0]}: error: "), where  # type: ignore[index]
    else:
        assert out.strip(), f"no output: {where}"


def check(case: Case, reply: dict[str, Any], base: Base, bundle: Path, backend: str) -> None:
    """The property: correct numbers or a JuliaBridgeError with a message."""
    outcome = reply["outcome"]
    family = f"{case.strategy}[{backend}]"
    detail = reply["cls"] if outcome == "error" else reply.get("code", outcome)
    key = f"{family}:{detail}" if outcome != "cli" else f"{family}:exit-{detail}"
    OUTCOMES[key] += 1
    if outcome == "ok" and reply.get("err_self") is None and reply.get("err_orig") is None:
        OUTCOMES[f"{family}:ok:numbers-not-compared"] += 1
    if outcome == "error" and "made no progress" in reply["message"]:
        OUTCOMES[f"{family}:{reply['cls']}:hdf5-reader-timed-out"] += 1
    if outcome == "error" and "libhdf5 crashed" in reply["message"]:
        OUTCOMES[f"{family}:{reply['cls']}:hdf5-reader-crashed"] += 1
    where = f"[{family}] {case.what}\nreply: {json.dumps(reply)[:4000]}"
    if outcome == "cli":
        check_cli(case, reply, where)
        return
    assert outcome in ("ok", "error"), f"{outcome.upper()}: {where}"
    if outcome == "error" and os.environ.get("JB_FUZZ_MESSAGES"):
        with open(os.environ["JB_FUZZ_MESSAGES"], "a") as log:
            log.write(json.dumps([family, case.what, reply["cls"], reply["message"]]))
            log.write("\n")
    if case.must_fail is not None:
        assert outcome == "error", f"an attack that breaks a rule was accepted: {where}"
        assert reply["cls"] in case.must_fail, f"wrong error class: {where}"
    if outcome == "error":
        msg = reply["message"]
        assert msg.strip(), f"empty message: {where}"
        assert not _is_bug(msg), f"internal error: {where}"
        return
    if reply.get("note") == "result structure changed":
        assert not case.benign, f"benign mutation changed the result structure: {where}"
        return
    if case.module_same:
        err = reply.get("err_self")
        assert err is None or err <= TOL, f"wrong numbers for the values given: {where}"
        same_values = case.weights_same and reply.get("mapping_same")
        if case.benign or same_values:
            assert reply.get("err_orig") is not None, f"numbers not comparable: {where}"
            assert reply["err_orig"] <= TOL, f"numbers differ from the original: {where}"
    else:
        assert reply.get("shape") == [5, 3], f"output shape changed: {where}"
        assert reply.get("dtype") == "float32", f"output dtype changed: {where}"


def run_case(case: Case, base: Base, runner: Runner, backend: str = "xla") -> None:
    """Write, load (or run the command) in the child, check, clean up."""
    root = Path(tempfile.mkdtemp(prefix="jbfuzz-"))
    t = time.perf_counter()
    try:
        bundle = _write_case(case, base, root)
        request: dict[str, Any] = {
            "path": str(bundle),
            "verify_checksums": case.verify_checksums,
            "backend": backend,
            "grad": case.grad,
        }
        if case.cli is not None:
            request["cli"] = [str(bundle) if a == "{path}" else a for a in case.cli]
        reply = runner.run(request)
        check(case, reply, base, bundle, backend)
    finally:
        key = f"{case.strategy}[{backend}]"
        TIMINGS[key] = TIMINGS.get(key, 0.0) + time.perf_counter() - t
        _rmtree(root)


# --- value strategies ---------------------------------------------------------------------------

DTYPES = [
    "f16",
    "bf16",
    "f32",
    "f64",
    "i1",
    "i8",
    "i16",
    "i32",
    "i64",
    "ui8",
    "ui16",
    "ui32",
    "ui64",
    "complex<f32>",
    "complex<f64>",
    "f128",
    "tensor",
    "",
]
NAMES = [
    "model.mlir",
    "weights.h5",
    "manifest.json",
    "../weights.h5",
    "../../etc/passwd",
    "/etc/passwd",
    "/dev/zero",
    "sub/weights.h5",
    ".",
    "..",
    "",
    "~root",
    "weights.h5\x00",
    "w\ud800.h5",
    "x" * 300,
    "nonexistent.h5",
    "C:\\weights.h5",
]
STRINGS = [
    *NAMES,
    *DTYPES,
    "input",
    "parameter",
    "state",
    "output",
    "test",
    "train",
    "juliabridge.bundle",
    "/params/layer_1/weight",
    "/params/layer_1/bias",
    "/state/layer_2/running_var",
    "/examples/inputs/0",
    "/",
    "//",
    "/params/../params/layer_1/weight",
    "/params",
    "0" * 64,
    "f" * 64,
]
INTS = [0, 1, 2, 3, 5, 6, 7, -1, -(2**31), 2**31, 2**40, 2**62, 2**63, 2**64, 10**12, 10**30]
json_scalars = (
    st.none()
    | st.booleans()
    | st.sampled_from(INTS)
    | st.integers(-10, 10)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(STRINGS)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=8,
)


def _nodes(obj: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if prefix:
        yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _nodes(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _nodes(v, (*prefix, i))


def _get(obj: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        obj = obj[p]
    return obj


# --- strategy: manifest tree --------------------------------------------------------------------


@st.composite
def manifest_tree_cases(draw: st.DrawFn, base: Base) -> Case:
    m = copy.deepcopy(base.manifest)
    ops = []
    for _ in range(draw(st.integers(1, 3))):
        nodes = list(_nodes(m))
        if not nodes:
            break
        path = draw(st.sampled_from(nodes))
        parent, key = _get(m, path[:-1]), path[-1]
        op = draw(st.sampled_from(["delete", "replace", "dup", "swap", "insert", "copy", "bump"]))
        ops.append(f"{op} {list(path)}")
        if op == "delete":
            del parent[key]
        elif op == "replace":
            parent[key] = draw(json_values)
        elif op == "dup" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        elif op == "swap" and isinstance(parent, list) and len(parent) > 1:
            other = draw(st.integers(0, len(parent) - 1))
            parent[key], parent[other] = parent[other], parent[key]
        elif op == "insert" and isinstance(parent[key], dict):
            parent[key][draw(st.text(max_size=8))] = draw(json_values)
        elif op == "copy":
            parent[key] = copy.deepcopy(_get(m, draw(st.sampled_from(nodes))))
        elif op == "bump" and isinstance(parent[key], int) and not isinstance(parent[key], bool):
            parent[key] += draw(st.sampled_from([-2, -1, 1, 2, 2**31, 10**12]))
    return Case("manifest_tree", "; ".join(ops), manifest=m)


# --- strategy: targeted manifest edits ----------------------------------------------------------


def _arg(m: dict[str, Any], i: int) -> dict[str, Any]:
    return m["arguments"][i % len(m["arguments"])]  # type: ignore[no-any-return]


@st.composite
def manifest_semantic_cases(draw: st.DrawFn, base: Base) -> Case:
    m = copy.deepcopy(base.manifest)
    kind = draw(
        st.sampled_from(
            [
                "dtype",
                "shape",
                "huge_shape",
                "swap_dataset",
                "swap_path",
                "role",
                "index",
                "alias",
                "examples",
                "file",
                "vjp",
                "metadata_depth",
                "unknown_key",
                "sha",
                "format",
                "batch",
                "batch_axis",
                "empty",
                "tied",
                "result_paths",
                "dataset_name",
            ]
        )
    )
    i = draw(st.integers(0, 6))
    j = draw(st.integers(0, 6))
    benign = False
    verify = True
    what = kind
    if kind == "dtype":
        _arg(m, i)["dtype"] = draw(st.sampled_from(DTYPES))
    elif kind == "shape":
        shape = draw(st.lists(st.integers(0, 7), max_size=4))
        _arg(m, i).update(shape=shape, julia_shape=shape[::-1])
        what += f" {shape}"
    elif kind == "huge_shape":
        shape = draw(
            st.sampled_from(
                [[10**12], [2**20, 2**20], [2**40, 2**40], [2**39], [5, 2**37], [2**62], [0, 2**40]]
            )
        )
        a = _arg(m, i)
        a.update(shape=shape, julia_shape=shape[::-1])
        if draw(st.booleans()):
            a["dtype"] = "i1"
        what += f" {shape}"
    elif kind == "swap_dataset":
        a, b = _arg(m, i), _arg(m, j)
        a["dataset"], b["dataset"] = b.get("dataset"), a.get("dataset")
    elif kind == "swap_path":
        a, b = _arg(m, i), _arg(m, j)
        a["path"], b["path"] = b["path"], a["path"]
    elif kind == "role":
        _arg(m, i)["role"] = draw(st.sampled_from(["input", "parameter", "state", "weight", ""]))
    elif kind == "index":
        _arg(m, i)["index"] = draw(st.sampled_from([*INTS, None, "0"]))
    elif kind == "alias":
        if m["aliases"]:
            m["aliases"][i % 2]["argument"] = draw(st.sampled_from([*INTS, 4, None]))
    elif kind == "examples":
        ex = m["examples"]
        side = draw(st.sampled_from(["inputs", "outputs"]))
        key = "argument" if side == "inputs" else "result"
        ex[side][0][key] = draw(st.sampled_from([*INTS, 4, None]))
    elif kind == "file":
        key = draw(st.sampled_from(["module", "weights"]))
        name = draw(st.sampled_from(NAMES))
        m[key]["file"] = name
        what += f" {key}={name!r}"
    elif kind == "vjp":
        m["vjp"] = {"file": "model.mlir", "sha256": _sha(base.mlir)}
        benign = True
    elif kind == "metadata_depth":
        depth = draw(st.sampled_from([1, 10, 60, 61, 62, 63, 64, 65, 100, 1000, 50000]))
        # Written as text: neither json.dumps nor copy.deepcopy would survive 50,000 levels.
        text = json.dumps(m)[:-1] + ', "metadata": {"deep": ' + "[" * depth + "0"
        text += "]" * depth + "}}"
        return Case(
            "manifest_semantic",
            f"metadata nested {depth} deep",
            manifest_bytes=text.encode(),
            benign=depth < 60,
        )
    elif kind == "unknown_key":
        m[draw(st.text(min_size=1, max_size=10).filter(lambda k: k not in m))] = draw(json_values)
        benign = True
    elif kind == "sha":
        key = draw(st.sampled_from(["module", "weights"]))
        m[key]["sha256"] = draw(st.sampled_from(["0" * 64, "f" * 64, _sha(b"x")]))
        verify = draw(st.booleans())
        benign = not verify
        return Case(
            "manifest_semantic",
            f"{kind} {key} verify={verify}",
            manifest=m,
            reseal=False,
            verify_checksums=verify,
            benign=benign,
        )
    elif kind == "format":
        m.update(
            draw(
                st.sampled_from(
                    [
                        {"format_version": 2},
                        {"format_version": 0},
                        {"format": "x"},
                        {"mode": "eval"},
                    ]
                )
            )
        )
    elif kind == "batch":
        m["batch"] = draw(
            st.sampled_from(
                [
                    {"size": 5, "samples_independent": False},
                    {"size": 1, "samples_independent": True},
                    {"size": 2, "samples_independent": True},
                    {"size": 10, "samples_independent": True},
                    {"size": 0, "samples_independent": True},
                    None,
                ]
            )
        )
    elif kind == "batch_axis":
        a = _arg(m, i) if draw(st.booleans()) else m["results"][0]
        a["batch_axis"] = draw(st.sampled_from([None, 0, 1, 2, -1]))
    elif kind == "empty":
        m["empty"] = draw(
            st.sampled_from(
                [
                    {"params": [["layer_3"]], "state": [["layer_1"]]},
                    {"params": [["layer_1"]]},
                    {"params": [[]]},
                    {"state": [["layer_2", "running_mean"]]},
                    {"params": "x"},
                ]
            )
        )
    elif kind == "tied":
        _arg(m, i)["tied_paths"] = [copy.deepcopy(_arg(m, j)["path"]), ["layer_9", "w"]]
    elif kind == "result_paths":
        m["results"][0]["paths"] = draw(
            st.sampled_from(
                [
                    [["output", 1]],
                    [["output"], ["output", 2]],
                    [["state", "layer_2", "running_mean"]],
                    [["output", "a"], ["output", "b"]],
                    [["y"]],
                ]
            )
        )
    elif kind == "dataset_name":
        _arg(m, i)["dataset"] = draw(st.sampled_from(STRINGS))
    return Case(
        "manifest_semantic",
        f"{what} (arg {i}, {j})",
        manifest=m,
        benign=benign,
        verify_checksums=verify,
    )


# --- strategy: manifest text --------------------------------------------------------------------


def _bytes_mutation(draw: st.DrawFn, data: bytes) -> tuple[bytes, str]:
    b = bytearray(data)
    op = draw(st.sampled_from(["flip", "set", "word", "truncate", "append", "zero", "copy", "cut"]))
    n = len(b)
    if op == "flip":
        k = draw(st.integers(1, 8))
        spots = [draw(st.integers(0, n - 1)) for _ in range(k)]
        for p in spots:
            b[p] ^= 1 << draw(st.integers(0, 7))
        return bytes(b), f"flip bits at {spots}"
    if op == "set":
        spots = [draw(st.integers(0, n - 1)) for _ in range(draw(st.integers(1, 6)))]
        for p in spots:
            b[p] = draw(st.sampled_from([0, 0xFF, 0x7F, 0x80, 0x01])) | 0
        return bytes(b), f"set bytes at {spots}"
    if op == "word":
        p = draw(st.integers(0, max(0, n - 8)))
        w = draw(
            st.sampled_from(
                [b"\xff" * 8, b"\x00" * 8, b"\xff\xff\xff\x7f\x00\x00\x00\x00", b"\x01" + b"\0" * 7]
            )
        )
        b[p : p + 8] = w
        return bytes(b), f"8-byte word {w.hex()} at {p}"
    if op == "truncate":
        p = draw(st.integers(0, n - 1))
        return bytes(b[:p]), f"truncate to {p}"
    if op == "append":
        junk = draw(st.binary(min_size=1, max_size=64))
        return bytes(b) + junk, f"append {len(junk)} bytes"
    if op == "zero":
        p = draw(st.integers(0, n - 1))
        k = draw(st.integers(1, 256))
        b[p : p + k] = bytes(len(b[p : p + k]))
        return bytes(b), f"zero {k} bytes at {p}"
    if op == "copy":
        src = draw(st.integers(0, n - 1))
        dst = draw(st.integers(0, n - 1))
        k = draw(st.integers(1, 64))
        chunk = b[src : src + k]
        b[dst : dst + len(chunk)] = chunk
        return bytes(b[:n]), f"copy {k} bytes {src}->{dst}"
    p = draw(st.integers(0, n - 1))
    k = draw(st.integers(1, 64))
    del b[p : p + k]
    return bytes(b), f"cut {k} bytes at {p}"


@st.composite
def manifest_text_cases(draw: st.DrawFn, base: Base) -> Case:
    text = json.dumps(base.manifest, indent=2).encode()
    data, what = _bytes_mutation(draw, text)
    return Case("manifest_text", what, manifest_bytes=data)


# --- strategy: weights bytes --------------------------------------------------------------------


@st.composite
def hdf5_bytes_cases(draw: st.DrawFn, base: Base) -> Case:
    data, what = _bytes_mutation(draw, base.weights)
    reseal = draw(st.sampled_from([True, True, True, True, False]))
    verify = reseal or draw(st.booleans())
    return Case(
        "hdf5_bytes",
        f"{what} (resealed={reseal}, verify={verify})",
        weights=data,
        reseal=reseal,
        verify_checksums=verify,
        weights_same=data == base.weights,
    )


# --- strategy: weights structure ----------------------------------------------------------------

DATASETS = [
    "/params/layer_1/weight",
    "/params/layer_1/bias",
    "/params/layer_2/scale",
    "/params/layer_2/bias",
    "/state/layer_2/running_mean",
    "/state/layer_2/running_var",
]


def _rewrite(
    base: Base, edit: Callable[[h5py.File, dict[str, np.ndarray]], None], **kw: Any
) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "w.h5"
        with h5py.File(p, "w", **kw) as f:
            arrays = dict(base.arrays)
            edit(f, arrays)
            for name, arr in arrays.items():
                if name not in f:
                    ds = f.create_dataset(name, data=arr)
                    ds.attrs["dtype"] = "f32"
        return p.read_bytes()


@st.composite
def hdf5_struct_cases(draw: st.DrawFn, base: Base) -> Case:
    name = draw(st.sampled_from(DATASETS))
    kind = draw(
        st.sampled_from(
            [
                "stored_type",
                "shape",
                "tag",
                "missing",
                "group",
                "soft_link",
                "external_link",
                "hard_link",
                "chunked",
                "partial",
                "external_storage",
                "virtual",
                "big_endian",
                "compact",
                "extra",
                "deep_groups",
                "cycle",
                "scalar",
                "unknown_filter",
                "string_data",
                "huge_attr",
            ]
        )
    )
    arr = base.arrays[name]
    benign = False
    post: list[Callable[[Path], None]] = []
    kw: dict[str, Any] = {}

    parent = name.rsplit("/", 1)[0]

    def put(f: h5py.File, data: Any, tag: Any = "f32", **opts: Any) -> None:
        ds = f.create_dataset(name, data=data, **opts)
        if tag is not None:
            ds.attrs["dtype"] = tag

    if kind == "stored_type":
        dt = draw(st.sampled_from(["f8", "f2", "i4", "u2", "u1", "?", "c8", "i8"]))
        tag = draw(st.sampled_from(["f32", "f64", "f16", "bf16", "i1", None]))
        edit = lambda f, a: put(f, arr.astype(dt), tag)  # noqa: E731
        what = f"{name} stored as {dt} tagged {tag}"
    elif kind == "shape":
        shp = draw(st.sampled_from([(1,), (3, 1), (2,), (6,), (0,), (3, 2), (2, 3, 1)]))
        edit = lambda f, a: put(f, np.resize(arr, shp))  # noqa: E731
        what = f"{name} with shape {shp}"
    elif kind == "tag":
        tag = draw(
            st.sampled_from(
                [
                    "f64",
                    "",
                    "f32 ",
                    "x" * 100,
                    np.int64(3),
                    np.array([b"f32", b"f32"]),
                    b"f32",
                    np.bytes_(b"f32"),
                ]
            )
        )
        edit = lambda f, a: put(f, arr, tag)  # noqa: E731
        what = f"{name} tagged {tag!r}"
        benign = isinstance(tag, (bytes, np.bytes_))
    elif kind == "missing":

        def edit(f: h5py.File, a: dict[str, np.ndarray]) -> None:
            del a[name]

        what = f"{name} missing"
    elif kind == "group":

        def edit(f: h5py.File, a: dict[str, np.ndarray]) -> None:
            f.create_group(name)

        what = f"{name} is a group"
    elif kind == "soft_link":

        def edit(f: h5py.File, a: dict[str, np.ndarray]) -> None:
            other = DATASETS[(DATASETS.index(name) + 1) % len(DATASETS)]
            f.create_dataset("/hidden/x", data=arr).attrs["dtype"] = "f32"
            f.require_group(parent)
            f[name] = h5py.SoftLink("/hidden/x")
            del other

        what = f"{name} is a soft link"
    elif kind == "external_link":

        def edit(f: h5py.File, a: dict[str, np.ndarray]) -> None:
            f.require_group(parent)
            f[name] = h5py.ExternalLink("/etc/passwd", "/x")

        what = f"{name} is an external link"
    elif kind == "hard_link":

        def edit(f: h5py.File, a: dict[str, np.ndarray]) -> None:
            put(f, arr)
            f["/extra/alias"] = f[name]

        what = f"{name} has a second hard link"
        benign = True
    elif kind == "chunked":
        comp = draw(st.sampled_from([None, "gzip", "lzf"]))
        shuffle = draw(st.booleans())
        fl = draw(st.booleans())
        edit = lambda f, a: put(  # noqa: E731
            f, arr, chunks=(1,) * arr.ndim, compression=comp, shuffle=shuffle, fletcher32=fl
        )
        what = f"{name} chunked compression={comp} shuffle={shuffle} fletcher32={fl}"
        benign = True
    elif kind == "partial":

        def edit(f: h5py.File, a: dict[str, np.ndarray]) -> None:
            ds = f.create_dataset(name, shape=arr.shape, dtype=arr.dtype, chunks=(1,) * arr.ndim)
            ds.attrs["dtype"] = "f32"
            if arr.ndim and arr.shape[0] > 1:
                ds[:1] = arr[:1]

        what = f"{name} partly written (fill values)"
    elif kind == "external_storage":

        def edit(f: h5py.File, a: dict[str, np.ndarray]) -> None:
            ds = f.create_dataset(
                name, shape=arr.shape, dtype=arr.dtype, external=[("raw.bin", 0, arr.nbytes)]
            )
            ds.attrs["dtype"] = "f32"

        post.append(lambda b: (b / "raw.bin").write_bytes(arr.tobytes()))
        what = f"{name} in external raw storage"
    elif kind == "virtual":

        def edit(f: h5py.File, a: dict[str, np.ndarray]) -> None:
            f.create_dataset("/src", data=arr)
            layout = h5py.VirtualLayout(shape=arr.shape, dtype=arr.dtype)
            layout[...] = h5py.VirtualSource(".", "/src", shape=arr.shape)
            f.require_group(parent)
            f.create_virtual_dataset(name, layout).attrs["dtype"] = "f32"

        what = f"{name} is a virtual dataset"
    elif kind == "big_endian":
        edit = lambda f, a: put(f, arr.astype(">f4"))  # noqa: E731
        what = f"{name} big-endian"
        benign = True
    elif kind == "compact":

        def edit(f: h5py.File, a: dict[str, np.ndarray]) -> None:
            space = h5py.h5s.create_simple(arr.shape)
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_layout(h5py.h5d.COMPACT)
            f.require_group(parent)
            dsid = h5py.h5d.create(f.id, name.encode(), h5py.h5t.IEEE_F32LE, space, dcpl=dcpl)
            ds = h5py.Dataset(dsid)
            ds[...] = arr
            ds.attrs["dtype"] = "f32"

        what = f"{name} compact layout"
        benign = True
    elif kind == "extra":
        edit = lambda f, a: f.create_dataset("/junk/x", data=np.zeros(1000))  # noqa: E731
        what = "unrelated extra dataset"
        benign = True
    elif kind == "deep_groups":
        depth = draw(st.sampled_from([10, 79, 81, 200]))
        edit = lambda f, a: f.create_group("/" + "/".join(["g"] * depth))  # noqa: E731
        what = f"groups nested {depth} deep"
        benign = depth < 79
    elif kind == "cycle":

        def edit(f: h5py.File, a: dict[str, np.ndarray]) -> None:
            g = f.create_group("/loop/a")
            g["back"] = f["/loop"]

        what = "a group linked into its own child"
        benign = True
    elif kind == "scalar":
        edit = lambda f, a: put(f, np.float32(arr.reshape(-1)[0]))  # noqa: E731
        what = f"{name} is a scalar"
    elif kind == "unknown_filter":
        edit = lambda f, a: put(f, arr, chunks=arr.shape, scaleoffset=2)  # noqa: E731
        what = f"{name} uses the scale-offset filter"
    elif kind == "string_data":
        edit = lambda f, a: put(f, np.array([b"abc"] * arr.size).reshape(arr.shape))  # noqa: E731
        what = f"{name} holds strings"
    else:  # huge_attr

        def edit(f: h5py.File, a: dict[str, np.ndarray]) -> None:
            put(f, arr)
            f[name].attrs.create("extra", data=np.zeros(4000, np.float64))

        what = f"{name} has a big extra attribute"
        benign = True
    if draw(st.booleans()):
        kw["track_order"] = True
    if draw(st.booleans()):
        kw["libver"] = "latest"
    weights = _rewrite(base, edit, **kw)
    return Case(
        "hdf5_struct",
        what,
        weights=weights,
        reseal=True,
        weights_same=benign,
        benign=benign,
        post=post,
    )


# --- strategy: module text ----------------------------------------------------------------------

OP_SWAPS = [
    ("stablehlo.add", "stablehlo.subtract"),
    ("stablehlo.add", "mhlo.add"),
    ("stablehlo.add", "builtin.unrealized_conversion_cast"),
    ("stablehlo.sqrt", "chlo.erf"),
    ("stablehlo.sqrt", "stablehlo.rsqrt"),
    ("stablehlo.divide", "stablehlo.custom_call @tpu_custom_call"),
    ("func.func public @main", "func.func private @main"),
    ("func.func public @main", "func.func public @forward"),
    ("return %18", "return %17"),
    ("tensor<5x3xf32>", "tensor<5x3xf64>"),
    ("tensor<2x3xf32>", "tensor<3x2xf32>"),
    ("%arg0", "%arg1"),
    ("dims = [1]", "dims = [0]"),
    ("contracting_dims = [1] x [0]", "contracting_dims = [0] x [1]"),
]
INJECTIONS = [
    "%c = stablehlo.custom_call @lapack_sgetrf_ffi(%arg2) : (tensor<3xf32>) -> tensor<3xf32>\n",
    '%c = stablehlo.custom_call @tpu_custom_call(%arg2) {backend_config = "x"} : '
    "(tensor<3xf32>) -> tensor<3xf32>\n",
    "%c = stablehlo.custom_call @__gpu$xla.gpu.triton(%arg2) : (tensor<3xf32>) -> tensor<3xf32>\n",
    '%c = stablehlo.custom_call @Sharding(%arg2) {mhlo.sharding = "{replicated}"} : '
    "(tensor<3xf32>) -> tensor<3xf32>\n",
    '%c = "enzymexla.gelu"(%arg2) : (tensor<3xf32>) -> tensor<3xf32>\n',
    "%c = stablehlo.constant dense<0.0> : tensor<1099511627776xf32>\n",
    "%c = stablehlo.constant dense<0.0> : tensor<1000x1000x1000x1000xf32>\n",
    "%c = stablehlo.broadcast_in_dim %arg2, dims = [2] : (tensor<3xf32>) -> tensor<65536x65536x3xf32>\n",
    "%c = stablehlo.iota dim = 0 : tensor<4096xi32>\n",
    '// comment with [[[[ and "quote\n',
    '%c = stablehlo.constant {note = "' + "[" * 500 + '"} dense<1.0> : tensor<f32>\n',
]


@st.composite
def mlir_cases(draw: st.DrawFn, base: Base) -> Case:
    text = base.mlir
    kind = draw(st.sampled_from(["bytes", "swap", "inject", "nesting", "lines"]))
    if kind == "bytes":
        data, what = _bytes_mutation(draw, text)
    elif kind == "swap":
        a, b = draw(st.sampled_from(OP_SWAPS))
        data, what = (
            text.replace(a.encode(), b.encode(), draw(st.sampled_from([1, -1]))),
            f"{a}->{b}",
        )
    elif kind == "inject":
        line = draw(st.sampled_from(INJECTIONS))
        anchor = b"    %0 ="
        data = text.replace(anchor, b"    " + line.encode() + anchor, 1)
        what = f"inject {line.strip()[:80]}"
    elif kind == "nesting":
        depth = draw(st.sampled_from([10, 200, 256, 257, 300, 5000, 100000]))
        opener = draw(st.sampled_from(["[", "{a = ", "tuple<", "("]))
        closer = {"[": "]", "{a = ": "}", "tuple<": ">", "(": ")"}[opener]
        nested = f"x = {opener * depth}1{closer * depth}, ".encode()
        data = text.replace(b"attributes {", b"attributes {" + nested, 1)
        what = f"nesting {opener!r} x {depth}"
    else:
        lines = text.split(b"\n")
        k = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["delete", "dup", "swap"]))
        if op == "delete":
            del lines[k]
        elif op == "dup":
            lines.insert(k, lines[k])
        else:
            o = draw(st.integers(0, len(lines) - 1))
            lines[k], lines[o] = lines[o], lines[k]
        data = b"\n".join(lines)
        what = f"{op} line {k}"
    reseal = draw(st.sampled_from([True, True, True, False]))
    return Case(
        "mlir",
        f"{what} (resealed={reseal})",
        mlir=data,
        reseal=reseal,
        module_same=data == text,
        grad=draw(st.integers(0, 9)) == 0,
    )


# --- strategy: files ----------------------------------------------------------------------------


FILE_OPS = [
    "delete",
    "directory",
    "symlink_out",
    "symlink_in",
    "fifo",
    "empty",
    "swap_contents",
    "hardlink_out",
    "root_is_file",
    "dangling",
]


def _file_op(target: str, op: str, base: Base) -> Callable[[Path], None]:
    def outside(b: Path) -> Path:
        o = b.parent / ("outside-" + target)
        shutil.copyfile(b / target, o)
        return o

    def replace(b: Path, make: Callable[[Path], None]) -> None:
        if (b / target).is_dir() and not (b / target).is_symlink():
            _rmtree(b / target)
        elif (b / target).exists() or (b / target).is_symlink():
            (b / target).unlink()
        make(b / target)

    if op == "delete":
        return lambda b: replace(b, lambda p: None)
    if op == "directory":
        return lambda b: replace(b, lambda p: p.mkdir())
    if op == "symlink_out":
        return lambda b: (lambda o: replace(b, lambda p: p.symlink_to(o)))(outside(b))
    if op == "symlink_in":
        other = "model.mlir" if target != "model.mlir" else "weights.h5"
        return lambda b: replace(b, lambda p: p.symlink_to(other))
    if op == "dangling":
        return lambda b: replace(b, lambda p: p.symlink_to("/nonexistent/file"))
    if op == "fifo":
        return lambda b: replace(b, lambda p: os.mkfifo(p))
    if op == "empty":
        return lambda b: replace(b, lambda p: p.write_bytes(b""))
    if op == "hardlink_out":
        return lambda b: (lambda o: replace(b, lambda p: os.link(o, p)))(outside(b))

    def root_is_file(b: Path) -> None:  # the case path points at a file named like a bundle
        _rmtree(b)
        b.write_bytes(base.weights)

    return root_is_file


@st.composite
def file_cases(draw: st.DrawFn, base: Base) -> Case:
    """One or two file-level changes (kind of file, links, swaps) to the bundle directory."""
    post: list[Callable[[Path], None]] = []
    weights = mlir = None
    done = []
    benign = True
    for _ in range(draw(st.integers(1, 2))):
        target = draw(st.sampled_from(["manifest.json", "model.mlir", "weights.h5"]))
        op = draw(st.sampled_from(FILE_OPS))
        done.append(f"{op} {target}")
        benign = benign and op == "hardlink_out"
        if op == "swap_contents":
            weights, mlir = base.mlir, base.weights
        else:
            post.append(_file_op(target, op, base))
    verify = draw(st.booleans())
    return Case(
        "files",
        f"{', '.join(done)} (verify={verify})",
        weights=weights,
        mlir=mlir,
        module_same=mlir is None,
        weights_same=weights is None,
        reseal=mlir is not None,
        verify_checksums=verify,
        benign=benign,
        post=post,
    )


# --- new families: the attack classes, and the command line ---------------------------------


class _BaseText(str):
    """The base module's text, with a short repr (hypothesis prints strategy arguments)."""

    def __repr__(self) -> str:
        return "<dense_bn module text>"


@st.composite
def module_attack_cases(draw: st.DrawFn, base: Base) -> Case:
    """One attack class of issue 11 on the module (tests/fuzz_attacks.py)."""
    attack: Attack = draw(module_attacks(_BaseText(base.mlir.decode()), long_run=LONG))
    return Case(
        "module_attacks",
        attack.what,
        mlir=attack.text.encode(),
        reseal=True,
        module_same=False,
        must_fail=attack.must_fail,
        grad=draw(st.integers(0, 9)) == 0,
    )


@st.composite
def host_eval_cases(draw: st.DrawFn, base: Base) -> Case:
    """What XLA evaluates on the host (issue 27): constant division, extents near 2^63."""
    attack: Attack = draw(host_eval_attack(_BaseText(base.mlir.decode())))
    return Case(
        "host_eval",
        attack.what,
        mlir=attack.text.encode(),
        reseal=True,
        # A valid case computes the base's function (its checks add 0 when right): numbers
        # are compared with the reference.
        module_same=attack.must_fail is None,
        must_fail=attack.must_fail,
        grad=draw(st.integers(0, 9)) == 0,
    )


@st.composite
def cli_cases(draw: st.DrawFn, base: Base) -> Case:
    """Hostile strings in the manifest, maybe another family's mutation, through the CLI."""
    inner: Case = draw(
        st.one_of(
            st.just(Case("cli", "no mutation")),
            manifest_semantic_cases(base),
            file_cases(base),
            module_attack_cases(base),
            mlir_cases(base),
        )
    )
    m = copy.deepcopy(base.manifest if inner.manifest is None else inner.manifest)
    where = draw(st.sampled_from(["note", "tool", "name", "path", "metadata", "dtype"]))
    text = draw(hostile_text())
    if where in ("note", "tool"):
        m.setdefault("producer", {})[where] = text
    elif where == "name":
        m["name"] = text
    elif where == "path" and m.get("arguments"):
        m["arguments"][1]["path"] = ["layer_1", text]
    elif where == "dtype" and m.get("arguments"):
        m["arguments"][1]["dtype"] = text
    else:
        m["metadata"] = {text: text}
    command = draw(st.sampled_from(["inspect", "verify"]))
    argv = [command, "{path}"]
    if command == "verify":
        argv += ["--backend", "{backend}"]
    if not inner.verify_checksums or draw(st.integers(0, 4)) == 0:
        argv.append("--no-verify")
    return Case(
        "cli",
        f"{command} with {where}={text!r} after [{inner.strategy}] {inner.what}",
        manifest=m if inner.manifest_bytes is None else None,
        manifest_bytes=inner.manifest_bytes,
        mlir=inner.mlir,
        weights=inner.weights,
        reseal=inner.reseal or inner.mlir is not None,
        post=inner.post,
        cli=argv,
    )


# --- the tests ----------------------------------------------------------------------------------


def fuzz(
    family: str,
    backend: str,
    cases: Callable[[Base], st.SearchStrategy[Case]],
    base: Base,
    runner: Runner,
) -> None:
    """Run `family`'s share of cases on `backend` (skipped with the reason when unavailable)."""
    if COUNTS[family, backend] == 0:
        pytest.skip(f"{family} does not depend on the backend; its cases run on {FUZZ_BACKENDS[0]}")
    require_backend(backend)

    @fuzz_settings(family, backend)
    @given(data=st.data())
    def one(data: st.DataObject) -> None:
        case = data.draw(cases(base))
        if case.cli is not None:
            case.cli = [backend if a == "{backend}" else a for a in case.cli]
        run_case(case, base, runner, backend)

    one()


@pytest.mark.parametrize("backend", FUZZ_BACKENDS)
def test_fuzz_manifest_tree(backend: str, base: Base, runner: Runner) -> None:
    fuzz("manifest_tree", backend, manifest_tree_cases, base, runner)


@pytest.mark.parametrize("backend", FUZZ_BACKENDS)
def test_fuzz_manifest_semantic(backend: str, base: Base, runner: Runner) -> None:
    fuzz("manifest_semantic", backend, manifest_semantic_cases, base, runner)


@pytest.mark.parametrize("backend", FUZZ_BACKENDS)
def test_fuzz_manifest_text(backend: str, base: Base, runner: Runner) -> None:
    fuzz("manifest_text", backend, manifest_text_cases, base, runner)


@pytest.mark.parametrize("backend", FUZZ_BACKENDS)
def test_fuzz_hdf5_bytes(backend: str, base: Base, runner: Runner) -> None:
    fuzz("hdf5_bytes", backend, hdf5_bytes_cases, base, runner)


@pytest.mark.parametrize("backend", FUZZ_BACKENDS)
def test_fuzz_hdf5_struct(backend: str, base: Base, runner: Runner) -> None:
    fuzz("hdf5_struct", backend, hdf5_struct_cases, base, runner)


@pytest.mark.parametrize("backend", FUZZ_BACKENDS)
def test_fuzz_mlir(backend: str, base: Base, runner: Runner) -> None:
    fuzz("mlir", backend, mlir_cases, base, runner)


@pytest.mark.parametrize("backend", FUZZ_BACKENDS)
def test_fuzz_files(backend: str, base: Base, runner: Runner) -> None:
    fuzz("files", backend, file_cases, base, runner)


@pytest.mark.parametrize("backend", FUZZ_BACKENDS)
def test_fuzz_module_attacks(backend: str, base: Base, runner: Runner) -> None:
    fuzz("module_attacks", backend, module_attack_cases, base, runner)


@pytest.mark.parametrize("backend", FUZZ_BACKENDS)
def test_fuzz_host_eval(backend: str, base: Base, runner: Runner) -> None:
    fuzz("host_eval", backend, host_eval_cases, base, runner)


@pytest.mark.parametrize("backend", FUZZ_BACKENDS)
def test_fuzz_cli(backend: str, base: Base, runner: Runner) -> None:
    fuzz("cli", backend, cli_cases, base, runner)


def test_unmutated_base_loads_with_correct_numbers(base: Base, runner: Runner) -> None:
    """The oracle itself: the base bundle must pass with the original numbers."""
    run_case(Case("baseline", "no mutation", benign=True), base, runner)


# --- permissions ------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # fork + immediate exec
@pytest.mark.parametrize("target", ["manifest.json", "model.mlir", "weights.h5", "."])
@pytest.mark.parametrize("verify", [True, False])
def test_unreadable_files(target: str, verify: bool, base: Base) -> None:
    """chmod 000 on each file (and the directory): a JuliaBridgeError naming the file.

    Permission bits do not stop root, so when the tests run as root the child first drops
    CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (see _drop_file_capabilities); if even a readable
    bundle then fails to load (e.g. the interpreter itself became unreadable), the test skips.
    """
    if not sys.platform.startswith("linux"):
        pytest.skip("the capability drop used for root is Linux-only")
    root = Path(tempfile.mkdtemp(prefix="jbperm-"))
    os.chmod(root, 0o755)
    # As root, the child drops the capabilities that let root ignore permission bits.
    r = Runner(unprivileged=os.geteuid() == 0)
    try:
        bundle = _write_case(Case("permissions", target), base, root)
        os.chmod(bundle, 0o755)
        for p in bundle.iterdir():
            os.chmod(p, 0o644)
        probe = r.run({"path": str(bundle), "verify_checksums": verify})
        if probe.get("outcome") != "ok":
            pytest.skip(f"the unprivileged child cannot load even a readable bundle: {probe}")
        os.chmod(bundle / target, 0o000)
        reply = r.run({"path": str(bundle), "verify_checksums": verify})
        assert reply["outcome"] == "error", reply
        assert reply["message"].strip()
        assert "ermission" in reply["message"] or "cannot" in reply["message"], reply
        named = str(bundle) if target == "." else target
        assert named in reply["message"], reply
    finally:
        r.close()
        _rmtree(root)


def test_permission_bits_do_not_stop_root_so_the_test_drops_privileges() -> None:
    """Documents why test_unreadable_files drops capabilities when run as root."""
    if os.name != "posix" or os.geteuid() != 0:
        pytest.skip("only meaningful as root")
    with tempfile.NamedTemporaryFile() as f:
        os.chmod(f.name, 0)
        assert os.access(f.name, os.R_OK)  # root reads it anyway
        assert stat.S_IMODE(os.stat(f.name).st_mode) == 0
