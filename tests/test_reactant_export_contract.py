"""The Reactant export reader as a contract (issue 52): every path form `is_export_dir` accepts
reads as the same model, forms it refuses are not routed there, and Dict keys are kept exactly
as Julia printed them — keys differing only in case, or only in Unicode normalization, are
different parameters, each holding its own array (numpy reference: the function of the keys).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import juliabridge
from juliabridge.reactant_export.directory import is_export_dir, open_export
from tests.bundle_factory import make_dense_bn
from tests.pinned_support import lower
from tests.reactant_export_writer import ArgInfo, Export, write_export

X = np.arange(6, dtype=np.float32).reshape(2, 3)


def _write(d: Path, keys: list[str]) -> tuple[Path, dict[str, np.ndarray]]:
    """f(x, Dict(k => v_k ...)) = x * (v_1 + 2 v_2 + 3 v_3 ...): each key's weight differs, so
    a value read under another key changes the output."""
    values = {k: np.full(3, i + 1, np.float32) * (i + 2) for i, k in enumerate(keys)}

    def fn(x: Any, *vs: Any) -> Any:
        acc = 0
        for i, v in enumerate(vs):
            acc = acc + (i + 1) * v
        return (x * acc, x, *vs)

    args = [ArgInfo([1], X), *(ArgInfo([2, k], v) for k, v in values.items())]
    write_export(d, Export("f", lower(fn, X, *values.values()), args))
    return d, values


def _reference(values: dict[str, np.ndarray]) -> np.ndarray:
    return X * sum((i + 1) * v for i, v in enumerate(values.values()))


#: Keys that only case or Unicode normalization tell apart.
KEY_FAMILIES = [
    ["weight", "Weight", "WEIGHT"],
    ["é", "e\u0301", "É"],  # composed, decomposed, upper
    ["straße", "STRASSE", "strasse"],
    ["\u212a", "K", "k"],  # Kelvin sign, K, k
    ["ω", "Ω", "\u2126"],  # omega, capital omega, ohm sign
    ["\u0661", "\u00b2", "\uff11"],  # digits outside ASCII (Arabic-Indic 1, ², fullwidth 1): names
]


@pytest.mark.parametrize(
    "family", KEY_FAMILIES, ids=lambda f: f[0].encode("unicode_escape").decode()
)
@settings(
    max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(n=st.integers(2, 3), order=st.permutations(range(3)))
def test_keys_differing_in_case_or_normalization_stay_apart(
    tmp_path_factory: pytest.TempPathFactory, family: list[str], n: int, order: list[int]
) -> None:
    keys = [family[i] for i in order][:n]
    d, values = _write(tmp_path_factory.mktemp("r") / "exp", keys)
    assert open_export(d).labels == ["arg.1", *(f"arg.2.{k}" for k in keys)]
    model = juliabridge.import_lux(d, backend="lax")
    assert sorted(model.params) == sorted(keys)
    for k, v in values.items():
        got = np.asarray(model.params[k])
        np.testing.assert_array_equal(got, v, err_msg=repr(k))
    np.testing.assert_allclose(np.asarray(model(X)), _reference(values), rtol=1e-6)


def test_every_accepted_path_form_reads_the_same_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d, values = _write(tmp_path / "my export", ["w", "W"])
    monkeypatch.chdir(tmp_path)
    py = d / "f.py"
    forms: list[Any] = [
        d,
        str(d),
        str(d) + "/",
        d.name,
        "./" + d.name,
        f"{d.name}/../{d.name}",
        py,
        str(py),
        f"{d.name}/f.py",
        Path(d.name) / "f.py",
    ]
    want = _reference(values)
    for form in forms:
        assert is_export_dir(form), form
        model = juliabridge.import_lux(form, backend="lax")
        assert sorted(model.params) == ["W", "w"], form
        np.testing.assert_allclose(np.asarray(model(X)), want, rtol=1e-6, err_msg=repr(form))


def test_forms_the_predicate_refuses_are_not_read_as_exports(tmp_path: Path) -> None:
    d, _ = _write(tmp_path / "exp", ["w"])
    others = [p for p in d.iterdir() if p.suffix != ".py"]
    assert others, "the writer wrote the module and the npz"
    for p in [*others, d / "missing.py", d / "F.py", tmp_path / "missing"]:
        assert not is_export_dir(p), p
        with pytest.raises(juliabridge.BundleError):
            juliabridge.import_lux(p, backend="lax")
    for thing in (None, 3, b"exp"):
        assert is_export_dir(thing) is False  # type: ignore[arg-type]


def test_a_bundle_beside_an_exporters_files_stays_a_bundle(tmp_path: Path) -> None:
    # A bundle directory someone also exported into: manifest.json says what it is.
    bundle = make_dense_bn(tmp_path / "dense_bn.bundle")
    d, _ = _write(tmp_path / "exp", ["w"])
    for p in d.iterdir():
        shutil.copy(p, bundle / p.name)
    assert is_export_dir(d) and not is_export_dir(bundle)
    model = juliabridge.import_lux(bundle, backend="lax")
    assert sorted(model.params) == ["layer_1", "layer_2"]
