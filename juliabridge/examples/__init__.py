"""Example bundles shipped with juliabridge, and the Lux models they were made from.

``lenet_bundle()`` is the path of the LeNet-5 bundle the README and ``juliabridge demo`` use;
``example_bundle_path(name)`` finds any shipped example by name, ``example_names()`` lists them.
``juliabridge.examples.luxmodels`` re-implements Lux layers in JAX to make such bundles without
Julia (for docs and tests).
"""

from .paths import example_bundle_path, example_names, lenet_bundle

__all__ = ["example_bundle_path", "example_names", "lenet_bundle"]
