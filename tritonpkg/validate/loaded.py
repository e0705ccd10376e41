"""Load each model directory once (config parsed, locations, files, model.json) so rules stay pure.

A repository under validation may be hostile: every file is read through boundedio (a regular file of at
most MAX_FILE_BYTES; a FIFO or device is refused, never waited on), and what does not parse becomes a
problem of that file, never an exception out of validate."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from tritonpkg import boundedio, version_files
from tritonpkg.validate.locate import Location, field_locations, lookup
from tritonpkg.validate.report import Problem, Severity

CONFIG = "config.pbtxt"
ENGINE_ARGS = version_files.ENGINE_ARGS
VERSION_RE = re.compile(r"^(0|-?[1-9][0-9]*)$")  # 2.51 ignores "01": no leading zeros
MAX_FILE_BYTES = 16 << 20  # beyond any config, engine-args file or model.py a server reads at load


def read_text(path: Path, limit: int = MAX_FILE_BYTES) -> str:
    return boundedio.read_file(path, limit).decode("utf-8", errors="replace")


def read_json(path: Path, limit: int = MAX_FILE_BYTES) -> Any:
    """JSON of a bounded file; ValueError (with the reason) for anything that does not parse, nesting too
    deep for the parser included."""
    try:
        return json.loads(boundedio.read_file(path, limit))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not valid JSON: {str(exc)[:200]}") from None
    except RecursionError:
        raise ValueError("not valid JSON: nested too deeply") from None


@dataclass
class LoadedModel:
    name: str
    path: Path
    repo: Path
    config: pb.ModelConfig | None = None
    config_text: str | None = None
    locs: dict[str, Location] = field(default_factory=dict)
    parse_error: tuple[str, int | None, int | None] | None = None
    entries: list[str] = field(default_factory=list)
    versions: dict[int, Path] = field(default_factory=dict)
    engine_args: dict[str, Any] | None = None
    engine_args_file: Path | None = None
    engine_args_error: str | None = None
    written: pb.ModelConfig | None = None  # the config as written, once auto-complete changed `config`
    auto_filled: dict[str, str] = field(default_factory=dict)  # field path -> what auto-complete supplied it
    auto_finding: Problem | None = None  # auto-complete's own finding (an error: it fails the load)

    @property
    def has_config_file(self) -> bool:
        return self.config_text is not None

    @property
    def backend(self) -> str:
        """The backend Triton will use: config's, or 'python' when auto-completed from a model.py."""
        cfg = self.config
        if cfg is not None and cfg.backend:
            return cfg.backend
        if cfg is not None and cfg.platform:
            return _PLATFORM_BACKEND.get(cfg.platform, cfg.platform)
        if any((d / "model.py").is_file() for d in self.versions.values()):
            return "python"
        return ""

    @property
    def parsed(self) -> pb.ModelConfig:
        """The parsed config, for rules the registry runs only on models whose config.pbtxt parsed."""
        if self.config is None:
            raise ValueError(f"model {self.name!r}: a config rule ran on a model whose config did not parse")
        return self.config

    @property
    def is_ensemble(self) -> bool:
        return self.config is not None and self.config.platform == "ensemble"

    def rel(self, p: Path) -> str:
        """`p` relative to the repository; a file outside it (an adapter folder multi_lora.json names by an
        absolute path) as its absolute path."""
        try:
            return p.relative_to(self.repo).as_posix()
        except ValueError:
            return p.as_posix()

    @property
    def config_rel(self) -> str:
        return self.rel(self.path / CONFIG)

    def problem(self, rule: str, severity: Severity, message: str, *, field: str | None = None,
                expected: str | None = None, file: Path | None = None,
                at: Location | None = None) -> Problem:
        """A Problem located at `field` in config.pbtxt (or in `file` when given). A field whose value
        auto-complete supplied says so (`auto_complete`): the config does not write it."""
        loc = at if at is not None else (lookup(self.locs, field) if file is None else None)
        supplied = self.supplied_by(field) if file is None else None
        if supplied:
            message += f" (a value Triton's auto-complete supplies: {supplied})"
        return Problem(rule=rule, severity=severity, file=self.rel(file) if file else self.config_rel,
                       line=loc[0] if loc else None, column=loc[1] if loc else None,
                       model=self.name, field=field, message=message, expected=expected, auto_complete=supplied)

    def supplied_by(self, path: str | None) -> str | None:
        """What auto-complete supplied `path` (or the entry holding it), None when the config writes it."""
        while path:
            if path in self.auto_filled:
                return self.auto_filled[path]
            cut = max(path.rfind("."), path.rfind("["))
            if cut <= 0:
                return None
            path = path[:cut]
        return None


_PLATFORM_BACKEND = {
    "onnxruntime_onnx": "onnxruntime", "tensorrt_plan": "tensorrt", "pytorch_libtorch": "pytorch",
    "tensorflow_savedmodel": "tensorflow", "tensorflow_graphdef": "tensorflow",
}


def load_model(repo: Path, path: Path) -> LoadedModel:
    m = LoadedModel(name=path.name, path=path, repo=repo)
    m.entries = sorted(p.name for p in path.iterdir() if not p.name.startswith("."))
    for entry in m.entries:
        if (path / entry).is_dir() and VERSION_RE.match(entry):
            m.versions[int(entry)] = path / entry
    cfg_file = path / CONFIG
    if cfg_file.is_file():
        cfg = pb.ModelConfig()
        try:
            m.config_text = read_text(cfg_file)
            text_format.Parse(m.config_text, cfg)
            m.config = cfg
            m.locs = field_locations(m.config_text, pb.ModelConfig.DESCRIPTOR)
        except text_format.ParseError as exc:
            msg = str(exc)
            msg = re.sub(r"^\d+:\d+ : ", "", msg)
            m.parse_error = (msg, exc.GetLine(), exc.GetColumn())
        except RecursionError:
            m.config, m.locs = None, {}
            m.parse_error = ("messages nested too deeply", None, None)
        except OSError as exc:
            m.config_text = ""
            m.parse_error = (f"config.pbtxt cannot be read: {exc.strerror}", None, None)
    elif m.backend == "python":
        m.config = pb.ModelConfig(name=m.name, backend="python")  # what Triton auto-completes
    _load_engine_args(m)
    return m


def _load_engine_args(m: LoadedModel) -> None:
    """model.json of the newest version that has one (the version the vllm backend serves)."""
    for v in sorted(m.versions, reverse=True):
        f = m.versions[v] / ENGINE_ARGS
        if f.is_file():
            m.engine_args_file = f
            try:
                m.engine_args = version_files.read_engine_args(m.versions[v])
            except version_files.NotAnObjectError:
                m.engine_args_error = "must be a JSON object of engine arguments"
            except ValueError as exc:
                m.engine_args_error = str(exc)
            except OSError as exc:
                m.engine_args_error = f"cannot be read: {exc.strerror}"
            return


def load_repository(repo: Path) -> list[LoadedModel]:
    return [load_model(repo, p) for p in sorted(repo.iterdir()) if p.is_dir() and not p.name.startswith(".")]
