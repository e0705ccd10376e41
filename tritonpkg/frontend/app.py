"""The FastAPI app: OpenAI routes over one shared Triton gRPC client.

Requests are validated by the strict models in protocol.py, turned into a Plan by mapping.py, sent
through triton.py and shaped by responses.py / streaming.py. Every failure leaves as an OpenAI error
body with a 4xx/5xx status, never as a traceback."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from tritonpkg.frontend.catalog import Catalog, ModelEntry
from tritonpkg.frontend.embeddings import embed_texts, embeddings_body, input_texts
from tritonpkg.frontend.errors import APIError, field_path
from tritonpkg.frontend.guard import RequestGuard
from tritonpkg.frontend.mapping import (
    Plan,
    Prompt,
    chat_messages,
    chat_plan,
    completion_plan,
    default_max_tokens,
    stream_requests,
    without_added_bos,
)
from tritonpkg.frontend.parsing import ChatParse, ModelParsers
from tritonpkg.frontend.protocol import ChatCompletionRequest, CompletionRequest, EmbeddingRequest, RerankRequest
from tritonpkg.frontend.responses import chat_body, completion_body, new_id, rerank_body
from tritonpkg.frontend.settings import FrontendSettings
from tritonpkg.frontend.streaming import Stream, chat_events, completion_events
from tritonpkg.frontend.triton import Output, TritonBackend

log = logging.getLogger("tritonpkg.frontend")

ERROR_SCHEMA = {
    "type": "object",
    "properties": {"error": {"type": "object", "properties": {
        "message": {"type": "string"}, "type": {"type": "string"},
        "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}},
}
Responses = dict[int | str, dict[str, Any]]  # FastAPI's `responses=`: status -> OpenAPI response
ERRORS: Responses = {status: {"description": text, "content": {"application/json": {"schema": ERROR_SCHEMA}}}
          for status, text in ((400, "Invalid request (the field is named in error.param)"),
                               (404, "Unknown model"), (413, "The body is larger than --max-request-bytes"),
                               (503, "Triton or the model is not ready"))}
UNAUTHORIZED: Responses = {401: {"description": "Missing or incorrect API key (Authorization: Bearer <key>)",
                      "content": {"application/json": {"schema": ERROR_SCHEMA}}}}
SSE: Responses = {200: {"content": {"text/event-stream": {}},
                         "description": "JSON, or server-sent events with stream=true"}}
INLINE_TOKENIZE_CHARS = 1024  # shorter prompts are tokenized on the event loop (at most ~1 ms)


def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
    """pydantic's 422 -> OpenAI's 400 naming the first bad field."""
    first = exc.errors()[0] if exc.errors() else {}
    loc = tuple(first.get("loc", ()))
    if first.get("type") == "json_invalid":  # loc is ('body', <character offset>), not a field
        reason = (first.get("ctx") or {}).get("error") or first.get("msg")
        at = f" at character {loc[-1]}" if loc and isinstance(loc[-1], int) else ""
        return JSONResponse(APIError(400, f"the body is not valid JSON: {reason}{at}").body(), status_code=400)
    param = field_path(loc) or None
    if first.get("type") == "extra_forbidden":
        message = f"unknown field '{param}': the frontend does not know it, so it cannot be honoured"
    elif param:
        message = f"'{param}': {first.get('msg', 'invalid value')}"
    else:
        message = "the body must be a JSON object sent as Content-Type: application/json"
    return JSONResponse(APIError(400, message, param=param).body(), status_code=400)


def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """Starlette's and FastAPI's own refusals (unknown route, wrong method, a body the parser gave up on)
    in the OpenAI shape instead of {"detail": ...}."""
    status = exc.status_code
    if status == 400 and isinstance(exc.__cause__, RecursionError):
        message = "the body is nested too deeply to parse"
    elif status == 404:
        message = f"no route {request.method} {request.url.path}"
    elif status == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
    else:
        message = str(exc.detail)
    return JSONResponse(APIError(status, message).body(), status_code=status, headers=exc.headers)


def _api_error(_request: Request, exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    log.error("unexpected frontend error", exc_info=exc)
    return JSONResponse(APIError(500, f"internal error: {type(exc).__name__}: {exc}").body(), status_code=500)


def create_app(settings: FrontendSettings) -> FastAPI:
    """The app; at start-up (lifespan) it connects to Triton and discovers the models it serves. A Triton
    that is not reachable yet does not stop it (separate mode: Triton restarts on its own); requests get
    503 until Triton answers."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        key = settings.triton_admin_key
        backend = TritonBackend(settings.triton_grpc_url, settings.request_timeout_s,
                                key.get_secret_value() if key is not None else None)
        catalog = Catalog(backend, settings.model_repository)
        try:
            await catalog.refresh()
        except APIError as exc:  # Triton may come (back) later: requests rediscover, 503 until then
            log.warning("no models discovered yet: %s", exc.message)
        app.state.backend, app.state.catalog = backend, catalog
        # Prompts are tokenized here, never on the event loop: an 8 MB prompt takes seconds to encode.
        app.state.tokenize = ThreadPoolExecutor(settings.tokenizer_threads, thread_name_prefix="tokenize")
        # What start-up leaves is long-lived (FastAPI's models, grpc, the tokenizers); with transformers'
        # tokenizer it was ~450k objects, and one full collection stalled the event loop 230-275 ms. Frozen,
        # the collector never walks them again (vLLM's server does the same).
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            app.state.tokenize.shutdown(wait=False, cancel_futures=True)
            await backend.close()

    app = FastAPI(title="tritonpkg OpenAI-compatible frontend", version="1", lifespan=lifespan,
                  description="OpenAI's completions, chat, embeddings and models routes, and the rerank route of "
                              "vLLM, Jina and Cohere, over Triton gRPC. Strict: a field the backend cannot honour "
                              "is a 400 naming it.")
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(APIError, _api_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)
    key = settings.api_key.get_secret_value() if settings.api_key is not None else None
    app.add_middleware(RequestGuard, api_key=key, max_body=settings.max_request_bytes,
                       max_headers=settings.max_header_count)
    # The guard checks the key; the dependency only documents the bearer scheme in /openapi.json.
    v1 = [Depends(HTTPBearer(auto_error=False, description="the server's API key"))] if key else []
    errors = {**ERRORS, **UNAUTHORIZED} if key else ERRORS

    def backend(request: Request) -> TritonBackend:
        return request.app.state.backend

    def catalog(request: Request) -> Catalog:
        return request.app.state.catalog

    @app.get("/v1/models", responses=errors, dependencies=v1)
    async def list_models(request: Request) -> dict[str, Any]:
        cat = catalog(request)
        await cat.refresh()
        return {"object": "list", "data": [_model_card(m) for m in cat.models.values()]}

    @app.get("/v1/models/{model_id:path}", responses=errors, dependencies=v1)
    async def get_model(model_id: str, request: Request) -> dict[str, Any]:
        """One model's card (OpenAI's retrieve-model route); 404 naming the served ones otherwise."""
        return _model_card(await catalog(request).get(model_id))

    @app.get("/health/ready", responses=ERRORS)
    async def ready(request: Request) -> JSONResponse:
        """200 only when Triton is ready and every model it has loaded or tried to load is READY."""
        be = backend(request)
        try:
            server = await be.server_ready()
            models = await be.models()
        except APIError as exc:
            return JSONResponse({"status": "not ready", "reason": exc.message}, status_code=503)
        not_ready = {m["name"]: m.get("state") for m in models if m.get("state") and m.get("state") != "READY"}
        if not server or not_ready or not models:
            # the models are named whether or not Triton as a whole is ready (a dead engine makes it both)
            parts = (["Triton is not ready"] if not server else []) + (
                [f"models not ready: {not_ready}"] if not_ready else [] if models else ["no models"])
            return JSONResponse({"status": "not ready", "reason": "; ".join(parts), "models": not_ready},
                                status_code=503)
        return JSONResponse({"status": "ready", "models": sorted(m["name"] for m in models)})

    @app.get("/health/live")
    async def live() -> dict[str, str]:
        return {"status": "live"}

    @app.post("/v1/completions", responses={**SSE, **errors}, dependencies=v1)
    async def completions(body: CompletionRequest, request: Request):
        plan = completion_plan(body)
        _check_sequences(plan, settings.max_sequences)
        entry = await catalog(request).get(body.model, ("generate",))
        _check_backend_inputs(entry, plan)
        _check_token_ids(entry, plan.prompts, "prompt")
        for i, prompt in enumerate(plan.prompts):
            if isinstance(prompt, str):
                _check_prompt_bytes(entry, prompt, "prompt", f" (prompt {i})" if len(plan.prompts) > 1 else "")
        if "max_tokens" not in plan.params and entry.tokenizer is not None:
            chars = sum(len(p) for p in plan.prompts if isinstance(p, str))
            longest = await _tokenizing(request, chars, _longest_prompt, entry.tokenizer, plan.prompts)
            _set_default_max_tokens(plan, entry, longest, "prompt")
        texts = _echo_texts(entry, plan)
        rid, created = new_id("cmpl"), int(time.time())
        if plan.stream:
            with _naming_the_prompt("prompt"):
                streams = await _start_all(backend(request), entry, stream_requests(plan, plan.prompts))
            _name_first_prompt_tokens(entry, [first for first, _ in streams])
            return _sse(completion_events(rid, created, body.model, plan, streams, texts))
        with _naming_the_prompt("prompt"):
            outputs = await _unless_client_leaves(request, _each(backend(request), entry, plan))
        _name_first_prompt_tokens(entry, outputs)
        return _json(completion_body(rid, created, body.model, texts, outputs, plan.echo, plan.logprobs))

    @app.post("/v1/chat/completions", responses={**SSE, **errors}, dependencies=v1)
    async def chat(body: ChatCompletionRequest, request: Request):
        entry = await catalog(request).get(body.model, ("generate",))
        parsers = _parsers(entry)
        plan = chat_plan(body, tool_parser=parsers is not None and parsers.tools)
        _check_sequences(plan, settings.max_sequences)
        parse = None
        # a forced tool on a model with a reasoning parser only is answered as before: its arguments, unparsed
        if parsers is not None and (parsers.tools or plan.tool is None):
            tokenizer = entry.tokenizer
            parse = ChatParse(parsers, body, plan.n, lambda text: tokenizer.encode(text, add_special_tokens=False))
            parse.sampling_overrides(plan.params)
        size = sum(len(m.text() or "") for m in body.messages)
        prompt, n_prompt, prompt_ids = await _tokenizing(request, size, _render_chat, entry, body, plan,
                                                         parse is not None)
        if parse is not None:
            parse.set_prompt(prompt_ids)
        if "max_tokens" not in plan.params:
            _set_default_max_tokens(plan, entry, n_prompt, "messages")
        rid, created = new_id("chatcmpl"), int(time.time())
        if plan.stream:
            with _naming_the_prompt("messages"):
                streams = await _start_all(backend(request), entry, stream_requests(plan, [prompt]))
            return _sse(chat_events(rid, created, body.model, plan, streams, parse))
        with _naming_the_prompt("messages"):
            output = await _unless_client_leaves(request, _one(backend(request), entry, plan, prompt))
        return _json(chat_body(rid, created, body.model, output, plan.logprobs, plan.tool, parse, plan.tool_required))

    @app.post("/v1/embeddings", responses=errors, dependencies=v1)
    async def embeddings(body: EmbeddingRequest, request: Request):
        texts = input_texts(body)
        entry = await catalog(request).get(body.model)
        _check_token_ids(entry, texts, "input")
        with _naming_the_prompt("input"), _served(entry, "dimensions" if body.dimensions is not None else None,
                                                   "input"):
            vectors, tokens = await embed_texts(entry, texts, body.dimensions, backend(request))
        return _json(embeddings_body(body, vectors, tokens))

    @app.post("/v1/rerank", responses=errors, dependencies=v1)
    async def rerank(body: RerankRequest, request: Request):
        """Documents ranked by a `scoring`-template model (bi-encoder cosine or a cross-encoder)."""
        entry = await catalog(request).get(body.model, ("score",))
        with _served(entry, None, "documents"):
            scores, tokens = await _unless_client_leaves(request, backend(request).score(entry.name, body.query,
                                                                                          body.documents))
        return _json(rerank_body(body.model, body.documents, scores, tokens, body.top_n, body.return_documents))

    return app


