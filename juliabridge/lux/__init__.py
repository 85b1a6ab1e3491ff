"""The Lux-model view of a bundle: LuxModel and the bundle route of import_lux
(import_bundle_lux; juliabridge/importers.py dispatches), the options of a load (options),
Lux's parameter and state trees, batch sizes, data parallelism, save/load of parameters.
Verification is juliabridge/verification.py, above the importers."""
