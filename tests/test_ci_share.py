"""JULIABRIDGE_TEST_SHARE (tests/ci_share.py): its parsing, the skips it makes, and the fuzz
battery's split into samples that together hold as many cases as one whole run."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import test_fuzz
from tests.benchmark_runs import BENCHMARKS, RUNS, SHARE_OF
from tests.ci_share import SHARE_VARIABLE, ShareError, parse_share, share, skip_unless_mine


@given(n=st.integers(1, 50), data=st.data())
def test_k_of_n_is_read_back(n: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(1, n))
    assert parse_share(f"{k}/{n}") == (k, n)
    assert parse_share(f" {k} / {n} ") == (k, n)


@pytest.mark.parametrize("text", ["", "  "])
def test_unset_is_the_whole(text: str) -> None:
    assert parse_share(text) == (1, 1)


@pytest.mark.parametrize("text", ["0/2", "3/2", "1/0", "2", "1/2/3", "a/b", "-1/2", "1.5/2"])
def test_a_malformed_share_is_a_usage_error_naming_the_variable(text: str) -> None:
    with pytest.raises(ShareError) as e:
        parse_share(text)
    assert str(e.value).startswith(f"{SHARE_VARIABLE}={text!r}: expected k/n with 1 <= k <= n")
    assert isinstance(e.value, pytest.UsageError)


def _owners_run(k: int, n: int, owners: range, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    monkeypatch.setenv(SHARE_VARIABLE, f"{k}/{n}")
    ran = []
    for owner in owners:
        try:
            skip_unless_mine(owner, f"case {owner}")
        except pytest.skip.Exception as e:
            assert f"case {owner} runs in share {(owner - 1) % n + 1}/{n}" in str(e)
            assert f"{SHARE_VARIABLE}={k}/{n} here" in str(e)
            continue
        ran.append(owner)
    return ran


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_every_owner_runs_in_exactly_one_share(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    owners = range(1, 12)
    runs = [_owners_run(k, n, owners, monkeypatch) for k in range(1, n + 1)]
    assert sorted(o for ran in runs for o in ran) == list(owners)
    assert runs[0][0] == 1  # owner k runs in share k
    if n > 1:
        assert 2 in runs[1]


def test_unset_runs_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SHARE_VARIABLE, raising=False)
    assert share() == (1, 1)
    for owner in (1, 2, 3):
        skip_unless_mine(owner, "anything")  # no skip


def test_each_benchmark_script_runs_in_one_of_two_shares() -> None:
    assert sorted(SHARE_OF) == sorted(RUNS)
    assert set(SHARE_OF.values()) == {1, 2}


@pytest.mark.parametrize("script", sorted(RUNS))
def test_a_script_whose_tiny_run_has_enzyme_rows_runs_in_share_1(script: str) -> None:
    # Share 1 is CI's environment A, the only one with enzyme-ad: a script whose tiny run
    # would time the enzyme backend (a "enzyme" backend row, not narrowed by --backends)
    # runs there, or those rows run nowhere.
    source = (BENCHMARKS / script).read_text(encoding="utf-8")
    if '"enzyme"' in source and "--backends" not in RUNS[script].args:
        assert SHARE_OF[script] == 1, script


@pytest.mark.parametrize("n", [2, 3])
def test_fuzz_shares_together_hold_a_whole_run_in_separate_samples(
    n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SHARE_VARIABLE, raising=False)
    whole = {key: test_fuzz.split_cases(*key) for key in test_fuzz.COUNTS}
    assert all(offset is None for _, offset in whole.values())
    parts = []
    for k in range(1, n + 1):
        monkeypatch.setenv(SHARE_VARIABLE, f"{k}/{n}")
        parts.append({key: test_fuzz.split_cases(*key) for key in test_fuzz.COUNTS})
    for key, (count, _) in whole.items():
        got = [part[key] for part in parts]
        if key[1] == "enzyme" or count == 0:
            # only one environment has enzyme-ad: it runs all of them, derandomized
            assert got == [(count, None)] * n, key
            continue
        assert count <= sum(c for c, _ in got) <= count + n - 1, (key, got)
        offsets = [offset for _, offset in got]
        assert None not in offsets and len(set(offsets)) == n, (key, offsets)
