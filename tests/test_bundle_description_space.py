"""BundleDescription's optional sections over their space (issue 38): several results, each
with its own batch axis (or none), example outputs as a list or as a mapping over any subset of
the results, explicit tolerances including 0, and a producer that replaces the writer's fields.
What the description says is what the manifest holds (docs/bundle-format.md §3.4, §3.7) and
what the reader reads back."""

from __future__ import annotations

import json
from typing import Any

import jax
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from juliabridge.bundle import open_bundle
from juliabridge.bundle.write.description import ArgumentSpec, BundleDescription
from juliabridge.bundle.write.writer import write_bundle

SPACE = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
X = np.arange(6, dtype=np.float32).reshape(2, 3)
W = np.linspace(-1.0, 1.0, 3, dtype=np.float32)
#: the results @main may return, each computed from x and w (none returns an argument)
FORMS = [lambda x, w: x * w, lambda x, w: x + w, lambda x, w: (x - w).sum(1), lambda x, w: w * 2]


@st.composite
def descriptions(draw: st.DrawFn) -> dict[str, Any]:
    picks = draw(st.lists(st.integers(0, len(FORMS) - 1), min_size=1, max_size=4))
    axes = [draw(st.sampled_from([None, 0])) if FORMS[p](X, W).ndim else None for p in picks]
    given = draw(st.sets(st.integers(0, len(picks) - 1)))
    as_mapping = draw(st.booleans()) or len(given) < len(picks)
    tol = st.sampled_from([None, 0.0, 1e-3, 2.5e-7])
    return {"picks": picks, "axes": axes, "given": sorted(given), "mapping": as_mapping,
            "rtol": draw(tol), "atol": draw(tol),
            "producer": draw(st.sampled_from([None, {"tool": "T.jl", "tool_version": "9.1"}]))}  # fmt: skip


@SPACE
@given(d=descriptions())
def test_what_the_description_says_is_what_the_manifest_holds(
    tmp_path_factory: Any, d: dict[str, Any]
) -> None:
    forms = [FORMS[p] for p in d["picks"]]
    text = jax.jit(lambda x, w: tuple(f(x, w) for f in forms), keep_unused=True).lower(X, W)
    text = text.as_text()
    outs = [np.asarray(f(X, W)) for f in forms]
    examples: Any = (
        {k: outs[k] for k in d["given"]} if d["mapping"] else [outs[k] for k in d["given"]]
    )
    description = BundleDescription(
        name="space",
        mlir_text=text,
        arguments=[ArgumentSpec("input", [], X, 0), ArgumentSpec("parameter", ["w"], W)],
        result_paths=[[["output", k + 1]] for k in range(len(forms))],
        batch={"size": 2, "samples_independent": True},
        result_batch_axes=d["axes"],
        example_outputs=examples if d["given"] else None,
        rtol=d["rtol"],
        atol=d["atol"],
        producer=d["producer"],
        portable_artifact=False,
    )
    path = write_bundle(tmp_path_factory.mktemp("b") / "s.bundle", description)
    m = json.loads((path / "manifest.json").read_text())
    assert [r.get("batch_axis") for r in m["results"]] == d["axes"]
    if d["producer"]:
        assert {k: m["producer"][k] for k in d["producer"]} == d["producer"]
    if not d["given"]:
        assert "examples" not in m
        return
    ex = m["examples"]
    assert [o["result"] for o in ex["outputs"]] == d["given"]
    for key in ("rtol", "atol"):
        assert ex[key] == d[key] if d[key] is not None else ex[key] > 0, (key, ex)
    bundle = open_bundle(path)
    read = bundle.read_examples()
    assert read is not None
    assert sorted(read[1]) == d["given"]
    for k in d["given"]:
        np.testing.assert_array_equal(read[1][k], outs[k])
