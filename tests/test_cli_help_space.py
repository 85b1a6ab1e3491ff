"""Every option of every `juliabridge` command explains itself in that command's `--help`.

Generated over the parser itself (each subcommand, each argument), checked against the text
`juliabridge COMMAND --help` prints: every argument has a help text and it is printed; a default
a help text names is the default the option has; an option whose help describes its choices as
``CHOICE: what it does`` clauses describes every choice that way, once, and marks the one it
takes by default.
"""

from __future__ import annotations

import argparse
import re

import pytest

from juliabridge.cli import commands as cli
from juliabridge.support.exitcodes import OK


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _arguments() -> list[tuple[str, str]]:
    return [
        (name, action.dest)
        for name, p in _commands().items()
        for action in p._actions
        if not isinstance(action, argparse._HelpAction)
    ]


#: (command, argument) pairs; each test builds the parser again (in the test, not at
#: collection: mutation testing counts only what a test itself runs).
ARGUMENTS = [pytest.param(c, d, id=f"{c}:{d}") for c, d in _arguments()]


def _action(command: str, dest: str) -> argparse.Action:
    (action,) = (a for a in _commands()[command]._actions if a.dest == dest)
    return action


def _words(text: str) -> str:
    return " ".join(text.split())


def _help_of(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main([command, "--help"]) == OK
    return _words(capsys.readouterr().out)


def test_every_command_is_covered() -> None:
    assert {"inspect", "verify", "vjp", "convert", "export-jax", "upgrade"} <= set(_commands())


@pytest.mark.parametrize(("command", "dest"), ARGUMENTS)
def test_every_argument_has_a_help_text_printed_by_its_command_s_help(
    command: str, dest: str, capsys: pytest.CaptureFixture[str]
) -> None:
    action = _action(command, dest)
    text = _words(action.help or "")
    assert len(text) >= 8, f"{command} {action.option_strings or action.dest}: no help text"
    out = _help_of(command, capsys)
    assert text in out
    for flag in action.option_strings:
        assert flag in out


@pytest.mark.parametrize(("command", "dest"), ARGUMENTS)
def test_a_default_a_help_text_names_is_the_option_s_default(command: str, dest: str) -> None:
    action = _action(command, dest)
    text = _words(action.help or "")
    named = re.findall(r"\(?default:? ([\w.-]+)[,);]", text)
    if action.default is None or isinstance(action.default, bool) or not named:
        return
    assert named == [str(action.default)], (command, action.option_strings, text)


@pytest.mark.parametrize(("command", "dest"), ARGUMENTS)
def test_choices_described_one_by_one_are_all_described_and_the_default_marked(
    command: str, dest: str
) -> None:
    action = _action(command, dest)
    if not action.choices:
        return
    clauses = _words(action.help or "").split("; ")
    choices = [str(c) for c in action.choices]
    if not any(c.startswith(f"{choice}: ") for c in clauses for choice in choices):
        return  # described another way (a list, or one phrase for all)
    leading = [c.split(":", 1)[0] for c in clauses]
    assert sorted(leading) == sorted(choices), (command, action.option_strings, clauses)
    marked = [c.split(":", 1)[0] for c in clauses if "(default)" in c]
    assert marked == [str(action.default)], (command, action.option_strings, clauses)
