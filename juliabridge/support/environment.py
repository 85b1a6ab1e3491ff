"""Every environment variable juliabridge reads, with what it does: the one registry.

The documentation site's table (docs/reference/environment.md, generated at build by
docs/_ext/reference.py) is made from `VARIABLES`, and tests/test_docs_reference.py scans the
code for every ``JULIABRIDGE_*`` name it reads and fails on one missing here, or on an entry
here that nothing reads. The modules that read a variable keep their own constants; this only
describes them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEVELOPMENT", "RUNTIME", "VARIABLES", "Variable"]

RUNTIME = "runtime"
DEVELOPMENT = "development"


@dataclass(frozen=True)
class Variable:
    """One environment variable.

    Attributes:
        name: the variable, e.g. ``JULIABRIDGE_DEBUG``.
        default: what applies when it is unset, in words.
        effect: what setting it does (Markdown, one paragraph).
        scope: `RUNTIME` (read by the juliabridge package) or `DEVELOPMENT` (read by the tests,
            tools or CI of a checkout).
    """

    name: str
    default: str
    effect: str
    scope: str = RUNTIME


VARIABLES: tuple[Variable, ...] = (
    Variable(
        "JULIABRIDGE_DEBUG",
        "unset: one line per error, backends' own output captured",
        "`1` (anything but empty or `0`): the command line prints the traceback after its "
        "one-line error, and what Enzyme and XLA print (and their dump files) is shown and kept "
        "instead of being captured into the error.",
    ),
    Variable(
        "JULIABRIDGE_PROGRESS",
        "unset: bars only when stderr is a terminal",
        "`0` hides every progress bar (loading a bundle with over 64 MiB of weights, "
        "`juliabridge vjp`, an export); `1` shows them even when stderr is not a terminal. A "
        "function's own `progress=` argument wins.",
    ),
    Variable(
        "JULIABRIDGE_HDF5_FASTPATH",
        "`1`: juliabridge's pure-Python HDF5 reader first",
        "`0` (or `false`, `no`, `off`) sends every weights file to libhdf5 in the reader "
        "process, skipping the bounded pure-Python metadata reader.",
    ),
    Variable(
        "JULIABRIDGE_HDF5_WORKER",
        "unset: libhdf5 runs in a separate reader process",
        "`0` runs libhdf5 in this process: faster to start, but a file that makes libhdf5 hang "
        "or crash takes the process with it. For files you trust (mutation testing sets it).",
    ),
    Variable(
        "JULIABRIDGE_HDF5_TIMEOUT",
        "`60` seconds",
        "Seconds the HDF5 reader process may go without progress before it is stopped and the "
        "load ends in a `BundleError`; read at every request.",
    ),
    Variable(
        "JULIABRIDGE_MEMORY_LIMIT",
        "this machine's memory (the smallest of RAM, cgroup limit and device memory)",
        "Bytes (or with a K/M/G/T suffix) that a module's largest and live values are checked "
        "against before XLA sees it (docs/reliability.md).",
    ),
    Variable(
        "JULIABRIDGE_MAX_OPS",
        "`100000`",
        "The most ops a module may hold after inlining its calls; more is a "
        "`ResourceLimitError`. Raise it for a large module you trust.",
    ),
    Variable(
        "JULIABRIDGE_MAX_CHAIN",
        "`10000`",
        "The longest chain of dependent ops juliabridge compiles; longer is a "
        "`ResourceLimitError`.",
    ),
    Variable(
        "JULIABRIDGE_MAX_CASE_BRANCHES",
        "`1000`",
        "The most branches one `stablehlo.case` may have; more is a `ResourceLimitError`.",
    ),
    Variable(
        "JULIABRIDGE_MAX_WINDOW_WORK",
        "`10**12`",
        "The most element-steps one windowed op (`reduce_window`, `select_and_scatter`) may "
        "take; more is a `ResourceLimitError`.",
    ),
    Variable(
        "JULIABRIDGE_COMPILE_LIMIT",
        "`300` seconds",
        "Seconds the first compile of an untrusted module that could compile for long (many "
        "lines, or complex element types) may take, in a child process, before loading fails "
        "with a `ResourceLimitError`; `0` turns the deadline off. Trusted modules never take "
        "this path.",
    ),
    Variable(
        "JULIABRIDGE_ENZYME_TIMEOUT",
        "`600` seconds",
        "Seconds the separate process that derives an untrusted module's derivatives with "
        "Enzyme may run before it is stopped.",
    ),
    Variable(
        "JULIABRIDGE_JULIA_ENV",
        "unset: juliapkg installs the Julia packages the first time",
        "A prepared Julia environment (a directory) with JuliaBridge, Lux and Reactant that "
        "exports run in, skipping juliapkg (e.g. the checkout's `julia/` after "
        "`Pkg.instantiate()`); a path that is not a directory is a `JuliaExportError`.",
    ),
    Variable(
        "JULIABRIDGE_JULIA_PROJECT",
        "the copy of JuliaBridge.jl inside the wheel, else the checkout's `julia/`",
        "Where JuliaBridge.jl's sources are (the `julia/` directory of a juliabridge checkout).",
    ),
    Variable(
        "JULIABRIDGE_IN_PROCESS_EXPORT",
        "unset: `export_lux(in_process=True)` refused where a crash is known",
        "`1` lets `export_lux(in_process=True)` run Reactant inside this Python process even "
        "where Reactant beside jaxlib is known to crash (Reactant issue #438: aarch64 Linux "
        "with conda-forge's jaxlib).",
    ),
    Variable(
        "JULIABRIDGE_TEST_SHARE",
        "unset: a test run takes every case",
        "`i/n`: this run's share of the batteries split between CI's environments (the "
        "benchmark scripts' tiny runs, the fuzz battery's lax and xla cases; tests/ci_share.py).",
        DEVELOPMENT,
    ),
    Variable(
        "JULIABRIDGE_TEST_JAX_CACHE",
        "unset: each test process keeps a JAX compilation cache for the session",
        "`off` runs the tests without the persistent compilation cache tests/conftest.py sets up.",
        DEVELOPMENT,
    ),
    Variable(
        "JULIABRIDGE_OTHER_PYTHON",
        "unset: the cross-version tests skip",
        "A second Python with juliabridge installed (another jax): tests/test_cross_version.py "
        "loads the bundles each writes in the other.",
        DEVELOPMENT,
    ),
    Variable(
        "JULIABRIDGE_JULIA_TESTS",
        "unset: the end-to-end Julia tests skip, with one reason",
        "`1` (or `yes`, `true`, `on`) runs the end-to-end Julia tests where a `julia` >= 1.10 is "
        "on PATH (another `julia` there is an error, not a skip); `require` also fails where "
        "none is (tests/e2e_julia/gate.py).",
        DEVELOPMENT,
    ),
    Variable(
        "JULIABRIDGE_FATOU",
        "unset: `fatou` on PATH",
        "The fatou executable tools/check_julia_names.py runs (the Julia linter; `.ci/run` "
        "installs it in a venv of its own).",
        DEVELOPMENT,
    ),
)
