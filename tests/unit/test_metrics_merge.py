"""The merged /metrics: family splitting and de-duplication on text, the multiprocess directory written by
real prometheus_client child processes, and the HTTP endpoint with a source up and one down."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tritonpkg.metrics import (
    MergedMetricsServer,
    family_blocks,
    merge_expositions,
    multiproc_exposition,
    prepare_multiproc_dir,
)
from tritonpkg.proc.ports import free_port

TRITON_TEXT = """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="tiny_llm",version="1"} 3
nv_inference_request_success{model="other",version="1"} 0
# HELP nv_inference_exec_count Number of model executions performed
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{model="tiny_llm",version="1"} 3
# HELP vllm:num_requests_running stale copy that must lose to nothing: Triton is first
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="x"} 7
"""

CHILD = """
import sys
from prometheus_client import Counter, Gauge, Histogram
tokens = Counter("vllm:prompt_tokens", "Prompt tokens.", ["model_name"])
running = Gauge("vllm:num_requests_running", "Running requests.", ["model_name"], multiprocess_mode="livesum")
ttft = Histogram("vllm:time_to_first_token_seconds", "TTFT.", ["model_name"], buckets=[0.1, 1.0])
tokens.labels("tiny_llm").inc(int(sys.argv[1]))
running.labels("tiny_llm").set(1)
ttft.labels("tiny_llm").observe(0.05)
"""


def type_lines(text: str) -> list[str]:
    return [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]


def test_family_blocks_keep_histogram_samples_together() -> None:
    text = textwrap.dedent("""\
        # HELP h A histogram.
        # TYPE h histogram
        h_bucket{le="1.0"} 1
        h_bucket{le="+Inf"} 2
        h_sum 3.5
        h_count 2
        untyped_thing 4
        # TYPE g gauge
        g 1
        """)
    blocks = family_blocks(text)
    assert list(blocks) == ["h", "untyped_thing", "g"]
    assert len(blocks["h"]) == 6 and blocks["g"] == ["# TYPE g gauge", "g 1"]


def test_merge_keeps_the_first_source_of_a_family_and_reports_the_drop() -> None:
    vllm = ("# HELP vllm:num_requests_running Running.\n# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{model_name="tiny_llm"} 1.0\n')
    merged = merge_expositions([("triton", TRITON_TEXT), ("vllm", vllm)])
    assert type_lines(merged.text) == ["nv_inference_request_success", "nv_inference_exec_count",
                                       "vllm:num_requests_running"]
    assert merged.dropped == [("vllm", "vllm:num_requests_running")]
    assert 'nv_inference_request_success{model="tiny_llm",version="1"} 3' in merged.text
    assert "model_name=\"x\"} 7" in merged.text and "tiny_llm\"} 1.0" not in merged.text


def run_child(directory: Path, count: int) -> None:
    env = {"PROMETHEUS_MULTIPROC_DIR": str(directory), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", CHILD, str(count)], env=env, check=True, timeout=60)


def test_multiprocess_values_of_several_processes_are_summed(tmp_path: Path) -> None:
    directory = prepare_multiproc_dir(tmp_path / "mp")
    run_child(directory, 5)
    run_child(directory, 7)
    text = multiproc_exposition(directory)
    assert 'vllm:prompt_tokens_total{model_name="tiny_llm"} 12.0' in text
    assert 'vllm:num_requests_running{model_name="tiny_llm"} 2.0' in text  # livesum over the two writers
    assert 'vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="tiny_llm"} 2.0' in text
    assert sorted(type_lines(text)) == sorted(set(type_lines(text)))


def test_prepare_clears_value_files_only(tmp_path: Path) -> None:
    directory = prepare_multiproc_dir(tmp_path / "mp")
    run_child(directory, 1)
    (directory / "notes.txt").write_text("the user's")
    assert list(directory.glob("*.db"))
    prepare_multiproc_dir(directory)
    assert not list(directory.glob("*.db"))
    assert (directory / "notes.txt").read_text() == "the user's"
    assert "vllm:" not in multiproc_exposition(directory)


class FakeTritonMetrics:
    """A loopback HTTP server answering Triton's metrics text (the real one is in the integration test);
    `stalls` holds seconds to hold back the next answers, as a busy Triton does."""

    def __init__(self) -> None:
        self.stalls: list[float] = []
        self.requests = 0
        self.released = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake.requests += 1
                if fake.stalls:
                    fake.released.wait(fake.stalls.pop(0))
                body = TRITON_TEXT.encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the caller gave up waiting

            def log_message(self, *_args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"


@pytest.fixture
def fake_triton():
    fake = FakeTritonMetrics()
    thread = threading.Thread(target=fake.httpd.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.released.set()
    fake.httpd.shutdown()
    fake.httpd.server_close()


@pytest.fixture
def fake_triton_metrics(fake_triton):
    return fake_triton.url


def scrape(url: str, scrape_timeout: float | None = None) -> tuple[int, str, str]:
    headers = {"X-Prometheus-Scrape-Timeout-Seconds": str(scrape_timeout)} if scrape_timeout else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as resp:
        return resp.status, resp.headers["Content-Type"], resp.read().decode()


def test_the_endpoint_merges_both_sources_without_duplicate_families(tmp_path: Path, fake_triton_metrics) -> None:
    directory = prepare_multiproc_dir(tmp_path / "mp")
    run_child(directory, 3)
    with MergedMetricsServer(fake_triton_metrics, directory, port=0) as server:
        status, ctype, text = scrape(server.url)
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    families = type_lines(text)
    assert len(families) == len(set(families))
    assert {"nv_inference_request_success", "vllm:prompt_tokens_total", "vllm:time_to_first_token_seconds",
            "tritonpkg_metrics_source_up"} <= set(families)
    assert 'tritonpkg_metrics_source_up{source="triton"} 1' in text
    assert 'tritonpkg_metrics_source_up{source="vllm"} 1' in text


def test_a_source_that_is_down_is_reported_not_fatal(tmp_path: Path) -> None:
    directory = prepare_multiproc_dir(tmp_path / "mp")
    run_child(directory, 3)
    dead = f"http://127.0.0.1:{free_port()}/metrics"
    with MergedMetricsServer(dead, directory, port=0) as server:
        status, _, text = scrape(server.url)
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(server.url.replace("/metrics", "/other"), timeout=5)
        assert info.value.code == 404
    assert status == 200
    assert 'tritonpkg_metrics_source_up{source="triton"} 0' in text
    assert 'vllm:prompt_tokens_total{model_name="tiny_llm"} 3.0' in text


def test_a_slow_triton_fetch_is_tried_again_within_the_scrapers_timeout(fake_triton) -> None:
    fake_triton.stalls = [5.0]  # the first fetch outlives half of the 3 s budget (a 4 s scrape timeout less 1 s)
    with MergedMetricsServer(fake_triton.url, None, port=0) as server:
        started = time.monotonic()
        status, _, text = scrape(server.url, scrape_timeout=4)
        took = time.monotonic() - started
    assert status == 200 and took < 4
    assert fake_triton.requests == 2
    assert 'tritonpkg_metrics_source_up{source="triton"} 1' in text
    assert 'nv_inference_request_success{model="tiny_llm",version="1"} 3' in text


def test_triton_series_do_not_vanish_for_one_failed_fetch(fake_triton) -> None:
    """A fetch that fails every attempt serves the last good scrape again, marked down, while it is fresh."""
    with MergedMetricsServer(fake_triton.url, None, port=0, stale_after=60) as server:
        assert 'source="triton"} 1' in scrape(server.url)[2]
        fake_triton.stalls = [5.0, 5.0]
        text = scrape(server.url, scrape_timeout=2)[2]
        assert 'tritonpkg_metrics_source_up{source="triton"} 0' in text
        assert 'nv_inference_request_success{model="tiny_llm",version="1"} 3' in text
        assert len(type_lines(text)) == len(set(type_lines(text)))
        server.stale_after = 0  # too old now: the series go, the source stays reported down
        fake_triton.stalls = [5.0, 5.0]
        text = scrape(server.url, scrape_timeout=2)[2]
    assert 'tritonpkg_metrics_source_up{source="triton"} 0' in text
    assert "nv_inference_request_success" not in text


def test_the_public_port_waits_for_tritons_metrics_to_name_every_model(fake_triton) -> None:
    from tritonpkg.errors import RuntimeSetupError

    server = MergedMetricsServer(fake_triton.url, None, port=0)
    server.wait_for_triton(5, ["tiny_llm", "other"])
    with pytest.raises(RuntimeSetupError, match=r"not complete after 1 s: no series yet for absent") as info:
        server.wait_for_triton(1, ["tiny_llm", "absent"])
    assert info.value.field == "metrics"
    dead = MergedMetricsServer(f"http://127.0.0.1:{free_port()}/metrics", None, port=0)
    with pytest.raises(RuntimeSetupError, match="refused"):
        dead.wait_for_triton(1)


def test_the_public_port_is_closed_after_stop(tmp_path: Path) -> None:
    port = free_port()
    server = MergedMetricsServer(None, prepare_multiproc_dir(tmp_path / "mp"), port=port).start()
    assert scrape(server.url)[0] == 200
    server.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_one_multiprocess_directory_serves_one_stack_at_a_time(tmp_path: Path) -> None:
    from tritonpkg.errors import RuntimeSetupError
    from tritonpkg.metrics import claim_multiproc_dir

    first = claim_multiproc_dir(tmp_path / "mp")
    run_child(first.path, 2)
    with pytest.raises(RuntimeSetupError, match="in use by another serving stack"):
        claim_multiproc_dir(tmp_path / "mp")
    assert "vllm:prompt_tokens_total" in multiproc_exposition(first.path)  # the refused claim cleared nothing
    first.release()
    second = claim_multiproc_dir(tmp_path / "mp")
    assert "vllm:" not in multiproc_exposition(second.path)
    second.release()
