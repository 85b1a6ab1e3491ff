"""juliaup.json in the user's depot, of every JSON shape and file type (issue 50): a malformed
record is a JuliaUnavailable naming it, from find_julia and from export_script, fast; a valid
one still finds its Julia."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from juliabridge.driver.juliaup import MAX_JULIAUP_JSON, juliaup_executables
from juliabridge.driver.process import export_script, find_julia
from juliabridge.errors import JuliaUnavailable
from tests.test_julia_driver import FAST, fake_julia, no_julia, posix_only

__all__ = ["no_julia"]  # the fixture, used by name

V = "1.11.5+0.x64.linux.gnu"
SHAPES: list[tuple[str, Any, str]] = [
    ("top list", [], "the top level is a list"),
    ("top string", "juliaup", "the top level is a str"),
    ("top number", 3, "the top level is a int"),
    ("top null", None, "the top level is a NoneType"),
    ("versions list", {"InstalledVersions": [V]}, "InstalledVersions is a list"),
    ("versions string", {"InstalledVersions": V}, "InstalledVersions is a str"),
    ("versions null", {"InstalledVersions": None}, "InstalledVersions is a NoneType"),
    ("entry number", {"InstalledVersions": {V: 1}}, f"version {V!r} is a int"),
    ("entry list", {"InstalledVersions": {V: ["Path"]}}, f"version {V!r} is a list"),
    ("entry string", {"InstalledVersions": {V: "julia-1.11"}}, f"version {V!r} is a str"),
    ("entry empty", {"InstalledVersions": {V: {}}}, "has neither Path nor BinaryPath"),
    ("path number", {"InstalledVersions": {V: {"Path": 3}}}, f"{V}.Path is '3'"),
    ("path null", {"InstalledVersions": {V: {"Path": None}}}, f"{V}.Path is 'None'"),
    ("path list", {"InstalledVersions": {V: {"Path": ["a"]}}}, f"{V}.Path is"),
    ("path empty", {"InstalledVersions": {V: {"Path": ""}}}, f"{V}.Path is ''"),
    ("path nul", {"InstalledVersions": {V: {"Path": "a\x00b"}}}, f"{V}.Path is"),
    ("binary object", {"InstalledVersions": {V: {"BinaryPath": {"a": 1}}}}, "BinaryPath is"),
]


def _meta(tmp_path: Path) -> Path:
    meta = tmp_path / "juliaup-depot" / "juliaup" / "juliaup.json"
    meta.parent.mkdir(parents=True, exist_ok=True)
    return meta


def _refused(match: str) -> None:
    t0 = time.monotonic()
    with pytest.raises(JuliaUnavailable, match=match) as e:
        find_julia()
    assert time.monotonic() - t0 < FAST
    assert "juliaup.json: juliaup's record of installed Julia versions is malformed" in str(e.value)
    assert "PYTHON_JULIAPKG_EXE" in str(e.value)


@pytest.mark.parametrize(("what", "doc", "found"), SHAPES, ids=[s[0] for s in SHAPES])
def test_each_malformed_shape_is_julia_unavailable(
    no_julia: Path, tmp_path: Path, what: str, doc: Any, found: str
) -> None:
    _meta(tmp_path).write_text(json.dumps(doc))
    _refused(re.escape(found))


@pytest.mark.parametrize(
    ("data", "found"),
    [
        (b"{", "not JSON: JSONDecodeError"),
        (b"\xff\xfe{}", "not JSON: UnicodeDecodeError"),
        (b"[" * 200_000 + b"]" * 200_000, "not JSON: RecursionError"),
        (b'{"InstalledVersions": {"' + b"9" * 100_000 + b'": {"Path": "x"}}}', None),
    ],
    ids=["truncated", "not utf-8", "deep", "huge version number"],
)
def test_bytes_that_are_not_juliaups_json(
    no_julia: Path, tmp_path: Path, data: bytes, found: str | None
) -> None:
    _meta(tmp_path).write_bytes(data)
    if found is None:  # valid shape: the version number's digits are not converted whole
        assert juliaup_executables()[0].endswith(os.path.join("x", "bin", "julia"))
        return
    _refused(re.escape(found))


def test_a_file_larger_than_the_limit_is_refused_unread(no_julia: Path, tmp_path: Path) -> None:
    with open(_meta(tmp_path), "wb") as f:
        f.truncate(MAX_JULIAUP_JSON + 1)
    _refused(f"{MAX_JULIAUP_JSON + 1} bytes, more than {MAX_JULIAUP_JSON}")


@posix_only
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_special_file_is_refused_without_blocking(
    no_julia: Path, tmp_path: Path, kind: str
) -> None:
    meta = _meta(tmp_path)
    if kind == "fifo":
        os.mkfifo(meta)
    else:
        meta.mkdir()
    _refused("not a regular file")


def test_export_script_says_julia_unavailable(no_julia: Path, tmp_path: Path) -> None:
    _meta(tmp_path).write_text(json.dumps({"InstalledVersions": {V: 1}}))
    script = tmp_path / "m.jl"
    script.write_text("model = nothing\n")
    with pytest.raises(JuliaUnavailable, match="malformed"):
        export_script(script, tmp_path / "out.bundle")


def test_no_file_means_no_juliaup_versions(no_julia: Path) -> None:
    assert juliaup_executables() == []


@posix_only
def test_versions_are_tried_newest_first(no_julia: Path, tmp_path: Path) -> None:
    meta = _meta(tmp_path)
    old = fake_julia(meta.parent / "old" / "bin" / "julia", "1.10.2")
    new = fake_julia(meta.parent / "new" / "bin" / "julia", "1.11.5")
    doc = {"InstalledVersions": {"1.10.2+0": {"Path": "old"}, "1.11.5+0": {"Path": "new"}}}
    meta.write_text(json.dumps(doc))
    assert juliaup_executables() == [str(new), str(old)]
    assert find_julia().executable == str(new)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    doc=st.one_of(
        JSON,
        st.dictionaries(st.just("InstalledVersions"), JSON, min_size=1),
        st.builds(
            lambda v, e: {"InstalledVersions": {v: e}},
            st.text(max_size=12),
            st.one_of(JSON, st.dictionaries(st.sampled_from(["Path", "BinaryPath"]), JSON)),
        ),
    )
)
def test_fuzz_juliaup_json_any_shape_is_a_list_or_julia_unavailable(
    doc: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The driver family of the hostile battery: any JSON value in juliaup.json gives the
    executables (strings) or a JuliaUnavailable, never another exception."""
    depot = tmp_path_factory.mktemp("juliaup-depot")
    meta = depot / "juliaup" / "juliaup.json"
    meta.parent.mkdir()
    meta.write_text(json.dumps(doc))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JULIAUP_DEPOT_PATH", str(depot))
        try:
            found = juliaup_executables()
        except JuliaUnavailable as e:
            assert "juliaup.json" in str(e)
        else:
            assert all(isinstance(p, str) and p for p in found)
