"""The site's generated reference pages, written from the code at every build.

- ``reference/api.md``: an autodoc entry for every name in the ``__all__`` of every public
  module (`PUBLIC_MODULES`), grouped by what it is for; Sphinx fills each from its docstring.
- ``reference/cli.md``: every command, argument and option of ``juliabridge`` from the argparse
  parser itself (``juliabridge.cli.commands.build_parser``).
- ``reference/environment.md``: every environment variable, from the registry
  ``juliabridge.support.environment`` and an AST scan of where the code reads each.

docs/conf.py calls `write_all` before Sphinx reads the sources; tests/test_docs_reference.py
checks the pages against the code without Sphinx. Nothing here imports Sphinx.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: The modules a user imports; every name in their ``__all__`` gets a reference entry.
PUBLIC_MODULES = (
    "juliabridge",
    "juliabridge.flax",
    "juliabridge.equinox",
    "juliabridge.testing",
    "juliabridge.examples",
)

#: The sections of ``juliabridge``'s entries, in reading order; a name not listed here lands
#: in the last section, so a new public name is never left out.
TOP_LEVEL_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Importing a model",
        ("import_lux", "load_mlir", "load_reactant_export", "LuxModel", "ImportedFunction"),
    ),
    ("Checking a bundle", ("verify", "VerifyReport")),
    ("Parameters and state", ("save_params", "load_params", "load_into")),
    ("Taking a model out", ("export_jax", "save_jax", "export_onnx", "save_onnx")),
    ("Exporting from Julia", ("export_lux",)),
    ("Version", ("__version__",)),
)

_VAR = re.compile(r"JULIABRIDGE_[A-Z0-9_]+")


def public_names() -> Iterator[tuple[str, str]]:
    """Every public name, as (module, name), in the order of `PUBLIC_MODULES` and ``__all__``.

    Returns:
        An iterator of (module name, attribute name).

    Raises:
        ImportError: a public module does not import (its extra is not installed).
    """
    for module in PUBLIC_MODULES:
        for name in importlib.import_module(module).__all__:
            yield module, name


def _directive(module: str, name: str) -> str:
    obj = getattr(importlib.import_module(module), name)
    target = f"{module}.{name}"
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        return f".. autoexception:: {target}\n   :show-inheritance:\n"
    if inspect.isclass(obj):
        return f".. autoclass:: {target}\n   :members:\n   :show-inheritance:\n"
    if callable(obj):
        return f".. autofunction:: {target}\n"
    # A constant has no docstring of its own (autodoc would show its type's): its ``#:``
    # comment where it is assigned is its documentation.
    body = "\n".join("   " + line for line in _data_doc(module, name).splitlines())
    return f".. py:data:: {target}\n   :value: {obj!r}\n\n{body}\n"


def _data_doc(module: str, name: str) -> str:
    """The ``#:`` comment above `name`'s assignment in the module that defines it."""
    obj = getattr(importlib.import_module(module), name)
    for mod in [importlib.import_module(module), *_submodules(module)]:
        if getattr(mod, name, _MISSING) is not obj or not getattr(mod, "__file__", None):
            continue
        lines = Path(mod.__file__).read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if re.match(rf"{re.escape(name)}\s*[:=]", line):
                doc = []
                for prev in reversed(lines[:i]):
                    if not prev.startswith("#:"):
                        break
                    doc.insert(0, prev[2:].strip())
                if doc:
                    return " ".join(doc)
    return f"`{module}.{name}`."


_MISSING = object()


def _submodules(package: str) -> list[object]:
    import sys

    return [m for k, m in sorted(sys.modules.items()) if k.startswith(package + ".")]


def _rst_block(entries: Iterable[tuple[str, str]]) -> str:
    body = "\n".join(_directive(m, n) for m, n in entries)
    return "```{eval-rst}\n" + body + "```\n"


