"""The documentation site's user guide says what runs: every python block of its pages runs as
written, and prints what its comments say (``print(...)  # VALUE: why``)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: The guide pages whose python blocks run here (docs/exporting.md's run in
#: tests/test_exporting_doc.py, docs/multihost.md's in tests/test_readme.py's scripts).
PAGES = ("index.md", "importing.md", "transforms.md")


def _blocks(page: str) -> list[str]:
    text = (REPO / "docs" / page).read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, re.S)


def _expected_prints(block: str) -> list[str]:
    """What each ``print(...)  # VALUE: why`` line of the block says it prints."""
    return [
        m.group(1).strip().strip('"')
        for m in re.finditer(r"^print\(.*\)  # ([^:\n]+)", block, re.M)
    ]


@pytest.mark.parametrize("page", PAGES)
def test_the_page_s_blocks_run_as_written(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = _blocks(page)
    assert blocks, f"docs/{page} has no python block"
    monkeypatch.chdir(tmp_path)  # blocks write files (finetuned.h5) where they run
    for _ in range(2):  # a second run in the same folder works too (files are replaced)
        for block in blocks:
            expected = _expected_prints(block)
            assert expected, f"a block of docs/{page} prints nothing it promises"
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(block, f"docs/{page}", "exec"), {"__name__": "__guide__"})
            assert out.getvalue().splitlines() == expected


def test_every_python_block_of_the_guide_is_run_somewhere() -> None:
    """A guide page with python blocks is run here or names the test that runs it."""
    for page in sorted((REPO / "docs").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        if "```python" not in text or page.name in PAGES:
            continue
        assert re.search(r"tests/test_\w+\.py", text), f"{page.name}: no test runs its blocks"
