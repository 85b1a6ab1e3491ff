"""The realistic mutants (tools/realistic_mutants/*.toml) parse and still apply to the code.

The full run of tools/realistic_mutants.py takes far longer than CI gives a test file, so it
stays out of the default run (docs/mutation-testing.md has its figures and command); this keeps
the mutant lists from going stale as the code changes: every `old` snippet must occur exactly
once in its module, and every test file a group names must exist.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location(
        "realistic_mutants", ROOT / "tools" / "realistic_mutants.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


TOOL = _tool()
GROUPS = TOOL.load_groups()


def test_every_group_file_parses_with_at_least_five_mutants():
    files = sorted((ROOT / "tools" / "realistic_mutants").glob("*.toml"))
    assert [g.source for g in GROUPS] == files
    for g in GROUPS:
        assert len(g.mutants) >= 5, f"{g.source.name}: {len(g.mutants)} mutants"


@pytest.mark.parametrize("mutant", [m for g in GROUPS for m in g.mutants], ids=lambda m: m.id)
def test_every_mutant_still_applies(mutant):
    assert TOOL.stale(mutant) is None
    assert mutant.old in (ROOT / mutant.path).read_text(encoding="utf-8")


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g.source.stem)
def test_every_named_test_file_exists(group):
    assert TOOL.missing_tests(group) == []


def test_a_stale_or_malformed_mutant_is_reported(tmp_path):
    m = GROUPS[0].mutants[0]
    moved = TOOL.Mutant(m.id, m.path, m.kind, m.description, m.old + "\n#gone", m.new, (), "g")
    assert "occurs 0 times" in TOOL.stale(moved)
    (tmp_path / "bad.toml").write_text('group = "x"\ntests = ["a"]\n[[mutant]]\nid = "y"\n')
    with pytest.raises(TOOL.MutantFileError, match="lacks path, kind, description, old, new"):
        TOOL.load_groups(tmp_path)
    (tmp_path / "bad.toml").write_text(
        'group = "x"\ntests = ["a"]\n[[mutant]]\nid = "y"\npath = "p"\nkind = "typo"\n'
        'description = "d"\nold = "a"\nnew = "b"\n'
    )
    with pytest.raises(TOOL.MutantFileError, match="has kind 'typo'"):
        TOOL.load_groups(tmp_path)


def test_the_check_mode_fails_on_a_stale_mutant(monkeypatch, tmp_path, capsys):
    m = GROUPS[0].mutants[0]
    (tmp_path / "g.toml").write_text(
        f'group = "g"\ntests = ["tests/test_realistic_mutants.py"]\n[[mutant]]\nid = "z"\n'
        f'path = "{m.path}"\nkind = "off-by-one"\ndescription = "d"\n'
        'old = "no such text in the module"\nnew = "b"\n'
    )
    monkeypatch.setattr(TOOL, "MUTANTS", tmp_path)
    monkeypatch.setattr(TOOL.load_groups, "__defaults__", (tmp_path,))
    assert TOOL.main(["--stale"]) == 1
    assert TOOL.main(["--check"]) == 1
    assert "STALE z: its `old` snippet occurs 0 times" in capsys.readouterr().out


def test_an_equivalent_mutant_is_listed_with_its_reason_and_left_out_of_the_score(tmp_path):
    body = 'path = "p"\nkind = "off-by-one"\ndescription = "d"\nold = "a"\nnew = "b"\n'
    (tmp_path / "g.toml").write_text(
        f'group = "g"\ntests = ["t"]\n[[mutant]]\nid = "x"\n{body}'
        f'[[mutant]]\nid = "y"\nequivalent = "no input tells it apart"\n{body}'
    )
    (group,) = TOOL.load_groups(tmp_path)
    assert [(m.id, m.equivalent) for m in group.mutants] == [
        ("x", ""),
        ("y", "no input tells it apart"),
    ]
    results = [
        {"id": "x", "group": "g", "verdict": "killed"},
        {"id": "y", "group": "g", "verdict": "survived"},
    ]
    s = TOOL.summarize([group], results, {})["g"]
    assert (s["killed"], s["total"], s["score"], s["equivalent"]) == (1, 1, 1.0, ["y"])
    (tmp_path / "g.toml").write_text(
        f'group = "g"\ntests = ["t"]\n[[mutant]]\nid = "y"\nequivalent = ""\n{body}'
    )
    with pytest.raises(TOOL.MutantFileError, match="`equivalent` must be the reason"):
        TOOL.load_groups(tmp_path)


def test_the_help_text_renders(capsys):
    with pytest.raises(SystemExit) as e:
        TOOL.main(["--help"])
    assert e.value.code == 0
    assert "exit 1 below 90% or stale" in " ".join(capsys.readouterr().out.split())
