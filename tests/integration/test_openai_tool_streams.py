"""Chat with tools on the tiny LLM through the frontend with vLLM's pythonic tool-call parser, compared with what
`vllm serve --enable-auto-tool-choice --tool-call-parser pythonic` sent for the same requests on the same weights
and engine settings (greedy): tests/support/vllm_tool_streams.json, recorded by tests/support/vllm_tool_streams.py.

The shared Triton (`vllm_server`) serves the model; the frontend reads the parser from its own copy of the
repository, whose lock names it (as `tritonpkg frontend -m REPO` in front of a Triton elsewhere): no engine of its
own. The tiny model's output is noise, but the same noise in both servers, so the answers are compared whole and
the streams by their chunk structure (chunk boundaries may differ: the backend can merge a step's tokens)."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest

from tests.support.vllm_tool_streams import RECORDING, post

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RECORDED = json.loads(RECORDING.read_text())
NAMES = [name for name in RECORDED["requests"] if not name.endswith("_stream")]


@pytest.fixture(scope="module")
def repo(vllm_repo, tmp_path_factory):
    """The shared repository's copy whose lock names the recording's tool-call parser for tiny_llm."""
    copy = tmp_path_factory.mktemp("tool-streams") / "repository"
    shutil.copytree(vllm_repo, copy, ignore=shutil.ignore_patterns("weights"))
    lock_path = copy / "tritonpkg.lock.json"
    lock = json.loads(lock_path.read_text())
    lock["models"]["tiny_llm"]["versions"]["1"]["serving"]["openai_parsers"] = {
        "tool_call_parser": RECORDED["tool_call_parser"]}
    lock_path.write_text(json.dumps(lock))
    return copy


@pytest.fixture(scope="module")
def frontend(vllm_server, repo):
    from tritonpkg.frontend import FrontendServer, FrontendSettings

    with FrontendServer(FrontendSettings(triton_grpc_url=vllm_server.grpc_url, port=0, model_repository=repo,
                                         triton_admin_key=vllm_server.admin_key)) as fe:
        yield fe


def _message(body: dict[str, Any]) -> dict[str, Any]:
    (choice,) = body["choices"]
    message = choice["message"]
    return {"content": message["content"], "finish_reason": choice["finish_reason"],
            "tool_calls": [(c["type"], c["function"]["name"], c["function"]["arguments"])
                           for c in message.get("tool_calls") or []]}


def _shape(chunks: list[Any]) -> list[str]:
    """A stream as the kinds of its chunks, repeats collapsed: role, content, call (index, id, type, name), args
    (index and an argument fragment only), finish:<reason>, [DONE]."""
    kinds: list[str] = []
    for chunk in chunks:
        if chunk == "[DONE]":
            kinds.append("[DONE]")
            continue
        (choice,) = chunk["choices"]
        delta = choice["delta"]
        found = ["role"] if "role" in delta else []
        found += ["content"] if delta.get("content") and "role" not in delta else []
        for call in delta.get("tool_calls") or []:
            if "id" in call:
                assert {k for k in call if call[k] is not None} == {"id", "type", "index", "function"}, call
                found.append("call")
            else:
                assert set(call) == {"index", "function"} and not call["function"].get("name"), call
                found.append("args")
        found += [f"finish:{choice['finish_reason']}"] if choice["finish_reason"] else []
        for kind in found:
            if not kinds or kinds[-1] != kind:
                kinds.append(kind)
    return kinds


def _joined(chunks: list[Any]) -> dict[str, Any]:
    content, arguments, names = "", "", []
    for chunk in chunks:
        for choice in [] if chunk == "[DONE]" else chunk["choices"]:
            content += choice["delta"].get("content") or ""
            for call in choice["delta"].get("tool_calls") or []:
                names += [call["function"]["name"]] if call["function"].get("name") else []
                arguments += call["function"].get("arguments") or ""
    return {"content": content, "names": names, "arguments": arguments}


@pytest.mark.parametrize("name", NAMES)
def test_a_chat_with_tools_is_answered_as_vllm_serve_answers_it(frontend, name):
    """auto, required, a named tool, none: the same message (content "" for a forced choice, the call's name
    and arguments) and finish_reason."""
    assert _message(post(frontend.url, RECORDED["requests"][name])) == _message(RECORDED["answers"][name])


@pytest.mark.parametrize("name", NAMES)
def test_a_streamed_chat_with_tools_has_vllm_serves_chunk_structure(frontend, name):
    """The role chunk, then what vLLM's parser streams (a named tool: the call with the first argument
    fragment, then fragments; `required`: nothing until a call parses), the finish chunk, [DONE]; joined, the
    same text and arguments."""
    ours = post(frontend.url, RECORDED["requests"][f"{name}_stream"])
    theirs = RECORDED["answers"][f"{name}_stream"]
    assert _shape(ours) == _shape(theirs)
    assert _joined(ours) == _joined(theirs)
