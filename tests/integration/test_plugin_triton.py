"""A plugin shipped inside a model package, end to end under the real Triton + vLLM CPU.

The logits_ext wheel is built once (`pip wheel --no-deps --no-build-isolation ./logits_ext`: ~1 s when
scripts/setup.sh left its build/ folder, ~36 s cold on 2 cores), declared in a tiny-llm spec, packaged
into an archive, unpacked, installed with `install_bundled` against the archive's lock (the same version
is already in the runtime venv: a no-op that must still see the entry point), and the unpacked repository
is served. Requests carry their constraint in `extra_args` through Triton's generate endpoint; the tiny
model's output is noise, so only the constraint can make it spell a choice. One server for the module."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from tests.support.paths import EXAMPLES, ROOT
from tests.support.servers import FIXTURE_EXIT_TIMEOUT_S

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]
pytest.importorskip("tritonpkg_logits._core", reason="logits_ext is not built (scripts/setup.sh builds it)")

TINY = EXAMPLES / "tiny-llm"
MODEL = "tiny_llm"
CHOICES = ["yes please", "no thanks", "maybe"]


@pytest.fixture(scope="module")
def package(tmp_path_factory, tiny_llm_weights):
    from tritonpkg.repository import package_spec
    from tritonpkg.spec import load_spec

    root = tmp_path_factory.mktemp("plugin-triton")
    spec_dir = root / "spec"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    str(ROOT / "logits_ext"), "-w", str(spec_dir)], check=True, timeout=600)
    (wheel,) = spec_dir.glob("tritonpkg_logits_ext-*.whl")
    data = yaml.safe_load((TINY / "tritonpkg.yaml").read_text())
    data["weights"] = str(tiny_llm_weights)
    data["plugins"] = [{"name": "tritonpkg-logits-ext", "wheel": wheel.name}]
    (spec_dir / "tritonpkg.yaml").write_text(yaml.safe_dump(data))
    package_spec(load_spec(spec_dir), root / "built", archive=root / "model.tar.gz")
    unpacked = root / "unpacked"
    with tarfile.open(root / "model.tar.gz") as tar:
        tar.extractall(unpacked, filter="data")
    return unpacked


@pytest.fixture(scope="module")
def installed(package):
    from tritonpkg.plugins import install_bundled

    return install_bundled(package / "wheels", lock=package / "repository" / "tritonpkg.lock.json")


@pytest.fixture(scope="module")
def server(package, installed):
    from tritonpkg.runtime import TritonServer, ensure_runtime

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
        with TritonServer(package / "repository", runtime=ensure_runtime(), startup_timeout=600,
                          exit_timeout=FIXTURE_EXIT_TIMEOUT_S) as srv:
            yield srv


def generate(server, params: dict) -> tuple[int, dict]:
    body = {"text_input": "hello", "exclude_input_in_output": True, "sampling_parameters": json.dumps(params)}
    req = urllib.request.Request(f"{server.http_url}/v2/models/{MODEL}/generate", data=json.dumps(body).encode(),
                                 method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_package_records_and_installs_the_plugin(package, installed):
    lock = json.loads((package / "repository" / "tritonpkg.lock.json").read_text())
    (rec,) = lock["models"][MODEL]["versions"]["1"]["plugins"]
    assert rec["entry_points"]["vllm.logits_processors"] == {
        "tritonpkg_constraints": "tritonpkg_logits.vllm_adapter:ConstraintLogitsProcessor"}
    assert (package / "wheels" / rec["wheel"]).is_file()
    (plugin,) = installed
    assert (plugin.name, plugin.version, plugin.sha256) == (rec["name"], rec["version"], rec["sha256"])
    assert plugin.action in ("already-installed", "installed", "replaced")
    assert Path(plugin.python).parent == Path(sys.executable).parent  # the interpreter Triton's stub embeds


def test_constrained_generation_through_triton(server, tokenizer_ids):
    a_id = tokenizer_ids("a")
    requests = [{"max_tokens": 24, "temperature": 1.0, "seed": s,
                 "extra_args": {"constraint": {"type": "choice", "choices": CHOICES}}} for s in range(4)]
    requests += [{"max_tokens": 12, "temperature": 1.0, "seed": 9, "ignore_eos": True,
                  "vllm_xargs": {"constraint": json.dumps({"type": "allow", "tokens": [a_id], "eos": False})}},
                 {"max_tokens": 24, "temperature": 1.0, "seed": 0}]
    with ThreadPoolExecutor(len(requests)) as pool:
        results = list(pool.map(lambda p: generate(server, p), requests))
    assert all(status == 200 for status, _ in results), results
    texts = [body["text_output"] for _, body in results]
    assert all(t in CHOICES for t in texts[:4]), texts
    assert texts[4] == "a" * 12, texts[4]
    assert texts[5] not in CHOICES  # the same noise model without a constraint


def test_malformed_constraint_is_a_clear_error(server):
    status, body = generate(server, {"max_tokens": 4, "extra_args": {"constraint": {"type": "regex", "pattern": "x"}}})
    assert status == 400, (status, body)
    assert "constraint type must be one of" in body["error"] and "'regex'" in body["error"], body


@pytest.fixture(scope="module")
def tokenizer_ids():
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TINY / "tokenizer" / "tokenizer.json"))

    def one(text: str) -> int:
        (token_id,) = tok.encode(text, add_special_tokens=False).ids
        return token_id

    return one
