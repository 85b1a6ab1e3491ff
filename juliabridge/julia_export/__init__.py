"""Directories written by JuliaBridge.jl's ``export_lux`` (docs/julia-export.md): the flat
module, the weights and ``juliabridge-export.json``, completed to a format-3 bundle in Python.

description.py reads and checks the description, complete.py holds it against the module and
computes what a bundle adds, convert.py writes the bundle or makes the LuxModel.
"""

from .complete import Completion, complete, is_julia_export
from .convert import convert_julia_export, import_julia_export
from .description import DESCRIPTION_NAME, Description

__all__ = [
    "DESCRIPTION_NAME",
    "Completion",
    "Description",
    "complete",
    "convert_julia_export",
    "import_julia_export",
    "is_julia_export",
]
