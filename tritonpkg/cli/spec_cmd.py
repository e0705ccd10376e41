from __future__ import annotations

from tritonpkg.cli._common import print_json


def schema() -> None:
    """Print the JSON Schema of tritonpkg.yaml."""
    from tritonpkg.spec import json_schema

    print_json(json_schema())
