"""backends/vllm/lora.py without Triton: reading NVIDIA's multi_lora.json, picking `lora_name`, and moving a
served list to the next (an engine that records add_lora/remove_lora stands in for vLLM's; the real engine's
rollout is in tests/integration/test_lora_serving.py)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "backends" / "vllm"))
from lora import AdapterError, Adapters, apply_list, follow_list, read_adapters  # backends/vllm, on sys.path above
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
    adapters = Adapters()
    params = {"max_tokens": 4}
    assert adapters.take(params) is None and params == {"max_tokens": 4}
    params = {"max_tokens": 4, "lora_name": "x"}
    with pytest.raises(ParamError, match=r"unknown LoRA adapter 'x' in 'lora_name'; this model serves: none"):
        adapters.take(params)
    assert "lora_name" not in params
    with pytest.raises(ParamError, match="must be a string"):
        adapters.take({"lora_name": ["x"]})


pytest.importorskip("vllm")


class Engine:
    """Records the engine calls; refuses folders named in `broken` as vLLM's worker refuses a bad adapter."""

    def __init__(self, broken=()):
        self.broken, self.calls = set(broken), []

    async def add_lora(self, request):
        self.calls.append(("add", request.lora_name, request.lora_int_id))
        if request.lora_path in self.broken:
            raise RuntimeError("Call to add_lora method failed: adapter_model.safetensors: header too large")
        return True

    async def remove_lora(self, lora_id):
        self.calls.append(("remove", lora_id))
        return True


def serve(adapters, folders, engine, log=None):
    asyncio.run(apply_list(adapters, folders, engine, (log if log is not None else []).append))


def test_a_new_list_loads_new_folders_first_shares_an_aliased_folder_and_removes_dropped_ones(tmp_path):
    a, b, c = (tmp_path / n for n in "abc")
    for folder in (a, b, c):
        folder.mkdir()
    adapters, engine = Adapters(), Engine()
    serve(adapters, {"a": str(a), "b": str(b)}, engine)
    assert engine.calls == [("add", "a", 1), ("add", "b", 2)]  # NVIDIA's numbering: the list's order from 1
    first_a = adapters.take({"lora_name": "a"})
    engine.calls.clear()
    # the rollout: bot@2 is new, bot is an alias of it (same folder: one adapter), a stays, b goes
    serve(adapters, {"a": str(a), "bot@2": str(c), "bot": str(c)}, engine)
    assert engine.calls == [("add", "bot@2", 3), ("remove", 2)]
    assert adapters.take({"lora_name": "a"}) is first_a
    assert adapters.take({"lora_name": "bot"}) is adapters.take({"lora_name": "bot@2"})
    with pytest.raises(ParamError, match=r"unknown LoRA adapter 'b'.*serves: 'a', 'bot@2', 'bot'"):
        adapters.take({"lora_name": "b"})
    engine.calls.clear()
    serve(adapters, {"b": str(b)}, engine)  # b's folder again: a new adapter to vLLM, ids are not reused
    assert engine.calls == [("add", "b", 4), ("remove", 1), ("remove", 3)]


def test_a_folder_the_engine_refuses_is_refused_by_name_and_the_rest_serve(tmp_path):
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    adapters, log = Adapters(), []
    serve(adapters, {"good": str(good), "bad": str(bad), "gone": str(tmp_path / "gone")}, Engine(broken={str(bad)}),
          log)
    assert adapters.take({"lora_name": "good"}).lora_path == str(good)
    with pytest.raises(ParamError, match=r"'bad' in 'lora_name' is listed in multi_lora.json but its folder "
                                         r"could not be loaded \(RuntimeError: .*header too large\); "
                                         r"this model serves: 'good'"):
        adapters.take({"lora_name": "bad"})
    with pytest.raises(ParamError, match=r"'gone'.*could not be loaded \(FileNotFoundError: no folder"):
        adapters.take({"lora_name": "gone"})
    assert any("'bad'" in line and "header too large" in line for line in log), log


def test_follow_list_serves_a_list_renamed_onto_the_old_and_keeps_serving_through_a_bad_one(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    listing = tmp_path / "multi_lora.json"
    listing.write_text(json.dumps({"a": "./a"}))
    (tmp_path / ".multi_lora.served.json").write_text("{}")  # asked for, as a rollout asks
    args = {"enable_lora": True}
    adapters, engine, log, closing, acknowledged = Adapters(), Engine(), [], [], []

    async def rollout():
        await apply_list(adapters, read_adapters(str(tmp_path), args), engine, log.append)
        task = asyncio.ensure_future(follow_list(adapters, str(tmp_path), args, engine, lambda: bool(closing),
                                                 log.append, interval=0.01))
        await asyncio.sleep(0.05)
        (tmp_path / "next.json").write_text(json.dumps({"a": "./a", "b": "./b", "c": "./missing"}))
        os.replace(tmp_path / "next.json", listing)
        acknowledged.append(hashlib.sha256(listing.read_bytes()).hexdigest())
        for _ in range(200):
            await asyncio.sleep(0.01)
            if "b" in adapters.folders:
                break
        listing.write_text("{ half written")
        await asyncio.sleep(0.1)
        closing.append(True)
        await task

    asyncio.run(rollout())
    assert adapters.take({"lora_name": "b"}).lora_path == str(tmp_path / "b")
    assert adapters.take({"lora_name": "a"}).lora_int_id == 1  # kept through both changes
    assert any("not valid JSON" in line and "stay as they were" in line for line in log), log
    # the acknowledgement names the last list applied (the half-written one is not), what it serves and refuses
    ack = json.loads((tmp_path / ".multi_lora.served.json").read_text())
    assert ack["list_sha256"] == acknowledged[0] and ack["served"] == ["a", "b"]
    assert list(ack["refused"]) == ["c"] and "no folder" in ack["refused"]["c"]


def test_no_acknowledgement_is_written_unless_asked_for(tmp_path):
    from lora import acknowledge

    acknowledge(str(tmp_path), Adapters(), "digest", print)
    assert list(tmp_path.iterdir()) == []  # a repository served in place gains no file
