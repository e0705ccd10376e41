"""Model repositories written by hand, for the tests that start Triton on the smallest real models."""

from __future__ import annotations

import textwrap
from pathlib import Path

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ -1 ] }} ]
"""
ECHO = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
                for r in requests]
"""
"""model.py of a model that answers Y = X."""
BROKEN = """
class TritonPythonModel:
    def initialize(self, args):
        raise ValueError("model.py refuses to start: missing weights")
"""
"""model.py of a model that fails to load."""


def make_repo(root: Path, models: dict[str, str]) -> Path:
    """`root` holding one Python-backend model (FP32 X -> FP32 Y, version 1) per name -> model.py source."""
    for name, code in models.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(CONFIG.format(name=name))
        (root / name / "1" / "model.py").write_text(textwrap.dedent(code))
    return root
