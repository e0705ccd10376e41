"""`tritonpkg demo` refuses a smoke request whose sampling_parameters the local vLLM would refuse, at its
validate step (before any runtime or engine starts), naming the spec field and the unknown key."""

from __future__ import annotations

import pytest
import yaml

from tests.support.paths import EXAMPLES
from tritonpkg.demo import DemoError, run


def test_demo_refuses_an_unknown_sampling_parameter(tmp_path, tiny_llm_weights):
    spec = yaml.safe_load((EXAMPLES / "tiny-llm" / "tritonpkg.yaml").read_text())
    spec["weights"] = str(tiny_llm_weights)
    spec["deployment"]["smoke_request"]["sampling_parameters"] = '{"max_tokens": 8, "max_tokenz": 2}'
    (tmp_path / "tritonpkg.yaml").write_text(yaml.safe_dump(spec))
    steps: list[str] = []
    with pytest.raises(DemoError, match=r"'max_tokenz'") as err:
        run(tmp_path / "tritonpkg.yaml", tmp_path / "repo", on_step=steps.append)
    assert err.value.field == "deployment.smoke_request.sampling_parameters"
    assert steps == ["package", "validate"]
