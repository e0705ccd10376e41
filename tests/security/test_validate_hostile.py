"""What validate (and spec load) said "ok" to although it fails later (issue 23, item 7): local weights
that lead out of the spec's folder, a version beyond Triton's int64, a requirement the pinned vLLM's own
Requires-Dist excludes; and a `package` interrupted by SIGTERM or SIGINT (or killed outright) that left
its staging folder behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tritonpkg.errors import PackageError, SpecError
from tritonpkg.repository import LOCK_NAME, package_spec
from tritonpkg.repository.pins import vllm_requirements
from tritonpkg.spec import load_spec

HOOKS = "def model(inputs):\n    return {'Y': inputs['X'] * 2}\n"


def custom_spec(version: int = 1, **extra) -> dict:
    return {
        "name": "double", "version": version, "kind": "python",
        "python": {"template": "custom", "parameters": {"module": "hooks.py"}, "files": ["hooks.py"],
                   "inputs": [{"name": "X", "data_type": "FP32", "dims": [4]}],
                   "outputs": [{"name": "Y", "data_type": "FP32", "dims": [4]}]},
        **extra,
    }


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*") if ".staging-" in p.name or ".old-" in p.name)


# -- weights ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("weights", ["../../../../etc", "../sibling", "w/../../x", "link", "link/inner"])
def test_local_weights_outside_the_spec_folder_are_refused(write_spec, tmp_path, weights):
    (tmp_path / "sibling" / "inner").mkdir(parents=True)
    spec = write_spec({"name": "m", "version": 1, "kind": "vllm", "weights": weights})
    os.symlink(tmp_path / "sibling", spec.parent / "link")
    with pytest.raises(SpecError, match="leads outside the spec's folder") as err:
        load_spec(spec)
    assert err.value.field == "weights" and err.value.file == f"{spec}:4"
    assert not (tmp_path / "repo").exists()


@pytest.mark.parametrize("weights", ["./weights", "weights/sub", "w/../weights", "ABS", "s3://bucket/m", "hf://o/n@r"])
def test_weights_inside_the_folder_absolute_or_remote_load(write_spec, tmp_path, weights):
    elsewhere = tmp_path / "elsewhere"
    spec = load_spec(write_spec({"name": "m", "version": 1, "kind": "vllm",
                                 "weights": str(elsewhere) if weights == "ABS" else weights}))
    assert spec.weights_location() is not None


@pytest.mark.parametrize(("weights", "message"), [
    ("w\x00x", "without NUL"), ("/models/m\nx", "without NUL"), ("", "non-empty"),
    ("x" * 5000, "at most 4096 bytes"), ("/models/" + "x" * 300, "each folder name at most 255"),
    ("s3://bucket/" + "k" * 5000, "at most 4096 bytes"),
])
def test_weights_that_are_no_path_are_refused_at_load(write_spec, weights, message):
    """A NUL or an over-long name crashed later, in the path calls (ValueError, ENAMETOOLONG)."""
    with pytest.raises(SpecError, match="weights: weights must be") as err:
        load_spec(write_spec({"name": "m", "version": 1, "kind": "vllm", "weights": weights}))
    assert message in str(err.value) and len(str(err.value)) < 600


# -- version ----------------------------------------------------------------------------------------

def test_a_version_directory_beyond_int64_is_an_error(write_spec, tmp_path):
    """Triton 2.51 dies of an uncaught std::out_of_range reading such a model (the whole server, observed)."""
    from tritonpkg.validate import validate_repository

    repo = tmp_path / "repo"
    package_spec(load_spec(write_spec(custom_spec(), extra_files={"hooks.py": HOOKS})), repo)
    huge = repo / "double" / str(10**23)
    (repo / "double" / "1").rename(huge)
    found = [p for p in validate_repository(repo).problems if p.rule == "layout.version-range"]
    assert [(p.severity, p.file, p.field) for p in found] == [("error", f"double/{10**23}", "version")]
    assert "9223372036854775807" in found[0].expected
    with pytest.raises(SpecError, match="version: Input should be less than or equal to 9223372036854775807"):
        load_spec(write_spec(custom_spec(version=10**23), folder="huge"))


# -- requirements against the pinned vLLM's own Requires-Dist -------------------------------------

needs_vllm = pytest.mark.skipif(vllm_requirements() is None, reason="the pinned vLLM is not installed here")


@needs_vllm
def test_a_requirement_the_pinned_vllm_excludes_is_refused_at_package(write_spec, tmp_path):
    version, reqs = vllm_requirements()
    theirs = next(str(r) for r in reqs if r.name == "transformers")
    spec = load_spec(write_spec(custom_spec(requirements=["regex>=2024", "transformers<4"]),
                                extra_files={"hooks.py": HOOKS}))
    with pytest.raises(PackageError) as err:
        package_spec(spec, tmp_path / "repo")
    assert err.value.field == "requirements[1]" and err.value.file == str(spec.source)
    assert f"pinned vLLM {version}, which requires {theirs}" in str(err.value)
    assert not (tmp_path / "repo").exists()
    package_spec(load_spec(write_spec(custom_spec(requirements=[theirs.replace("transformers", "transformers ")]),
                                      folder="ok", extra_files={"hooks.py": HOOKS})), tmp_path / "repo")


@needs_vllm
def test_validate_reports_a_requirements_file_the_pinned_vllm_excludes(write_spec, tmp_path):
    from tritonpkg.validate import validate_repository

    repo = tmp_path / "repo"
    package_spec(load_spec(write_spec(custom_spec(), extra_files={"hooks.py": HOOKS})), repo)
    (repo / "double" / "1" / "requirements.txt").write_text("# hand-written\nregex\ntransformers<4\n")
    found = [p for p in validate_repository(repo).problems if p.rule == "runtime.vllm-requires"]
    assert [(p.severity, p.file, p.line, p.field) for p in found] == [
        ("error", "double/1/requirements.txt", 3, "transformers")]
    assert "no version satisfies both" in found[0].message
    # an NGC image's vLLM is not the one installed here: nothing to compare against
    assert not [p for p in validate_repository(repo, target_release="24.10").problems
                if p.rule == "runtime.vllm-requires"]


# -- an interrupted package leaves no staging --------------------------------------------------------

SLOW_PACKAGE = textwrap.dedent("""
    # `tritonpkg package`, held inside its staging folder: after the first model file is staged it
    # writes FLAG and sleeps, so the signal deterministically arrives while the staging exists.
    # SIGINT stands for an interactive Ctrl-C: a runner started as a background job ignores it, and that
    # disposition would be inherited, so Python's own handler is put back.
    import signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from pathlib import Path
    import tritonpkg.repository.package as package
    flag, argv = Path(sys.argv[1]), sys.argv[2:]
    write_model = package._write_model
    def held(stage, model):
        write_model(stage, model)
        flag.write_text(str(stage))
        time.sleep(120)
    package._write_model = held
    from tritonpkg.cli import app
    app(argv, prog_name="tritonpkg")
