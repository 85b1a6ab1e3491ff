"""Hand-written realistic mutants, planted one at a time, each run against its module's tests.

mutmut (tools/mutation_smoke.py) flips operators; the bugs developers write are of another
kind: a wrong axis, a reversed permutation, an off-by-one, a dropped check, a device path
skipped, a rule valid only in the common layout, a limit checked outside regions only. This
tool plants such bugs, written by hand as data in tools/realistic_mutants/*.toml (one file per
module group), and reports per group how many the tests kill.

A group file holds ``group`` (its name), ``tests`` (the test files or node ids a developer of
the group runs, or ``"map"``: for each mutant, the test files tools/test_map.json measured
executing its module) and ``[[mutant]]`` entries, each with ``id``, ``path`` (the module), ``kind``
(the bug class), ``description`` (one line), ``old`` (a snippet that must occur exactly once
in the module) and ``new`` (its replacement); a mutant may name its own ``tests``. A mutant
found equivalent (no input any public route accepts tells it from the code) carries
``equivalent``, the reason: it is not run and not counted (the score is killed over the others),
and is listed with its reason in the summary; ``--with-equivalent`` runs it anyway.

Each mutant runs in a scratch copy of the repository (one copy per worker; the module is
rewritten there and restored after the run, the checkout is never touched), as one pytest
process with ``-x`` over the group's tests, with 4 fake CPU devices (so multi-device tests
run). A mutant is killed when pytest fails or runs past ``--timeout``; first each group's
tests run once unmutated, and a group whose clean run fails is reported as an error.

Usage:
    python tools/realistic_mutants.py --stale        # every `old` still matches (seconds)
    python tools/realistic_mutants.py --jobs 2       # run every mutant, print the figures
    python tools/realistic_mutants.py --group sort --check   # exit 1 below 90 % or if stale
    python tools/realistic_mutants.py --group params --map   # with the map's tests per module
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTANTS = ROOT / "tools" / "realistic_mutants"
#: Killed fraction each group must reach under --check.
THRESHOLD = 0.9
#: The classes of bug a mutant may name (its `kind`).
KINDS = frozenset(
    {
        "wrong axis",
        "wrong argument",
        "reversed permutation",
        "off-by-one",
        "dropped check",
        "device path skipped",
        "rule valid only in the common layout",
        "rule valid only in the common case",
        "limit checked outside regions only",
        "value edge",
        "option combination",
    }
)


@dataclass(frozen=True)
class Mutant:
    """One planted bug."""

    id: str
    path: str
    kind: str
    description: str
    old: str
    new: str
    tests: tuple[str, ...]
    group: str
    #: Why no input tells the mutant from the code ("" for a mutant that counts).
    equivalent: str = ""


@dataclass
class Group:
    """The mutants of one module group and the tests they run against."""

    name: str
    source: Path
    tests: tuple[str, ...]
    mutants: list[Mutant] = field(default_factory=list)


class MutantFileError(ValueError):
    """A mutant file is malformed."""


def load_groups(directory: Path = MUTANTS) -> list[Group]:
    """Every group file of `directory`, parsed and checked for shape (not for staleness).

    Raises:
        MutantFileError: a file is not valid TOML or lacks a required key.
    """
    groups = []
    ids: set[str] = set()
    for f in sorted(directory.glob("*.toml")):
        try:
            data = tomllib.loads(f.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as e:
            raise MutantFileError(f"{f}: not valid TOML ({e})") from e
        name, tests = data.get("group"), data.get("tests")
        if tests == "map":  # each mutant's tests: the map's for its module (tools/test_map.py)
            tests = []
        elif not isinstance(tests, list) or not tests:
            tests = None
        if not isinstance(name, str) or tests is None:
            raise MutantFileError(
                f'{f}: needs `group` (a string) and `tests` (a non-empty list, or "map")'
            )
        group = Group(name, f, tuple(tests))
        for i, m in enumerate(data.get("mutant", [])):
            keys = ("id", "path", "kind", "description", "old", "new")
            missing = [k for k in keys if not isinstance(m.get(k), str) or not m.get(k)]
            if missing:
                raise MutantFileError(f"{f}: mutant {i} lacks {', '.join(missing)}")
            if m["kind"] not in KINDS:
                raise MutantFileError(
                    f"{f}: mutant {m['id']} has kind {m['kind']!r}, not one of {sorted(KINDS)}"
                )
            if m["id"] in ids:
                raise MutantFileError(f"{f}: mutant id {m['id']} is used twice")
            if m["old"] == m["new"]:
                raise MutantFileError(f"{f}: mutant {m['id']} changes nothing")
            equivalent = m.get("equivalent", "")
            if not isinstance(equivalent, str) or ("equivalent" in m and not equivalent):
                raise MutantFileError(
                    f"{f}: mutant {m['id']}: `equivalent` must be the reason (a non-empty string)"
                )
            ids.add(m["id"])
            group.mutants.append(
                Mutant(
                    m["id"],
                    m["path"],
                    m["kind"],
                    m["description"],
                    m["old"],
                    m["new"],
                    tuple(m.get("tests", tests) or map_tests(m["path"])),
                    name,
                    equivalent,
                )
            )
        groups.append(group)
    return groups


def map_tests(path: str) -> list[str]:
    """The test files tools/test_map.json says execute the module at `path` (the tests the
    project names for it: measured, not written by hand)."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import test_map
    finally:
        sys.path.pop(0)
    return test_map.tests_for_module(path)


