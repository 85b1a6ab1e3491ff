"""An imported Lux model as a Flax NNX module (optional extra: ``pip install juliabridge[flax]``).

Parameters become `nnx.Param` variables and Lux state `LuxState` variables, in nested
`nnx.Dict`s keyed by Lux names, so the module trains with `nnx.Optimizer(module, tx,
wrt=nnx.Param)` and nests inside larger Flax models. Calling the module runs
`LuxModel.apply` and writes the returned state back (running statistics in train mode), the
way Flax's own BatchNorm updates its batch statistics.
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


def _check_named(tree: Any, what: str, model: LuxModel) -> None:
    """Refuse trees that are not Lux-named dicts (nnx.Dict holds names, not positions)."""
    if isinstance(tree, dict):
        for v in tree.values():
            _check_named(v, what, model)
    elif isinstance(tree, (tuple, list)) or tree is None:
        raise JuliaBridgeError(
            f"{model.manifest.name}: juliabridge.flax.LuxModule needs {what} named by Lux paths "
            "(a bundle written by JuliaBridge.export_lux), but this model's are positional "
            "tuples (a Reactant export_to_enzymejax directory records positions, not names); "
            "use the LuxModel itself, or juliabridge.equinox.LuxModule, which takes any pytree"
        )


def _wrap(tree: Any, kind: type) -> Any:
    if isinstance(tree, dict):
        return nnx.Dict({k: _wrap(v, kind) for k, v in tree.items()})
    return kind(tree)


def _unwrap(tree: Any) -> Any:
    if isinstance(tree, (nnx.Dict, dict)):
        return {k: _unwrap(tree[k]) for k in tree}
    return tree.get_value()


def _assign(variables: Any, values: Any) -> None:
    for k in variables:
        if isinstance(values[k], dict):
            _assign(variables[k], values[k])
        else:
            variables[k].set_value(values[k])


class LuxModule(nnx.Module):  # type: ignore[misc]
    """A Lux model imported from a bundle, as an `nnx.Module`.

    Args:
        model: a `LuxModel`, or the path of a bundle directory to import.
        **import_options: passed to `juliabridge.import_lux` when `model` is a path
            (backend, layout, verify_checksums, trust).

    Attributes:
        params: the parameters, nnx.Param leaves in nested nnx.Dicts by Lux name.
        state: the Lux state, LuxState leaves in nested nnx.Dicts.

    Raises:
        JuliaBridgeError (and subclasses): as `import_lux` does.
    """

    def __init__(self, model: LuxModel | str | os.PathLike[str], **import_options: Any) -> None:
        if not isinstance(model, LuxModel):
            model = import_lux(model, **import_options)
        elif import_options:
            raise JuliaBridgeError("import options only apply when a bundle path is given")
        _check_named(model.params, "params", model)
        _check_named(model.state, "state", model)
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
