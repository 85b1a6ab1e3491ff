"""Run JuliaBridge.jl's exporter from Python in a ``julia`` subprocess (scripts, the CLI, and
by default the objects of a juliacall session, which ``session`` serializes first).

The export runs in a separate ``julia`` process: isolated, interruptible, timed out on request,
streaming its progress; a crash in Reactant/XLA cannot take the user's Python down with it, and
Reactant's PythonCall extension (which imports jax and tensorflow into a Python that hosts
Julia, Reactant ext/ReactantPythonCallExt) never loads.

How the Julia side is found:

- **Julia**, quickly and without network: ``PYTHON_JULIAPKG_EXE`` (if set, it is the only
  candidate), juliapkg's own install, juliaup's installed versions, then ``julia`` on PATH.
  None found -> ``JuliaUnavailable`` saying how to install Julia or point to one.
- **The Julia environment**, the juliapkg way: the package ships ``juliabridge/juliapkg.json``,
  which declares JuliaBridge.jl (a ``dev`` dependency on ``juliabridge/jl_package``, the
  Julia package inside the wheel; a symlink to ``julia/`` in a checkout), Lux and Reactant at
  the versions JuliaBridge.jl was written against. ``juliapkg.resolve()`` installs them into
  juliapkg's project (``{venv}/julia_env``) the first time, with the Julia found above
  (``PYTHON_JULIAPKG_EXE``), so juliapkg never downloads Julia itself. juliacall reads the
  same file, so both routes use one environment. ``JULIABRIDGE_JULIA_ENV=/path/to/env`` skips
  juliapkg and uses a prepared environment (e.g. ``julia/`` itself after
  ``Pkg.instantiate()``).
- **JuliaBridge.jl's sources** (for error messages and test caches): ``JULIABRIDGE_JULIA_PROJECT``,
  ``juliabridge/jl_package``, or ``julia/`` next to the package in a source checkout.

The script convention: a ``.jl`` file that defines ``model`` (a Lux layer), ``ps``, ``st``
(e.g. ``ps, st = Lux.setup(rng, model)``) and ``x`` (the example input: one array in Julia's
layout, batch last, or a tuple of arrays for several inputs). It may also define ``metadata``
(a ``Dict``) and ``name`` (a ``String``), and ``include`` files next to it. It can ``using Lux,
Reactant, Random``; other packages must be added to the environment first (``juliapkg.add``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import urllib.error
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import JuliaBridgeError, JuliaExportError, JuliaUnavailable
from ..support.progress import enabled as progress_enabled
from .juliaup import juliaup_executables

#: UUID of the JuliaBridge.jl package (julia/Project.toml).
JULIABRIDGE_UUID = "68228255-5dbd-4b1b-8e33-da13dc0231ec"
#: The juliapkg declaration of the Julia packages (shipped as package data).
JULIAPKG_JSON = Path(__file__).resolve().parent.parent / "juliapkg.json"
MIN_JULIA = (1, 10, 0)
MODES = ("test", "train")
NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,128}")
PROGRESS_RE = re.compile(r"^\[juliabridge:progress\] (\d+)/(\d+) (.*)$")
JULIA_MAIN = "using JuliaBridge; exit(JuliaBridge.run_request(ARGS[1]))"

INSTALL_HINT = (
    "install Julia >= 1.10 with juliaup (curl -fsSL https://install.julialang.org | sh, "
    "or see https://julialang.org/downloads) or point PYTHON_JULIAPKG_EXE at a julia executable"
)


@dataclass(frozen=True)
class JuliaInstallation:
    """A usable Julia: its executable, version and where it was found."""

    executable: str
    version: tuple[int, int, int]
    source: str


def _config(name: str) -> str | None:
    """A juliapkg option from ``-X juliapkg-NAME`` or ``PYTHON_JULIAPKG_NAME`` (juliapkg's rule)."""
    value = sys._xoptions.get("juliapkg-" + name.lower().replace("_", "-"))
    if isinstance(value, str):
        return value
    return os.environ.get("PYTHON_JULIAPKG_" + name.upper()) or None


def julia_version(executable: str, timeout: float = 15.0) -> tuple[int, int, int] | None:
    """The version `executable --version` reports, or None if it is not a working Julia."""
    try:
        out = subprocess.run(
            [executable, "--version"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.match(r"\s*julia version (\d+)\.(\d+)\.(\d+)", out)
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def _juliapkg_project() -> Path:
    """juliapkg's default Julia project, computed as its state.py does, without importing it."""
    project = _config("project")
    if project:
        return Path(project)
    prefix = sys.prefix if sys.prefix != sys.base_prefix else os.environ.get("CONDA_PREFIX")
    if prefix:
        return Path(prefix) / "julia_env"
    depot = os.environ.get("JULIA_DEPOT_PATH", "").split(os.pathsep)[0] or str(
        Path.home() / ".julia"
    )
    return Path(depot) / "environments" / "pyjuliapkg"


def _candidates() -> Iterator[tuple[str, str]]:
    """(executable, source) in juliapkg's order: explicit, juliapkg install, juliaup, PATH."""
    exe = "julia.exe" if os.name == "nt" else "julia"
    yield str(_juliapkg_project() / "pyjuliapkg" / "install" / "bin" / exe), "juliapkg's install"
    for path in juliaup_executables():
        yield path, "juliaup"
    on_path = shutil.which("julia")
    if on_path:
        yield on_path, "PATH"


def find_julia(*, timeout: float = 15.0) -> JuliaInstallation:
    """The Julia to run exports with; raises ``JuliaUnavailable`` (fast, no network) if none."""
    explicit = _config("exe")
    if explicit:
        path = shutil.which(explicit) or explicit
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise JuliaUnavailable(
                f"PYTHON_JULIAPKG_EXE={explicit} is not an executable file; {INSTALL_HINT}"
            )
        version = julia_version(path, timeout)
        if version is None:
            raise JuliaUnavailable(
                f"PYTHON_JULIAPKG_EXE={explicit} is not a Julia executable "
                f"(`{explicit} --version` failed); {INSTALL_HINT}"
            )
        return _require_version(JuliaInstallation(path, version, "PYTHON_JULIAPKG_EXE"))
    too_old: list[JuliaInstallation] = []
    for path, source in _candidates():
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            continue
        version = julia_version(path, timeout)
        if version is None:
            continue
        found = JuliaInstallation(path, version, source)
        if version >= MIN_JULIA:
            return found
        too_old.append(found)
    if too_old:
        return _require_version(too_old[0])
    raise JuliaUnavailable(
        "no Julia found (looked at PYTHON_JULIAPKG_EXE, juliapkg's install, juliaup and "
        f"`julia` on PATH); {INSTALL_HINT}"
    )


def _require_version(julia: JuliaInstallation) -> JuliaInstallation:
    if julia.version < MIN_JULIA:
        shown = ".".join(map(str, julia.version))
        raise JuliaUnavailable(
            f"{julia.executable} (from {julia.source}) is Julia {shown}, but JuliaBridge needs "
            f">= 1.10; {INSTALL_HINT}"
        )
    return julia


def _is_juliabridge_project(path: Path) -> bool:
    try:
        data = tomllib.loads((path / "Project.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return False
    return data.get("name") == "JuliaBridge" and data.get("uuid") == JULIABRIDGE_UUID


def julia_project_dir() -> Path:
    """JuliaBridge.jl: $JULIABRIDGE_JULIA_PROJECT, the copy in the wheel, or the checkout's."""
    here = Path(__file__).resolve().parent.parent  # the juliabridge package directory
    override = os.environ.get("JULIABRIDGE_JULIA_PROJECT")
    candidates = [Path(override)] if override else [here / "jl_package", here.parent / "julia"]
    for path in candidates:
        if _is_juliabridge_project(path):
            return path.resolve()
    raise JuliaExportError(
        "JuliaBridge.jl was not found (looked at "
        + ", ".join(str(p) for p in candidates)
        + "); reinstall juliabridge, or set JULIABRIDGE_JULIA_PROJECT to the julia/ directory "
        "of a juliabridge checkout"
    )


def _use_juliapkg_exe(julia: JuliaInstallation) -> None:
    """Make juliapkg use `julia` (and so never look for or download another Julia)."""
    os.environ["PYTHON_JULIAPKG_EXE"] = julia.executable
    if "juliapkg" in sys.modules:  # imported earlier: its state was read before we set the option
        state = sys.modules["juliapkg"].state.STATE
        if state.get("override_executable") != julia.executable:
            sys.modules["juliapkg"].state.reset_state()


def prepare_environment(
    julia: JuliaInstallation, *, offline: bool = False, notify: Callable[[str], None]
) -> Path:
    """The Julia environment to run exports in, installed with juliapkg the first time.

    juliapkg finds the packages to install in ``juliabridge/juliapkg.json`` (and in the
    juliapkg.json of every other installed package), so nothing is added here.
    Raises ``JuliaUnavailable`` without juliapkg, ``JuliaExportError`` when installing fails.
    """
    prepared = os.environ.get("JULIABRIDGE_JULIA_ENV")
    if prepared:
        if not Path(prepared).is_dir():
            raise JuliaExportError(f"JULIABRIDGE_JULIA_ENV={prepared} is not a directory")
        return Path(prepared)
    _use_juliapkg_exe(julia)
    if offline:
        os.environ["PYTHON_JULIAPKG_OFFLINE"] = "yes"
    try:
        import juliapkg
    except ImportError as exc:
        raise JuliaUnavailable(
            "juliapkg is not installed, so the Julia packages cannot be set up: "
            "pip install 'juliabridge[julia]', or set JULIABRIDGE_JULIA_ENV to a Julia "
            "environment that has JuliaBridge, Lux and Reactant"
        ) from exc
    try:
        if offline:
            juliapkg.offline(True)
        if not juliapkg.resolve(dry_run=True):
            notify(
                "installing JuliaBridge.jl's Julia packages with juliapkg (Reactant, Lux, ...); "
                "the first time takes several minutes"
            )
            juliapkg.resolve()
        return Path(juliapkg.project())
    except subprocess.CalledProcessError as exc:
        raise JuliaExportError(
            f"juliapkg could not install the Julia packages (Julia exited with status "
            f"{exc.returncode}; its output is above). Check the network, or set "
            "JULIABRIDGE_JULIA_ENV to a prepared environment"
        ) from exc
    except urllib.error.URLError as exc:
        raise JuliaUnavailable(f"juliapkg needed the network and failed: {exc.reason}") from exc
    except JuliaBridgeError:
        raise
    except Exception as exc:  # juliapkg raises plain Exception for its own failures
        raise JuliaExportError(f"juliapkg failed to set up the Julia environment: {exc}") from exc


class ProgressDisplay:
    """Progress of one export on stderr: a rich spinner/bar, or nothing."""

    def __init__(self, enabled: bool) -> None:
        self._progress: Any = None
        self._task: Any = None
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True, force_terminal=True),  # only built when asked for
                transient=True,
            )

    def __enter__(self) -> ProgressDisplay:
        if self._progress is not None:
            self._progress.start()
            self._task = self._progress.add_task("starting Julia", total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def step(self, done: int, total: int, message: str) -> None:
        """Stage `done` of `total` (total 0: not known yet) is `message`."""
        if self._progress is not None:
            if total > 0:
                self._progress.update(
                    self._task, description=message, completed=done - 1, total=total
                )
            else:
                self._progress.update(self._task, description=message)

    def note(self, message: str) -> None:
        """A line printed above the bar (or to stderr when there is no bar)."""
        if self._progress is not None:
            self._progress.console.print(message, markup=False, highlight=False)
        else:
            print(message, file=sys.stderr)


@contextmanager
def _killer(proc: subprocess.Popen[str], timeout: float | None) -> Iterator[threading.Event]:
    """Kill `proc` after `timeout` seconds; the event says whether that happened."""
    fired = threading.Event()

    def kill() -> None:
        fired.set()
        proc.kill()

    timer = threading.Timer(timeout, kill) if timeout else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        yield fired
    finally:
        if timer is not None:
            timer.cancel()


def run_export_request(
    julia: JuliaInstallation,
    environment: Path,
    request: Mapping[str, Any],
    *,
    display: ProgressDisplay,
    verbose: bool = False,
    timeout: float | None = None,
) -> str:
    """Run one export request in Julia; return the directory path Julia reports.

    `request` names a ``script`` or a ``serialized`` file (julia/src/driver.jl) and the options.
    """
    with tempfile.TemporaryDirectory(prefix="juliabridge-export-") as tmp:
        request_path = Path(tmp) / "request.json"
        result_path = Path(tmp) / "result.json"
        request_path.write_text(json.dumps({**request, "result_file": str(result_path)}))
        cmd = _julia_command(julia, environment, JULIA_MAIN, str(request_path))
        tail: deque[str] = deque(maxlen=40)
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                bufsize=1,
            )
        except OSError as exc:
            raise JuliaUnavailable(f"could not start {julia.executable}: {exc}") from exc
        with _killer(proc, timeout) as timed_out:
            try:
                if proc.stdout is None:  # started with a pipe
                    raise JuliaUnavailable(f"{julia.executable} started without an output pipe")
                for raw in proc.stdout:
                    line = raw.rstrip("\n")
                    m = PROGRESS_RE.match(line)
                    if m:
                        display.step(int(m[1]), int(m[2]), m[3])
                        continue
                    tail.append(line)
                    if verbose:
                        display.note(line)
                status = proc.wait()
            except BaseException:
                proc.kill()
                proc.wait()
                raise
        if timed_out.is_set():
            raise JuliaExportError(
                f"the export did not finish within {timeout:g} s and Julia was stopped"
            )
        result = _read_result(result_path)
        if result is None:
            last = "\n".join(tail) or "(no output)"
            raise JuliaExportError(
                f"Julia exited with status {status} after {time.monotonic() - started:.0f} s "
                f"before finishing the export; its last output:\n{last}"
            )
        if not result.get("ok"):
            raise JuliaExportError(
                f"{result.get('error_type', 'error')} in Julia: {result.get('message', '')}"
            )
        return str(result["path"])


#: Prints `[juliabridge:package] NAME VERSION` for each name in ARGS, from the environment's
#: manifest (Pkg.dependencies, Pkg's documented API: no package is loaded, nothing is fetched).
PACKAGES_MAIN = (
    "import Pkg; deps = Dict(p.name => p.version for p in values(Pkg.dependencies())); "
    'foreach(n -> println("[juliabridge:package] ", n, " ", '
    'something(get(deps, n, nothing), "missing")), ARGS)'
)
PACKAGE_RE = re.compile(r"^\[juliabridge:package\] (\S+) (\S+)$")


def _julia_command(
    julia: JuliaInstallation, environment: Path, program: str, *args: str
) -> list[str]:
    """`julia` running `program` (Julia source) with `args` in `environment`, without the
    user's startup file, history or colours (their output is parsed)."""
    return [julia.executable, f"--project={environment}", "--startup-file=no",
            "--history-file=no", "--color=no", "-e", program, *args]  # fmt: skip


def package_versions(
    julia: JuliaInstallation, environment: Path, names: tuple[str, ...], *, timeout: float
) -> dict[str, str | None]:
    """The version of each package `names` lists in `environment`'s manifest (None: absent).

    Raises ``JuliaExportError`` when Julia fails, answers nothing or runs past `timeout`
    seconds (it is then stopped), ``JuliaUnavailable`` when it cannot be started.
    """
    cmd = _julia_command(julia, environment, PACKAGES_MAIN, *names)
    # A session of its own, so that a time-out stops Julia and anything it started that still
    # holds the output pipe (which would otherwise keep the read waiting past the limit).
    try:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=os.name == "posix",
        )
    except OSError as exc:
        raise JuliaUnavailable(f"could not start {julia.executable}: {exc}") from exc
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        _stop_group(proc)
        raise JuliaExportError(
            f"Julia did not list the packages of {environment} within {timeout:g} s and was stopped"
        ) from exc
    found: dict[str, str | None] = {}
    for line in stdout.splitlines():
        m = PACKAGE_RE.match(line.strip())
        if m and m[1] in names:
            found[m[1]] = None if m[2] in ("missing", "nothing") else m[2]
    if proc.returncode != 0 or set(found) != set(names):
        last = "\n".join((stdout + stderr).strip().splitlines()[-10:]) or "(no output)"
        raise JuliaExportError(
            f"Julia could not list the packages of {environment} (status {proc.returncode}); "
            f"its last output:\n{last}"
        )
    return found


def _stop_group(proc: subprocess.Popen[str]) -> None:
    """Kill `proc` and, on POSIX, the session it leads; reap it."""
    try:
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except ProcessLookupError:
        pass
    proc.communicate()


def _read_result(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check_options(
    out: Path,
    *,
    overwrite: bool,
    mode: str,
    name: str | None,
    metadata: Any,
    samples_independent: bool | None,
) -> None:
    """Refuse, before Julia starts, options JuliaBridge.export_lux would refuse.

    Raises ``JuliaExportError`` for an existing `out` (without `overwrite`) or one that is not a
    directory, ``ValueError`` for a bad mode, name, metadata or mode/samples_independent pair.
    """
    if out.exists() and not overwrite:
        raise JuliaExportError(f"{out} already exists; pass overwrite=True (--overwrite)")
    if out.exists() and not out.is_dir():
        raise JuliaExportError(f"{out} exists and is not a directory")
    if mode not in MODES:
        raise ValueError(f"mode must be 'test' or 'train', got {mode!r}")
    if mode == "train" and samples_independent:
        raise ValueError(
            "samples_independent=True contradicts mode='train': Lux's training mode mixes the "
            "samples of a batch (BatchNorm batch statistics); leave samples_independent unset"
        )
    if name is not None and not NAME_RE.fullmatch(name):
        raise ValueError(f"name must match [A-Za-z0-9_.-]{{1,128}}, got {name!r}")
    try:
        json.dumps(metadata, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"metadata must be JSON-serializable: {exc}") from exc


def export_script(
    script: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    name: str | None = None,
    mode: str = "test",
    reference: bool = True,
    metadata: Mapping[str, Any] | None = None,
    samples_independent: bool | None = None,
    offline: bool = False,
    progress: bool | None = None,
    verbose: bool = False,
    timeout: float | None = None,
) -> Path:
    """Export the Lux model a Julia script defines (``model``, ``ps``, ``st``, ``x``).

    Runs ``JuliaBridge.export_lux`` in a ``julia`` subprocess and returns the directory it wrote:
    a Julia export directory (docs/julia-export.md) that ``juliabridge.import_lux`` imports and
    ``juliabridge convert`` turns into a bundle (where ``juliabridge vjp`` adds the pullback;
    the module's ops are checked at import).
    Raises ``JuliaUnavailable`` when no Julia is found, ``JuliaExportError`` when the export
    fails (with Julia's error message), ``ValueError`` for bad options. ``progress`` (default:
    when stderr is a terminal) shows a progress bar; ``verbose`` also shows Julia's own output;
    ``timeout`` (seconds) stops Julia.
    """
    script_path = Path(script).expanduser().resolve()
    out_path = Path(out).expanduser().resolve()
    if not script_path.is_file():
        raise JuliaExportError(f"no such Julia script: {script_path}")
    check_options(
        out_path,
        overwrite=overwrite,
        mode=mode,
        name=name,
        metadata=metadata,
        samples_independent=samples_independent,
    )
    julia = find_julia()
    # Before the progress bar: juliapkg's first install prints Pkg's own output to the terminal.
    environment = prepare_environment(
        julia,
        offline=offline,
        notify=lambda m: print(f"juliabridge: {m}", file=sys.stderr),
    )
    show = progress_enabled(progress)
    with ProgressDisplay(show) as display:
        display.step(0, 0, "starting Julia and loading JuliaBridge (Reactant, Lux)")
        request = {
            "script": str(script_path),
            "out": str(out_path),
            "overwrite": overwrite,
            "name": name,
            "mode": mode,
            "reference": reference,
            "metadata": dict(metadata) if metadata else None,
            "samples_independent": samples_independent,
        }
        path = run_export_request(
            julia, environment, request, display=display, verbose=verbose, timeout=timeout
        )
    return Path(path)
