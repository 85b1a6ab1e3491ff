"""docs/lax-backend.md embeds exactly the coverage tables tools/lax_coverage.py generates."""

from __future__ import annotations

import runpy
from pathlib import Path

from juliabridge.backends.lax import RULES
from juliabridge.backends.lax.ops._linalg_targets import TARGETS

TOOL = Path(__file__).resolve().parents[2] / "tools" / "lax_coverage.py"
tool = runpy.run_path(str(TOOL))


def test_the_doc_embeds_the_generated_coverage_tables() -> None:
    doc = tool["DOC"].read_text()
    assert tool["embedded"](doc) == tool["coverage_markdown"](), (
        "docs/lax-backend.md is out of date: run `python tools/lax_coverage.py --write`"
    )


def test_the_tables_name_every_registered_op_and_target_once() -> None:
    table = tool["coverage_markdown"]()
    for name in [*RULES, *TARGETS]:
        assert table.count(f"`{name}`") == 1, name
    assert f"{len(RULES)} ops, {len(TARGETS)} custom-call targets." in table


def test_with_table_replaces_only_the_generated_part() -> None:
    begin, end = tool["BEGIN"], tool["END"]
    doc = f"intro\n{begin}\nold\n{end}\noutro\n"
    assert tool["with_table"](doc, "new") == f"intro\n{begin}\nnew\n{end}\noutro\n"
    assert tool["embedded"]("no markers") is None