def _model_card(m: ModelEntry) -> dict[str, Any]:
    """vLLM's model card: `root` the served name (vLLM puts its weights path there; this server does not show
    paths), `parent` the base model of a LoRA adapter (null otherwise), `max_model_len` the context (null when
    unknown)."""
    return {"id": m.name, "object": "model", "created": m.created, "owned_by": "tritonpkg", "root": m.name,
            "parent": m.parent, "max_model_len": m.max_model_len, "kind": m.kind, "version": m.version}


def _parsers(entry: ModelEntry) -> ModelParsers | None:
    """The model's vLLM parsers; a model whose spec names parsers that did not load serves no chat (its
    answers would come back unparsed): 500 naming the reason."""
    if entry.parser_names and entry.parsers is None:
        raise APIError(500, entry.parser_error or f"the OpenAI parsers of model '{entry.name}' are not loaded")
    return entry.parsers


def _check_sequences(plan: Plan, limit: int) -> None:
    """Every prompt times n is one sequence in the engine: a bound per request, so one request cannot
    fill the engine's batch (vLLM schedules 256 sequences at a time by default)."""
    prompts = max(len(plan.prompts), 1)
    if prompts * plan.n > limit:
        raise APIError(400, f"{prompts} prompt(s) x n={plan.n} ask for {prompts * plan.n} sequences; at most {limit} "
                            "per request", param="n" if plan.n > 1 and prompts <= limit else "prompt")


