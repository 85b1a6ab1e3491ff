"""An imported Lux model as a Flax NNX module (optional extra: ``pip install juliabridge[flax]``).

Parameters become `nnx.Param` variables and Lux state `LuxState` variables, in nested
`nnx.Dict`s keyed by Lux names (and `nnx.List`s where the trees have positions, as a
Reactant export directory's do: ``module.params[0][0]``), so the module trains with
`nnx.Optimizer(module, tx, wrt=nnx.Param)` and nests inside larger Flax models. Calling the
module runs `LuxModel.apply` and writes the returned state back (running statistics in train
mode), the way Flax's own BatchNorm updates its batch statistics.
"""

from __future__ import annotations

import os
from typing import Any

from .errors import JuliaBridgeError

try:
    from flax import nnx
except ImportError as e:  # pragma: no cover - depends on the environment
    raise JuliaBridgeError(
        "juliabridge.flax needs Flax (with NNX): pip install 'juliabridge[flax]' or "
        "pip install flax"
    ) from e

from .importers import import_lux
from .lux.model import LuxModel

__all__ = ["LuxModule", "LuxState"]


class LuxState(nnx.Variable):  # type: ignore[misc]
    """A Lux state leaf (e.g. BatchNorm running mean): not trained, updated by calls."""


def _wrap(tree: Any, kind: type) -> Any:
    # Lux names become nnx.Dicts; positions (a Reactant export's tuples) nnx.Lists, whose
    # None entries (empty Lux containers) stay None: nnx treats them as static.
    if isinstance(tree, dict):
        return nnx.Dict({k: _wrap(v, kind) for k, v in tree.items()})
    if isinstance(tree, (tuple, list)):
        return nnx.List([_wrap(v, kind) for v in tree])
    return None if tree is None else kind(tree)


def _unwrap(tree: Any) -> Any:
    if isinstance(tree, (nnx.Dict, dict)):
        return {k: _unwrap(tree[k]) for k in tree}
    if isinstance(tree, (nnx.List, list, tuple)):
        return tuple(_unwrap(v) for v in tree)  # the LuxModel's trees hold tuples
    return None if tree is None else tree.get_value()


def _assign(variables: Any, values: Any) -> None:
    keys = variables if isinstance(variables, (nnx.Dict, dict)) else range(len(variables))
    for k in keys:
        if isinstance(values[k], (dict, tuple, list)):
            _assign(variables[k], values[k])
        elif values[k] is not None:
            variables[k].set_value(values[k])


class LuxModule(nnx.Module):  # type: ignore[misc]
    """A Lux model imported from a bundle (or an export directory), as an `nnx.Module`.

    Args:
        model: a `LuxModel`, or the path of anything `import_lux` reads: a bundle, a
            JuliaBridge.jl export directory or a Reactant export_to_enzymejax directory.
        **import_options: passed to `juliabridge.import_lux` when `model` is a path
            (backend, layout, verify_checksums, trust).

    Attributes:
        params: the parameters, nnx.Param leaves in nested nnx.Dicts by Lux name (nnx.Lists
            by position for a Reactant export directory; an empty Lux container is None).
        state: the Lux state, LuxState leaves in the same containers.

    Raises:
        JuliaBridgeError (and subclasses): as `import_lux` does.
    """

    def __init__(self, model: LuxModel | str | os.PathLike[str], **import_options: Any) -> None:
        if not isinstance(model, LuxModel):
            model = import_lux(model, **import_options)
        elif import_options:
            raise JuliaBridgeError("import options only apply when a bundle path is given")
        self.lux = model
        self.params = _wrap(model.params, nnx.Param)
        self.state = _wrap(model.state, LuxState)

    def __juliabridge_trees__(self) -> tuple[Any, Any, LuxModel]:
        """(params, state, LuxModel): plain trees of the current values, for save_params."""
        return _unwrap(self.params), _unwrap(self.state), self.lux

    def __juliabridge_replace__(self, params: Any, state: Any) -> LuxModule:
        """This module with its variables set to `params` and `state` (juliabridge.load_into)."""
        _assign(self.params, params)
        _assign(self.state, state)
        return self

    def __call__(self, *inputs: Any) -> Any:
        """The model's outputs for `inputs`; the state variables take the returned state.

        Args:
            *inputs: the model's inputs, as for `LuxModel.apply`.

        Returns:
            The outputs.

        Raises:
            CallArgumentError: inputs of the wrong count, shape or dtype.
        """
        outputs, new_state = self.lux.apply(_unwrap(self.params), _unwrap(self.state), *inputs)
        _assign(self.state, new_state)
        return outputs
