"""Bounded parsing of tritonpkg.yaml (issue 23, item 6, the YAML half): an alias bomb, duplicate keys,
an oversized or too deeply nested spec, and values JSON has no kind for are refused at load with
file:line, before anything is written. The bomb runs in a subprocess under RLIMIT_AS, so a regression
fails this test instead of taking the machine down."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tritonpkg.errors import SpecError
from tritonpkg.spec import MAX_DEPTH, MAX_NODES, MAX_SPEC_BYTES, load_spec

MEMORY_LIMIT = 768 << 20  # `tritonpkg package` of a small spec peaks well below this

LAUGHS = """\
  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
  b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
  c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
  d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
  e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
  f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
  g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
  h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
  i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""
HEAD = "name: m\nversion: 1\nkind: vllm\nweights: ./w\n"
BOMBS = {  # where -> (spec, line of the first anchor)
    "engine_args": (HEAD + "engine_args:\n" + LAUGHS, 6),
    "smoke_request": (HEAD + "deployment:\n  smoke_request:\n"
                      + LAUGHS.replace("\n  ", "\n    ").replace("  a:", "    a:", 1), 7),
}


def _package(folder: Path, out: Path) -> tuple[subprocess.CompletedProcess, float]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tritonpkg", "package", str(folder), "-o", str(out)],
                          preexec_fn=limit, capture_output=True, text=True, timeout=120, check=False)
    return done, time.monotonic() - start


def _leftovers(root: Path) -> list[str]:
    return [p.name for p in root.rglob("*") if ".staging-" in p.name or ".old-" in p.name]


@pytest.mark.parametrize("where", sorted(BOMBS))
def test_the_alias_bomb_is_refused_fast_in_bounded_memory(where, tmp_path):
    folder = tmp_path / "spec"
    (folder / "w").mkdir(parents=True)
    (folder / "tritonpkg.yaml").write_text(HEAD + "engine_args: {enforce_eager: true}\n")
    ok, _ = _package(folder, tmp_path / "clean")
    assert ok.returncode == 0, ok.stderr  # the memory limit alone does not fail a package

    bomb, line = BOMBS[where]
    assert len(bomb.encode()) < 1024 and bomb.count("*") == 72
    (folder / "tritonpkg.yaml").write_text(bomb)
    done, seconds = _package(folder, tmp_path / "repo")
    assert done.returncode == 1, done.stderr[-2000:]
    assert "YAML aliases are not accepted in a spec" in done.stderr
    assert f"{folder / 'tritonpkg.yaml'}:{line}:" in done.stderr.replace("\n", "")  # the first anchor's line
    assert "Traceback" not in done.stderr and len(done.stderr) < 1000
    assert seconds < 30
    assert not (tmp_path / "repo").exists() and _leftovers(tmp_path) == []


def write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "tritonpkg.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


@pytest.mark.parametrize(("text", "line", "message"), [
    ("name: a\nversion: 1\nkind: vllm\nweights: ./w\nname: b\n", 5, "duplicate key 'name' (first on line 1)"),
    (HEAD + "engine_args:\n  max_model_len: 256\n  max_model_len: 512\n", 7, "duplicate key 'max_model_len'"),
    (HEAD + "engine_args: {x: &x 1, y: *x}\n", 5, "YAML aliases are not accepted in a spec"),
    (HEAD + "engine_args:\n  <<: {max_model_len: 256}\n", 6, "merge keys (<<) are not accepted"),
    (HEAD + "engine_args: {1: x}\n", 5, "a mapping key must be a string"),
    (HEAD + "engine_args: {revision: 2024-01-01}\n", 5, "a YAML timestamp is not accepted"),
    (HEAD + "engine_args: {blob: !!binary aGVsbG8=}\n", 5, "a YAML binary is not accepted"),
    (HEAD + "engine_args: {x: !!set {a}}\n", 5, "a YAML set is not accepted"),
    (HEAD + "engine_args: {gpu_memory_utilization: .nan}\n", 5, "not a finite number"),
    (HEAD + "engine_args: {max_model_len: " + "9" * 5000 + "}\n", 5, "an integer too long"),
    (HEAD + "engine_args: {x: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "}\n", 5,
     f"nested deeper than {MAX_DEPTH} levels"),
    (HEAD + "engine_args: {x: !!python/object:os.system echo}\n", 5, "could not determine a constructor"),
])
def test_yaml_the_loader_refuses_names_file_and_line(tmp_path, text, line, message):
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert message in str(err.value)
    assert str(err.value).startswith(f"{path}:{line}:")
    assert len(str(err.value)) < 600


