"""The Lux-model view of a bundle: import_lux and LuxModel, Lux's parameter and state trees,
batch sizes, data parallelism, save/load of parameters and verify."""