def _check_prompt_bytes(entry: ModelEntry, text: str, param: str, which: str = "") -> None:
    """Refuse, before tokenizing it, a prompt too long in bytes to fit the context in any tokenization
    (entry.max_prompt_bytes: the context times the most bytes one token of this tokenizer covers)."""
    bound = entry.max_prompt_bytes
    if bound is None or len(text) * 4 <= bound:  # a character is at most 4 bytes of UTF-8
        return
    if len(text) > bound:
        size = f"at least {len(text)}"
    else:
        encoded = len(text.encode("utf-8"))
        if encoded <= bound:
            return
        size = str(encoded)
    raise APIError(400, f"the prompt{which} has {size} bytes; model '{entry.name}' has a context of "
                        f"{entry.max_model_len} tokens, and no text of more than {bound} bytes fits in it", param=param)


async def _tokenizing(request: Request, chars: int, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) in the tokenizer pool; inline for short texts (microseconds, less than the thread hop)."""
    if chars < INLINE_TOKENIZE_CHARS:
        return fn(*args)
    return await asyncio.get_running_loop().run_in_executor(request.app.state.tokenize, fn, *args)


def _count(tokenizer: Any, text: str, add_special_tokens: bool) -> int:
    """Token count without building the id list (a ChatTokenizer can; transformers' cannot)."""
    count = getattr(tokenizer, "count", None)
    if count is not None:
        return count(text, add_special_tokens)
    return len(tokenizer.encode(text, add_special_tokens=add_special_tokens))


def _longest_prompt(tokenizer: Any, prompts: list[Prompt]) -> int:
    return max(_count(tokenizer, p, True) if isinstance(p, str) else len(p) for p in prompts)


def _check_backend_inputs(entry: ModelEntry, plan: Plan) -> None:
    """Token-id prompts and prompt log-probabilities need inputs the vLLM backend has (NVIDIA's does not)."""
    if any(not isinstance(p, str) for p in plan.prompts) and "prompt_token_ids" not in entry.inputs:
        raise APIError(400, f"model '{entry.name}' takes text prompts only (its backend has no 'prompt_token_ids' "
                            "input)", param="prompt")
    if "prompt_logprobs" in plan.params and "return_prompt_logprobs" not in entry.inputs:
        raise APIError(400, f"'echo' with 'logprobs' needs prompt log-probabilities, which model '{entry.name}''s "
                            "backend does not return (no 'return_prompt_logprobs' input)", param="echo")


def _check_token_ids(entry: ModelEntry, prompts: list[Any], field: str) -> None:
    """Token-id prompts against the model's vocabulary and context, before the engine sees them (vLLM
    would refuse them too, naming no field or `input_tokens`)."""
    for i, ids in enumerate(prompts):
        if isinstance(ids, str):
            continue
        where = f"{field}.{i}" if len(prompts) > 1 else field
        vocab, context = entry.vocab_size, entry.max_model_len
        if vocab is not None and (top := max(ids)) >= vocab:
            raise APIError(400, f"'{where}' holds token id {top}; model '{entry.name}' has a vocabulary of {vocab} "
                                f"ids (0 to {vocab - 1})", param=field)
        if context is not None and len(ids) >= context:
            raise APIError(400, f"'{where}' has {len(ids)} tokens; model '{entry.name}''s context is {context}",
                           param=field)


VLLM_PROMPT_PARAMS = ("input_tokens", "prompt_token_ids")  # what vLLM names a prompt that does not fit


@contextmanager
def _naming_the_prompt(field: str) -> Iterator[None]:
    """A backend refusal of the prompt itself (too long for the context, a token id out of vocabulary)
    names the request's field (`prompt`, `messages`, `input`), not vLLM's internal name for it."""
    try:
        yield
    except APIError as exc:
        if exc.status == 400 and (exc.param in VLLM_PROMPT_PARAMS
                                  or (exc.param is None and "out of vocabulary" in exc.message)):
            raise APIError(400, exc.message, param=field, type=exc.type, code=exc.code) from None
        raise


def _name_first_prompt_tokens(entry: ModelEntry, outputs: list[Output]) -> None:
    """The backend names a prompt's first token by id only (vLLM scores it with nothing); its text is the
    tokenizer's, as vLLM's server decodes it."""
    for output in outputs:
        first = output.prompt_logprobs[0]["sampled"] if output.prompt_logprobs else None
        if first is not None and not first["token"] and entry.tokenizer is not None:
            first["token"] = entry.tokenizer.decode([first["id"]])


def _echo_texts(entry: ModelEntry, plan: Plan) -> list[str]:
    """Each prompt as echoed: its text, or its token ids decoded (as vLLM's server echoes them)."""
    if not plan.echo or all(isinstance(p, str) for p in plan.prompts):
        return [p if isinstance(p, str) else "" for p in plan.prompts]
    if entry.tokenizer is None:
        raise APIError(400, f"'echo' of token ids needs model '{entry.name}''s tokenizer: {entry.tokenizer_error}",
                       param="echo")
    return [p if isinstance(p, str) else entry.tokenizer.decode(p) for p in plan.prompts]


def _set_default_max_tokens(plan: Plan, entry: ModelEntry, prompt_tokens: int, param: str) -> None:
    value = default_max_tokens(entry.max_model_len, prompt_tokens, param)
    if value is not None:
        plan.params["max_tokens"] = value


def _render_chat(entry: ModelEntry, body: ChatCompletionRequest, plan: Plan,
                 with_ids: bool = False) -> tuple[str, int, list[int] | None]:
    """The model's own chat template over the messages -> (prompt text, its token count, its token ids when
    `with_ids`: what vLLM's parsers get); runs in the tokenizer pool."""
    tokenizer = entry.tokenizer
    if tokenizer is None:
        raise APIError(400, f"chat is unavailable for model '{entry.name}': {entry.tokenizer_error}", param="model")
    if not getattr(tokenizer, "chat_template", None):
        raise APIError(400, f"model '{entry.name}'s tokenizer has no chat template; use /v1/completions",
                       param="messages")
    extra: dict[str, Any] = {}
    if body.reasoning_effort is not None:  # vLLM passes it to the template; a template that ignores it cannot honour it
        if "reasoning_effort" not in str(tokenizer.chat_template):
            raise APIError(400, f"model '{entry.name}'s chat template does not read reasoning_effort",
                           param="reasoning_effort")
        extra["reasoning_effort"] = body.reasoning_effort
    try:
        prompt = tokenizer.apply_chat_template(chat_messages(body), tools=plan.tools or None, tokenize=False,
                                               add_generation_prompt=True, **extra)
    except Exception as exc:
        raise APIError(400, f"the chat template of model '{entry.name}' refused the messages: {exc}",
                       param="messages") from None
    _check_prompt_bytes(entry, prompt, "messages", " rendered by the chat template")
    text = without_added_bos(prompt, entry.bos_added)
    if with_ids:
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        return text, len(ids), ids
    return text, _count(tokenizer, prompt, False), None


async def _start_all(be: TritonBackend, entry: ModelEntry,
                     requests: list[tuple[Prompt, dict[str, Any]]]) -> list[Stream]:
    """Begin every choice's streamed generation at once and wait for each one's first response; a rejection
    of any keeps its status and closes the others."""
    if len(requests) == 1:
        return [await _start(be, entry, *requests[0])]
    started = await asyncio.gather(*(_start(be, entry, prompt, params) for prompt, params in requests),
                                   return_exceptions=True)
    failed = [s for s in started if isinstance(s, BaseException)]
    if failed:
        for s in started:
            if not isinstance(s, BaseException):
                await s[1].aclose()  # type: ignore[attr-defined]
        raise failed[0]
    return started  # type: ignore[return-value]


async def _start(be: TritonBackend, entry: ModelEntry, prompt: Prompt, params: dict[str, Any]) -> Stream:
    """Begin a streamed generation and wait for its first response (so rejections keep their status)."""
    rest = _in_served_terms_streamed(entry, be.generate(entry.triton_name, prompt, entry.with_adapter(params), True,
                                                        entry.returns))
    try:
        first = await rest.__anext__()
    except StopAsyncIteration:
        raise APIError(500, f"model '{entry.name}' closed the stream without a response") from None
    return first, rest


async def _in_served_terms_streamed(entry: ModelEntry, outputs: AsyncIterator[Output]) -> AsyncIterator[Output]:
    """A stream's outputs; an error, at its start or after, in served terms (it reaches the client as an error
    event then)."""
    try:
        async for output in outputs:
            yield output
    except APIError as exc:
        raise in_served_terms(entry, exc) from None
    finally:
        await outputs.aclose()  # type: ignore[attr-defined]


PARAMETER = re.compile(r"\(parameter=([A-Za-z_][A-Za-z0-9_.]*)|sampling parameter '([A-Za-z_][A-Za-z0-9_]*)'"
                       r"|\(received ([A-Za-z_][A-Za-z0-9_]*)=")


def in_served_terms(entry: ModelEntry, exc: APIError) -> APIError:
    """A backend error as the client should read it: the engine's weights and tokenizer paths replaced by the
    served model name (a client never sent, and should not learn, a server path), and `param` the field vLLM
    names (its validation errors end in '(parameter=max_tokens, value=...)'; the backend's say
    "sampling parameter 'x'")."""
    message = exc.message
    paths = {str(p) for p in ((entry.engine_args or {}).get("model"), (entry.engine_args or {}).get("tokenizer"),
                              entry.tokenizer_path(), entry.weights_path()) if p}
    for path in sorted(paths | {os.path.realpath(p) for p in paths}, key=len, reverse=True):
        message = message.replace(path, entry.name)
    param = exc.param
    if param is None and exc.status < 500:
        found = PARAMETER.search(message)
        param = next((g for g in found.groups() if g), None) if found else None
    if message == exc.message and param == exc.param:
        return exc
    return APIError(exc.status, message, param=param, type=exc.type, code=exc.code)


@contextmanager
def _served(entry: ModelEntry, mentioned: str | None, default: str) -> Iterator[None]:
    """Backend errors of one route in served terms (in_served_terms); a refusal that names no field names
    `mentioned` where its message speaks of it, else `default` (the input the route sends)."""
    try:
        yield
    except APIError as exc:
        served = in_served_terms(entry, exc)
        if served.status < 500 and served.param is None and served.status != 429:
            param = mentioned if mentioned is not None and mentioned in served.message else default
            served = APIError(served.status, served.message, param=param, type=served.type, code=served.code)
        raise served from None


async def _unless_client_leaves(request: Request, work):
    """Await `work`, cancelling it if the client disconnects first (Starlette does not cancel a
    non-streaming handler): the cancellation reaches Triton, which aborts the generation."""
    task = asyncio.ensure_future(work)

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        with suppress(asyncio.CancelledError, APIError):
            await task
        raise APIError(499, "the client closed the connection before the response")
    return task.result()


async def _one(be: TritonBackend, entry: ModelEntry, plan: Plan, prompt: Prompt) -> Output:
    try:
        outputs = [o async for o in be.generate(entry.triton_name, prompt, entry.with_adapter(plan.params), False,
                                                entry.returns)]
    except APIError as exc:
        raise in_served_terms(entry, exc) from None
    if len(outputs) != 1:
        raise APIError(500, f"model '{entry.name}' sent {len(outputs)} responses to a non-streamed request")
    return outputs[0]


async def _each(be: TritonBackend, entry: ModelEntry, plan: Plan) -> list[Output]:
    """Every prompt's output, in order; one prompt (the usual case) without gather's extra task."""
    if len(plan.prompts) == 1:
        return [await _one(be, entry, plan, plan.prompts[0])]
    return list(await asyncio.gather(*(_one(be, entry, plan, p) for p in plan.prompts)))


def _json(body: dict[str, Any]) -> Response:
    """Bodies are plain JSON already: skip FastAPI's jsonable_encoder walk (about 1 ms a response here)."""
    return Response(json.dumps(body, separators=(",", ":")).encode(), media_type="application/json")


def _sse(events) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
