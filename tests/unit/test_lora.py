"""LoRA adapters: the spec's `adapters:`, packaging into NVIDIA's multi_lora.json layout, the serve step that
materializes remote adapters, and validate's adapter rules, each broken kind reproduced with a real peft
adapter of the tiny Llama."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from tests.support.lora import BROKEN_KINDS, make_adapter, make_base, make_broken
from tests.support.validate_repos import only, run
from tritonpkg.errors import PackageError, RuntimeSetupError, SpecError
from tritonpkg.repository import lock as lock_mod
from tritonpkg.repository import package_spec
from tritonpkg.serve.weights import ensure_adapters, plan_adapters, read_multi_lora
from tritonpkg.spec import Spec, load_spec

pytest.importorskip("peft")

BASE_SPEC = {"name": "tiny_llm", "version": 1, "kind": "vllm", "target_release": "24.10",
             "engine_args": {"enforce_eager": True, "max_model_len": 256, "dtype": "float32"}}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny Llama, two adapters of it (different seeds) and one broken copy of adapter A per kind."""
    root = tmp_path_factory.mktemp("lora")
    base = make_base(root / "base")
    out = {"base": base, "a": make_adapter(base, root / "a", seed=1), "b": make_adapter(base, root / "b", seed=2)}
    out.update(make_broken(out["a"], base, root / "broken"))
    return out