def test_a_spec_over_the_size_bound_is_refused_before_it_is_parsed(tmp_path):
    path = write(tmp_path, HEAD + "# " + "x" * MAX_SPEC_BYTES + "\n")
    start = time.monotonic()
    with pytest.raises(SpecError, match="larger than 1048576 bytes"):
        load_spec(path)
    assert time.monotonic() - start < 1


def test_a_spec_of_too_many_values_is_refused_fast(tmp_path):
    """Half a million values fit in 1 MiB and take seconds to parse: the count is bounded too."""
    path = write(tmp_path, HEAD + "engine_args:\n  x: [" + ",".join(["1"] * (MAX_SPEC_BYTES // 2 - 100)) + "]\n")
    assert path.stat().st_size <= MAX_SPEC_BYTES
    start = time.monotonic()
    with pytest.raises(SpecError, match=f"more than {MAX_NODES} values"):
        load_spec(path)
    assert time.monotonic() - start < 10


def test_a_spec_that_is_not_utf8_is_refused(tmp_path):
    with pytest.raises(SpecError, match=r"not UTF-8 \(byte 14\)"):
        load_spec(write(tmp_path, b"name: m\nkind: \xff\n"))


@pytest.mark.parametrize("version", [0, -1, 2**63, 10**23])
def test_a_version_outside_tritons_int64_is_refused_at_load(tmp_path, version):
    with pytest.raises(SpecError) as err:
        load_spec(write(tmp_path, HEAD.replace("version: 1", f"version: {version}")))
    assert f"{tmp_path / 'tritonpkg.yaml'}:2: version:" in str(err.value)


def test_the_largest_int64_version_and_a_clean_spec_still_load(tmp_path):
    (tmp_path / "w").mkdir()
    spec = load_spec(write(tmp_path, HEAD.replace("version: 1", f"version: {2**63 - 1}")
                           + "engine_args:\n  max_model_len: 256\n  compilation_config: {level: 0}\n"))
    assert spec.version == 2**63 - 1 and spec.engine_args == {"max_model_len": 256, "compilation_config": {"level": 0}}


def test_a_contract_file_is_read_by_the_same_bounded_loader(tmp_path):
    """`validate --contract` takes YAML from the user too: the bomb and a duplicate key are refused there."""
    from tritonpkg.errors import TritonpkgError
    from tritonpkg.validate.contract import load_contract

    bomb = tmp_path / "contract.yaml"
    laughs = BOMBS["smoke_request"][0].split("smoke_request:\n")[1]
    bomb.write_text("model: m\ninputs:\n- name: x\n  datatype: FP32\n  shape:\n" + laughs)
    with pytest.raises(SpecError, match="YAML aliases are not accepted") as err:
        load_contract(bomb)
    assert str(err.value).startswith(f"{bomb}:6:")
    bomb.write_text("model: m\nmodel: n\n")
    with pytest.raises(SpecError, match=r"contract.yaml:2:1: duplicate key 'model'"):
        load_contract(bomb)
    deep = tmp_path / "contract.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(TritonpkgError, match="cannot parse contract"):
        load_contract(deep)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("dims", [2**63], "every dim must be a positive size or -1 \\(variable\\), at most 9223372036854775807"),
    ("dims", [1] * 65, "at most 64 items"),
    ("max_batch_size", 2**31, "less than or equal to 2147483647"),
    ("instance_count", 2**31, "less than or equal to 2147483647"),
])
def test_numbers_that_reach_the_model_config_fit_its_fields(write_spec, tmp_path, field, value, message):
    """Out of the protobuf's range they crashed the config builder ("Value out of range") with a traceback."""
    from tritonpkg.repository import package_spec

    python = {"template": "custom", "parameters": {"module": "hooks.py"}, "files": ["hooks.py"],
              "inputs": [{"name": "X", "data_type": "FP32", "dims": [4]}],
              "outputs": [{"name": "Y", "data_type": "FP32", "dims": [4]}]}
    if field == "dims":
        python["inputs"][0]["dims"] = value
    else:
        python[field] = value
    spec = write_spec({"name": "m", "version": 1, "kind": "python", "python": python},
                      extra_files={"hooks.py": "def model(x):\n    return x\n"})
    with pytest.raises(SpecError, match=message):
        package_spec(load_spec(spec), tmp_path / "repo")
    assert not (tmp_path / "repo").exists()