def stale(mutant: Mutant, root: Path = ROOT) -> str | None:
    """Why `mutant` no longer applies to the code under `root` (None when its `old` occurs
    exactly once in its module)."""
    path = root / mutant.path
    if not path.is_file():
        return f"{mutant.id}: {mutant.path} does not exist"
    n = path.read_text(encoding="utf-8").count(mutant.old)
    if n != 1:
        return f"{mutant.id}: its `old` snippet occurs {n} times in {mutant.path} (expected once)"
    return None


def missing_tests(group: Group, root: Path = ROOT) -> list[str]:
    """Test files a group or its mutants name that do not exist under `root`."""
    names = {t for m in group.mutants for t in m.tests} | set(group.tests)
    out = sorted(t for t in names if not (root / t.split("::")[0]).is_file())
    out += [
        f"(none measured for {m.path}: tools/test_map.py --refresh)"
        for m in group.mutants
        if not m.tests
    ]
    return out


def _copy_repo(dest: Path, shared: Path) -> Path:
    """A scratch copy of the checkout's files (tracked and untracked, not ignored) at
    dest/repo, with dest/shared linked to `shared` (the real Reactant fixtures the tests read at
    ../shared) if it exists."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    repo = dest / "repo"
    for raw in files:
        if not raw:
            continue
        rel = raw.decode()
        src = ROOT / rel
        if not src.is_file() or src.is_symlink():
            continue
        target = repo / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
    if shared.is_dir():
        (dest / "shared").symlink_to(shared.resolve())
    return repo


def _pytest(repo: Path, tests: tuple[str, ...], timeout: float) -> tuple[str, float, str]:
    """Run `tests` in `repo`: ('passed' | 'failed' | 'timeout', seconds, output tail)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), env.get("PYTHONPATH")) if p)
    env["JAX_PLATFORMS"] = "cpu"
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    ).strip()
    env.pop("MUTANT_UNDER_TEST", None)
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: stopped with its children
    )
    _RUNNING.add(proc)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(proc)
        return "timeout", time.monotonic() - start, ""
    finally:
        _RUNNING.discard(proc)
    tail = out.decode(errors="replace")[-1500:]
    if proc.returncode == 0:
        return "passed", time.monotonic() - start, tail
    if proc.returncode == 5:  # no tests collected: the selection is wrong, not the mutant
        return "error", time.monotonic() - start, tail
    return "failed", time.monotonic() - start, tail


#: pytest processes running now (stopped, with their children, if this tool is stopped).
_RUNNING: set[subprocess.Popen[bytes]] = set()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill `proc`'s process group (pytest and the helpers its tests started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _on_signal(signum: int, _frame: object) -> None:
    for proc in list(_RUNNING):
        _stop(proc)
    sys.exit(128 + signum)


