"""Make the tiny Llama and two LoRA adapters of it, fully offline, with peft (`pip install peft`).

Each adapter has rank 8 on every projection of the tiny Llama and random non-zero A and B (peft's
`init_lora_weights=False`) from its own seed, so each changes the greedy output and the two differ.

    python examples/tiny-llm-lora/make_adapters.py [--out DIR]    # DIR/weights, DIR/support-bot, DIR/legal-bot
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "made"
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
RANK = 8
ADAPTERS = {"support-bot": 1, "legal-bot": 2}  # name -> seed


def make_adapter(base: Path, out: Path, seed: int, rank: int = RANK, targets: tuple[str, ...] = TARGETS) -> Path:
    """A peft LoRA adapter of `base` with random A and B from `seed`, saved in peft's format into `out`."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=sorted(targets), lora_dropout=0.0,
                        init_lora_weights=False, task_type="CAUSAL_LM")
    get_peft_model(model, config).save_pretrained(str(out))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    base = args.out / "weights"
    if not (base / "config.json").is_file():
        subprocess.run([sys.executable, str(HERE.parent / "tiny-llm" / "make_tiny_llm.py"), "--out", str(base)],
                       check=True)
    for name, seed in ADAPTERS.items():
        if not (args.out / name / "adapter_config.json").is_file():
            make_adapter(base, args.out / name, seed)
    print(f"made {base} and adapters {', '.join(ADAPTERS)} under {args.out}")


if __name__ == "__main__":
    main()
