"""Lift functions, one module per op family.

This is the one place the lax backend's rules are registered: importing this package imports
every family file below, and each file's ``@lifts`` decorators add its ops to
``registry.RULES``. A new family file is added to this import.
"""

from . import (  # noqa: F401  (imported to register their rules)
    calls,
    chlo,
    control,
    conv,
    custom_call,
    dot,
    elementwise,
    fft,
    indexing,
    linalg,
    normalization,
    random,
    reduction,
    shape,
    sort,
)
