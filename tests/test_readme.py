"""README.md says what runs: its Usage block runs as written, its commands exist."""

from __future__ import annotations

import contextlib
import io
import re
import tomllib
from pathlib import Path

import pytest

from juliabridge import cli

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")


def _usage_blocks() -> list[str]:
    usage = README[README.index("## Usage") : README.index("## What to know")]
    return re.findall(r"```python\n(.*?)```", usage, re.S)


def _expected_prints(block: str) -> list[str]:
    """What each ``print(...)  # VALUE: why`` line of the block says it prints."""
    return [
        m.group(1).strip().strip('"') for m in re.finditer(r"^print\(.*\)  # ([^:]+)", block, re.M)
    ]


def test_the_usage_block_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = _usage_blocks()
    assert blocks, "README.md's Usage section has no python block"
    monkeypatch.chdir(tmp_path)  # the block writes finetuned.h5 where it runs
    for block in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, "README.md (Usage)", "exec"), {"__name__": "__readme__"})
        assert out.getvalue().splitlines() == _expected_prints(block)
    assert (tmp_path / "finetuned.h5").is_file()


def test_the_readme_commands_exist() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for line in re.findall(r"```bash\n(.*?)```", README, re.S):
        for group in re.findall(r"pip install -e '\.\[([a-z,]+)\]'", line):
            assert set(group.split(",")) <= set(extras), group
    assert "python -m pytest -q -rs" in README
    assert "-m pytest -q -rs" in (REPO / ".ci" / "run").read_text()  # CI runs what README says
    commands = set(cli.build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    for name in re.findall(r"`juliabridge (\w+)", README):
        assert name in commands, f"README names `juliabridge {name}`, which does not exist"
