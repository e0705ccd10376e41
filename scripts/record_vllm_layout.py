"""Record the part of a vLLM release's module layout that logits_ext imports: which modules exist under the
logits-processor packages, and each class there (bases, methods with their arguments, abstract or not,
dataclass fields), read with `ast` from a wheel or an unpacked tree, never imported (a GPU-only vLLM needs no
GPU, and no dependency, to be read).

    python scripts/record_vllm_layout.py vllm-0.34.0-...whl        # or a site-packages folder holding vllm/
    -> tritonpkg/compat/vllm_layouts/vllm-<version>.json

tests/unit/test_logits_layouts.py builds a stand-in vllm from such a record and imports logits_ext on it."""

from __future__ import annotations

import ast
import json
import re
import sys
import zipfile
from pathlib import Path

PREFIXES = ("vllm/v1/sample/", "vllm/v1/worker/gpu/sample/logits_processor/")
CLASS_MODULES = ("vllm.v1.sample.logits_processor.interface", "vllm.v1.worker.gpu.sample.logits_processor.interface")
OUT = Path(__file__).resolve().parents[1] / "tritonpkg" / "compat" / "vllm_layouts"


def _sources(src: Path) -> tuple[str, dict[str, str]]:
    """(version, {path inside the distribution: text}) for the files under PREFIXES."""
    files: dict[str, str] = {}
    if src.is_file():
        with zipfile.ZipFile(src) as z:
            names = z.namelist()
            files = {n: z.read(n).decode() for n in names if n.startswith(PREFIXES) and n.endswith(".py")}
            meta = next(n for n in names if re.match(r"vllm(_cpu)?-[^/]+\.dist-info/METADATA$", n))
            text = z.read(meta).decode()
    else:
        for p in sorted(src.glob("vllm/**/*.py")):
            rel = p.relative_to(src).as_posix()
            if rel.startswith(PREFIXES):
                files[rel] = p.read_text()
        meta_path = next(p for p in src.glob("vllm*.dist-info/METADATA"))
        text = meta_path.read_text()
    version = re.search(r"^Version: (\S+)$", text, re.MULTILINE)
    if version is None:
        raise SystemExit(f"{src}: no Version in the distribution's METADATA")
    return version.group(1), files


def _classes(text: str) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for node in ast.parse(text).body:
        if not isinstance(node, ast.ClassDef):
            continue
        decorators = [ast.unparse(d) for d in node.decorator_list]
        cls: dict = {"bases": [ast.unparse(b) for b in node.bases], "decorators": decorators, "methods": {},
                     "fields": []}
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                decos = [ast.unparse(d) for d in item.decorator_list]
                cls["methods"][item.name] = {
                    "args": [a.arg for a in item.args.args],
                    "abstract": "abstractmethod" in decos,
                    "kind": "classmethod" if "classmethod" in decos else
                            "staticmethod" if "staticmethod" in decos else "method",
                }
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                cls["fields"].append(item.target.id)
        out[node.name] = cls
    return out


def record(src: Path) -> dict:
    version, files = _sources(src)
    modules = sorted({p[:-3].replace("/", ".").removesuffix(".__init__") for p in files})
    classes = {f"{mod}:{name}": c
               for path, text in files.items()
               if (mod := path[:-3].replace("/", ".").removesuffix(".__init__")) in CLASS_MODULES
               for name, c in _classes(text).items()}
    reexports = {mod: names for path, text in files.items()
                 if (names := _reexports(text, modules))
                 and (mod := path[:-3].replace("/", ".").removesuffix(".__init__"))}
    return {"vllm_version": version, "prefixes": list(PREFIXES), "modules": modules, "classes": classes,
            "reexports": reexports}


def _reexports(text: str, modules: list[str]) -> dict[str, str]:
    """name -> module, for the module-level `from <recorded module> import name` statements (a package's
    __init__ re-exporting its interface)."""
    return {a.asname or a.name: node.module for node in ast.parse(text).body
            if isinstance(node, ast.ImportFrom) and node.module in modules for a in node.names}


def main(argv: list[str]) -> int:
    for arg in argv:
        rec = record(Path(arg))
        OUT.mkdir(parents=True, exist_ok=True)
        path = OUT / f"vllm-{rec['vllm_version'].split('+')[0]}.json"
        path.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
        sys.stderr.write(f"wrote {path} ({len(rec['modules'])} modules, {len(rec['classes'])} classes)\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
