"""`tritonpkg demo` on the Python-backend sentiment example: packaged, validated, brought up by the serve stage
(the same steps `tritonpkg serve` runs, merged /metrics included), answered, stopped."""

from __future__ import annotations

import json
import subprocess
import urllib.request

import pytest

from tests.support.cli import tritonpkg
from tests.support.paths import EXAMPLES

pytestmark = pytest.mark.integration


def test_demo_brings_the_model_up_through_the_serve_stage(cli_env, tmp_path) -> None:
    out = subprocess.run(tritonpkg("demo", str(EXAMPLES / "sentiment-custom"), "-o", str(tmp_path / "repo"), "--json"),
                         env=cli_env, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["serve_steps"] == ["verify", "weights", "metrics_dir", "triton", "metrics"]
    assert result["answer"]["LABEL"], result
    assert result["endpoints"]["metrics"].endswith("/metrics")
    with pytest.raises(OSError, match="Connection refused"):  # everything it started is stopped
        urllib.request.urlopen(result["endpoints"]["http"] + "/v2/health/live", timeout=2)
