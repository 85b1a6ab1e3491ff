"""The documentation site's generated reference holds everything a user can reach, and its
pages are all in the site (docs/_ext/reference.py, docs/_ext/notebooks.py, docs/index.md).

These run without Sphinx: they check what the generators write, which is what Sphinx renders
(CI builds the site itself, with warnings as errors: tools/build_docs.py).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"docs_ext_{name}", DOCS / "_ext" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


reference = _load("reference")
notebooks = _load("notebooks")


def _directive_targets(markdown: str) -> set[str]:
    return set(re.findall(r"^\.\. (?:auto\w+|py:data):: (\S+)$", markdown, re.M))


def test_every_public_name_has_a_reference_entry() -> None:
    pytest.importorskip("flax", reason="juliabridge.flax's entries need flax")
    pytest.importorskip("equinox", reason="juliabridge.equinox's entries need equinox")
    text = reference.api_markdown()
    targets = _directive_targets(text)
    expected = {f"{m}.{n}" for m, n in reference.public_names()}
    assert expected - targets == set(), "public names without a reference entry"
    assert targets - expected == set(), "reference entries for names that are not public"
    assert len(re.findall(r"^\.\. ", text, re.M)) == len(expected), "a name documented twice"
    for module in reference.PUBLIC_MODULES:
        assert f"## `{module}`" in text, module


def test_the_public_modules_are_the_ones_users_are_told_about() -> None:
    """Every module the docstring test treats as public is in the reference, and each public
    module's ``__all__`` names only what it has."""
    from tests import test_docstrings

    assert set(test_docstrings.PUBLIC) <= set(reference.PUBLIC_MODULES)
    for module in reference.PUBLIC_MODULES:
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            pytest.skip(f"{module} needs an extra that is not installed: {exc}")
        missing = [n for n in mod.__all__ if not hasattr(mod, n)]
        assert missing == [], f"{module}.__all__ names {missing}, which it lacks"


def test_a_new_top_level_name_lands_in_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """A public name nobody placed in a section still gets an entry (the 'Other names')."""
    import juliabridge

    monkeypatch.setattr(juliabridge, "__all__", [*juliabridge.__all__, "ImportedFunction_"])
    monkeypatch.setattr(juliabridge, "ImportedFunction_", juliabridge.import_lux, raising=False)
    monkeypatch.setattr(reference, "PUBLIC_MODULES", ("juliabridge",))
    text = reference.api_markdown()
    assert ".. autofunction:: juliabridge.ImportedFunction_" in text
    assert "### Other names" in text


def test_a_constant_s_entry_is_its_comment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A constant has no docstring: its entry is the ``#:`` comment where it is assigned."""
    monkeypatch.setattr(reference, "PUBLIC_MODULES", ("juliabridge",))
    text = reference.api_markdown()
    entry = text[text.index(".. py:data:: juliabridge.__version__") :].split("```")[0]
    assert "juliabridge's version (PEP 440)" in entry and "'0." in entry


# --- the command line -----------------------------------------------------------------------


def _walk(parser: argparse.ArgumentParser, prefix: str = "juliabridge"):
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, f"{prefix} {name}")


def test_the_cli_reference_has_every_command_and_option() -> None:
    from juliabridge.cli.commands import build_parser

    parser = build_parser()
    text = reference.cli_markdown(parser)
    commands = list(_walk(parser))
    assert len(commands) > 8
    for name, sub in commands:
        if name != "juliabridge":
            assert f"## {name}\n" in text, name
            section = text[text.index(f"## {name}\n") :].split("\n## ")[0]
        else:
            section = text.split("\n## ")[0]
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            for option in action.option_strings or [action.metavar or action.dest]:
                assert f"`{option}`" in section, f"{name}: {option}"
            if action.help:
                first = " ".join(action.help.split())[:30]
                assert reference._md_escape(first) in section.replace("\n", " "), first
            for choice in action.choices or ():
                assert f"`{choice}`" in section, f"{name}: {choice}"
    assert "## Exit codes" in text and "JuliaBridgeError" in text


def test_the_cli_reference_follows_a_new_option() -> None:
    """The page is made from the parser, not written by hand: an option added appears."""
    from juliabridge.cli.commands import build_parser

    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            action.choices["verify"].add_argument("--brand-new", help="a planted option")
    text = reference.cli_markdown(parser)
    section = text[text.index("## juliabridge verify\n") :].split("\n## ")[0]
    assert "`--brand-new` `BRAND_NEW`" in section and "a planted option" in section


# --- environment variables ------------------------------------------------------------------


def test_every_variable_the_package_reads_is_documented() -> None:
    from juliabridge.support.environment import RUNTIME, VARIABLES

    documented = {v.name for v in VARIABLES if v.scope == RUNTIME}
    read = reference.runtime_reads()
    assert set(read) - documented == set(), "read by juliabridge/ but not documented"
    assert documented - set(read) == set(), "documented but nothing in juliabridge/ reads it"
    for name in ("JULIABRIDGE_JULIA_ENV", "JULIABRIDGE_JULIA_PROJECT"):
        assert name in documented
    assert "JULIABRIDGE_IN_PROCESS_EXPORT" in documented
    page = reference.environment_markdown()
    for name in documented:
        assert f"| `{name}` |" in page, name


def test_the_development_variables_are_read_where_the_table_says() -> None:
    from juliabridge.support.environment import DEVELOPMENT, VARIABLES

    reads = reference.scan_reads([REPO / "tests", REPO / "tools", REPO / "benchmarks"])
    for var in (v for v in VARIABLES if v.scope == DEVELOPMENT):
        assert var.name in reads, f"{var.name} is documented, but no test or tool reads it"


