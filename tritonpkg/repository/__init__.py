"""Building model repositories: config.pbtxt from Triton's protobuf schema, model.json, rendered
templates, the lock file, an atomic write and a reproducible archive."""

from tritonpkg.repository.build import BuiltModel, build_models, engine_args
from tritonpkg.repository.lock import LOCK_NAME, verify as verify_lock
from tritonpkg.repository.package import PackageResult, package_spec

__all__ = ["BuiltModel", "LOCK_NAME", "PackageResult", "build_models", "engine_args", "package_spec", "verify_lock"]