def api_markdown() -> str:
    """The API reference page.

    Returns:
        Markdown (MyST) with one autodoc directive per public name.

    Raises:
        ImportError: a public module does not import.
    """
    out = [
        "# API reference\n",
        "Generated at every build from the docstrings of every name in the `__all__` of "
        + ", ".join(f"`{m}`" for m in PUBLIC_MODULES)
        + " (docs/_ext/reference.py). Everything else under `juliabridge.` is internal and "
        "may change.\n",
    ]
    top = importlib.import_module("juliabridge").__all__
    errors = [n for n in top if n.endswith(("Error", "Unavailable"))]
    placed = {n for _, names in TOP_LEVEL_GROUPS for n in names} | set(errors)
    out.append("## `juliabridge`\n")
    for title, names in TOP_LEVEL_GROUPS:
        present = [n for n in names if n in top]
        if present:
            out.append(f"### {title}\n")
            out.append(_rst_block(("juliabridge", n) for n in present))
    out.append("### Errors\n")
    out.append(
        "Every error juliabridge raises is a `JuliaBridgeError`; the command line's exit code "
        "for each is in the [CLI reference](cli.md#exit-codes).\n"
    )
    root = [n for n in errors if n == "JuliaBridgeError"]
    out.append(_rst_block(("juliabridge", n) for n in root + sorted(set(errors) - set(root))))
    rest = [n for n in top if n not in placed]
    if rest:
        out.append("### Other names\n")
        out.append(_rst_block(("juliabridge", n) for n in rest))
    for module in PUBLIC_MODULES[1:]:
        mod = importlib.import_module(module)
        out.append(f"## `{module}`\n")
        first = (inspect.getdoc(mod) or "").split("\n\n")[0].replace("\n", " ")
        if first:
            out.append(_md_escape(first) + "\n")
        out.append(_rst_block((module, n) for n in mod.__all__))
    return "\n".join(out)


# --- the command line -----------------------------------------------------------------------


def _md_escape(text: str) -> str:
    return re.sub(r"([\\`*_\[\]<>|#])", r"\\\1", text)


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices.items())
    return []