def _spec_dir(tmp_path: Path, made: dict[str, Path], adapters: list[dict], **engine_args: object) -> Path:
    folder = tmp_path / "spec"
    folder.mkdir()
    for entry in adapters:  # a made adapter (by its key) is copied beside the spec
        if entry["source"] in made:
            shutil.copytree(made[entry["source"]], folder / entry["source"])
    spec = {**BASE_SPEC, "weights": str(made["base"]),
            "engine_args": {**BASE_SPEC["engine_args"], **engine_args},
            "adapters": [{**a, "source": f"./{a['source']}" if a["source"] in made else a["source"]}
                         for a in adapters]}
    (folder / "tritonpkg.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return folder


# --- spec ---------------------------------------------------------------------------------------------------

def _validate(adapters: list[dict], **extra: object) -> Spec:
    return Spec.model_validate({**BASE_SPEC, "weights": "/w", "adapters": adapters, **extra})


def test_spec_refuses_a_duplicate_adapter_name_naming_the_field():
    with pytest.raises(ValueError, match=r"adapters\[1\]\.name: duplicate adapter name 'a'"):
        _validate([{"name": "a", "source": "./x"}, {"name": "a", "source": "./y"}])


@pytest.mark.parametrize(("adapter", "message"), [
    ({"name": "tiny_llm", "source": "./x"}, "the model's own name"),
    ({"name": "1st", "source": "./x"}, "should match pattern"),
    ({"name": "../x", "source": "./x"}, "should match pattern"),
    ({"name": "a", "source": "hf://org"}, "hf://org/name@revision"),
    ({"name": "a", "source": "s3://x"}, "s3://bucket/prefix"),
    ({"name": "a", "source": "./x\x00"}, "control characters"),
    ({"name": "a", "source": "./x", "revision": "main"}, "hf:// source only"),
    ({"name": "a", "source": "hf://org/n@v1", "revision": "v2"}, "differs"),
    ({"name": "a", "source": "./x", "rank": 8}, "Extra inputs"),
])
def test_spec_refuses_bad_adapters(adapter, message):
    with pytest.raises(ValueError, match=message):
        _validate([adapter])


def test_spec_adapter_revision_joins_the_hub_source():
    spec = _validate([{"name": "a", "source": "hf://org/n", "revision": "abc"}])
    assert spec.adapter_location(spec.adapters[0]) == "hf://org/n@abc"


def test_spec_adapters_only_on_vllm_models():
    with pytest.raises(ValueError, match="'adapters' only applies to kind 'vllm'"):
        Spec.model_validate({"name": "p", "version": 1, "kind": "python", "python": {"template": "custom"},
                             "adapters": [{"name": "a", "source": "./x"}]})


def test_spec_local_adapter_outside_the_spec_folder_is_refused(write_spec):
    folder = write_spec({**BASE_SPEC, "weights": "/w", "adapters": [{"name": "a", "source": "../../etc"}]})
    with pytest.raises(SpecError) as err:
        load_spec(folder)
    assert err.value.field == "adapters[0].source" and "leads outside" in err.value.message


# --- package ------------------------------------------------------------------------------------------------

def test_package_writes_nvidia_layout_engine_args_and_lock(tmp_path, made):
    folder = _spec_dir(tmp_path, made, [{"name": "alpha", "source": "a"}, {"name": "beta", "source": "b"},
                                        {"name": "gamma", "source": "hf://org/gamma@main"}])
    repo = tmp_path / "repo"
    package_spec(load_spec(folder), repo)
    version = repo / "tiny_llm" / "1"
    assert json.loads((version / "multi_lora.json").read_text()) == {
        "alpha": "./adapters/alpha", "beta": "./adapters/beta", "gamma": "hf://org/gamma@main"}
    assert list(json.loads((version / "multi_lora.json").read_text())) == ["alpha", "beta", "gamma"]
    args = json.loads((version / "model.json").read_text())
    assert (args["enable_lora"], args["max_loras"], args["max_lora_rank"]) == (True, 3, 8)
    for name, src in (("alpha", made["a"]), ("beta", made["b"])):
        assert (version / "adapters" / name / "adapter_model.safetensors").read_bytes() == \
            (src / "adapter_model.safetensors").read_bytes()
    entry = json.loads((repo / lock_mod.LOCK_NAME).read_text())["models"]["tiny_llm"]["versions"]["1"]
    files = entry["adapters"]["alpha"]["files"]
    weights = "tiny_llm/1/adapters/alpha/adapter_model.safetensors"
    assert files[weights] == lock_mod.sha256((made["a"] / "adapter_model.safetensors").read_bytes())
    assert entry["files"][weights] == files[weights]
    assert entry["adapters"]["gamma"] == {"source": "hf://org/gamma@main", "folder": None, "files": {}}
    assert lock_mod.verify(repo) == []
    (version / "adapters" / "alpha" / "adapter_model.safetensors").write_bytes(b"changed")
    assert lock_mod.verify(repo) == [f"{weights}: sha256 differs from the lock"]


def test_package_keeps_what_the_spec_sets(tmp_path, made):
    folder = _spec_dir(tmp_path, made, [{"name": "alpha", "source": "a"}], max_lora_rank=32, max_loras=4)
    package_spec(load_spec(folder), tmp_path / "repo")
    args = json.loads((tmp_path / "repo" / "tiny_llm" / "1" / "model.json").read_text())
    assert (args["max_lora_rank"], args["max_loras"]) == (32, 4)


def test_package_refuses_adapters_with_lora_off(tmp_path, made):
    folder = _spec_dir(tmp_path, made, [{"name": "alpha", "source": "a"}], enable_lora=False)
    with pytest.raises(PackageError) as err:
        package_spec(load_spec(folder), tmp_path / "repo")
    assert err.value.field == "engine_args.enable_lora"


def test_package_refuses_a_link_out_of_the_adapter_folder(tmp_path, made):
    folder = _spec_dir(tmp_path, made, [{"name": "alpha", "source": "a"}])
    secret = tmp_path / "secret.txt"
    secret.write_text("not an adapter file")
    os.symlink(secret, folder / "a" / "notes.txt")
    with pytest.raises(PackageError) as err:
        package_spec(load_spec(folder), tmp_path / "repo")
    assert err.value.field == "adapters[0].source" and "notes.txt" in err.value.message
    assert not (tmp_path / "repo").exists()


# --- serve: adapters on this machine before the engine starts ------------------------------------------------

def test_plan_adapters_local_remote_and_a_way_out():
    actions = plan_adapters({"m/1/multi_lora.json": {"a": "./adapters/a", "b": "/abs/b", "c": "s3://bkt/c"}})
    assert [(a.name, a.kind, a.location) for a in actions] == [
        ("a", "local", "m/1/adapters/a"), ("b", "local", "/abs/b"), ("c", "materialize", "s3://bkt/c")]
    with pytest.raises(RuntimeSetupError) as err:
        plan_adapters({"m/1/multi_lora.json": {"x": "../../../etc"}})
    assert err.value.field == "x" and "outside its model version" in err.value.message


def test_ensure_adapters_materializes_remote_ones_and_points_the_list_at_them(tmp_path, made):
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe({f"/loras/beta/{p.name}": p.read_bytes() for p in made["b"].iterdir()})
    repo = tmp_path / "repo"
    (repo / "m" / "1" / "adapters" / "alpha").mkdir(parents=True)
    (repo / "m" / "1" / "multi_lora.json").write_text(json.dumps({"alpha": "./adapters/alpha",
                                                                  "beta": "memory://loras/beta"}))
    actions = plan_adapters(read_multi_lora(repo))
    results = ensure_adapters(repo, actions, tmp_path / "root")
    listing = json.loads((repo / "m" / "1" / "multi_lora.json").read_text())
    assert listing["alpha"] == "./adapters/alpha"
    beta = Path(listing["beta"])
    assert beta.is_absolute() and (beta / "READY").is_file()
    assert (beta / "adapter_model.safetensors").read_bytes() == (made["b"] / "adapter_model.safetensors").read_bytes()
    assert [(r.kind, r.source) for r in results] == [("local", "m/1/adapters/alpha"),
                                                     ("materialized", "memory://loras/beta")]


def test_ensure_adapters_refuses_a_remote_adapter_above_max_lora_rank(tmp_path, made):
    """Package cannot know a remote adapter's rank: serve checks it once materialized, before the engine."""
    import fsspec

    config = json.loads((made["b"] / "adapter_config.json").read_text())
    fsspec.filesystem("memory").pipe({"/loras/wide/adapter_config.json": json.dumps({**config, "r": 32}).encode(),
                                      "/loras/wide/adapter_model.safetensors": b"x"})
    repo = tmp_path / "repo"
    (repo / "m" / "1").mkdir(parents=True)
    (repo / "m" / "1" / "model.json").write_text(json.dumps({"model": "/w", "enable_lora": True}))
    (repo / "m" / "1" / "multi_lora.json").write_text(json.dumps({"wide": "memory://loras/wide"}))
    with pytest.raises(RuntimeSetupError, match="rank 32, above the engine's max_lora_rank 16") as err:
        ensure_adapters(repo, plan_adapters(read_multi_lora(repo)), tmp_path / "root")
    assert err.value.field == "max_lora_rank"
    (repo / "m" / "1" / "model.json").write_text(json.dumps({"model": "/w", "enable_lora": True, "max_lora_rank": 32}))
    [result] = ensure_adapters(repo, plan_adapters(read_multi_lora(repo)), tmp_path / "root")
    assert result.kind == "materialized"


def test_ensure_adapters_refuses_a_missing_folder_and_a_link_out(tmp_path):
    repo = tmp_path / "repo"
    (repo / "m" / "1").mkdir(parents=True)
    (repo / "m" / "1" / "multi_lora.json").write_text(json.dumps({"a": "./adapters/a"}))
    with pytest.raises(RuntimeSetupError, match="adapter folder not found"):
        ensure_adapters(repo, plan_adapters(read_multi_lora(repo)), tmp_path / "root")
    (repo / "m" / "1" / "adapters").mkdir()
    os.symlink(tmp_path, repo / "m" / "1" / "adapters" / "a")
    with pytest.raises(RuntimeSetupError, match="link that leaves its model version"):
        ensure_adapters(repo, plan_adapters(read_multi_lora(repo)), tmp_path / "root")


# --- validate -----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def packaged(made, tmp_path_factory) -> Path:
    """A repository with adapter A packaged as `alpha` (max_lora_rank 8), to break piece by piece."""
    tmp = tmp_path_factory.mktemp("packaged")
    folder = _spec_dir(tmp, made, [{"name": "alpha", "source": "a"}])
    package_spec(load_spec(folder), tmp / "repo")
    return tmp / "repo"


def _with_adapter(tmp_path: Path, packaged: Path, adapter: Path | None = None, listing: str | None = None,
                  **engine_args: object) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(packaged, repo)
    version = repo / "tiny_llm" / "1"
    if adapter is not None:
        shutil.rmtree(version / "adapters" / "alpha")
        shutil.copytree(adapter, version / "adapters" / "alpha")
    if listing is not None:
        (version / "multi_lora.json").write_text(listing)
    if engine_args:
        args = json.loads((version / "model.json").read_text())
        args.update(engine_args)
        args = {k: v for k, v in args.items() if v is not None}
        (version / "model.json").write_text(json.dumps(args))
    return repo


def _lora_problems(repo: Path) -> list:
    return [p for p in run(repo).problems if p.rule.startswith("lora.")]


def test_validate_a_good_adapter_is_clean(packaged):
    assert _lora_problems(packaged) == []


EXPECTED = {  # broken kind -> (rule, severity, file ending, field)
    "no_config": ("lora.config_missing", "error", "alpha/adapter_config.json", None),
    "bad_json": ("lora.config_json", "error", "alpha/adapter_config.json", None),
    "bad_peft": ("lora.config", "error", "alpha/adapter_config.json", "r"),
    "wrong_base": ("lora.base", "warning", "alpha/adapter_config.json", "base_model_name_or_path"),
    "high_rank": ("lora.rank", "error", "alpha/adapter_config.json", "r"),
    "unknown_module": ("lora.target_modules", "error", "alpha/adapter_config.json", "target_modules"),
    "bad_shape": ("lora.shape", "error", "alpha/adapter_model.safetensors",
                  "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"),
    "no_weights": ("lora.weights_missing", "error", "alpha/adapter_model.safetensors", None),
}


def test_every_broken_kind_has_an_expectation():
    assert set(EXPECTED) == set(BROKEN_KINDS)


@pytest.mark.parametrize("kind", BROKEN_KINDS)
def test_validate_finds_each_broken_adapter(tmp_path, made, packaged, kind):
    found = _lora_problems(_with_adapter(tmp_path, packaged, made[kind]))
    rule, severity, file, field = EXPECTED[kind]
    assert [(p.rule, p.severity, p.field) for p in found if p.rule == rule][:1] == [(rule, severity, field)], found
    assert all(p.file.endswith(file) for p in found if p.rule == rule)
    assert "'alpha'" in found[0].message


def test_validate_wrong_architecture_base_folder_is_an_error(tmp_path, made, packaged):
    other = tmp_path / "other"
    other.mkdir()
    config = json.loads((made["base"] / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "architectures": ["MistralForCausalLM"],
                                                   "model_type": "mistral"}))
    adapter = tmp_path / "adapter"
    shutil.copytree(made["a"], adapter)
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**cfg, "base_model_name_or_path": str(other)}))
    [problem] = only(run(_with_adapter(tmp_path / "x", packaged, adapter)), "lora.base")
    assert problem.severity == "error" and "MistralForCausalLM" in problem.message


