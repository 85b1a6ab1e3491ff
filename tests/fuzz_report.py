"""Markdown tables of one or more JB_FUZZ_REPORT files, as docs/reliability.md quotes them.

    python -m tests.fuzz_report report1.json [report2.json ...]

Loader families: one row per family and backend, a column per outcome (``ok`` and each
juliabridge error class). The ``cli`` family: a column per exit code.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path


def _merge(paths: list[str]) -> Counter[str]:
    total: Counter[str] = Counter()
    for p in paths:
        total.update(json.loads(Path(p).read_text())["outcomes"])
    return total


def tables(outcomes: Counter[str]) -> str:
    """The two tables for merged outcome counts."""
    rows: dict[str, Counter[str]] = {}
    notes: Counter[str] = Counter()
    for key, n in outcomes.items():
        parts = key.split(":")
        if len(parts) != 2:
            notes[":".join(parts[1:])] += n
            continue
        rows.setdefault(parts[0], Counter())[parts[1]] += n
    loader = {k: v for k, v in rows.items() if not k.startswith("cli[")}
    cli = {k: v for k, v in rows.items() if k.startswith("cli[")}
    cols = sorted({c for v in loader.values() for c in v}, key=lambda c: (c != "ok", c))
    out = []
    head = ["family", "cases", *[c.removesuffix("Error") for c in cols]]
    out.append("| " + " | ".join(head) + " |")
    out.append("| --- | " + " | ".join("---:" for _ in head[1:]) + " |")
    total: Counter[str] = Counter()
    for fam in sorted(loader):
        v = loader[fam]
        total.update(v)
        out.append(
            f"| `{fam}` | {sum(v.values())} | " + " | ".join(str(v.get(c, 0)) for c in cols) + " |"
        )
    out.append(
        f"| **total** | **{sum(total.values())}** | "
        + " | ".join(f"**{total.get(c, 0)}**" for c in cols)
        + " |"
    )
    if cli:
        codes = sorted({c for v in cli.values() for c in v}, key=lambda c: int(c.split("-")[1]))
        out.append("")
        out.append(
            "| family | cases | " + " | ".join(f"exit {c.split('-')[1]}" for c in codes) + " |"
        )
        out.append("| --- | ---: | " + " | ".join("---:" for _ in codes) + " |")
        for fam in sorted(cli):
            v = cli[fam]
            out.append(
                f"| `{fam}` | {sum(v.values())} | "
                + " | ".join(str(v.get(c, 0)) for c in codes)
                + " |"
            )
    if notes:
        out.append("")
        out += [f"- {k}: {n}" for k, n in sorted(notes.items())]
    return "\n".join(out)


if __name__ == "__main__":
    print(tables(_merge(sys.argv[1:])))
