"""A local deploy unit comes up the way `tritonpkg serve` does: the tiny LLM's weights live in a real S3 API
(moto server), the spec is deployed red-black to the local target (real HAProxy, real Triton + vLLM), and
the unit serves from a materialized copy — vLLM is never handed the s3:// URL the packaged model.json names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.deploy import make_executor
from tests.support.paths import EXAMPLES

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BUCKET = "deploy-unit-weights"


def test_a_local_unit_materializes_s3_weights_and_serves_the_copy(tmp_path: Path, deploy_runtime, s3_env,
                                                                  monkeypatch) -> None:
    from tritonpkg.deploy.release import build, release_from

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    weights = tmp_path / "weights"
    subprocess.run([sys.executable, str(EXAMPLES / "tiny-llm" / "make_tiny_llm.py"), "--out", str(weights)],
                   check=True, timeout=300)
    s3 = s3_env.client()
    s3.create_bucket(Bucket=BUCKET)
    for path in sorted(weights.rglob("*")):
        if path.is_file():
            s3.upload_file(str(path), BUCKET, f"tiny-llm/{path.relative_to(weights).as_posix()}")
    spec = yaml.safe_load((EXAMPLES / "tiny-llm" / "tritonpkg.yaml").read_text())
    spec["weights"] = f"s3://{BUCKET}/tiny-llm"
    (tmp_path / "spec").mkdir()
    (tmp_path / "spec" / "tritonpkg.yaml").write_text(yaml.safe_dump(spec))

    ex, driver, store = make_executor(tmp_path, deploy_runtime)
    driver.weights_root = tmp_path / "weights-root"
    driver.startup_timeout = None  # a vLLM engine on a busy host: wait while Triton reports it loading
    release = build(release_from(tmp_path / "spec", tmp_path / "work"))
    packaged = json.loads((release.repository / "tiny_llm" / "1" / "model.json").read_text())
    assert packaged["model"] == f"s3://{BUCKET}/tiny-llm"  # the package records where the weights come from
    try:
        out = ex.deploy(release)
        assert out.ok, out.error
        [unit] = [r for r in store.units_table("tiny_llm") if r["status"] != "retired"]
        ep = unit["endpoints"]
        [w] = ep["weights"]
        assert (w["kind"], w["source"]) == ("materialized", f"s3://{BUCKET}/tiny-llm")
        assert Path(w["path"]).is_relative_to(tmp_path / "weights-root") and (Path(w["path"]) / "config.json").is_file()
        served = json.loads((Path(ep["serving_repository"]) / "tiny_llm" / "1" / "model.json").read_text())
        assert served["model"] == w["path"]  # what vLLM was handed
        log = Path(ep["log"]).read_text(errors="replace")
        assert "s3://" not in log, "vLLM saw the s3:// URL"
        # the release's own repository is left as packaged
        assert json.loads((release.repository / "tiny_llm" / "1" / "model.json").read_text()) == packaged
    finally:
        driver.shutdown([r["endpoints"] for r in store.units_table("tiny_llm") if r["status"] != "retired"])
    assert not (tmp_path / "work" / "units").exists() or not any((tmp_path / "work" / "units").iterdir())
