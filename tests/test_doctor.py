"""juliabridge.cli.doctor: the facts it reports match what the installation can really do."""

from __future__ import annotations

import jax
import pytest

from juliabridge.backends.enzyme import enzyme_available
from juliabridge.cli import doctor


def test_report_matches_the_installation() -> None:
    r = doctor.report()
    assert r.jax == jax.__version__
    by_name = {c.name: c for c in r.backends}
    assert set(by_name) == {"lax", "enzyme", "xla"}
    assert by_name["lax"].ok
    assert by_name["enzyme"].ok == enzyme_available()
    if not enzyme_available():
        assert "CPython 3.11" in by_name["enzyme"].detail
    from jaxlib.mlir.dialects import stablehlo

    assert r.stablehlo["writes_and_reads_up_to"] == str(stablehlo.get_current_version())
    assert r.as_dict()["backends"][0]["name"] == "lax"


@pytest.mark.parametrize(
    ("version", "tested"),
    [("0.10.2", True), ("0.11.1", True), ("0.12.0.1", True), ("0.10.1", False), ("0.13.0", False)],
)
def test_tested_range(version: str, tested: bool) -> None:
    assert doctor._in_tested_range(version) is tested


def test_julia_absence_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from juliabridge.errors import JuliaUnavailable

    def missing(**_: object) -> None:
        raise JuliaUnavailable("no Julia found; install Julia >= 1.10 with juliaup")

    monkeypatch.setattr("juliabridge.julia.driver.find_julia", missing)
    julia = {c.name: c for c in doctor.report().julia}["julia"]
    assert not julia.ok and "juliaup" in julia.detail