def test_validate_enable_lora_without_an_adapter_list(tmp_path, packaged):
    repo = _with_adapter(tmp_path, packaged)
    (repo / "tiny_llm" / "1" / "multi_lora.json").unlink()
    [problem] = _lora_problems(repo)
    assert (problem.rule, problem.field) == ("lora.list_missing", "enable_lora")
    assert problem.file.endswith("tiny_llm/1/model.json") and "FileNotFoundError" in problem.message


def test_validate_duplicate_names_in_the_list(tmp_path, packaged):
    repo = _with_adapter(tmp_path, packaged, listing='{"alpha": "./adapters/alpha", "alpha": "./adapters/alpha"}')
    [problem] = _lora_problems(repo)
    assert (problem.rule, problem.field) == ("lora.duplicate", "alpha")
    assert problem.file.endswith("tiny_llm/1/multi_lora.json")


@pytest.mark.parametrize(("listing", "rule"), [("[1]", "lora.list_json"), ("{", "lora.list_json"),
                                                ('{"alpha": "../../../../etc"}', "lora.folder"),
                                                ('{"alpha": "./adapters/none"}', "lora.folder"),
                                                ("{}", "lora.list_empty")])
def test_validate_bad_lists(tmp_path, packaged, listing, rule):
    found = _lora_problems(_with_adapter(tmp_path, packaged, listing=listing))
    assert [p.rule for p in found] == [rule]
    assert found[0].file.endswith("multi_lora.json")


