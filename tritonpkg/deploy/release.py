"""What one deploy brings, built once. A spec is loaded once and its models built once, in memory: the I/O
schema comes from the built config, the adapter facts from the built files, and `build` writes them once
into the release's repository folder. An already packaged repository is read as it is, its adapter facts once,
by release_from. Planning reads these facts from the release and never goes back to its files."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, PrivateAttr

from tritonpkg import compat
from tritonpkg.deploy import adapters, iodiff
from tritonpkg.errors import TritonpkgError

if TYPE_CHECKING:
    from tritonpkg.repository.build import BuiltModel
    from tritonpkg.spec import Spec


class Release(BaseModel):
    """One version of one model: a packaged repository, or a spec built in memory until `build` writes it."""

    model: str
    version: int
    repository: Path
    smoke_request: dict[str, Any] | None = None
    traffic_steps: list[int] = Field(default_factory=lambda: [10, 25, 50, 100])
    replicas: int = 1
    gpus: int = 0
    weights: str | None = None
    target_release: str = Field(default_factory=compat.default_release)
    strategy: str = "auto"
    min_requests: int | None = Field(default=None, ge=0, description="the spec's gate minimum; None: the default")
    unit_port_base: int | None = Field(default=None, description="the spec's; None: the driver's or none")
    schema_: iodiff.Schema | None = Field(default=None, alias="schema")
    adapter_facts: adapters.AdapterFacts | adapters.Refusal | None = Field(
        default=None, description="what an adapter rollout compares, or why it cannot (release_from sets it); "
                                  "None: not read, no adapter rollout")

    model_config = {"populate_by_name": True}

    _spec: Spec | None = PrivateAttr(default=None)
    _models: list[BuiltModel] | None = PrivateAttr(default=None)  # the spec's, until written

    @property
    def spec(self) -> Spec | None:
        """The spec this release was built from (None: a packaged repository)."""
        return self._spec

    @property
    def built(self) -> bool:
        """Its repository is on disk (a packaged one always is)."""
        return self._models is None

    @property
    def version_dir(self) -> Path:
        return self.repository / self.model / str(self.version)


def release_from(source: str | Path, workdir: Path, strategy: str | None = None) -> Release:
    """A spec (loaded and built in memory, written by `build`) or an already packaged repository. A spec's I/O
    schema comes from its built config, so a deploy is planned, and refused, before anything is written."""
    from tritonpkg.repository.package import build as build_models
    from tritonpkg.spec import load_spec

    src = Path(source)
    if src.is_dir() and (src / "tritonpkg.lock.json").is_file():
        model_dir, version = iodiff.repository_model(src)
        return Release(model=model_dir.name, version=version, repository=src.absolute(),
                       strategy=strategy or "auto", schema_=iodiff.load(model_dir),
                       adapter_facts=adapters.read_facts(src, model_dir.name, version))
    spec = load_spec(src)
    models = build_models(spec)
    main = next((m for m in models if m.name == spec.name), models[0])
    d = spec.deployment
    release = Release(model=spec.name, version=spec.version,
                      repository=(workdir / "releases" / f"{spec.name}-v{spec.version}" / "repository").absolute(),
                      smoke_request=d.smoke_request, traffic_steps=d.traffic_steps, replicas=d.replicas, gpus=d.gpus,
                      weights=spec.weights_location(), target_release=spec.target_release,
                      strategy=strategy or d.strategy, min_requests=d.min_requests, unit_port_base=d.unit_port_base,
                      schema_=iodiff.from_config(main.config, spec.version), adapter_facts=_facts(main, spec.version))
    release._spec, release._models = spec, models
    return release


def _facts(main: BuiltModel, version: int) -> adapters.AdapterFacts | adapters.Refusal:
    try:
        return adapters.facts(main.name, version, main.files)
    except (ValueError, TritonpkgError) as exc:
        return adapters.Refusal(why=[f"the releases cannot be compared: {exc}"])


def build(release: Release) -> Release:
    """Write a spec's built models into the release's repository folder (beside it first, so a failed write
    leaves what was there); returns the release, now built. A built one is returned as it is."""
    if release._models is None or release._spec is None:
        return release
    from tritonpkg.repository import package_spec

    repo = release.repository
    partial = repo.with_name(repo.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    package_spec(release._spec, partial, models=release._models)
    if repo.exists():
        shutil.rmtree(repo)
    partial.rename(repo)
    out = release.model_copy()
    out._models = None
    return out
