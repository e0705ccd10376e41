"""The Triton side of the `embedding` and `scoring` templates: a decoupled Python-backend model whose
execute() only parses requests into the engine's pool and returns; the engine thread answers each
request through its response sender when its sequences are done. Triton's own batcher counts
sequences; this pool counts tokens.

`pb` is the stub's triton_python_backend_utils module, passed in so this file imports nothing that
exists only inside Triton."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from .checkpoint import read_checkpoint
from .encoder import PackedBert, resolve_compute_dtype
from .engine import EmbeddingEngine
from .errors import EmbeddingInputError
from .options import check_dimensions, classifier_scores, cosine_scores, finish_vectors
from .tokenize import encode_pairs, encode_texts


def _texts(array: np.ndarray) -> list[str]:
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in array.reshape(-1)]


def off_main_thread(work: Callable[[], Any]) -> Any:
    """`work()` on a thread of its own, joined before this returns.

    Loading runs torch's parallel operations, and libgomp keeps a team of worker threads for every thread
    that ever ran one. With the stub's main thread holding one team and the engine thread another, the
    process has more OpenMP threads than a small CPU has cores, and libgomp then cuts every worker's spin to
    1,000 polls: the workers fall asleep between a forward pass's operations (MiniLM at 128 tokens on 2
    cores: 21.4 ms instead of 17.1). A joined thread takes its team with it, so the engine's is the only one."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedding-load") as pool:
        return pool.submit(work).result()  # leaving the block joins the thread