def test_the_registry_is_one_entry_per_variable_each_said_in_full() -> None:
    from juliabridge.support.environment import DEVELOPMENT, RUNTIME, VARIABLES

    names = [v.name for v in VARIABLES]
    assert len(names) == len(set(names))
    for v in VARIABLES:
        assert re.fullmatch(r"JULIABRIDGE_[A-Z0-9_]+", v.name)
        assert v.scope in (RUNTIME, DEVELOPMENT) and v.default and len(v.effect) > 20


def test_the_scan_finds_reads_through_constants_and_ignores_prose(tmp_path: Path) -> None:
    src = tmp_path / "mod.py"
    src.write_text(
        '"""Set JULIABRIDGE_IN_DOCSTRING=1 to ..."""\n'
        "import os\n"
        '__all__ = ["JULIABRIDGE_EXPORTED"]\n'
        'KEY = "JULIABRIDGE_VIA_CONSTANT"\n'
        "def f():\n"
        '    """JULIABRIDGE_IN_FUNCTION_DOC."""\n'
        '    raise ValueError("set JULIABRIDGE_IN_MESSAGE to 2")\n'
        'a = os.environ.get("JULIABRIDGE_DIRECT", "")\n'
        'b = os.getenv("JULIABRIDGE_GETENV")\n'
        'c = os.environ["JULIABRIDGE_SUBSCRIPT"]\n'
        "d = os.environ.get(KEY)\n",
        encoding="utf-8",
    )
    found = reference.scan_reads([tmp_path], root=tmp_path)
    assert set(found) == {
        "JULIABRIDGE_VIA_CONSTANT",
        "JULIABRIDGE_DIRECT",
        "JULIABRIDGE_GETENV",
        "JULIABRIDGE_SUBSCRIPT",
    }
    assert found["JULIABRIDGE_DIRECT"] == {"mod.py"}


def test_no_environment_read_escapes_the_scan() -> None:
    """No os.environ/os.getenv read in juliabridge/ builds a ``JULIABRIDGE_`` name from pieces
    (the scan sees whole names only: a string constant, or a name bound to one)."""
    for file in sorted((REPO / "juliabridge").rglob("*.py")):
        tree = ast.parse(file.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            key = _environ_key(node)
            if key is None or isinstance(key, ast.Constant | ast.Name | ast.Attribute):
                continue
            built = [
                c.value
                for c in ast.walk(key)
                if isinstance(c, ast.Constant) and "JULIABRIDGE" in str(c.value)
            ]
            assert not built, (
                f"{file.relative_to(REPO)}:{node.lineno}: an environment read whose name "
                f"the scan cannot see ({ast.unparse(key)})"
            )


def _environ_key(node: ast.AST) -> ast.expr | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        owner = ast.unparse(node.func.value)
        if (owner == "os.environ" and node.func.attr == "get") or (
            owner == "os" and node.func.attr == "getenv"
        ):
            return node.args[0]
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
        return node.slice
    return None


# --- the site's pages -----------------------------------------------------------------------


def _toctree_entries() -> set[str]:
    entries: set[str] = set()
    for page in DOCS.rglob("*.md"):
        if "_build" in page.parts:
            continue
        for block in re.findall(
            r"```\{toctree\}\n(.*?)```", page.read_text(encoding="utf-8"), re.S
        ):
            base = page.parent.relative_to(DOCS)
            for line in block.splitlines():
                line = line.strip()
                if line and not line.startswith(":"):
                    entries.add((base / line).as_posix())
    return entries


def test_every_page_is_in_the_site() -> None:
    entries = _toctree_entries()
    pages = {
        p.relative_to(DOCS).with_suffix("").as_posix()
        for p in DOCS.rglob("*.md")
        if "_build" not in p.parts and p.name != "index.md"
    }
    generated = {"reference/api", "reference/cli", "reference/environment"}
    tutorials = {f"tutorials/{p.stem}" for p in (REPO / "tutorials").glob("*.ipynb")}
    assert (pages | generated | tutorials) - entries == set(), "pages no toctree lists"


def test_needs_julia_cells_are_shown_but_not_executed() -> None:
    nb = json.loads((REPO / "tutorials" / "01_export_from_julia.ipynb").read_text("utf-8"))
    out = notebooks.tagged(nb)
    julia = [c for c in nb["cells"] if "needs-julia" in c.get("metadata", {}).get("tags", [])]
    assert julia, "tutorial 01 has no needs-julia cells"
    for before, after in zip(nb["cells"], out["cells"]):
        tags = after.get("metadata", {}).get("tags", [])
        needs = "needs-julia" in before.get("metadata", {}).get("tags", [])
        assert ("skip-execution" in tags) == needs
        assert after["source"] == before["source"]
    assert "skip-execution" not in json.dumps(nb), "tagged() changed its argument"


def test_the_tutorials_use_only_the_public_api() -> None:
    """A tutorial imports juliabridge's public modules only, and uses names they export."""
    public = set(reference.PUBLIC_MODULES)
    for path in sorted((REPO / "tutorials").glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        code = "\n".join(
            "".join(c["source"])
            for c in nb["cells"]
            if c["cell_type"] == "code" and not "".join(c["source"]).startswith("%")
        )
        for module in re.findall(r"^\s*(?:from|import) (juliabridge[\w.]*)", code, re.M):
            assert module in public, f"{path.name} imports the internal module {module}"
        for module, name in re.findall(r"^\s*from (juliabridge[\w.]*) import (\w+)", code, re.M):
            assert name in importlib.import_module(module).__all__, f"{path.name}: {name}"
        top = importlib.import_module("juliabridge").__all__
        for name in re.findall(r"\bjuliabridge\.(\w+)", code):
            assert name in top or f"juliabridge.{name}" in public, f"{path.name}: {name}"
