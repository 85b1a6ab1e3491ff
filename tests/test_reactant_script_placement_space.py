"""A malformed placement line of an export's .py, on each argument of a sharded export (issue 38).

Reactant's template places each sharded argument with one line
``argK = jax.device_put(argK, jax.sharding.NamedSharding(meshN, P(...)))``
(src/serialization/EnzymeJAX.jl). A line of another form is refused with the typed error
naming the .py and that line's number, so a user can find it. The space: how many arguments
are sharded (so where the line stands), which one is malformed, and the form it takes. The
reference line number is found by scanning the .py's text.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from juliabridge.errors import ManifestError
from juliabridge.reactant_export.pyscript import read_script
from tests.reactant_export_writer import ArgInfo, Export, write_export

#: Forms of the sharding that are not NamedSharding(meshN, P(...)).
MALFORMED = [
    "jax.sharding.PositionalSharding(mesh0, P('a'))",
    "jax.sharding.NamedSharding(mesh0)",
    "jax.sharding.NamedSharding(mesh0, None)",
    "jax.sharding.NamedSharding(m[0], P('a'))",
    "jax.sharding.NamedSharding(mesh0, P('a'), 1)",
]


@pytest.mark.parametrize("form", MALFORMED)
@pytest.mark.parametrize(("n", "k"), [(1, 1), (3, 1), (3, 2), (3, 3), (5, 4)])
def test_a_malformed_placement_is_refused_naming_its_line(
    tmp_path: Path, n: int, k: int, form: str
) -> None:
    args = [
        ArgInfo([i], np.zeros((2, 3), np.float32), sharding=("m", (2,), ("a",), ("a", None)))
        for i in range(1, n + 1)
    ]
    py = write_export(tmp_path, Export("f", "module {}\n", args))
    assert len(read_script(py).placements) == n  # the template's own lines are read
    lines = py.read_text().splitlines()
    put = f"arg{k} = jax.device_put(arg{k}, "
    line = next(i for i, t in enumerate(lines, 1) if t.strip().startswith(put))
    lines[line - 1] = lines[line - 1].split(put)[0] + put + form + ")"
    py.write_text("\n".join(lines) + "\n")
    with pytest.raises(ManifestError) as e:
        read_script(py)
    assert re.search(
        rf"f\.py:{line}: expected jax\.sharding\.NamedSharding\(meshN, P\(\.\.\.\)\)", str(e.value)
    ), (line, str(e.value))
