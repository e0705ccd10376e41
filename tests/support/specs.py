"""Specs the tests write: the `custom`-template model that doubles X, and versioned models for rollouts."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

HOOKS = "import numpy as np\n\ndef model(inputs):\n    return {'Y': inputs['X'] * 2}\n"
"""hooks.py of `custom_spec`'s model."""


def custom_spec(version: int = 1, **extra: Any) -> dict[str, Any]:
    """A `custom`-template model `double` (Y = 2 X, four FP32s) whose hooks.py is `HOOKS`; `extra` adds
    top-level spec fields (plugins, deployment, ...)."""
    return {
        "name": "double",
        "version": version,
        "kind": "python",
        "python": {
            "template": "custom",
            "parameters": {"module": "hooks.py"},
            "files": ["hooks.py"],
            "inputs": [{"name": "X", "data_type": "FP32", "dims": [4]}],
            "outputs": [{"name": "Y", "data_type": "FP32", "dims": [4]}],
        },
        **extra,
    }


_DEPLOY_IDS = itertools.count()
VERSIONED_HOOKS = """
VERSION = {version}
{prelude}

def model(inputs):
    x = inputs["{input}"]
    {check}
    return {{"Y": x + VERSION}}
"""


def write_deploy_spec(root: Path, name: str, version: int, *, input_name: str = "X", prelude: str = "",
                      check: str = "pass", steps: Sequence[int] = (25, 50, 100)) -> Path:
    """A folder under `root` holding a spec whose model answers Y = X + `version` (so a client sees which
    version served it), with `prelude` at module level and `check` run on each request (to make a version
    crash at start or fail its canary), `steps` as its traffic steps."""
    folder = root / f"{name}-v{version}-{next(_DEPLOY_IDS)}"
    folder.mkdir(parents=True)
    (folder / "hooks.py").write_text(VERSIONED_HOOKS.format(version=version, prelude=prelude, input=input_name,
                                                            check=check))
    spec = {
        "name": name, "version": version, "kind": "python",
        "python": {"template": "custom", "parameters": {"module": "hooks.py"}, "files": ["hooks.py"],
                   "inputs": [{"name": input_name, "data_type": "FP32", "dims": [2]}],
                   "outputs": [{"name": "Y", "data_type": "FP32", "dims": [2]}]},
        "deployment": {"traffic_steps": list(steps), "smoke_request": {input_name: [1.0, 2.0]}},
    }
    (folder / "tritonpkg.yaml").write_text(yaml.safe_dump(spec))
    return folder