""")


def _held_package(tmp_path: Path, spec: Path, repo: Path) -> tuple[subprocess.Popen, Path]:
    flag = tmp_path / "staged"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_PACKAGE, str(flag), "package", str(spec), "-o", str(repo)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not flag.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the package never reached its staging"
        time.sleep(0.05)
    stage = Path(flag.read_text())
    assert stage.is_dir() and stage.parent == repo.parent and ".staging-" in stage.name
    return proc, stage


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_while_staging_leaves_no_staging_and_the_repository_as_it_was(write_spec, tmp_path, sig):
    repo = tmp_path / "out" / "repo"
    package_spec(load_spec(write_spec(custom_spec(1), extra_files={"hooks.py": HOOKS})), repo)
    before = tree(repo)
    proc, stage = _held_package(tmp_path, write_spec(custom_spec(2), folder="v2", extra_files={"hooks.py": HOOKS}),
                                repo)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    # SystemExit(128 + signal) once cleaned up (SIGINT: KeyboardInterrupt, which Typer ends with 130)
    assert proc.returncode == 128 + sig, (proc.returncode, err[-2000:])
    assert "Traceback" not in err
    assert not stage.exists() and leftovers(tmp_path) == []
    assert tree(repo) == before  # version 2 never landed, version 1 untouched


def test_a_killed_package_leaves_a_staging_that_the_next_run_removes(write_spec, tmp_path):
    """SIGKILL cannot be caught: the staging stays, named by its owner's host and pid, and the next
    package into the same target removes it once that owner is gone."""
    repo = tmp_path / "out" / "repo"
    spec = write_spec(custom_spec(1), extra_files={"hooks.py": HOOKS})
    proc, stage = _held_package(tmp_path, spec, repo)
    proc.kill()
    proc.communicate(timeout=60)
    assert stage.is_dir() and f"-{proc.pid}-" in stage.name
    other = tmp_path / "out" / f".repo.staging-00000000-{proc.pid}-x"  # another host's: not ours to judge
    other.mkdir()
    package_spec(load_spec(spec), repo)
    assert not stage.exists() and leftovers(tmp_path) == [other.name]
    assert json.loads((repo / LOCK_NAME).read_text())["models"]["double"]["versions"].keys() == {"1"}


def test_a_live_packagers_staging_is_left_alone(write_spec, tmp_path):
    repo = tmp_path / "out" / "repo"
    spec = write_spec(custom_spec(1), extra_files={"hooks.py": HOOKS})
    proc, stage = _held_package(tmp_path, spec, repo)
    try:
        package_spec(load_spec(write_spec(custom_spec(2), folder="v2", extra_files={"hooks.py": HOOKS})), repo)
        assert stage.is_dir()
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    assert not stage.exists()


# -- a hostile repository: validate reports, never crashes, never waits on a FIFO --------------------

PY_CONFIG = ('name: "m"\nbackend: "python"\ninput [{ name: "X", data_type: TYPE_FP32, dims: [1] }]\n'
             'output [{ name: "Y", data_type: TYPE_FP32, dims: [1] }]\n')
PY_MODEL = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
VLLM_CONFIG = 'name: "m"\nbackend: "vllm"\nmodel_transaction_policy { decoupled: true }\n'


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _sparse(size: int):
    def make(path: Path) -> None:
        with open(path, "wb") as f:
            f.truncate(size)
    return make


HOSTILE_REPOS = {
    "deep JSON model.json": ({"m/config.pbtxt": VLLM_CONFIG, "m/1/model.json": "[" * 100_000 + "]" * 100_000},
                             "engine_args.json", "nested too deeply"),
    "deep JSON object": ({"m/config.pbtxt": VLLM_CONFIG, "m/1/model.json": '{"a":' * 100_000 + "1" + "}" * 100_000},
                         "engine_args.json", "nested too deeply"),
    "FIFO model.json": ({"m/config.pbtxt": VLLM_CONFIG, "m/1/model.json": _fifo}, "layout.model-file", "FIFO"),
    "FIFO model.py": ({"m/config.pbtxt": PY_CONFIG, "m/1/model.py": _fifo}, "layout.model-file", "FIFO"),
    "FIFO requirements": ({"m/config.pbtxt": PY_CONFIG, "m/1/model.py": PY_MODEL, "m/1/requirements.txt": _fifo},
                          None, None),
    "model.py over the bound": ({"m/config.pbtxt": PY_CONFIG, "m/1/model.py": _sparse((16 << 20) + 1)},
                                "backend.python-syntax", "cannot be read"),
    "config.pbtxt over the bound": ({"m/config.pbtxt": _sparse((16 << 20) + 1), "m/1/model.py": PY_MODEL},
                                    "config.syntax", "larger than"),
    "deep config.pbtxt": ({"m/config.pbtxt": PY_CONFIG + "model_warmup { inputs { key: \"X\" value { " * 3000,
                           "m/1/model.py": PY_MODEL}, "config.syntax", ""),
    "binary model.py": ({"m/config.pbtxt": PY_CONFIG, "m/1/model.py": b"\x00\xff\xfe" * 1000},
                        "backend.python-syntax", ""),
    "lock of the wrong shape": ({"m/config.pbtxt": PY_CONFIG, "m/1/model.py": PY_MODEL,
                                 LOCK_NAME: json.dumps({"lock_version": 1, "models": {"m": {
                                     "versions": {"1": {"role": ["custom"], "tritonpkg": {}}}, "config_sha256": 1}}})},
                                "lock.invalid", "cannot be checked"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_REPOS))
def test_validate_reports_a_hostile_repository_instead_of_crashing_or_hanging(tmp_path, case):
    """In a subprocess with a deadline: a FIFO read would block forever in the test process itself."""
    files, rule, words = HOSTILE_REPOS[case]
    repo = tmp_path / "repo"
    for rel, data in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if callable(data):
            data(path)
        else:
            path.write_bytes(data if isinstance(data, bytes) else data.encode())
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tritonpkg", "validate", str(repo), "--json"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "TRITONPKG_NO_LIVE_VLLM": "1"}, check=False)
    assert time.monotonic() - start < 30
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    report = json.loads(done.stdout)
    if rule is not None:
        found = [p for p in report["problems"] if p["rule"] == rule]
        assert found and words in found[0]["message"], report["problems"]
