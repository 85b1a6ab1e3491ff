"""An imported Lux model as an Equinox module (optional extra: `juliabridge[equinox]`).

`LuxModule` holds the parameters and state as array leaves (nested dicts keyed by Lux names),
so `eqx.filter_jit`, `eqx.filter_grad` and optax work on it as on any Equinox model. Equinox
modules are immutable: `module(x)` returns the outputs, and `module.apply(x)` also returns a new
module carrying the returned Lux state (running statistics in train mode).
"""

from __future__ import annotations

import os
from typing import Any

from .errors import JuliaBridgeError

try:
    import equinox as eqx
except ImportError as e:  # pragma: no cover - depends on the environment
    raise JuliaBridgeError(
        "juliabridge.equinox needs Equinox: pip install 'juliabridge[equinox]' or "
        "pip install equinox"
    ) from e

from .importers import import_lux
from .lux.model import LuxModel

__all__ = ["LuxModule"]


class LuxModule(eqx.Module):  # type: ignore[misc]
    """A Lux model imported from a bundle, as an `eqx.Module`.

    Attributes:
        params: nested dict of parameter arrays (trainable leaves).
        state: nested dict of Lux state arrays. Keep it out of training: partition the
            module so that only ``params`` is differentiated, e.g.
            ``trainable = eqx.tree_at(lambda m: m.params, jax.tree.map(lambda _: False, m),
            jax.tree.map(lambda _: True, m.params))``, then ``diff, static =
            eqx.partition(m, trainable)`` and ``eqx.filter_grad`` of a loss of
            ``eqx.combine(diff, static)`` (docs/importing.md's Flax/Equinox block runs this).
        lux: the `LuxModel` (a static field).
    """

    params: Any
    state: Any
    lux: LuxModel = eqx.field(static=True)

    def __init__(self, model: LuxModel | str | os.PathLike[str], **import_options: Any) -> None:
        """Wrap `model`, or import the bundle at that path with `import_options`.

        Args:
            model: a `LuxModel`, or the path of anything `import_lux` reads (a bundle, a
                JuliaBridge.jl or a Reactant export directory).
            **import_options: passed to `juliabridge.import_lux` when `model` is a path
                (backend, layout, verify_checksums, trust).

        Raises:
            JuliaBridgeError (and subclasses): as `juliabridge.import_lux` does, or import
                options given with a `LuxModel`.
        """
        if not isinstance(model, LuxModel):
            model = import_lux(model, **import_options)
        elif import_options:
            raise JuliaBridgeError("import options only apply when a bundle path is given")
        self.lux = model
        self.params = model.params
        self.state = model.state

    def __juliabridge_trees__(self) -> tuple[Any, Any, LuxModel]:
        """(params, state, LuxModel): this module's trees, for save_params."""
        return self.params, self.state, self.lux

    def __juliabridge_replace__(self, params: Any, state: Any) -> LuxModule:
        """A copy of this module holding `params` and `state` (for juliabridge.load_into)."""
        return eqx.tree_at(lambda m: (m.params, m.state), self, (params, state))  # type: ignore[no-any-return]

    def __call__(self, *inputs: Any) -> Any:
        """The model's outputs for `inputs` with this module's parameters and state.

        Args:
            *inputs: the model's inputs, as for `LuxModel.apply`.

        Returns:
            The outputs (use `apply` to keep the returned state).

        Raises:
            CallArgumentError: inputs of the wrong count, shape or dtype.
        """
        return self.lux.apply(self.params, self.state, *inputs)[0]

    def apply(self, *inputs: Any) -> tuple[Any, LuxModule]:
        """Run the model and keep the state it returns (Equinox modules are immutable).

        Args:
            *inputs: the model's inputs, as for `LuxModel.apply`.

        Returns:
            ``(outputs, module)``: a copy of this module carrying the returned state.

        Raises:
            CallArgumentError: inputs of the wrong count, shape or dtype.
        """
        outputs, new_state = self.lux.apply(self.params, self.state, *inputs)
        return outputs, eqx.tree_at(lambda m: m.state, self, new_state)
