"""The spec's `openai:` settings block: accepted as a bool or a mapping of vLLM parser names, recorded in
the lock, read back by the frontend's catalog, and checked by `tritonpkg validate` against the installed
vLLM's own parser tables (a name it lacks, a chat template that drops the tools)."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from tests.support.paths import EXAMPLES
from tritonpkg.errors import SpecError
from tritonpkg.frontend.catalog import read_parser_names
from tritonpkg.repository import package_spec
from tritonpkg.spec import load_spec
from tritonpkg.validate import validate_repository

MOCK = EXAMPLES / "mock-tool-llm"


def mock_spec(tmp_path, **openai):
    folder = tmp_path / "mock"
    shutil.copytree(MOCK, folder)
    data = yaml.safe_load((folder / "tritonpkg.yaml").read_text())
    if openai:
        data["openai"] = openai
    (folder / "tritonpkg.yaml").write_text(yaml.safe_dump(data))
    return folder


def openai_problems(repo):
    return [p for p in validate_repository(repo).problems if p.rule.startswith("openai")]


@pytest.mark.parametrize(("value", "enabled", "parsers"), [
    (True, True, {}), (False, False, {}), ({"tool_call_parser": "hermes"}, True, {"tool_call_parser": "hermes"}),
    ({"enabled": False, "reasoning_parser": "qwen3"}, False, {"reasoning_parser": "qwen3"})])
def test_openai_is_a_bool_or_a_mapping(write_spec, value, enabled, parsers):
    spec = load_spec(write_spec({"name": "m", "version": 1, "kind": "vllm", "weights": "hf://o/m@main",
                                 "openai": value}))
    assert (spec.openai_enabled, spec.openai_parsers) == (enabled, parsers)


@pytest.mark.parametrize(("value", "field"), [({"tool_parser": "hermes"}, "openai"),
                                          ({"tool_call_parser": "../x"}, "openai.tool_call_parser"),
                                          ({"reasoning_parser": "a" * 65}, "openai.reasoning_parser")])
def test_openai_mapping_is_strict(write_spec, value, field):
    with pytest.raises(SpecError) as info:
        load_spec(write_spec({"name": "m", "version": 1, "kind": "vllm", "weights": "hf://o/m@main", "openai": value}))
    assert field in str(info.value)


def test_the_lock_records_the_parsers_and_the_catalog_reads_them(tmp_path):
    repo = tmp_path / "repo"
    package_spec(load_spec(MOCK), repo)
    lock = json.loads((repo / "tritonpkg.lock.json").read_text())
    serving = lock["models"]["mock_tool_llm"]["versions"]["1"]["serving"]
    assert serving["openai"] is True
    assert read_parser_names(repo, "mock_tool_llm", "1") == {"tool_call_parser": "hermes",
                                                             "reasoning_parser": "deepseek_r1"}
    assert read_parser_names(repo, "mock_tool_llm", "2") == {} and read_parser_names(None, "mock_tool_llm", "1") == {}
    (repo / "tritonpkg.lock.json").write_text("[" * 100_000)  # hostile: nested past the parser's recursion
    assert read_parser_names(repo, "mock_tool_llm", "1") == {}


def test_a_plain_openai_true_lock_has_no_parser_entry(write_spec, tmp_path):
    spec = write_spec({"name": "m", "version": 1, "kind": "vllm", "weights": "hf://o/m@main", "openai": True})
    package_spec(load_spec(spec), tmp_path / "repo")
    lock = json.loads((tmp_path / "repo" / "tritonpkg.lock.json").read_text())
    serving = lock["models"]["m"]["versions"]["1"]["serving"]
    assert serving == {"execution_mode": "embedded", "openai": True}


def test_validate_accepts_parsers_the_pinned_vllm_has(tmp_path):
    package_spec(load_spec(MOCK), tmp_path / "repo")
    assert openai_problems(tmp_path / "repo") == []


def test_validate_refuses_a_parser_vllm_lacks(tmp_path):
    package_spec(load_spec(mock_spec(tmp_path, tool_call_parser="hermess", reasoning_parser="no_such_parser")),
                 tmp_path / "repo")
    found = {p.rule: p for p in openai_problems(tmp_path / "repo")}
    assert set(found) == {"openai.tool_call_parser", "openai.reasoning_parser"}
    tool = found["openai.tool_call_parser"]
    assert tool.severity == "error" and "did you mean 'hermes'" in tool.message and tool.file == "tritonpkg.lock.json"
    assert tool.field == "models.mock_tool_llm.versions.1.serving.openai_parsers.tool_call_parser"
    assert "llama3_json" in tool.expected and "deepseek_r1" in found["openai.reasoning_parser"].expected


def test_validate_refuses_a_chat_template_that_drops_the_tools(tmp_path):
    folder = mock_spec(tmp_path, tool_call_parser="hermes")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    package_spec(load_spec(folder), tmp_path / "repo")
    (problem,) = openai_problems(tmp_path / "repo")
    assert problem.rule == "openai.chat_template" and problem.severity == "error" and "tools" in problem.message
