"""The embedding-serving matrix (same as `tritonpkg bench embeddings`): tritonpkg's embedding/scoring
templates behind the gateway against in-process sentence-transformers (the floor), vLLM's pooling
server and infinity-emb, on all-MiniLM-L6-v2, in one run.

    python bench/embeddings.py [--quick] [--systems tritonpkg,floor,vllm,infinity] [--install-baselines]"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from tritonpkg.cli.bench_cmd import app

    sys.exit(app(["embeddings", *sys.argv[1:]], standalone_mode=True))