def _subcommand_help(parser: argparse.ArgumentParser) -> dict[str, str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {a.dest: a.help or "" for a in action._choices_actions}
    return {}


def _option_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| argument | default | what it does |", "| --- | --- | --- |"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.option_strings:
            names = ", ".join(f"`{s}`" for s in action.option_strings)
            if action.nargs != 0:
                metavar = action.metavar or action.dest.upper()
                names += f" `{metavar}`"
        else:
            names = f"`{action.metavar or action.dest}`"
        if action.choices is not None:
            names += " (" + ", ".join(f"`{c}`" for c in action.choices) + ")"
        if action.nargs == 0 or action.default in (None, argparse.SUPPRESS):
            default = ""
        else:
            default = f"`{action.default}`"
        if action.required and action.option_strings:
            default = "required"
        extra = " Repeatable." if isinstance(action, argparse._AppendAction) else ""
        help_text = _md_escape(" ".join((action.help or "").split())) + extra
        rows.append(f"| {names} | {default} | {help_text} |")
    return rows


def cli_markdown(parser: argparse.ArgumentParser | None = None) -> str:
    """The CLI reference page, from the ``juliabridge`` argument parser.

    Args:
        parser: the parser to describe (default: ``juliabridge.cli.commands.build_parser()``).

    Returns:
        Markdown: the usage, every subcommand with its arguments, and the exit codes.
    """
    if parser is None:
        from juliabridge.cli.commands import build_parser

        parser = build_parser()
    helps = _subcommand_help(parser)
    out = [
        "# Command-line reference\n",
        "Generated at every build from the `juliabridge` command's argument parser "
        "(`juliabridge.cli.commands.build_parser`; docs/_ext/reference.py). "
        "`python -m juliabridge` is the same command.\n",
        "```text\n" + parser.format_usage().strip() + "\n```\n",
        "| command | what it does |",
        "| --- | --- |",
    ]
    for name, _ in _subcommands(parser):
        out.append(f"| [`{name}`](#juliabridge-{name}) | {_md_escape(helps.get(name, ''))} |")
    out.append("")
    out.append("Options of `juliabridge` itself:\n")
    out.extend(_option_rows(parser))
    out.append("")
    for name, sub in _subcommands(parser):
        out.append(f"## juliabridge {name}\n")
        text = sub.description or helps.get(name, "")
        out.append("\n\n".join(_md_escape(" ".join(p.split())) for p in text.split("\n\n")))
        out.append("")
        out.append("```text\n" + sub.format_usage().strip() + "\n```\n")
        out.extend(_option_rows(sub))
        out.append("")
    out.append("## Exit codes\n")
    out.append(
        "One per error class (`juliabridge/support/exitcodes.py`); errors, usage errors "
        "included, are one line on stderr (`juliabridge <command>: error: <message>`), and "
        "`JULIABRIDGE_DEBUG=1` adds the traceback "
        "([environment variables](environment.md)).\n"
    )
    from juliabridge.support.exitcodes import table_markdown

    out.append(table_markdown() + "\n")
    return "\n".join(out)


# --- environment variables ------------------------------------------------------------------


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _all_lists(tree: ast.AST) -> set[int]:
    """The string constants inside ``__all__ = [...]`` (names exported, not variables)."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            ids |= {id(c) for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
    return ids


def scan_reads(paths: Iterable[Path], root: Path = REPO) -> dict[str, set[str]]:
    """Which ``JULIABRIDGE_*`` environment variables code reads, and where.

    A variable counts as read where its whole name is a string constant in code (the argument
    of ``os.environ.get``/``os.getenv``/``os.environ[...]``, or a constant a module keeps for
    them, e.g. ``WORKER_ENV = "JULIABRIDGE_HDF5_WORKER"``); names in docstrings, messages and
    ``__all__`` do not count.

    Args:
        paths: Python files or directories (searched for ``*.py``).
        root: the paths in the result are relative to it.

    Returns:
        Variable name -> the files (relative, POSIX) that name it.

    Raises:
        SyntaxError: a file does not parse.
    """
    found: dict[str, set[str]] = {}
    for path in paths:
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            tree = ast.parse(file.read_text(encoding="utf-8"), str(file))
            skip = _docstring_nodes(tree) | _all_lists(tree)
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and id(node) not in skip
                    and _VAR.fullmatch(node.value)
                ):
                    found.setdefault(node.value, set()).add(file.relative_to(root).as_posix())
    return found


#: Constants spelled like variables that are not environment variables.
NOT_VARIABLES = frozenset({"JULIABRIDGE_UUID"})


def runtime_reads() -> dict[str, set[str]]:
    """The variables the juliabridge package reads (`scan_reads` of ``juliabridge/``).

    Returns:
        Variable name -> the package files that read it.
    """
    reads = scan_reads([REPO / "juliabridge"])
    registry = "juliabridge/support/environment.py"  # describes the variables, reads none
    return {
        k: files - {registry}
        for k, files in reads.items()
        if k not in NOT_VARIABLES and files - {registry}
    }


def environment_markdown() -> str:
    """The environment-variable page, from the registry and the scan.

    Returns:
        Markdown: one table for the package's variables, one for a checkout's tests and tools.
    """
    from juliabridge.support.environment import DEVELOPMENT, RUNTIME, VARIABLES

    reads = runtime_reads()
    dev_reads = scan_reads([REPO / "tests", REPO / "tools", REPO / "benchmarks"])
    out = [
        "# Environment variables\n",
        "Generated at every build from `juliabridge.support.environment` (what each does) and a "
        "scan of the code (where each is read; docs/_ext/reference.py). A test fails when the "
        "code reads a `JULIABRIDGE_*` variable this page lacks.\n",
    ]
    for scope, title, where in (
        (RUNTIME, "Read by juliabridge", reads),
        (DEVELOPMENT, "Read by the tests and tools of a checkout", dev_reads),
    ):
        out.append(f"## {title}\n")
        out.append("| variable | when unset | what setting it does | read in |")
        out.append("| --- | --- | --- | --- |")
        for var in (v for v in VARIABLES if v.scope == scope):
            files = ", ".join(f"`{f}`" for f in sorted(where.get(var.name, ())))
            effect = var.effect.replace("|", "\\|")
            out.append(f"| `{var.name}` | {var.default} | {effect} | {files} |")
        out.append("")
    return "\n".join(out)


def write_all(docs: Path) -> list[Path]:
    """Write the generated pages under ``docs/reference/`` (only those whose text changed).

    Args:
        docs: the site's source directory.

    Returns:
        The pages written.
    """
    pages = {
        "api.md": api_markdown(),
        "cli.md": cli_markdown(),
        "environment.md": environment_markdown(),
    }
    target = docs / "reference"
    target.mkdir(exist_ok=True)
    written = []
    for name, text in pages.items():
        path = target / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written
