"""A stand-in `vllm` package built from a recorded module layout (tritonpkg/compat/vllm_layouts/, written by
scripts/record_vllm_layout.py from a release's wheel): every recorded module exists, each recorded class has its
bases, its methods (abstract ones abstract, classmethods as such) and its dataclass fields, and a package
re-exports what its __init__ does. Enough to import logits_ext against a vLLM that cannot be installed here
(0.34 is GPU-only) and to have Python's ABC machinery judge the processor class."""

from __future__ import annotations

import json
from pathlib import Path

LAYOUTS = Path(__file__).resolve().parents[2] / "tritonpkg" / "compat" / "vllm_layouts"
BASES = {"ABC": "ABC", "Enum": "enum.Enum"}


def layout(version: str) -> dict:
    return json.loads((LAYOUTS / f"vllm-{version}.json").read_text())


def _class_source(name: str, cls: dict) -> str:
    bases = ", ".join(BASES[b] for b in cls["bases"] if b in BASES) or "object"
    lines = []
    if any(d.startswith("dataclass") for d in cls["decorators"]):
        lines.append("@dataclasses.dataclass(frozen=True)")
    lines.append(f"class {name}({bases}):")
    lines += [f"    {f}: object" for f in cls["fields"]]
    for meth, m in cls["methods"].items():
        if m["abstract"]:
            lines.append("    @abstractmethod")
        if m["kind"] != "method":
            lines.append(f"    @{m['kind']}")
        body = ("raise NotImplementedError" if m["abstract"]
                else "return True" if meth == "add_request" else "return None")
        lines.append(f"    def {meth}({', '.join(m['args'])}):\n        {body}")
    if len(lines) == 1 + bool(cls["decorators"]):
        lines.append("    pass")
    return "\n".join(lines) + "\n"


def build(version: str, root: Path) -> Path:
    """Write the stand-in vllm of `version` under `root` (put `root` first on sys.path) and return `root`."""
    rec = layout(version)
    defined: dict[str, set[str]] = {}
    sources: dict[str, str] = {}
    for key, cls in rec["classes"].items():
        mod, name = key.split(":")
        defined.setdefault(mod, set()).add(name)
        sources[mod] = sources.get(mod, "") + _class_source(name, cls)
    packages = {m.rsplit(".", i)[0] for m in rec["modules"] for i in range(1, m.count(".") + 1)}
    packages |= {m for m in rec["modules"] if any(o.startswith(m + ".") for o in rec["modules"])}
    for mod in sorted(set(rec["modules"]) | packages):
        path = root.joinpath(*mod.split("."))
        path = path / "__init__.py" if mod in packages else path.with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        head = "import dataclasses\nimport enum\nfrom abc import ABC, abstractmethod\n"
        exports = "".join(f"from {src} import {name}\n" for name, src in rec.get("reexports", {}).get(mod, {}).items()
                          if name in defined.get(src, ()))
        path.write_text(head + exports + sources.get(mod, ""))
    return root
