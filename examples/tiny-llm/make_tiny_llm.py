"""Make a tiny random-weight Llama model, fully offline, for tests and examples.

The output is noise, but shapes, tokenisation, streaming and constraints are real, so vLLM and
Triton exercise their full paths in seconds. The tokenizer is committed beside this script
(`tokenizer/`) and reused when present, so the model's vocabulary always matches the files other
code loads with the `tokenizers` library alone.

    python examples/tiny-llm/make_tiny_llm.py [--out DIR] [--context 512]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOKENIZER_DIR = HERE / "tokenizer"
DEFAULT_OUT = HERE / "weights"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
MODEL_FILES = ("config.json", "model.safetensors", "generation_config.json")
SEED = 1234
CONTEXT = 512  # max_position_embeddings: rotary, so a longer context changes no weight
VOCAB_SIZE = 512
BOS, EOS, PAD = "<s>", "</s>", "<pad>"
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
CORPUS = [
    "hello world, this is a tiny language model used to test Triton and vLLM.",
    "The quick brown fox jumps over the lazy dog.",
    "Triton Inference Server serves models over HTTP and gRPC.",
    "vLLM streams tokens one delta at a time; the client joins them into text.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000. Punctuation: ! ? . , ; : ' \" ( ) [ ] { }",
    "JSON looks like {\"name\": \"value\", \"count\": 3, \"ok\": true, \"items\": [1, 2]}.",
    "user assistant system: You are a helpful assistant. What is the capital of France? Paris.",
    "def add(a, b):\n    return a + b\n",
]


def train_tokenizer(dest: Path) -> None:
    """Train a byte-level BPE tokenizer and save it as a PreTrainedTokenizerFast with chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD, model_max_length=512
    )
    dest.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(dest))
    # transformers 5 writes the template to chat_template.jinja, names its own backend class and drops
    # special_tokens_map.json; older transformers (and vLLM's loaders) read the classic layout.
    config_path = dest / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("backend", None)
    config.update(tokenizer_class="PreTrainedTokenizerFast", chat_template=CHAT_TEMPLATE, add_bos_token=False)
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    special = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}
    (dest / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    for extra in {p.name for p in dest.iterdir()} - set(TOKENIZER_FILES):
        (dest / extra).unlink()


def build_model(stage: Path, tokenizer_dir: Path, context: int = CONTEXT) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(SEED)
    tok = PreTrainedTokenizerFast.from_pretrained(str(tokenizer_dir))
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=context,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    model.save_pretrained(str(stage), safe_serialization=True)
    for name in TOKENIZER_FILES:
        shutil.copyfile(tokenizer_dir / name, stage / name)


def is_complete(out: Path, context: int = CONTEXT) -> bool:
    if not all((out / name).is_file() for name in MODEL_FILES + TOKENIZER_FILES):
        return False
    return json.loads((out / "config.json").read_text()).get("max_position_embeddings") == context


def make(out: Path = DEFAULT_OUT, tokenizer_dir: Path = TOKENIZER_DIR, context: int = CONTEXT) -> Path:
    """Write the model dir at `out` (staged then renamed, so readers never see half a model)."""
    out = out.resolve()
    if is_complete(out, context):
        return out
    if not all((tokenizer_dir / n).is_file() for n in TOKENIZER_FILES):
        train_tokenizer(tokenizer_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        build_model(stage, tokenizer_dir, context)
        stage.chmod(0o755)
        for path in stage.iterdir():
            path.chmod(0o644)
        if out.exists():
            shutil.rmtree(out)
        stage.rename(out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"model dir to write (default {DEFAULT_OUT})")
    parser.add_argument(
        "--tokenizer-dir", type=Path, default=TOKENIZER_DIR, help="tokenizer files to reuse (trained there if missing)"
    )
    parser.add_argument("--context", type=int, default=CONTEXT,
                        help=f"the model's maximum context in tokens (default {CONTEXT})")
    args = parser.parse_args(argv)
    print(make(args.out, args.tokenizer_dir, args.context))
    return 0


if __name__ == "__main__":
    sys.exit(main())
