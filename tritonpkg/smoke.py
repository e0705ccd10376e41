"""One request to a served model, built from the spec's `deployment.smoke_request`: the demo's answer,
and the canary a rollout sends before it shifts traffic. Decoupled models (vLLM) go through Triton's
generate endpoint; the rest through the official tritonclient."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import numpy as np

from tritonpkg.errors import TritonpkgError


class SmokeError(TritonpkgError):
    """The served model refused or failed the smoke request."""


def _host(http_url: str) -> str:
    return http_url.removeprefix("http://").removeprefix("https://")


def send(http_url: str, model: str, request: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
    """Send `request` (input name -> value) to `model`; return output name -> plain Python value."""
    import tritonclient.http as httpclient  # pulls in gevent: imported only when a request is sent

    client = httpclient.InferenceServerClient(_host(http_url), network_timeout=timeout, connection_timeout=timeout)
    try:
        config = client.get_model_config(model)
    except Exception as exc:  # tritonclient raises its own InferenceServerException
        raise SmokeError(f"model {model!r} is not available: {exc}", field="deployment.smoke_request") from exc
    finally:
        client.close()
    if config.get("model_transaction_policy", {}).get("decoupled"):
        return _generate(http_url, model, request, timeout)
    return _infer(http_url, model, config, request, timeout)


def _generate(http_url: str, model: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    body = {k: (json.dumps(v) if isinstance(v, dict) else v) for k, v in request.items()}
    req = urllib.request.Request(  # noqa: S310  http_url is the served unit's own http:// URL
        f"{http_url}/v2/models/{model}/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310  as above
            data = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise SmokeError(f"{model}: HTTP {exc.code}: {exc.read().decode(errors='replace')}",
                         field="deployment.smoke_request") from exc
    return {k: v for k, v in data.items() if k not in {"model_name", "model_version"}}


def _infer(http_url: str, model: str, config: dict, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    import tritonclient.http as httpclient  # as in send()
    from tritonclient.utils import triton_to_np_dtype

    batched = config.get("max_batch_size", 0) > 0
    inputs = []
    for spec in config.get("input", []):
        name = spec["name"]
        if name not in request:
            if spec.get("optional"):
                continue
            raise SmokeError(f"smoke request has no value for input {name!r}", field="deployment.smoke_request",
                             expected=f"values for {', '.join(i['name'] for i in config['input'])}")
        datatype = spec["data_type"].removeprefix("TYPE_").replace("STRING", "BYTES")
        dtype = np.object_ if datatype == "BYTES" else triton_to_np_dtype(datatype)
        value = request[name]
        array = np.array([v.encode() if isinstance(v, str) else v for v in value] if datatype == "BYTES"
                         and isinstance(value, list) else value, dtype=dtype)
        if batched:
            array = array[np.newaxis, ...]
        tensor = httpclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    client = httpclient.InferenceServerClient(_host(http_url), network_timeout=timeout, connection_timeout=timeout)
    try:
        result = client.infer(model, inputs)
    except Exception as exc:
        raise SmokeError(f"{model}: {exc}", field="deployment.smoke_request") from exc
    finally:
        client.close()
    out: dict[str, Any] = {}
    for spec in config.get("output", []):
        array = result.as_numpy(spec["name"])
        if array is not None:
            out[spec["name"]] = [v.decode() if isinstance(v, bytes) else v for v in array.reshape(-1).tolist()]
    return out
