"""The sharding helpers of transforms/sharding.py, in this process (tests/test_mesh_axes.py runs
its many-device checks in child processes, where mutated code is not live).

One device makes a mesh whose Explicit axes still type every value, so specs, meshes and
reshards are observable; the checks that need two devices are marked `multidevice` and skip
without them (tests/test_multidevice.py and the mutation smoke run them with 4 fake CPU devices).
"""

from __future__ import annotations

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from juliabridge.transforms import sharding as sh

MESH = jax.make_mesh((1, 1), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
A = np.arange(6, dtype=np.float32).reshape(2, 3)


def _on(spec: P, value: np.ndarray = A) -> jax.Array:
    return jax.device_put(value, NamedSharding(MESH, spec))


def test_specs_read_from_the_type() -> None:
    a = _on(P("x", None))
    assert sh.spec_of(a) == P("x", None)
    assert sh.spec_of(np.ones(3)) == P(None)
    assert sh.spec_of(2.0) == P()
    assert [sh.spec_entry(a, k) for k in range(4)] == ["x", None, None, None]
    assert sh.spec_entry(_on(P(("x", "y"), None)), 0) == ("x", "y")
    assert sh.spec_with(3, 1, "x") == P(None, "x", None)
    assert sh.spec_with(2, None, "x") == P(None, None)
    assert sh.spec_with(0, 0, "x") == P()


def test_explicit_mesh_is_the_first_typed_value_s() -> None:
    assert sh.explicit_mesh([np.ones(2), 3.0]) is None
    auto = jax.make_mesh((1,), ("z",), axis_types=(AxisType.Auto,))
    z = jax.device_put(np.ones(2), NamedSharding(auto, P("z")))
    assert sh.explicit_mesh([z]) is None  # Auto axes are not in the type
    found = sh.explicit_mesh([np.ones(2), z, _on(P("x", None))])
    assert found is not None and tuple(found.axis_names) == ("x", "y")


def test_unshard_leading_axis_inside_jit() -> None:
    seen = {}

    @jax.jit
    def f(a: jax.Array, b: jax.Array, c: jax.Array) -> tuple[jax.Array, ...]:
        out = sh.unshard_leading_axis(a), sh.unshard_leading_axis(b), sh.unshard_leading_axis(c)
        seen.update(same_b=out[1] is b, same_c=out[2] is c)
        seen["specs"] = [jax.typeof(v).sharding.spec for v in out]
        return out

    with jax.set_mesh(MESH):
        out = f(_on(P("x", "y")), _on(P(None, "x")), _on(P()))
    assert seen["specs"] == [P(None, "y"), P(None, "x"), P(None, None)]
    assert seen["same_b"] and seen["same_c"]
    for v in out:
        np.testing.assert_array_equal(np.asarray(v), A)


def test_run_with_auto_axes_types_the_results() -> None:
    def body(a: jax.Array) -> tuple[jax.Array, ...]:
        return (a.reshape(6) * 2, a.sum())

    @jax.jit
    def f(a: jax.Array) -> tuple[jax.Array, ...]:
        return sh.run_with_auto_axes(jax.typeof(a).sharding.mesh, body, [a], [P("x"), P()])

    with jax.set_mesh(MESH):
        y, s = f(_on(P("x", None)))
    assert jax.typeof(y).sharding.spec == P("x") and jax.typeof(s).sharding.spec == P()
    np.testing.assert_array_equal(np.asarray(y), A.reshape(6) * 2)
    assert float(s) == A.sum()


def test_caller_tiling_counts_pieces_per_dim() -> None:
    # The mesh's sizes are what count (a stand-in mesh of sizes 4 and 3 here).
    mesh = SimpleNamespace(shape={"x": 4, "y": 3})
    assert sh.caller_tiling(_on(P("x", None)), mesh) == (4, 1)
    assert sh.caller_tiling(_on(P(None, "y")), mesh) == (1, 3)
    assert sh.caller_tiling(_on(P(("x", "y"), None)), mesh) == (12, 1)
    assert sh.caller_tiling(_on(P("x")), mesh) == (4, 1)  # missing trailing dims: one piece
    assert sh.caller_tiling(np.ones((2, 2, 2)), mesh) == (1, 1, 1)


def test_recorded_tiling_forms() -> None:
    assert sh.recorded_tiling('  "{replicated}" ', 3) == (1, 1, 1)
    assert sh.recorded_tiling("{replicated}", 0) == ()
    assert sh.recorded_tiling("{devices=[3,1,2]<=[6] last_tile_dim_replicate}", 3) is None
    assert sh.recorded_tiling("{devices=[3,1,2]<=[6]}", 3) == (3, 1, 2)
    assert sh.recorded_tiling("{devices=[2]<=[2]}", 1) == (2,)
    assert sh.recorded_tiling("x{devices=[2]<=[2]}", 1) is None


def test_sharding_disagreements_one_line_each() -> None:
    mesh = SimpleNamespace(shape={"x": 4, "y": 3})
    args = [_on(P("x", None)), _on(P(None, "y")), np.ones(2)]
    recorded = {
        0: "{devices=[4,1]<=[4]}",  # agrees
        1: "{devices=[2,1]<=[2]}",  # disagrees
        2: "{maximal device=0}",  # nothing to compare
        7: "{devices=[2]<=[2]}",  # no such argument
    }
    assert sh.sharding_disagreements(recorded, args, ["a", "b", "c"], mesh) == [
        "b: the module records mhlo.sharding {devices=[2,1]<=[2]} (pieces per dim [2, 1]), the "
        "call splits it [1, 3] (spec (None, 'y'))"
    ]
    recorded = {2: " {replicated} ", 0: "{devices=[1,1]<=[1]}"}
    assert sh.sharding_disagreements(recorded, args, ["a", "b", "c"], mesh) == [
        "a: the module records mhlo.sharding {devices=[1,1]<=[1]} (pieces per dim [1, 1]), the "
        "call splits it [4, 1] (spec ('x', None))"
    ]


def test_device_conflict_on_one_device() -> None:
    d0 = jax.devices()[0]
    committed = jax.device_put(np.ones(2), d0)
    assert sh.device_conflict({"x": committed, "ps": {"w": committed}}) is None
    assert sh.device_conflict({"x": np.ones(2), "ps": jnp.ones(2)}) is None

    @jax.jit
    def f(t: jax.Array) -> jax.Array:
        assert sh.device_conflict({"x": t, "ps": committed}) is None
        return t

    f(jnp.ones(2))


@pytest.mark.multidevice(devices=2)
def test_device_conflict_names_each_device_set() -> None:
    d0, d1 = jax.devices()[:2]
    a = jax.device_put(np.ones(2), d0)
    b = jax.device_put(np.ones(2), d1)
    loose = jnp.ones(2)  # uncommitted: never a conflict
    got = sh.device_conflict({"x": [loose, a], "ps": {"w": b, "v": b}, "st": a})
    assert got == f"x[1] on devices [{d0.id}]; ps['v'] on devices [{d1.id}]"
    both = jax.device_put(np.ones(2), NamedSharding(jax.make_mesh((2,), ("d",)), P()))
    got = sh.device_conflict({"x": both, "y": a})
    assert got == f"x on devices {sorted([d0.id, d1.id])}; y on devices [{d0.id}]"
