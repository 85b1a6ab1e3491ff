"""Which share of the split batteries this test run takes: ``JULIABRIDGE_TEST_SHARE=k/n``.

Unset (or ``1/1``), a run takes everything. ``.ci/run`` runs the README's test command once per
environment and gives each environment one share of the batteries that cost the most and
gain least from meeting both jax versions (the benchmark scripts' tiny runs; the fuzz
battery's lax and xla cases, as separate samples): each case then runs once per CI, in one of
the environments, instead of the same cases twice. Everything else runs in full in every
share.
"""

from __future__ import annotations

import os
import re

import pytest

#: The environment variable that names this run's share.
SHARE_VARIABLE = "JULIABRIDGE_TEST_SHARE"


class ShareError(pytest.UsageError):
    """JULIABRIDGE_TEST_SHARE is not of the form k/n with 1 <= k <= n."""


def parse_share(text: str) -> tuple[int, int]:
    """`text` ("k/n", or empty for the whole) as (k, n).

    Raises:
        ShareError: `text` is not k/n with 1 <= k <= n.
    """
    if not text.strip():
        return 1, 1
    m = re.fullmatch(r"\s*([0-9]{1,4})\s*/\s*([0-9]{1,4})\s*", text)
    if m is None or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise ShareError(
            f"{SHARE_VARIABLE}={text!r}: expected k/n with 1 <= k <= n (e.g. 1/2 and 2/2 for "
            "two environments), or unset for every test"
        )
    return int(m.group(1)), int(m.group(2))


def share() -> tuple[int, int]:
    """This run's share (k, n) from the environment; (1, 1) when unset."""
    return parse_share(os.environ.get(SHARE_VARIABLE, ""))


def skip_unless_mine(owner: int, what: str) -> None:
    """Skip, with the reason shown, when share `owner` (1-based, taken modulo n) of the split
    is not this run's."""
    k, n = share()
    if (owner - 1) % n != k - 1:
        pytest.skip(
            f"{what} runs in share {(owner - 1) % n + 1}/{n} of the test runs "
            f"({SHARE_VARIABLE}={k}/{n} here; unset it to run everything)"
        )
