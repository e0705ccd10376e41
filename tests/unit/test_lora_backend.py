"""backends/vllm/lora.py without Triton: reading NVIDIA's multi_lora.json and picking `lora_name`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "backends" / "vllm"))
from lora import AdapterError, Adapters, read_adapters  # the backend's folder, put on sys.path above
from request_params import ParamError


def test_lora_off_reads_nothing(tmp_path):
    (tmp_path / "multi_lora.json").write_text("not json")
    assert read_adapters(str(tmp_path), {"model": "m"}) == {}
    assert read_adapters(str(tmp_path), {"enable_lora": "false"}) == {}


def test_relative_folders_resolve_against_the_version_absolute_ones_stay(tmp_path):
    (tmp_path / "multi_lora.json").write_text(json.dumps({"a": "./adapters/a", "b": "/opt/loras/b"}))
    for flag in (True, "true", "True"):
        assert read_adapters(str(tmp_path), {"enable_lora": flag}) == {
            "a": str(tmp_path / "adapters" / "a"), "b": "/opt/loras/b"}


@pytest.mark.parametrize(("listing", "message"), [
    (None, "is missing"), ("{", "not valid JSON"), ("[]", "name -> folder"), ('{"a": 3}', "name -> folder"),
    ('{"a": ""}', "name -> folder")])
def test_a_bad_list_fails_the_load_naming_the_file(tmp_path, listing, message):
    if listing is not None:
        (tmp_path / "multi_lora.json").write_text(listing)
    with pytest.raises(AdapterError, match=message) as err:
        read_adapters(str(tmp_path), {"enable_lora": True})
    assert str(tmp_path / "multi_lora.json") in str(err.value)


def test_lora_name_without_adapters_is_refused_and_taken_out_of_the_parameters():
    adapters = Adapters({})
    params = {"max_tokens": 4}
    assert adapters.take(params) is None and params == {"max_tokens": 4}
    params = {"max_tokens": 4, "lora_name": "x"}
    with pytest.raises(ParamError, match=r"unknown LoRA adapter 'x' in 'lora_name'; this model serves: none"):
        adapters.take(params)
    assert "lora_name" not in params
    with pytest.raises(ParamError, match="must be a string"):
        adapters.take({"lora_name": ["x"]})
