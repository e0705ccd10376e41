"""`EmbeddingGateway`: the path from texts to vectors for the frontend and for internal callers.

Tokenization happens here, once, with the model's own rules (tritonpkg.embedding.tokenize), so the
gateway knows every input's token count before anything is sent: it refuses over-long inputs and
overload at once, and cuts a client batch into chunks that each fill one forward batch of the model's
token budget. Chunks go out concurrently, round-robin over the replicas' gRPC endpoints; Triton
spreads them over a replica's instances. Results come back in input order."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tritonpkg.embedding.checkpoint import Checkpoint, read_checkpoint
from tritonpkg.embedding.errors import EmbeddingInputError
from tritonpkg.embedding.tokenize import encode_texts
from tritonpkg.errors import TritonpkgError
from tritonpkg.gateway.admission import TokenAdmission
from tritonpkg.gateway.chunking import plan_chunks

TOKENIZE_OFF_LOOP = 8  # batches larger than this are tokenized in a worker thread
TOKENIZE_OFF_LOOP_CHARS = 64 * 1024  # and so are fewer texts this long (a megabyte takes about a second)


class GatewayRequestError(TritonpkgError):
    """The request is wrong (too long with truncation off, unsupported dimensions, ...): a 400."""


class GatewayUnavailable(TritonpkgError):  # noqa: N818  a condition, as GatewayOverloaded
    """Triton could not be reached or failed the request: a 503."""


@dataclass
class Embeddings:
    vectors: np.ndarray  # [n, d] float32, in input order
    num_tokens: list[int]

    @property
    def total_tokens(self) -> int:
        return sum(self.num_tokens)


@dataclass
class Scores:
    scores: np.ndarray  # [documents] float32, in document order
    num_tokens: list[int]  # query first, then each document


class EmbeddingGateway:
    """`weights`: the model's checkpoint folder, whose tokenizer and length rules the model applies too
    (tritonpkg.embedding.checkpoint); `max_length` None takes the checkpoint's."""

    def __init__(self, grpc_urls: Sequence[str], model: str, weights: str | Path | Checkpoint, *,
                 token_budget: int = 512, max_length: int | None = None, truncate: bool = True,
                 max_inflight_tokens: int = 65536, scoring_model: str | None = None) -> None:
        if not grpc_urls:
            raise ValueError("the gateway needs at least one Triton gRPC endpoint")
        checkpoint = weights if isinstance(weights, Checkpoint) else read_checkpoint(weights)
        self.urls = list(grpc_urls)
        self.model = model
        self.scoring_model = scoring_model
        self.token_budget = token_budget
        self.max_length = checkpoint.length_limit(max_length)
        self.truncate = truncate
        self.tokenizer = checkpoint.tokenizer()
        self.admission = TokenAdmission(max_inflight_tokens)
        self._clients: list[Any] | None = None
        self._next = itertools.count()

    @classmethod
    def for_model(cls, grpc_urls: Sequence[str], version_dir: str | Path, **overrides: Any) -> EmbeddingGateway:
        """A gateway for a model packaged from the `embedding` template: its gateway.json (written by the
        packager) gives the weights, token budget, length limit and truncation default."""
        path = Path(version_dir) / "gateway.json"
        if not path.is_file():
            raise TritonpkgError("no gateway.json: not a model of the `embedding` template", file=path,
                                 expected="a model packaged with python.template: embedding")
        settings = json.loads(path.read_text())
        kwargs = {"token_budget": settings["token_budget"], "max_length": settings.get("max_length"),
                  "truncate": settings["truncate"], "max_inflight_tokens": settings.get("max_inflight_tokens", 65536),
                  **overrides}
        return cls(grpc_urls, settings["model"], settings["weights"], **kwargs)

    def _client(self) -> Any:
        if self._clients is None:  # grpc.aio channels belong to the running event loop: made on first use
            import tritonclient.grpc.aio as grpc_aio

            self._clients = [grpc_aio.InferenceServerClient(u) for u in self.urls]
        return self._clients[next(self._next) % len(self._clients)]

    async def close(self) -> None:
        for client in self._clients or []:
            await client.close()
        self._clients = None

    async def tokenize(self, texts: Sequence[str], truncate: bool | None = None,
                       field: str = "input") -> list[list[int]]:
        truncate = self.truncate if truncate is None else truncate
        try:
            if len(texts) > TOKENIZE_OFF_LOOP or sum(map(len, texts)) > TOKENIZE_OFF_LOOP_CHARS:
                return await asyncio.to_thread(encode_texts, self.tokenizer, texts, self.max_length, truncate, field)
            return encode_texts(self.tokenizer, texts, self.max_length, truncate, field)
        except EmbeddingInputError as exc:
            raise GatewayRequestError(exc.message, field=exc.field, expected=exc.expected) from None

    async def embed(self, texts: Sequence[str], *, normalize: bool = True, dimensions: int | None = None,
                    truncate: bool | None = None) -> Embeddings:
        """Vectors of `texts`, in order. Raises GatewayOverloaded, GatewayRequestError, GatewayUnavailable."""
        ids = await self.tokenize(texts, truncate)
        lengths = [len(s) for s in ids]
        with self.admission.hold(sum(lengths)):
            chunks = plan_chunks(lengths, self.token_budget)
            parts = await asyncio.gather(*(self._embed_chunk(ids[c.start:c.stop], normalize, dimensions)
                                           for c in chunks))
        return Embeddings(np.concatenate(parts) if parts else np.zeros((0, 0), np.float32), lengths)

    async def score(self, query: str, documents: Sequence[str], *, truncate: bool | None = None) -> Scores:
        """Relevance of each document to `query`, in order, from the scoring model."""
        if self.scoring_model is None:
            raise GatewayRequestError("this gateway has no scoring model", field="scoring_model",
                                      expected="EmbeddingGateway(..., scoring_model=NAME)")
        ids = await self.tokenize([query, *documents], truncate, field="documents")
        lengths = [len(s) for s in ids]
        with self.admission.hold(sum(lengths)):
            inputs = [_tensor("QUERY", np.array([query.encode()], dtype=np.object_)),
                      _tensor("DOCUMENTS", np.array([d.encode() for d in documents], dtype=np.object_))]
            if truncate is not None:
                inputs.append(_tensor("TRUNCATE", np.array([truncate])))
            result = await self._infer(self.scoring_model, inputs)
        return Scores(result.as_numpy("SCORES"), lengths)

    async def _embed_chunk(self, ids: list[list[int]], normalize: bool, dimensions: int | None) -> np.ndarray:
        inputs = [_tensor("INPUT_IDS", np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64)),
                  _tensor("LENGTHS", np.array([len(s) for s in ids], dtype=np.int64)),
                  _tensor("NORMALIZE", np.array([normalize]))]
        if dimensions is not None:
            inputs.append(_tensor("DIMENSIONS", np.array([dimensions], dtype=np.int32)))
        return (await self._infer(self.model, inputs)).as_numpy("EMBEDDINGS")

    async def _infer(self, model: str, inputs: list) -> Any:
        """One request over a gRPC stream (the template models are decoupled: Triton's unary ModelInfer
        refuses them)."""
        from tritonclient.utils import InferenceServerException

        async def one():
            yield {"model_name": model, "inputs": inputs}

        try:
            async for result, error in self._client().stream_infer(one()):
                if error is not None:
                    raise GatewayRequestError(str(error).removeprefix("[StatusCode.INVALID_ARGUMENT] "),
                                              field=model)
                return result
        except InferenceServerException as exc:
            raise GatewayUnavailable(f"Triton did not answer: {exc}", field=model) from exc
        raise GatewayUnavailable("Triton closed the stream without a response", field=model)


def _tensor(name: str, value: np.ndarray) -> Any:
    from tritonclient.grpc import InferInput
    from tritonclient.utils import np_to_triton_dtype

    t = InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
    t.set_data_from_numpy(value)
    return t