def test_validate_rank_against_the_default_max_lora_rank(tmp_path, made, packaged):
    """Without max_lora_rank in model.json vLLM's default (16) applies: rank 16 fits, 32 does not."""
    adapter = tmp_path / "adapter"
    shutil.copytree(made["a"], adapter)
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**cfg, "r": 32}))
    found = _lora_problems(_with_adapter(tmp_path / "x", packaged, adapter, max_lora_rank=None))
    assert [(p.rule, p.field) for p in found] == [("lora.rank", "r")] and "max_lora_rank 16" in found[0].message


@pytest.mark.parametrize(("change", "field"), [({"lora_dropout_rate": 0.1}, "lora_dropout_rate"),
                                               ({"use_dora": True}, "use_dora"), ({"peft_type": "IA3"}, "peft_type"),
                                               ({"target_modules": []}, "target_modules")])
def test_validate_config_fields_peft_or_vllm_refuse(tmp_path, made, packaged, change, field):
    """An unknown key (peft's LoraConfig has no such field), a feature vLLM refuses, another peft type."""
    adapter = tmp_path / "adapter"
    shutil.copytree(made["a"], adapter)
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**cfg, **change}))
    found = _lora_problems(_with_adapter(tmp_path / "x", packaged, adapter))
    assert [(p.rule, p.field) for p in found] == [("lora.config", field)], found


