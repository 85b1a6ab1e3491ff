"""Loading Reactant's StableHLO text: sanitizing, signature, op policy."""

from .module import StableHLOModule, TensorSpec, parse_module

__all__ = ["StableHLOModule", "TensorSpec", "parse_module"]