def _run_one(repo: Path, mutant: Mutant, timeout: float) -> dict[str, object]:
    path = repo / mutant.path
    original = path.read_text(encoding="utf-8")
    try:
        path.write_text(original.replace(mutant.old, mutant.new, 1), encoding="utf-8")
        outcome, seconds, tail = _pytest(repo, mutant.tests, timeout)
    finally:
        path.write_text(original, encoding="utf-8")
    verdict = {"passed": "survived", "failed": "killed", "timeout": "killed (timeout)"}.get(
        outcome, "error"
    )
    return {
        "id": mutant.id,
        "group": mutant.group,
        "path": mutant.path,
        "kind": mutant.kind,
        "description": mutant.description,
        "verdict": verdict,
        "seconds": round(seconds, 1),
        "tests": list(mutant.tests),
        "tail": tail if verdict in ("survived", "error") else tail[-400:],
    }


def run_mutants(
    groups: list[Group],
    jobs: int,
    timeout: float,
    shared: Path = ROOT.parent / "shared",
    log: Path | None = None,
    clean_first: bool = True,
) -> tuple[list[dict[str, object]], dict[str, str]]:
    """Run every mutant of `groups` (after each group's clean run); (results, group errors).

    Progress goes to stdout, and each result as a JSON line to `log` if given.
    """
    with tempfile.TemporaryDirectory(prefix="realistic-mutants-") as tmp:
        copies: queue.Queue[Path] = queue.Queue()
        for w in range(jobs):
            copies.put(_copy_repo(Path(tmp) / f"w{w}", shared))

        def clean(group: Group) -> tuple[str, str]:
            repo = copies.get()
            try:
                tests = tuple(dict.fromkeys(t for m in group.mutants for t in m.tests))
                outcome, seconds, tail = _pytest(repo, tests or group.tests, timeout)
            finally:
                copies.put(repo)
            print(f"[clean] {group.name}: {outcome} in {seconds:.0f} s", flush=True)
            return outcome, tail

        def one(m: Mutant) -> dict[str, object]:
            repo = copies.get()
            try:
                r = _run_one(repo, m, timeout)
            finally:
                copies.put(repo)
            print(f"[{r['verdict']}] {m.group} / {m.id} ({r['seconds']} s)", flush=True)
            if log is not None:
                with log.open("a") as f:
                    f.write(json.dumps(r) + "\n")
            return r

        errors: dict[str, str] = {}
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            for g, (outcome, tail) in zip(groups, pool.map(clean, groups if clean_first else [])):
                if outcome != "passed":
                    errors[g.name] = f"clean run {outcome}:\n{tail}"
            todo = [m for g in groups if g.name not in errors for m in g.mutants]
            results = list(pool.map(one, todo))
    return results, errors


def summarize(
    groups: list[Group], results: list[dict[str, object]], errors: dict[str, str]
) -> dict[str, dict[str, object]]:
    """Per group: killed, total (the mutants that count), score, the equivalent mutants left
    out and the survivors' ids."""
    out: dict[str, dict[str, object]] = {}
    for g in groups:
        counted = {m.id for m in g.mutants if not m.equivalent}
        mine = [r for r in results if r["group"] == g.name and r["id"] in counted]
        killed = sum(1 for r in mine if str(r["verdict"]).startswith("killed"))
        out[g.name] = {
            "killed": killed,
            "total": len(counted),
            "score": killed / len(counted) if counted else 1.0,
            "equivalent": [m.id for m in g.mutants if m.equivalent],
            "survived": [r["id"] for r in mine if r["verdict"] == "survived"],
            "errors": [r["id"] for r in mine if r["verdict"] == "error"],
            "group_error": errors.get(g.name),
        }
    return out


