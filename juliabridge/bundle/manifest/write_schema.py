"""Print the manifest's JSON Schema, generated from schema.py's declarations.

``python -m juliabridge.bundle.manifest.write_schema > docs/bundle-manifest.schema.json``
(a module of its own because ``python -m juliabridge.bundle.manifest.schema`` would run a
module the package has already imported).
"""

from __future__ import annotations

import sys

from .schema import schema_text


def main() -> None:
    """Write the schema to standard output."""
    sys.stdout.write(schema_text())


if __name__ == "__main__":
    main()
