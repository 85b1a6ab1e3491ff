"""Shardings the module records on @main (``mhlo.sharding``) against the call's placement.

In-process on one device: a one-device mesh with an Explicit axis is still a mesh, whose
placement splits nothing, so a module recording a 2-way split disagrees with it and one
recording ``{replicated}`` agrees.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import juliabridge
from juliabridge.transforms.sharding import recorded_tiling

from .pinned_support import Arg, Res, Spec, lower, write

B = 2
W = np.array([[0.5, 2.0, -1.0]] * B, np.float32)


def _bundle(tmp_path: Path, sharding: str) -> Path:
    x = np.ones((B, 3), np.float32)
    mlir = lower(lambda x, w: (x * w,), x, W)
    head = "%arg0: tensor<2x3xf32>"
    assert head in mlir
    mlir = mlir.replace(head, f'{head} {{mhlo.sharding = "{sharding}"}}', 1)
    spec = Spec(
        name="rec",
        mlir=mlir,
        args=[Arg("input", [], x, batch_axis=0), Arg("parameter", ["w"], W)],
        results=[Res([["output"]], x.shape, "f32", batch_axis=0)],
        batch={"size": B, "samples_independent": True},
    )
    return write(tmp_path / f"rec{abs(hash(sharding))}.bundle", spec)


def _call(model: juliabridge.LuxModel) -> tuple[np.ndarray, list[str]]:
    mesh = jax.make_mesh((1,), ("data",), axis_types=(AxisType.Explicit,))
    x = np.arange(2 * B * 3, dtype=np.float32).reshape(2 * B, 3)
    xs = jax.device_put(x, NamedSharding(mesh, P("data")))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = np.asarray(jax.jit(model)(xs))
    np.testing.assert_allclose(y, x * W[np.arange(2 * B) % B], rtol=1e-6)
    return y, [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def test_a_recorded_split_the_call_does_not_make_is_reported(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_bundle(tmp_path, "{devices=[2,1]<=[2]}"))
    assert model.metadata["shardings"] == {"x": '"{devices=[2,1]<=[2]}"'}
    _, caught = _call(model)
    assert caught == [
        'rec: x: the module records mhlo.sharding "{devices=[2,1]<=[2]}" (pieces per dim '
        "[2, 1]), the call splits it [1, 1] (spec ('data', None))"
    ]


def test_a_recorded_sharding_the_call_agrees_with_is_silent(tmp_path: Path) -> None:
    model = juliabridge.import_lux(_bundle(tmp_path, "{replicated}"))
    _, caught = _call(model)
    assert caught == []


@pytest.mark.parametrize(
    ("text", "rank", "want"),
    [
        ('"{replicated}"', 2, (1, 1)),
        ("{devices=[4,1]<=[4]}", 2, (4, 1)),
        ("{devices=[2,1,2]<=[4] last_tile_dim_replicate}", 2, (2, 1)),
        ("{devices=[2,2]0,1,2,3}", 2, (2, 2)),
        ("{maximal device=0}", 2, None),
        ("{manual}", 2, None),
        ("{devices=[2,1]<=[2]}", 3, None),
    ],
)
def test_recorded_tiling_reads_hlo_sharding_strings(
    text: str, rank: int, want: tuple[int, ...] | None
) -> None:
    assert recorded_tiling(text, rank) == want


def test_inspect_reports_the_recorded_shardings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from juliabridge.cli import main

    assert main(["inspect", str(_bundle(tmp_path, "{devices=[2,1]<=[2]}"))]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "recorded shardings (reported, not applied; place arrays with jax.device_put): "
        'num_partitions=1; x: "{devices=[2,1]<=[2]}"'
    ) in out
