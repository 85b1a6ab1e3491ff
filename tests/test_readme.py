"""README.md, the front door, says what runs: its example (on the first screen) runs as written,
its commands exist, its links lead to pages that exist."""

from __future__ import annotations

import contextlib
import io
import re
import tomllib
from pathlib import Path

import pytest

from juliabridge.cli import commands as cli

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")
#: The tests as README.md says to run them (pytest-xdist: two processes, a file each at a time).
TEST_COMMAND = "-m pytest -q -rs -n 2 --dist loadfile"


#: The setup command: a fresh venv, juliabridge with the test extras, the main job.
SETUP_COMMAND = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[enzyme,test]' "
    "&& juliabridge demo"
)


def _example_blocks() -> list[str]:
    example = README[README.index("## Example") : README.index("## Tests")]
    return re.findall(r"```python\n(.*?)```", example, re.S)


def _expected_prints(block: str) -> list[str]:
    """What each ``print(...)  # VALUE: why`` line of the block says it prints."""
    return [
        m.group(1).strip().strip('"')
        for m in re.finditer(r"^print\(.*\)  # ([^:\n]+)", block, re.M)
    ]


def test_the_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = _example_blocks()
    assert len(blocks) == 1, "README.md's Example section has one python block"
    monkeypatch.chdir(tmp_path)
    for _ in range(2):  # a second run in the same process works too
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(blocks[0], "README.md (Example)", "exec"), {"__name__": "__readme__"})
        assert out.getvalue().splitlines() == _expected_prints(blocks[0])
    assert len(_expected_prints(blocks[0])) >= 2


def test_the_example_is_on_the_first_screen() -> None:
    """What it is, then the setup command, then an example of about ten lines, within the first
    screen (50 lines)."""
    lines = README.splitlines()
    start = lines.index("```python")
    assert start < 50, f"the example starts at line {start + 1}"
    end = lines.index("```", start)
    assert end - start - 1 <= 11, f"the example is {end - start - 1} lines"
    assert README.index(SETUP_COMMAND) < README.index("```python")


def test_the_readme_links_lead_to_pages_that_exist() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert len(links) >= 10
    for link in links:
        if not link.startswith("http"):
            assert (REPO / link).exists(), link


def test_the_readme_commands_exist() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for line in re.findall(r"```bash\n(.*?)```", README, re.S):
        for group in re.findall(r"pip install -e '\.\[([a-z,]+)\]'", line):
            assert set(group.split(",")) <= set(extras), group
    assert f"python {TEST_COMMAND}\n" in README
    assert f"{SETUP_COMMAND}\n" in README
    ci = (REPO / ".ci" / "run").read_text()
    # CI runs what README says, in both environments, and no other pytest command
    assert ci.count(f"{TEST_COMMAND}\n") == 2, TEST_COMMAND
    assert ci.count("-m pytest") == 2
    commands = set(cli.build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    for name in re.findall(r"`juliabridge (\w+)", README):
        assert name in commands, f"README names `juliabridge {name}`, which does not exist"


def test_multihost_doc_shows_the_tested_code() -> None:
    doc = (REPO / "docs" / "multihost.md").read_text(encoding="utf-8")
    assert "(docs/multihost.md)" in README
    scripts = " ".join(
        (REPO / "tests" / "scripts" / name).read_text()
        for name in ("multiprocess_train.py", "model_parallel_check.py")
    )
    scripts = " ".join(scripts.split())
    code = " ".join(" ".join(re.findall(r"```python\n(.*?)```", doc, re.S)).split())
    code = code.replace("jax.make_mesh((jax.device_count(),)", "jax.make_mesh((8,)")
    patterns = (
        r"jax\.make_mesh\([^)]*\),[^)]*\)\)",
        r"NamedSharding\(mesh, P\([^)]*\)\)",
        r"jax\.make_array_from_process_local_data\([^)]*\)\), \w+",
        r"optax\.\w+\([^)]*\)",
        r"model\.(?:params|state) = jax\.device_put\([^)]*\)",
    )
    found = [m for p in patterns for m in re.findall(p, code)]
    assert len(found) >= 10, found
    for snippet in found:
        snippet = snippet.replace("x_local", "x[local]").replace("y_local", "y[local]")
        assert snippet in scripts, f"docs/multihost.md shows {snippet!r}, which no test runs"
