"""LoadOptions: what a load of a Lux model is asked to do, as one frozen record.

`juliabridge.import_lux` (and the ``juliabridge convert`` command) build it once from their
keywords and pass it down whole, to the bundle route (lux/model.py), JuliaBridge.jl's
directories (julia_export/) and Reactant's (reactant_export/). An option is added in two places:
its field here and the code that uses it (plus, being public, a keyword of `import_lux`;
tests/test_load_options.py fails until the keyword and the field agree).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..backends import resolve_backend_name
from ..errors import JuliaBridgeError

if TYPE_CHECKING:
    from .sharded_load import ShardingSpec

#: The layouts a LuxModel presents: row-major as in the module, or Julia's dimension order.
LAYOUTS = ("mlir", "julia")


def check_layout(layout: str) -> None:
    """Refuse a layout other than "mlir" or "julia".

    Raises:
        JuliaBridgeError: an unknown layout.
    """
    if layout not in LAYOUTS:
        raise JuliaBridgeError(f"unknown layout {layout!r}; expected 'mlir' or 'julia'")


@dataclass(frozen=True)
class LoadOptions:
    """The options of one load, checked when made (layout first, then the backend's name).

    The fields are `juliabridge.import_lux`'s keywords, with its defaults; its docstring says
    what each means to a user.

    Raises:
        JuliaBridgeError: an unknown layout or backend name.
    """

    #: "auto", "lax", "enzyme" or "xla" ("auto" is resolved per module, backends/select.py).
    backend: str = "auto"
    #: "mlir" (the module's row-major shapes) or "julia" (Julia's dimension order).
    layout: str = "mlir"
    #: Check the digests the manifest records (bundles only; an export directory has none).
    verify_checksums: bool = True
    #: Admit ops and custom calls outside the allowlist (parsing, backends, artifact isolation).
    trust: bool = False
    #: (Reactant export directories) the @main results that are the outputs, in order.
    outputs: Sequence[int] | None = None
    #: (Reactant export directories) result index -> index of the st argument it renews.
    state_results: Mapping[int, int] | None = None
    #: (Reactant export directories) the traced positions of (x, ps, st).
    positions: Sequence[int] | None = None
    #: (Reactant export directories) the inputs' batch axis, when samples are independent.
    batch_axis: int | None = None
    #: Where each parameter and state array goes; each process reads only its shards
    #: (lux/sharded_load.py). None: every array whole on the default device.
    shardings: ShardingSpec | None = None

    def __post_init__(self) -> None:
        check_layout(self.layout)
        resolve_backend_name(self.backend)


#: `import_lux`'s defaults, for the routes called without options (tests, ``inspect``).
DEFAULT_OPTIONS = LoadOptions()


__all__ = ["DEFAULT_OPTIONS", "LAYOUTS", "LoadOptions", "check_layout"]
