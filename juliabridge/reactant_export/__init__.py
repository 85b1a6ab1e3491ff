"""Directories written by Reactant's ``Serialization.export_to_enzymejax``
(docs/reactant-export.md): the generated .py read as data (`pyscript`), the inputs npz read
safely (`npz`), the directory (`directory`), its Lux mapping (`luxmap`, `luxmodel`), shardings
(`sharding`) and conversion to a bundle (`convert`)."""

from .directory import ReactantExport, load_reactant_export, open_export

__all__ = ["ReactantExport", "load_reactant_export", "open_export"]