def _previous_kills(paths: list[Path]) -> dict[str, dict[str, object]]:
    """Mutant id -> its result, for every mutant an earlier run (--json or --log) killed."""
    found: dict[str, dict[str, object]] = {}
    for path in paths:
        text = path.read_text()
        try:
            rows = json.loads(text)["results"]  # a --json file
        except (json.JSONDecodeError, KeyError, TypeError):
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        for r in rows:
            if str(r["verdict"]).startswith("killed"):
                found[str(r["id"])] = {**r, "carried": str(path)}
    return found


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--group", action="append", default=[], help="run groups whose name or file contains this"
    )
    ap.add_argument("--mutant", action="append", default=[], help="run only these mutant ids")
    ap.add_argument("--jobs", type=int, default=1, help="parallel workers (one repo copy each)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per pytest run")
    ap.add_argument("--stale", action="store_true", help="only check that every mutant applies")
    ap.add_argument(
        "--check",
        action="store_true",
        help=f"exit 1 below {THRESHOLD:.0%}% or stale",  # %% for argparse
    )
    ap.add_argument(
        "--with-equivalent",
        action="store_true",
        help="also run the mutants marked equivalent (reported, still not counted)",
    )
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--log", type=Path, help="append each result here as a JSON line")
    ap.add_argument(
        "--previous",
        type=Path,
        action="append",
        default=[],
        help="a --json or --log file of an earlier run: its kills are carried over (tests are "
        "only ever added between runs), so only its survivors run again",
    )
    ap.add_argument(
        "--no-clean",
        action="store_true",
        help="skip each group's unmutated run (when it is known to pass: it costs as much as a "
        "surviving mutant)",
    )
    ap.add_argument(
        "--tests",
        nargs="+",
        help="run the chosen mutants against these tests instead of their groups' (e.g. only "
        "the tests added since --previous)",
    )
    ap.add_argument(
        "--map",
        action="store_true",
        help="run each mutant against the tests tools/test_map.json names for its module "
        "(instead of its group's list)",
    )
    ap.add_argument(
        "--shared",
        type=Path,
        default=ROOT.parent / "shared",
        help="the fixtures folder the copies see at ../shared (default: the checkout's)",
    )
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)

    groups = load_groups()
    if args.group:
        groups = [g for g in groups if any(s in g.name or s in g.source.stem for s in args.group)]
    if args.mutant:
        for g in groups:
            g.mutants = [m for m in g.mutants if m.id in args.mutant]
        groups = [g for g in groups if g.mutants]
    problems = [p for g in groups for m in g.mutants if (p := stale(m)) is not None]
    problems += [f"{g.name}: no test file {t}" for g in groups for t in missing_tests(g)]
    for p in problems:
        print(f"STALE {p}")
    if args.stale:
        print(f"{sum(len(g.mutants) for g in groups)} mutants in {len(groups)} groups checked")
        return 1 if problems else 0
    if problems and args.check:
        return 1

    carried = _previous_kills(args.previous)
    if args.map:
        for g in groups:
            g.mutants = [dataclasses.replace(m, tests=tuple(map_tests(m.path))) for m in g.mutants]
    if args.tests:
        for g in groups:
            g.tests = tuple(args.tests)
            g.mutants = [dataclasses.replace(m, tests=g.tests) for m in g.mutants]
    todo = [
        dataclasses.replace(
            g,
            mutants=[
                m
                for m in g.mutants
                if m.id not in carried and (args.with_equivalent or not m.equivalent)
            ],
        )
        for g in groups
    ]
    start = time.monotonic()
    results, errors = run_mutants(
        [g for g in todo if g.mutants],
        max(1, args.jobs),
        args.timeout,
        args.shared,
        args.log,
        clean_first=not args.no_clean,
    )
    results += [carried[m.id] for g in groups for m in g.mutants if m.id in carried]
    summary = summarize(groups, results, errors)
    elapsed = time.monotonic() - start
    print(f"\nrealistic mutants, {elapsed:.0f} s with {args.jobs} worker(s):")
    failed = bool(problems)
    for name, s in summary.items():
        line = f"  {name}: {s['killed']}/{s['total']} killed ({float(s['score']):.0%})"  # type: ignore[arg-type]
        if s["equivalent"]:
            line += f", {len(s['equivalent'])} equivalent not counted"  # type: ignore[arg-type]
        if s["group_error"]:
            line += "  ERROR: the clean run did not pass"
            failed = True
        print(line)
        equivalent = {m.id: m.equivalent for g in groups if g.name == name for m in g.mutants}
        for r in results:
            if r["group"] != name:
                continue
            if r["verdict"] in ("survived", "error") and not equivalent.get(str(r["id"])):
                print(f"    {r['verdict']}: {r['id']} [{r['kind']}] {r['description']}")
        for mid, why in equivalent.items():
            if why:
                ran = [r["verdict"] for r in results if r["id"] == mid]
                note = f" (ran: {ran[0]})" if ran else ""
                print(f"    equivalent, not counted{note}: {mid}: {why}")
        if float(s["score"]) < THRESHOLD:  # type: ignore[arg-type]
            failed = True
    for name, why in errors.items():
        print(f"\n{name}: {why}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"seconds": round(elapsed), "summary": summary, "results": results}, indent=1
            )
        )
    return 1 if failed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
