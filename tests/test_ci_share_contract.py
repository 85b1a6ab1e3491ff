"""tests/ci_share.py's split as a contract over every k/n (issue 52): any owner runs in exactly
one share of n, the one ``(owner - 1) % n + 1``, so the shares of a CI run partition the cases
(none twice, none lost); the text form is read back for every k/n and refused otherwise; the
fuzz battery's samples of n shares hold at least a whole run's cases, each from its own seed."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import test_fuzz
from tests.ci_share import SHARE_VARIABLE, ShareError, parse_share, skip_unless_mine


def _runs(owner: int, k: int, n: int, monkeypatch: pytest.MonkeyPatch) -> bool:
    monkeypatch.setenv(SHARE_VARIABLE, f"{k}/{n}")
    try:
        skip_unless_mine(owner, "case")
    except pytest.skip.Exception:
        return False
    return True


@given(n=st.integers(1, 40), owners=st.lists(st.integers(1, 10_000), min_size=1, max_size=30))
def test_every_owner_runs_in_exactly_one_share(n: int, owners: list[int]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        for owner in owners:
            shares = [k for k in range(1, n + 1) if _runs(owner, k, n, mp)]
            assert shares == [(owner - 1) % n + 1], (owner, n, shares)


@given(n=st.integers(1, 9999), data=st.data())
def test_the_share_text_is_read_iff_it_is_k_of_n(n: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(0, n + 2))
    text = f"{k}/{n}"
    if 1 <= k <= n:
        assert parse_share(text) == (k, n)
    else:
        with pytest.raises(ShareError, match=re.escape(f"{SHARE_VARIABLE}={text!r}")):
            parse_share(text)


@given(text=st.text(max_size=12))
def test_any_other_text_is_refused_or_read_as_k_of_n(text: str) -> None:
    try:
        k, n = parse_share(text)
    except ShareError:
        return
    assert (k, n) == (1, 1) if not text.strip() else 1 <= k <= n
    if text.strip():
        assert re.fullmatch(rf"\s*0*{k}\s*/\s*0*{n}\s*", text), text


@pytest.mark.parametrize("n", [2, 3, 5])
def test_fuzz_samples_of_n_shares_hold_a_whole_run(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    for (name, backend), whole in test_fuzz.COUNTS.items():
        samples = []
        for k in range(1, n + 1):
            monkeypatch.setenv(SHARE_VARIABLE, f"{k}/{n}")
            samples.append(test_fuzz.split_cases(name, backend))
        counts = [c for c, _ in samples]
        offsets = [o for _, o in samples]
        if backend == "enzyme" or whole == 0:
            assert counts == [whole] * n and offsets == [None] * n
        else:
            assert sum(counts) >= whole and all(c >= 1 for c in counts), (name, backend)
            assert sum(counts) <= whole + n, (name, backend)
            assert len(set(offsets)) == n and None not in offsets, (name, backend)