def test_validate_a_list_without_lora_on_is_a_warning(tmp_path, packaged):
    found = _lora_problems(_with_adapter(tmp_path, packaged, enable_lora=False))
    assert [(p.rule, p.severity, p.field) for p in found] == [("lora.disabled", "warning", "enable_lora")]


def test_the_example_packages_and_validates_clean(tmp_path, made):
    """examples/tiny-llm-lora as written, with what its make_adapters.py makes (copied in from this module's
    made adapters: the same builder)."""
    from tests.support.paths import EXAMPLES

    folder = tmp_path / "example"
    folder.mkdir()
    shutil.copy(EXAMPLES / "tiny-llm-lora" / "tritonpkg.yaml", folder)
    for name, key in (("weights", "base"), ("support-bot", "a"), ("legal-bot", "b")):
        shutil.copytree(made[key], folder / "made" / name)
    package_spec(load_spec(folder), tmp_path / "repo")
    version = tmp_path / "repo" / "tiny_llm_lora" / "1"
    assert list(json.loads((version / "multi_lora.json").read_text())) == ["support-bot", "legal-bot"]
    args = json.loads((version / "model.json").read_text())
    assert (args["enable_lora"], args["max_loras"], args["max_lora_rank"]) == (True, 2, 8)
    assert [p for p in run(tmp_path / "repo").problems if p.severity == "error" or p.rule.startswith("lora.")] == []


def test_validate_an_adapter_named_like_a_model_is_a_warning(tmp_path, packaged):
    repo = _with_adapter(tmp_path, packaged, listing='{"alpha": "./adapters/alpha", "tiny_llm": "./adapters/alpha"}')
    found = _lora_problems(repo)
    assert [(p.rule, p.severity, p.field) for p in found] == [("lora.name_taken", "warning", "tiny_llm")], found
    assert "model 'tiny_llm'" in found[0].message
