"""Facts about the deployment target that rules need besides the model itself."""

from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from tritonpkg import compat
from tritonpkg.validate.loaded import LoadedModel


@dataclass
class Context:
    repo: Path
    target: str  # a release name or compat.LOCAL
    models: dict[str, LoadedModel] = field(default_factory=dict)
    gpu_count: int = 0
    backends_dir: Path | None = None
    auto_complete: bool = True  # Triton's default; off = tritonserver --disable-auto-complete-config
    _lock: dict | None = field(default=None, repr=False)

    def lock(self) -> dict:
        """The repository's tritonpkg.lock.json as far as it is a mapping ({} when there is none or it
        does not read; `validate` reports that as lock.invalid)."""
        if self._lock is None:
            from tritonpkg.repository.lock import LOCK_NAME
            from tritonpkg.validate.loaded import read_json

            self._lock = {}
            if (self.repo / LOCK_NAME).is_file():
                try:
                    data = read_json(self.repo / LOCK_NAME)
                except (OSError, ValueError):
                    data = None
                if isinstance(data, dict) and isinstance(data.get("models"), dict):
                    self._lock = data
        return self._lock

    @property
    def is_local(self) -> bool:
        return self.target == compat.LOCAL

    @property
    def release_vllm(self) -> Version | None:
        """The vLLM the target runs: the toolkit's pin locally, the image's vLLM for an NGC release (None:
        the release does not publish it)."""
        if self.is_local:
            return compat.pinned_vllm()
        return compat.get_release(self.target).vllm_base

    def available_backends(self) -> set[str] | None:
        """Backends the target server can load; None when unknown."""
        if self.is_local:
            found = {"python"}
            if self.backends_dir is not None and self.backends_dir.is_dir():
                found |= {p.name for p in self.backends_dir.iterdir() if (p / "model.py").is_file()}
            return found
        return {"python", "vllm"}  # the -vllm-python-py3 images


def count_gpus() -> int:
    """NVIDIA device nodes present: Triton's KIND_GPU needs at least one."""
    return len(glob.glob("/dev/nvidia[0-9]*"))
