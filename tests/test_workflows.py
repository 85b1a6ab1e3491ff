"""The hosted workflows (.github/workflows): what they run, and that the static checkers pass.

The rules checked here in Python (every action pinned by a full commit SHA, least permissions,
no persisted credentials, a timeout on every job, the matrices and commands the README and
issue 48 name) need nothing installed. The checkers .ci/run installs (zizmor, check-jsonschema's
workflow schema, actionlint where it installs) run too where they are found
(``$JULIABRIDGE_WORKFLOW_TOOLS`` or PATH) and are skipped with the reason elsewhere; each must
also reject a planted broken workflow, so a checker that passes everything is caught.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="needs PyYAML to read the workflows")

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / ".github" / "workflows"
README_TEST_COMMAND = "python -m pytest -q -rs -n 2 --dist loadfile"
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")

BROKEN = """\
name: broken
on: [push]
jobs:
  t:
    runs_on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - run: echo "${{ github.event.head_commit.message }}"
"""


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    # PyYAML reads the key `on` as True (YAML 1.1); the rules below do not need it.
    assert isinstance(data, dict), f"{path} is not a mapping"
    return data


def problems(path: Path) -> list[str]:
    """Every rule `path` breaks, as `file: what` lines (empty when it keeps them all)."""
    name = path.name
    data = load(path)
    found = []
    if data.get("permissions") != {"contents": "read"}:
        found.append(f"{name}: top-level permissions must be exactly contents: read")
    jobs = data.get("jobs")
    if not isinstance(jobs, dict) or not jobs:
        return [*found, f"{name}: no jobs"]
    for job_name, job in jobs.items():
        where = f"{name}: job {job_name}"
        if "permissions" in job:
            found.append(f"{where}: widens permissions")
        if not isinstance(job.get("timeout-minutes"), int):
            found.append(f"{where}: has no timeout-minutes")
        if "runs-on" not in job:
            found.append(f"{where}: has no runs-on")
        for step in job.get("steps", []):
            uses = step.get("uses")
            if uses is None:
                continue
            if not PINNED.match(uses):
                found.append(f"{where}: {uses} is not pinned by a full commit SHA")
            if uses.startswith("actions/checkout@") and (
                (step.get("with") or {}).get("persist-credentials") is not False
            ):
                found.append(f"{where}: checkout without persist-credentials: false")
    return found


def workflow_files() -> list[Path]:
    return sorted(WORKFLOWS.glob("*.yml")) + sorted(WORKFLOWS.glob("*.yaml"))


def test_there_are_workflows_and_each_keeps_the_rules() -> None:
    files = workflow_files()
    assert {f.name for f in files} >= {"python.yml", "julia.yml"}
    assert [p for f in files for p in problems(f)] == []


def test_pins_name_the_release_they_are() -> None:
    """A SHA alone says nothing to a reader: each pin carries its release tag as a comment."""
    for f in workflow_files():
        for line in f.read_text(encoding="utf-8").splitlines():
            if "uses:" in line:
                assert re.search(r"@[0-9a-f]{40} # v\d+(\.\d+)*$", line), f"{f.name}: {line}"


def test_the_rules_catch_a_planted_broken_workflow(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(BROKEN)
    found = problems(bad)
    assert "bad.yml: top-level permissions must be exactly contents: read" in found
    assert "bad.yml: job t: has no timeout-minutes" in found
    assert "bad.yml: job t: has no runs-on" in found
    assert "bad.yml: job t: actions/checkout@v4 is not pinned by a full commit SHA" in found
    assert "bad.yml: job t: checkout without persist-credentials: false" in found
    # A pin that looks right but is cut short (a 39-digit "SHA") is refused too.
    good = (WORKFLOWS / "python.yml").read_text(encoding="utf-8")
    short = re.sub(r"(checkout@[0-9a-f]{39})[0-9a-f]", r"\1", good, count=1)
    (tmp_path / "short.yml").write_text(short)
    assert any("not pinned" in p for p in problems(tmp_path / "short.yml"))


def steps_text(path: Path) -> str:
    return "\n".join(
        str(step.get("run", "")) for job in load(path)["jobs"].values() for step in job["steps"]
    )


def test_python_workflow_runs_the_readme_command_on_each_python_and_os() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert README_TEST_COMMAND in readme
    data = load(WORKFLOWS / "python.yml")
    (job,) = data["jobs"].values()
    matrix = job["strategy"]["matrix"]
    assert matrix["python"] == ["3.11", "3.12", "3.13"]
    assert any(o.startswith("ubuntu") for o in matrix["os"])
    # macOS 14 and later runners are arm64.
    assert any(re.fullmatch(r"macos-(1[4-9]|latest)", o) for o in matrix["os"])
    assert README_TEST_COMMAND.removeprefix("python ") in steps_text(WORKFLOWS / "python.yml")
    assert "pip install -e '.[dev,mutation]'" in steps_text(WORKFLOWS / "python.yml")
    assert "pip install -e '.[dev,mutation]'" in readme


def test_julia_workflow_runs_pkg_test_then_the_end_to_end_tests() -> None:
    data = load(WORKFLOWS / "julia.yml")
    (job,) = data["jobs"].values()
    matrix = job["strategy"]["matrix"]
    assert matrix["julia"] == ["1.10", "1.11", "1.12"]
    assert any(o.startswith("ubuntu") for o in matrix["os"])
    assert any(re.fullmatch(r"macos-(1[4-9]|latest)", o) for o in matrix["os"])
    runs = [str(s.get("run", "")) for s in job["steps"]]
    pkg = next(i for i, r in enumerate(runs) if "Pkg.test()" in r)
    e2e = next(i for i, r in enumerate(runs) if "tests/test_e2e_julia.py" in r)
    assert pkg < e2e
    assert "--project=julia" in runs[pkg] and "Pkg.instantiate()" in runs[pkg]
    env = job["steps"][e2e]["env"]
    # "require": a runner whose Julia went missing fails instead of skipping everything.
    assert env["JULIABRIDGE_JULIA_TESTS"] == "require"
    assert (REPO / "tests" / "test_e2e_julia.py").is_file()


# -- the checkers .ci/run installs ---------------------------------------------------------------


def tool(name: str) -> str:
    """The checker `name` from $JULIABRIDGE_WORKFLOW_TOOLS or PATH, or a skip saying why."""
    folder = os.environ.get("JULIABRIDGE_WORKFLOW_TOOLS")
    found = shutil.which(name, path=folder) if folder else None
    found = found or shutil.which(name)
    if found is None:
        pytest.skip(
            f"{name} is not installed (.ci/run installs it into its workflows venv and sets "
            "JULIABRIDGE_WORKFLOW_TOOLS; or pip install it)"
        )
    return found


CHECKERS = {
    "zizmor": lambda exe, files: [exe, "--offline", "--no-progress", *files],
    "check-jsonschema": lambda exe, files: [
        exe,
        "--builtin-schema",
        "vendor.github-workflows",
        *files,
    ],
    "actionlint": lambda exe, files: [exe, *files],
}


def run_checker(name: str, files: list[Path]) -> subprocess.CompletedProcess[str]:
    argv = CHECKERS[name](tool(name), [str(f) for f in files])
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO)


@pytest.mark.parametrize("name", sorted(CHECKERS))
def test_checker_passes_the_workflows_and_rejects_a_broken_one(name: str, tmp_path: Path) -> None:
    ok = run_checker(name, workflow_files())
    assert ok.returncode == 0, ok.stdout + ok.stderr
    broken_dir = tmp_path / ".github" / "workflows"
    broken_dir.mkdir(parents=True)
    (broken_dir / "broken.yml").write_text(BROKEN)
    bad = run_checker(name, [broken_dir / "broken.yml"])
    assert bad.returncode != 0, f"{name} passed a broken workflow:\n{bad.stdout}{bad.stderr}"


def test_ci_run_checks_the_workflows_after_the_julia_lint() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    names = ci.index('"$A" tools/check_julia_names.py')
    stage = ci.index('echo "== workflows')
    assert names < stage < ci.index("== pytest")
    block = ci[stage : ci.index("\nfi\n", stage)]
    assert '"$ENVS/workflows/bin/zizmor" --offline --no-progress .github/workflows' in block
    assert "--builtin-schema vendor.github-workflows .github/workflows/*.yml" in block
    assert '"$ENVS/workflows/bin/actionlint" .github/workflows/*.yml' in block
    assert "export JULIABRIDGE_WORKFLOW_TOOLS" in block  # so this file's checker tests run
