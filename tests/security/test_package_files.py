"""Issue 23 item 3: `python.files` entries are names from outside. An absolute path, a `..`, a symlink
leading out of the spec's folder or a FIFO is refused at package time (file: the spec, field:
`python.files[i]`) with nothing written; a file inside is copied with its own mode bits, into the
repository, into `--archive` and back out of `serve`'s unpack."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from tritonpkg.errors import SpecError
from tritonpkg.repository import package_spec
from tritonpkg.serve.unpack import unpack_archive
from tritonpkg.spec import load_spec

MARKER = "tritonpkg host secret marker\n"
HOOKS = "def model(inputs):\n    return {'Y': inputs['X'] * 2}\n"


def _spec(files: list[str]) -> dict:
    return {
        "name": "double", "version": 1, "kind": "python",
        "python": {"template": "custom", "parameters": {"module": "hooks.py"}, "files": files,
                   "inputs": [{"name": "X", "data_type": "FP32", "dims": [4]}],
                   "outputs": [{"name": "Y", "data_type": "FP32", "dims": [4]}]},
    }


@pytest.fixture
def host_secret(tmp_path: Path) -> Path:
    secret = tmp_path / "host" / "shadow"
    secret.parent.mkdir()
    secret.write_text(MARKER)
    secret.chmod(0o640)
    return secret


def _copies_of_marker(tree: Path, original: Path) -> list[Path]:
    found = []
    for dirpath, _dirs, names in os.walk(tree):
        for name in names:
            path = Path(dirpath) / name
            if path == original or path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            if MARKER.encode() in data:
                found.append(path)
            elif name.endswith(".tar.gz"):
                with tarfile.open(path) as tar:
                    if any(m.isfile() and MARKER.encode() in tar.extractfile(m).read() for m in tar):
                        found.append(path)
    return found


def _refuse(tmp_path: Path, spec_path: Path, index: int, match: str, secret: Path) -> str:
    repo, archive = tmp_path / "repo", tmp_path / "pkg.tar.gz"
    with pytest.raises(SpecError, match=match) as err:
        package_spec(load_spec(spec_path), repo, archive=archive)
    assert err.value.file == str(spec_path) and err.value.field == f"python.files[{index}]"
    assert len(str(err.value)) - len(str(spec_path)) < 400  # short: the spec's own path is the only long part
    assert not repo.exists() and not archive.exists()
    assert _copies_of_marker(tmp_path, secret) == []
    return str(err.value)


def test_absolute_host_path_is_refused(write_spec, tmp_path, host_secret):
    spec = write_spec(_spec(["hooks.py", str(host_secret)]), extra_files={"hooks.py": HOOKS})
    _refuse(tmp_path, spec, 1, "an absolute path", host_secret)


def test_etc_shadow_is_refused(write_spec, tmp_path, host_secret):
    spec = write_spec(_spec(["/etc/shadow"]), extra_files={"hooks.py": HOOKS})
    _refuse(tmp_path, spec, 0, r"'/etc/shadow' breaks the path rule: an absolute path", host_secret)


def test_parent_reference_is_refused(write_spec, tmp_path, host_secret):
    spec = write_spec(_spec(["hooks.py", "../host/shadow"]), extra_files={"hooks.py": HOOKS})
    _refuse(tmp_path, spec, 1, "'..' segment", host_secret)


@pytest.mark.parametrize("link_in", ["", "sub/"])
def test_symlink_leaving_the_spec_folder_is_refused(write_spec, tmp_path, host_secret, link_in):
    spec = write_spec(_spec(["hooks.py", f"{link_in}lexicon.json"]), extra_files={"hooks.py": HOOKS})
    (spec.parent / link_in).mkdir(exist_ok=True)
    os.symlink(host_secret, spec.parent / link_in / "lexicon.json")
    _refuse(tmp_path, spec, 1, "outside", host_secret)


def test_folder_link_leaving_the_spec_folder_is_refused(write_spec, tmp_path, host_secret):
    spec = write_spec(_spec(["hooks.py", "data/shadow"]), extra_files={"hooks.py": HOOKS})
    os.symlink(host_secret.parent, spec.parent / "data")
    _refuse(tmp_path, spec, 1, "outside", host_secret)


def test_fifo_is_refused_without_blocking(write_spec, tmp_path, host_secret):
    spec = write_spec(_spec(["hooks.py", "pipe"]), extra_files={"hooks.py": HOOKS})
    os.mkfifo(spec.parent / "pipe")
    _refuse(tmp_path, spec, 1, "not a regular file", host_secret)


def test_entry_may_not_replace_a_template_file(write_spec, tmp_path, host_secret):
    spec = write_spec(_spec(["hooks.py", "model.py"]), extra_files={"hooks.py": HOOKS, "model.py": "x = 1\n"})
    _refuse(tmp_path, spec, 1, "would replace double/1/model.py", host_secret)


def test_files_inside_keep_their_own_modes_through_repository_archive_and_unpack(write_spec, tmp_path):
    spec = write_spec(_spec(["hooks.py", "lexicon.json", "tool.sh", "alias.json", "shared.txt"]),
                      extra_files={"hooks.py": HOOKS, "lexicon.json": "{}", "tool.sh": "echo\n", "shared.txt": ""})
    (spec.parent / "hooks.py").chmod(0o640)
    (spec.parent / "shared.txt").chmod(0o666)  # group/other write is not shipped
    (spec.parent / "lexicon.json").chmod(0o600)
    (spec.parent / "tool.sh").chmod(0o750)
    os.symlink("lexicon.json", spec.parent / "alias.json")  # a link that stays inside is followed
    result = package_spec(load_spec(spec), tmp_path / "repo", archive=tmp_path / "pkg.tar.gz")
    version = tmp_path / "repo" / "double" / "1"
    expected = {"hooks.py": 0o640, "lexicon.json": 0o600, "tool.sh": 0o750, "alias.json": 0o600, "shared.txt": 0o644,
                "model.py": 0o644}
    assert {n: (version / n).stat().st_mode & 0o7777 for n in expected} == expected
    assert not (version / "alias.json").is_symlink() and (version / "alias.json").read_text() == "{}"
    with tarfile.open(result.archive) as tar:
        assert {n: tar.getmember(f"repository/double/1/{n}").mode for n in expected} == expected
    out = unpack_archive(result.archive, tmp_path / "unpacked")
    assert {n: (out.repository / "double" / "1" / n).stat().st_mode & 0o7777 for n in expected} == expected


def _tokenizer_spec(tokenizer: str) -> dict:
    return {
        "name": "tok", "version": 1, "kind": "python",
        "python": {"template": "tokenizer", "parameters": {"tokenizer": tokenizer},
                   "inputs": [{"name": "TEXT", "data_type": "STRING", "dims": [1]}],
                   "outputs": [{"name": "IDS", "data_type": "INT64", "dims": [-1]}]},
    }


@pytest.mark.parametrize(("name", "rule"), [("/etc/shadow", "an absolute path"), ("../host", "a '..' segment")])
def test_tokenizer_parameter_outside_the_spec_folder_is_refused(write_spec, tmp_path, host_secret, name, rule):
    (host_secret.parent / "tokenizer.json").write_text(MARKER)
    spec = write_spec(_tokenizer_spec(name))
    repo = tmp_path / "repo"
    with pytest.raises(SpecError, match=rule) as err:
        package_spec(load_spec(spec), repo)
    assert err.value.field == "python.parameters.tokenizer" and err.value.file == str(spec)
    assert not repo.exists() and _copies_outside_host(tmp_path, host_secret) == []


def test_tokenizer_folder_link_leaving_the_spec_folder_is_refused(write_spec, tmp_path, host_secret):
    (host_secret.parent / "tokenizer.json").write_text(MARKER)
    spec = write_spec(_tokenizer_spec("tok"))
    os.symlink(host_secret.parent, spec.parent / "tok")
    with pytest.raises(SpecError, match="breaks the path rule") as err:
        package_spec(load_spec(spec), tmp_path / "repo")
    assert err.value.field == "python.parameters.tokenizer"
    assert _copies_outside_host(tmp_path, host_secret) == []


def _copies_outside_host(tree: Path, secret: Path) -> list[Path]:
    return [p for p in _copies_of_marker(tree, secret) if p.parent != secret.parent]


@pytest.mark.parametrize(("wheel", "rule"), [("../host/p-1-py3-none-any.whl", "a '..' segment"),
                                         ("/tmp/p-1-py3-none-any.whl", "an absolute path"),
                                         ("link.whl", "a link that leaves the spec's folder")])
def test_a_plugin_wheel_outside_the_spec_folder_is_refused(write_spec, tmp_path, host_secret, wheel, rule):
    from tritonpkg.errors import PackageError

    data = _spec(["hooks.py"])
    data["plugins"] = [{"name": "p", "wheel": wheel}]
    spec = write_spec(data, extra_files={"hooks.py": HOOKS})
    os.symlink(host_secret, spec.parent / "link.whl")
    repo, archive = tmp_path / "repo", tmp_path / "pkg.tar.gz"
    with pytest.raises(PackageError, match=rule) as err:
        package_spec(load_spec(spec), repo, archive=archive)
    assert err.value.field == "plugins[0].wheel" and err.value.file == str(spec)
    assert not repo.exists() and not archive.exists()
