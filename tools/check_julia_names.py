"""Lint the Julia package for undefined names, wrong call arity and non-public access (fatou).

    python tools/check_julia_names.py [--fatou PATH]

Runs ``fatou lint`` with ``.ci/fatou.toml`` (the opt-in rules ``undefined-name``, ``call-arity``
and ``non-public-access``) on julia/src, julia/test and julia/examples, and fails on every
finding that ``tools/fatou_accepted.json`` does not list. Each accepted finding names its file,
rule and message, with the reason it is accepted; an accepted entry that no longer matches a
finding is stale and fails too, so the list stays honest. fatou is found as ``--fatou``, else
``$JULIABRIDGE_FATOU``, else ``fatou`` on PATH; without it the script exits 2.

Exit codes: 0 clean, 1 findings (or stale entries), 2 fatou missing or unusable.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / ".ci" / "fatou.toml"
ACCEPTED = REPO / "tools" / "fatou_accepted.json"
TARGETS = ("julia/src", "julia/test", "julia/examples")


def find_fatou(given: str | None) -> str | None:
    """The fatou executable: `given`, else $JULIABRIDGE_FATOU, else `fatou` on PATH, or None."""
    for name in (given, os.environ.get("JULIABRIDGE_FATOU"), "fatou"):
        if name:
            found = shutil.which(name)
            if found:
                return found
    return None


def findings(
    fatou: str, root: Path = REPO, targets: Sequence[str] = TARGETS
) -> list[dict[str, str]]:
    """fatou's findings under `root` as ``{"path", "rule", "message"}`` (path relative to `root`).

    Raises:
        RuntimeError: fatou failed without printing findings (a crash, a bad config).
    """
    proc = subprocess.run(
        [fatou, "lint", "--config", str(CONFIG), "--output", "json", *targets],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    try:
        raw: list[dict[str, Any]] = json.loads(proc.stdout or "[]")
    except json.JSONDecodeError as e:
        raise RuntimeError(
            f"fatou printed no JSON (exit {proc.returncode}): {proc.stderr[-2000:]}"
        ) from e
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"fatou exited {proc.returncode}: {proc.stderr[-2000:]}")
    out = []
    for f in raw:
        path = Path(f["path"])
        rel = path.resolve().relative_to(root.resolve()) if path.is_absolute() else path
        out.append({"path": rel.as_posix(), "rule": f["rule"], "message": f["message"]["body"]})
    return out


def unaccepted(
    found: list[dict[str, str]], accepted: list[dict[str, str]]
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(findings no accepted entry covers, accepted entries no finding matches)."""

    def key(d: dict[str, str]) -> tuple[str, str, str]:
        return (d["path"], d["rule"], d["message"])

    keys = {key(a) for a in accepted}
    new = [f for f in found if key(f) not in keys]
    seen = {key(f) for f in found}
    stale = [a for a in accepted if key(a) not in seen]
    return new, stale


def main(argv: Sequence[str] | None = None) -> int:
    """Run the check; returns the exit code (0 clean, 1 findings or stale entries, 2 no fatou)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fatou", help="the fatou executable (default: $JULIABRIDGE_FATOU or PATH)")
    args = ap.parse_args(argv)
    fatou = find_fatou(args.fatou)
    if fatou is None:
        print("check_julia_names: fatou not found (pip install fatou==0.24.0)", file=sys.stderr)
        return 2
    try:
        found = findings(fatou)
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
        print(f"check_julia_names: {e}", file=sys.stderr)
        return 2
    accepted = json.loads(ACCEPTED.read_text())
    for a in accepted:
        if not a.get("reason"):
            print(f"check_julia_names: accepted entry without a reason: {a}", file=sys.stderr)
            return 1
    new, stale = unaccepted(found, accepted)
    for f in new:
        print(f"{f['path']}: {f['rule']}: {f['message']}")
    for a in stale:
        print(f"stale entry in {ACCEPTED.name} (no such finding now): {a['path']}: {a['rule']}")
    print(
        f"check_julia_names: {len(found)} finding(s), {len(found) - len(new)} accepted, "
        f"{len(new)} new, {len(stale)} stale"
    )
    return 1 if new or stale else 0


if __name__ == "__main__":
    sys.exit(main())