class _EngineModel:
    head = "pool"  # PackedBert's head for this template ("auto": from the checkpoint's config.json)

    def __init__(self, pb: Any, settings: dict, args: dict) -> None:
        self.pb = pb
        self.settings = settings
        weights = settings.get("weights")
        if not weights or not os.path.isdir(weights):
            raise pb.TritonModelException(
                f"weights folder {weights!r} not found: the spec's `weights:` must name a BERT, RoBERTa, "
                "XLM-RoBERTa, MPNet or DistilBERT checkpoint folder (config.json, model.safetensors, tokenizer.json)")
        if settings.get("torch_threads"):
            torch.set_num_threads(int(settings["torch_threads"]))
        device = "cpu"
        if args.get("model_instance_kind") == "GPU" and torch.cuda.is_available():
            device = f"cuda:{args.get('model_instance_device_id', 0)}"
            torch.cuda.set_device(device)
        dtype = resolve_compute_dtype(settings.get("dtype") or "float32", device)
        try:
            checkpoint = read_checkpoint(weights)
            self.model = off_main_thread(
                lambda: PackedBert.from_pretrained(checkpoint, dtype, self.head).to(device).eval())
        except ValueError as exc:
            raise pb.TritonModelException(f"weights folder {weights}: {exc}") from None
        self.tokenizer = checkpoint.tokenizer()
        self.max_length = checkpoint.length_limit(settings.get("max_length"))
        self.engine = EmbeddingEngine(self.model, int(settings["token_budget"]),
                                      cuda_graphs=bool(settings.get("cuda_graphs", True)))
        self.max_pending = int(settings.get("max_pending_tokens") or 2 * self.engine.token_budget)

    def option(self, request: Any, name: str, default: Any) -> Any:
        tensor = self.pb.get_input_tensor_by_name(request, name)
        return default if tensor is None else tensor.as_numpy().reshape(-1)[0].item()

    def tokenize(self, texts: list[str], truncate: bool, field: str) -> list[list[int]]:
        return encode_texts(self.tokenizer, texts, self.max_length, truncate, field=field)

    def execute(self, requests: list) -> None:
        for request in requests:
            sender = request.get_response_sender()
            try:
                self.submit(request, sender)
            except Exception as exc:  # a bad request gets its own error; the others go on
                self.send_error(sender, exc)
        self.engine.batcher.wait_below(self.max_pending, timeout=30)
        return

    def submit(self, request: Any, sender: Any) -> None:
        raise NotImplementedError

    def send(self, sender: Any, outputs: dict[str, np.ndarray]) -> None:
        response = self.pb.InferenceResponse(output_tensors=[self.pb.Tensor(k, v) for k, v in outputs.items()])
        sender.send(response, flags=self.pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def send_error(self, sender: Any, exc: BaseException) -> None:
        text = str(exc) if isinstance(exc, EmbeddingInputError) else f"{type(exc).__name__}: {exc}"
        sender.send(self.pb.InferenceResponse(error=self.pb.TritonError(text)),
                    flags=self.pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def reply_when_done(self, sender: Any, seqs: list[list[int]], outputs,
                        type_starts: list[int | None] | None = None) -> None:
        """Submit `seqs`; when done, send outputs(values) (or the error) through `sender`."""
        def done(ticket):
            try:
                if ticket.error is not None:
                    raise ticket.error
                self.send(sender, outputs(ticket.values))
            except Exception as exc:
                self.send_error(sender, exc)

        self.engine.submit(seqs, on_done=done, type_starts=type_starts)

    def finalize(self) -> None:
        self.engine.close()


class EmbeddingModel(_EngineModel):
    """TEXT (strings) or INPUT_IDS + LENGTHS (packed ids, from the gateway) -> EMBEDDINGS, NUM_TOKENS."""

    def submit(self, request: Any, sender: Any) -> None:
        normalize = bool(self.option(request, "NORMALIZE", self.settings["normalize"]))
        truncate = bool(self.option(request, "TRUNCATE", self.settings["truncate"]))
        dims = self.option(request, "DIMENSIONS", 0) or None
        dims = check_dimensions(dims, self.model.out_dim, self.settings.get("matryoshka_dimensions") or [])
        seqs = self._sequences(request, truncate)
        counts = np.array([len(s) for s in seqs], dtype=np.int64)
        self.reply_when_done(sender, seqs, lambda values: {
            "EMBEDDINGS": finish_vectors(values, normalize, dims), "NUM_TOKENS": counts})

    def _sequences(self, request: Any, truncate: bool) -> list[list[int]]:
        text = self.pb.get_input_tensor_by_name(request, "TEXT")
        if text is not None:
            return self.tokenize(_texts(text.as_numpy()), truncate, "TEXT")
        ids = self.pb.get_input_tensor_by_name(request, "INPUT_IDS")
        lengths = self.pb.get_input_tensor_by_name(request, "LENGTHS")
        if ids is None or lengths is None:
            raise EmbeddingInputError("no input", field="TEXT", expected="TEXT, or INPUT_IDS with LENGTHS")
        flat = ids.as_numpy().reshape(-1).tolist()
        sizes = lengths.as_numpy().reshape(-1).tolist()
        if sum(sizes) != len(flat) or min(sizes, default=1) < 1:
            raise EmbeddingInputError(f"LENGTHS sum to {sum(sizes)} but INPUT_IDS holds {len(flat)} ids",
                                      field="LENGTHS", expected="positive lengths that sum to len(INPUT_IDS)")
        seqs, start = [], 0
        for i, n in enumerate(sizes):
            if n > self.max_length:
                raise EmbeddingInputError(f"sequence {i} has {n} tokens", field=f"LENGTHS[{i}]",
                                          expected=f"at most {self.max_length} (truncate before sending ids)")
            seqs.append(flat[start:start + n])
            start += n
        return seqs


class ScoringModel(_EngineModel):
    """QUERY + DOCUMENTS -> SCORES (relevance of each document to the query, in order), prefill only.
    A sentence-embedding checkpoint (bi-encoder): the query and documents are encoded in one pass and
    compared by cosine similarity. A BertForSequenceClassification checkpoint (cross-encoder): each
    (query, document) pair is one sequence and its score the classifier's logit (`activation`)."""

    head = "auto"

    def __init__(self, pb: Any, settings: dict, args: dict) -> None:
        super().__init__(pb, settings, args)
        if self.model.head == "classifier" and self.model.num_labels != 1:
            raise pb.TritonModelException(
                f"weights folder {settings['weights']}: the classifier has {self.model.num_labels} labels; "
                "a relevance cross-encoder has 1 (one score per document)")
        self.activation = settings.get("activation") or "sigmoid"

    def submit(self, request: Any, sender: Any) -> None:
        truncate = bool(self.option(request, "TRUNCATE", self.settings["truncate"]))
        query = _texts(self.pb.get_input_tensor_by_name(request, "QUERY").as_numpy())
        docs = _texts(self.pb.get_input_tensor_by_name(request, "DOCUMENTS").as_numpy())
        if len(query) != 1:
            raise EmbeddingInputError(f"{len(query)} queries given", field="QUERY", expected="exactly one query")
        limit = int(self.settings["max_documents"])
        if not 1 <= len(docs) <= limit:
            raise EmbeddingInputError(f"{len(docs)} documents given", field="DOCUMENTS",
                                      expected=f"1 to {limit} documents")
        if self.model.head == "classifier":
            seqs, starts = encode_pairs(self.tokenizer, query[0], docs, self.max_length, truncate)
            counts = np.array([len(s) for s in seqs], dtype=np.int64)
            self.reply_when_done(sender, seqs, lambda values: {
                "SCORES": classifier_scores(values, self.activation), "NUM_TOKENS": counts}, type_starts=starts)
            return
        seqs = self.tokenize(query, truncate, "QUERY") + self.tokenize(docs, truncate, "DOCUMENTS")
        counts = np.array([len(s) for s in seqs[1:]], dtype=np.int64)
        self.reply_when_done(sender, seqs, lambda values: {"SCORES": cosine_scores(values), "NUM_TOKENS": counts})
