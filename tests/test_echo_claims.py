"""The reader checks each `echo_of` claim against the module's structure (spec §3.4).

A false claim would make `apply` return an argument where the module computes a new value,
while `verify` (which compares the module's own results) still passes; so a reader refuses it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import juliabridge
from juliabridge.bundle.bundle import open_bundle
from juliabridge.bundle.write.description import ArgumentSpec, BundleDescription
from juliabridge.bundle.write.writer import write_bundle
from juliabridge.examples.luxmodels import build_bundle
from juliabridge.examples.paths import example_bundle_path, example_names

from .bundle_factory import edit_manifest


def _train_bundle(tmp_path: Path) -> Path:
    return build_bundle("batchnorm_train", tmp_path / "bn_train.bundle", batch=4, seed=0)


def _label_as_echo(m: dict, result: int, argument: int) -> None:
    r = m["results"][result]
    r["paths"] = []
    r["echo_of"] = argument
    r.pop("batch_axis", None)


def test_a_computed_running_mean_labelled_an_echo_is_refused(tmp_path: Path) -> None:
    path = _train_bundle(tmp_path)
    m = json.loads((path / "manifest.json").read_text())
    # Chain(Dense, BatchNorm) in train mode: results y, new running_mean, new running_var;
    # the running mean is state argument 5 (x, weight, bias, scale, bias, mean, var).
    mean = next(a["index"] for a in m["arguments"] if a["path"] == ["layer_2", "running_mean"])
    res = next(
        r["index"] for r in m["results"] if ["state", "layer_2", "running_mean"] in r["paths"]
    )
    assert (mean, res) == (5, 1)
    edit_manifest(path, lambda d: _label_as_echo(d, res, mean))
    with pytest.raises(juliabridge.SignatureMismatchError) as e:
        open_bundle(path)
    assert (
        "the manifest says @main result 1 is argument 5 (state.layer_2.running_mean) returned "
        "unchanged (echo_of), but the module computes it" in str(e.value)
    )
    with pytest.raises(juliabridge.SignatureMismatchError):
        juliabridge.import_lux(path, backend="xla")
    # verify compares the module's own results, so it would have passed: it opens the bundle
    # through the same check.
    with pytest.raises(juliabridge.SignatureMismatchError):
        juliabridge.verify(path, backend="xla")


def test_the_same_bundle_without_the_false_claim_loads_and_updates_the_mean(
    tmp_path: Path,
) -> None:
    path = _train_bundle(tmp_path)
    b = open_bundle(path)
    assert b.module.returned_arguments == {}  # every train-mode result is computed
    model = juliabridge.import_lux(path, backend="xla")
    x = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    ps, st = model.params, model.state
    _, new_state = model.apply(ps, st, x)
    # numpy from Lux's semantics: h = x W + b, running_mean' = 0.9 running_mean + 0.1 mean(h).
    h = x @ np.asarray(ps["layer_1"]["weight"]) + np.asarray(ps["layer_1"]["bias"])
    want = 0.9 * np.asarray(st["layer_2"]["running_mean"]) + 0.1 * h.mean(axis=0)
    got = np.asarray(new_state["layer_2"]["running_mean"])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(got, np.asarray(st["layer_2"]["running_mean"]))


def _echo_module() -> str:
    # @main returns its argument through Reactant's boundary transposes (a true echo) and a
    # computed value that equals the argument for every non-negative input (abs): only the
    # first is an echo, whatever the example values are.
    return (
        "func.func @main(%arg0: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {\n"
        "  %0 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>\n"
        "  %1 = stablehlo.transpose %0, dims = [1, 0] : (tensor<3x2xf32>) -> tensor<2x3xf32>\n"
        "  %2 = stablehlo.abs %arg0 : tensor<2x3xf32>\n"
        "  return %1, %2 : tensor<2x3xf32>, tensor<2x3xf32>\n"
        "}\n"
    )


@pytest.mark.parametrize("echo", [0, 1])
def test_a_true_echo_loads_and_a_value_equal_by_chance_does_not(tmp_path: Path, echo: int) -> None:
    x = np.abs(np.random.default_rng(0).standard_normal((2, 3))).astype(np.float32)
    paths: list[list[list[object]]] = [[["output", 1]], [["output", 2]]]
    paths[echo] = []
    if echo == 0:  # the echo has no output place, so the other result is the output's first
        paths[1] = [["output", 1]]
    echoes: list[int | None] = [None, None]
    echoes[echo] = 0

    def write(echoes: list[int | None], paths: list[list[list[object]]]) -> Path:
        return write_bundle(
            tmp_path / f"echo{echo}.bundle",
            BundleDescription(
                name="echo",
                mlir_text=_echo_module(),
                arguments=[ArgumentSpec("input", [], x)],
                result_paths=paths,
                result_echoes=echoes,
                example_outputs=[x, x],
            ),
            overwrite=True,
        )

    if echo == 0:
        path = write(echoes, paths)
        b = open_bundle(path)
        assert b.module.returned_arguments == {0: 0}
        assert juliabridge.verify(path, backend="xla").ok
        return
    # abs(x) == x on this (non-negative) example, so a value comparison would call it an echo.
    # The writer refuses the claim; a manifest edited to make it is refused by the reader.
    with pytest.raises(juliabridge.SignatureMismatchError, match=r"result 1: echo_of=0, but"):
        write(echoes, paths)
    path = write([None, None], [[["output", 1]], [["output", 2]]])
    edit_manifest(path, lambda m: _label_as_echo(m, 1, 0))
    with pytest.raises(
        juliabridge.SignatureMismatchError, match=r"result 1 is argument 0 .* computes it"
    ):
        open_bundle(path)


@pytest.mark.parametrize("name", example_names())
def test_the_shipped_bundles_still_load(name: str) -> None:
    b = open_bundle(example_bundle_path(name))
    claimed = {r.index: r.echo_of for r in b.manifest.results if r.echo_of is not None}
    assert all(b.module.returned_arguments.get(k) == j for k, j in claimed.items())


def test_train_mode_without_a_batch_says_why_another_shape_is_refused(tmp_path: Path) -> None:
    path = _train_bundle(tmp_path)

    def drop_batch(m: dict) -> None:
        m.pop("batch")
        for entry in (*m["arguments"], *m["results"]):
            entry.pop("batch_axis", None)

    edit_manifest(path, drop_batch)
    model = juliabridge.import_lux(path, backend="xla")
    x = np.ones((4, 3), np.float32)  # the traced shape still runs
    y, _ = model.apply(model.params, model.state, x)
    assert np.asarray(y).shape == (4, 5)
    with pytest.raises(juliabridge.CallArgumentError) as e:
        model.apply(model.params, model.state, np.ones((6, 3), np.float32))
    assert "x expects exactly [4, 3] (f32), got shape [6, 3]: the bundle records no batch" in str(
        e.value
    )
    assert "train-mode bundle's samples are not independent" in str(e.value)
