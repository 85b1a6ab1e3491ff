"""Check that the Reactant source lines julia/ cites hold in every release its compat admits.

    python tools/check_julia_citations.py --reactant GIT_DIR

julia/src and julia/README.md cite Reactant's sources as ``R path:lines`` (``R src/Types.jl:67``,
``R src/compiler/Macros.jl:74-83``), read at the upper end of the ``Reactant`` range in
julia/Project.toml (``"LOW - HIGH"``). For each release tag ``vX.Y.Z`` of the Reactant.jl git
repository GIT_DIR (a clone or a bare mirror) inside that range, every cited block (its lines
at HIGH, indentation ignored) must appear, contiguously, in the same file: moved lines are fine,
changed ones are not. Raising the range's upper end (or lowering its lower end) is then: run
this against a checkout that has the new tags, fix the citations it names.

Exit codes: 0 every release holds every citation, 1 some release does not (each printed), 2 no
usable checkout, no citation, or no range in Project.toml.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: ``R path:a[-b]`` and its continuations ``, :c[-d]`` (the same file).
CITE = re.compile(
    r"R ((?:src|lib|ext|docs)/[\w/.-]+\.(?:jl|md)):(\d+)(?:-(\d+))?((?:, ?:\d+(?:-\d+)?)*)"
)
Citation = tuple[str, int, int]


def citations(texts: Iterable[str]) -> list[Citation]:
    """The distinct (file, first line, last line) citations in `texts`, sorted."""
    found: set[Citation] = set()
    for text in texts:
        for m in CITE.finditer(text):
            found.add((m.group(1), int(m.group(2)), int(m.group(3) or m.group(2))))
            for a, b in re.findall(r":(\d+)(?:-(\d+))?", m.group(4) or ""):
                found.add((m.group(1), int(a), int(b or a)))
    return sorted(found)


def compat_range(spec: str) -> tuple[str, str]:
    """The ends of a ``"LOW - HIGH"`` compat entry with full versions.

    Raises:
        ValueError: `spec` is not of that form.
    """
    m = re.fullmatch(r"\s*(\d+\.\d+\.\d+)\s+-\s+(\d+\.\d+\.\d+)\s*", spec)
    if m is None:
        raise ValueError(f"expected 'X.Y.Z - X.Y.Z', got {spec!r}")
    return m.group(1), m.group(2)


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _git(git_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True, timeout=120
    )


def releases(git_dir: Path, low: str, high: str) -> list[str]:
    """The tags ``vX.Y.Z`` of `git_dir` from `low` to `high`, both included, oldest first."""
    tags = _git(git_dir, "tag", "--list", "v*").stdout.split()
    versions = [t[1:] for t in tags if re.fullmatch(r"v\d+\.\d+\.\d+", t)]
    return ["v" + v for v in sorted(versions, key=_key) if _key(low) <= _key(v) <= _key(high)]


def _lines(git_dir: Path, tag: str, path: str) -> list[str] | None:
    proc = _git(git_dir, "show", f"{tag}:{path}")
    return [line.strip() for line in proc.stdout.splitlines()] if proc.returncode == 0 else None


def check(git_dir: Path, cites: Sequence[Citation], low: str, high: str) -> dict[str, list[str]]:
    """For each release in [low, high]: the citations whose block (as read at `high`) it lacks.

    Raises:
        ValueError: `high` has no tag, or a citation is beyond its file at `high`.
    """
    tags = releases(git_dir, low, high)
    if not tags or tags[-1] != f"v{high}":
        raise ValueError(f"{git_dir} has no tag v{high}")
    blocks: dict[Citation, list[str]] = {}
    for path, a, b in cites:
        lines = _lines(git_dir, tags[-1], path)
        if lines is None or not (1 <= a <= b <= len(lines)):
            raise ValueError(f"R {path}:{a}-{b} is not in {path} at v{high}")
        blocks[(path, a, b)] = lines[a - 1 : b]
    out: dict[str, list[str]] = {}
    for tag in tags:
        missing = []
        for (path, a, b), block in blocks.items():
            lines = _lines(git_dir, tag, path) or []
            n = len(block)
            if not any(lines[i : i + n] == block for i in range(len(lines) - n + 1)):
                missing.append(f"{path}:{a}-{b}" if a != b else f"{path}:{a}")
        out[tag] = missing
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run the check; returns the exit code (0 all hold, 1 a release differs, 2 unusable)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reactant", required=True, type=Path, help="Reactant.jl git directory")
    ap.add_argument("--root", type=Path, default=REPO, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    julia = args.root / "julia"
    texts = [p.read_text(encoding="utf-8") for p in sorted((julia / "src").glob("*.jl"))]
    texts.append((julia / "README.md").read_text(encoding="utf-8"))
    git_dir = args.reactant / ".git" if (args.reactant / ".git").exists() else args.reactant
    try:
        compat = tomllib.loads((julia / "Project.toml").read_text())["compat"]["Reactant"]
        low, high = compat_range(compat)
        cites = citations(texts)
        if not cites:
            raise ValueError("julia/ cites no Reactant source line")
        result = check(git_dir, cites, low, high)
    except (KeyError, ValueError, OSError, subprocess.TimeoutExpired) as e:
        print(f"check_julia_citations: {e}", file=sys.stderr)
        return 2
    for tag, missing in result.items():
        print(
            f"{tag}: " + ("every citation holds" if not missing else "lacks " + ", ".join(missing))
        )
    bad = [t for t, m in result.items() if m]
    print(
        f"check_julia_citations: {len(cites)} citation(s), {len(result)} release(s), "
        f"{len(bad)} differ"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
