"""`LocalChatModel`: a GGUF model running in-process through llama.cpp (the `xllamacpp` bindings).

Without a `model_path` it runs the embedded default, Qwen2.5-Coder-1.5B-Instruct (Q4_K_M), assembled once
from the `agentloop-runtime[local]` extra's parts and verified by size and sha256 (see `_weights`);
`LocalChatModel("qwen2.5-coder-0.5b")` runs the smaller, faster 0.5B model the same way
(`agentloop-runtime[local-0-5b]`).

llama.cpp calls block and release the GIL, so every call runs in a worker thread: the model loads there on
first use (once per instance, under a lock), and each generation pass runs in a thread of its own. Nothing in
an instance is bound to one event loop, so one model serves asyncio and trio alike, even in turn.

A pass hands its chunks to the event loop through `_Handoff`: a small bounded buffer (the worker waits for
room while the consumer is behind) and a wakeup the worker posts to the loop without waiting for it to run.
The worker never blocks on the event loop, which may stop or close at any moment (an `anyio.run` or a test
ending right after the response): a thread waiting for a loop that never runs again would live forever. Its
one wait, for room, rechecks every `_CHECK_EVERY` seconds that the consumer is still there and its loop still
runs, so a pass ends at its next token once its stream is closed, its consumer cancelled, or its loop ended.

Tool calling: this model (like most small GGUF models) has no dependable native tool calling, so the
provider owns the protocol (`_local_tools`): a pass constrained by a JSON schema decides the calls; when it
decides none are needed, a second, unconstrained pass writes the answer, streamed token by token.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import math
import os
import secrets
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import msgspec

from .._values._errors import (
    AgentLoopError,
    BadRequestError,
    BadResponseError,
    IllegalConfigurationError,
    ModelError,
)
from .._values._messages import (
    AiMessage,
    ChatRequest,
    ChatResponse,
    FinishReason,
    TokenUsage,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from .._values._spec import ToolSpecification
from .._values._text import valid_value
from ._base import (
    GenerationProgress,
    ModelEvent,
    ResponseComplete,
    TextDelta,
    TokenCount,
    ToolCallComplete,
    ToolCallDelta,
)
from ._local_checks import YES_NO_GRAMMAR, conversation_text, fit_questions, grounded, yes_probability
from ._local_prompts import SavedPrompts, count_prompt_tokens, model_identity
from ._local_threads import cpu_sample, default_threads
from ._local_tools import (
    ToolCallScanner,
    answered_calls,
    call_key,
    offered_tools,
    render_plain,
    render_protocol,
    tool_calls_schema,
)
from ._media import refuse_media
from ._weights import (
    DEFAULT_WEIGHTS,
    KNOWN_WEIGHTS,
    LocalModelWeightsError,
    WeightsSpec,
    cache_dir,
    ensure_weights,
)

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["LocalChatModel", "LocalModelWeightsError"]

_PROVIDER = "local"
_INSTALL_HINT = 'pip install "agentloop-runtime[local]"'
_BUFFER = 32  # chunks in flight per pass
_CHECK_EVERY = 0.25  # seconds between liveness checks while a worker waits for room
_WORKER_NAME = "agentloop-local-model"
# Prompt tokens llama.cpp evaluates per step: each step ends with a progress report (`GenerationProgress`),
# so a long prompt shows it advancing (measured: no slower than the default 2048-token steps on 2 cores).
_PROMPT_BATCH = 128
_FORCED_TRIES = 2  # passes asking a declined decision again with a call required (see `_checked`)
# Host memory for llama.cpp's prompt cache: the KV state of earlier prompts, restored when a new prompt
# starts with one of them (a run's decision prompts share the tool list, the answer prompt differs). About
# 9,000 tokens of the 1.5B model's state; llama.cpp's own default (8 GiB) would let a server grow for ever.
_PROMPT_CACHE_MIB = 256
_RESERVED = frozenset(
    {"messages", "stream", "stream_options", "timings_per_token", "tools", "tool_choice", "n"}
)
_CONSTRAINTS = frozenset({"response_format", "json_schema", "grammar"})
_FINISH = {
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "tool_calls": FinishReason.TOOL_EXECUTION,
}


class _Delta(msgspec.Struct):
    content: str | None = None


class _Top(msgspec.Struct):
    token: str = ""
    logprob: float = -math.inf


class _TokenLogprobs(msgspec.Struct):
    top_logprobs: list[_Top] = msgspec.field(default_factory=list)


class _Logprobs(msgspec.Struct):
    content: list[_TokenLogprobs] | None = None


class _Choice(msgspec.Struct):
    delta: _Delta = msgspec.field(default_factory=_Delta)
    finish_reason: str | None = None
    logprobs: _Logprobs | None = None  # asked for by the fit questions only


class _Details(msgspec.Struct):
    cached_tokens: int = 0


class _Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: _Details | None = None


class _Timings(msgspec.Struct):
    """Per-token timings (`timings_per_token`): the usage so far when a pass is stopped early."""

    cache_n: int = 0
    prompt_n: int = 0
    predicted_n: int = 0


class _PromptProgress(msgspec.Struct):
    """llama.cpp's report after each step of prompt evaluation (`return_progress`)."""

    total: int = 0
    cache: int = 0
    processed: int = 0


class _Chunk(msgspec.Struct):
    """The part of one OpenAI-format stream chunk that matters here."""

    choices: list[_Choice] = msgspec.field(default_factory=list)
    usage: _Usage | None = None
    timings: _Timings | None = None
    prompt_progress: _PromptProgress | None = None
    id: str | None = None
    error: dict[str, Any] | None = None


_chunk_from_builtins = msgspec.convert


class _Done(msgspec.Struct):
    """Marks the end of one generation pass in the worker thread (with its failure, if any)."""

    error: BaseException | None = None


class _Pass(msgspec.Struct):
    """What one generation pass produced."""

    text: str = ""
    finish: str | None = None
    usage: TokenUsage | None = None
    id: str | None = None
    first_top: list[_Top] | None = None  # the first token's top log-probabilities, when asked for


class LocalChatModel:
    """A chat model running in this process on llama.cpp: the embedded default or any GGUF file.

    ```python
    model = LocalChatModel()          # verified Qwen2.5-Coder-1.5B-Instruct, assembled on first use
    model = LocalChatModel("models/other.gguf", n_ctx=8192, n_threads=4)
    response = await model.chat(ChatRequest([UserMessage("Hi")]))
    await model.aclose()
    ```

    The model loads lazily on first use, in a worker thread, once per instance. Generation defaults to greedy
    decoding (`temperature=0.0`, reproducible); `ChatRequest.parameters` override per call (`temperature`,
    `max_tokens`, `top_p`, `top_k`, `min_p`, `seed`, `stop`, `repeat_penalty`, ... as llama.cpp names them).
    A `ChatRequest.response_format` constrains the answer with a grammar built from its schema, so the
    answer always parses.
    """

    supports_response_format = True

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        *,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        tool_call_max_tokens: int = 512,
        max_tool_calls: int = 8,
        seed: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        progress: bool | Callable[[str], None] = True,
        model_name: str | None = None,
        save_prompts: bool = True,
        check_calls: bool = True,
    ) -> None:
        if n_ctx < 256:
            raise IllegalConfigurationError(f"LocalChatModel: n_ctx must be at least 256, got {n_ctx}")
        if n_threads is not None and n_threads < 1:
            raise IllegalConfigurationError(
                f"LocalChatModel: n_threads must be >= 1 or None, got {n_threads}"
            )
        if max_tokens is not None and max_tokens < 1:
            raise IllegalConfigurationError(
                f"LocalChatModel: max_tokens must be >= 1 or None, got {max_tokens}"
            )
        if tool_call_max_tokens < 16:
            raise IllegalConfigurationError(
                f"LocalChatModel: tool_call_max_tokens must be >= 16, got {tool_call_max_tokens}"
            )
        if max_tool_calls < 1:
            raise IllegalConfigurationError(
                f"LocalChatModel: max_tool_calls must be >= 1, got {max_tool_calls}"
            )
        self.tool_call_max_tokens = tool_call_max_tokens
        self.max_tool_calls = max_tool_calls
        # A known name (`KNOWN_WEIGHTS`) picks shipped weights; anything else is a path to a GGUF file.
        self.weights: WeightsSpec | None = (
            DEFAULT_WEIGHTS if model_path is None else KNOWN_WEIGHTS.get(os.fspath(model_path).strip())
        )
        self.model_path: Path | None = (
            Path(model_path).expanduser() if model_path is not None and self.weights is None else None
        )
        if isinstance(model_path, str) and self.model_path is not None and not _looks_like_a_path(model_path):
            raise IllegalConfigurationError(
                f"LocalChatModel: unknown model name {model_path!r}; known names: {known_names()}. "
                f"For a GGUF file, pass its path (ending in .gguf, or with a directory: ./{model_path})"
            )
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.cache_dir = cache_dir
        self.save_prompts = save_prompts
        self.check_calls = check_calls
        """Check the model's calls before any runs (`_local_checks`): grounded in the conversation, each
        described string argument fitting its description; a first decision of no call is asked again."""
        self._saved: SavedPrompts | None = None
        self._api_key: str | None = None  # the in-process server's key (its HTTP port serves counting)
        self._seen_prompts: set[str] = set()
        self.model_name = model_name or (
            self.model_path.stem
            if self.model_path is not None
            else self._shipped().file_name.removesuffix(".gguf")
        )
        self._defaults: dict[str, Any] = {"temperature": temperature}
        if max_tokens is not None:
            self._defaults["max_tokens"] = max_tokens
        if seed is not None:
            self._defaults["seed"] = seed
        if progress is True:
            self._progress: Callable[[str], None] = _print_progress
        elif progress is False:
            self._progress = _silent
        else:
            self._progress = progress
        self._server: Any = None
        self._loaded_path: Path | None = None
        self.threads_in_use: int | None = None
        """Threads llama.cpp runs with, once loaded: `n_threads`, or what `default_threads()` chose."""
        self._closed = False
        self._load_lock = threading.Lock()
        self._workers: set[threading.Thread] = set()

    def _shipped(self) -> WeightsSpec:
        """The shipped weights this model runs (when it was not given a path)."""
        assert self.weights is not None
        return self.weights

    def __repr__(self) -> str:
        where = str(self.model_path) if self.model_path is not None else self._shipped().description
        return f"LocalChatModel({where!r}, n_ctx={self.n_ctx}, loaded={self._server is not None})"

    # -- lifecycle ----------------------------------------------------------------------------------------

    @property
    def loaded_path(self) -> Path | None:
        """The GGUF file in use once loaded (for the default: the verified cache file), else None."""
        return self._loaded_path

    async def load(self) -> None:
        """Loads the model now instead of on first use (assembling and verifying the default weights)."""
        await self._ensure_server()

    async def aclose(self) -> None:
        """Unloads the model. Calls after this raise `IllegalConfigurationError`."""
        self._closed = True
        with self._load_lock:
            server, self._server = self._server, None
        if server is not None:
            # Dropping the last reference stops llama.cpp's loop and joins its thread: do that off the loop,
            # once the passes still finishing (a pass left early stops at its next token) are done with it.
            await anyio.to_thread.run_sync(_release, [server], list(self._workers))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _ensure_server(self) -> Any:
        server = self._server
        if server is not None:
            return server
        if self._closed:
            raise IllegalConfigurationError("LocalChatModel is closed; create a new one")
        return await anyio.to_thread.run_sync(self._load_blocking, abandon_on_cancel=True)

    def _load_blocking(self) -> Any:
        with self._load_lock:
            if self._server is not None:
                return self._server
            if self._closed:
                raise IllegalConfigurationError("LocalChatModel is closed; create a new one")
            # How busy the machine is, watched while the runtime imports and the weights are checked.
            since = cpu_sample() if self.n_threads is None else None
            try:
                xllamacpp: Any = importlib.import_module("xllamacpp")
            except ImportError as exc:
                raise IllegalConfigurationError(
                    f"LocalChatModel needs the llama.cpp runtime (xllamacpp): {_INSTALL_HINT}"
                ) from exc
            if self.model_path is None:
                path = ensure_weights(self._shipped(), cache=self.cache_dir, progress=self._progress)
            else:
                path = self.model_path
                if not path.is_file():
                    raise IllegalConfigurationError(f"LocalChatModel: no GGUF model file at {path}")
            params = xllamacpp.CommonParams()
            params.model.path = str(path)
            params.n_ctx = self.n_ctx
            params.n_parallel = 1
            params.verbosity = 0
            params.warmup = False
            params.ui = False
            params.n_threads_http = 1
            params.n_batch = params.n_ubatch = _PROMPT_BATCH
            params.cache_prompt = True  # reuse the KV cache of the prompt prefix a request shares
            params.cache_ram_mib = _PROMPT_CACHE_MIB
            # xllamacpp also serves HTTP on an ephemeral 127.0.0.1 port; a random key keeps other local
            # processes out (the in-process calls below do not go through HTTP).
            api_key = secrets.token_urlsafe(24)
            params.api_keys = [api_key]
            prompts = self._prompts_directory()
            if prompts is not None:  # saved prompt states (`_local_prompts`): llama.cpp's slot actions
                params.endpoint_slots = True
                params.slot_save_path = f"{prompts}{os.sep}"
            # Worker threads sleep instead of spinning between tasks: as fast on an idle machine, and it
            # keeps throughput from collapsing when other processes compete for the cores (measured 7 vs
            # 56 tokens/s on this project's 2-core machine under load).
            params.cpuparams.poll = 0
            params.cpuparams_batch.poll = 0
            threads = self.n_threads if self.n_threads is not None else default_threads(since)
            params.cpuparams.n_threads = threads
            params.cpuparams_batch.n_threads = threads
            self._progress(f"loading {path.name} (n_ctx={self.n_ctx}, n_threads={threads})")
            started = time.perf_counter()
            try:
                server = xllamacpp.Server(params)
            except RuntimeError as exc:
                raise IllegalConfigurationError(
                    f"LocalChatModel: llama.cpp could not load {path} (not a GGUF model, or too little "
                    f"memory for n_ctx={self.n_ctx}?): {exc}"
                ) from exc
            self._progress(f"loaded in {time.perf_counter() - started:.1f}s")
            self._server = server
            self._api_key = api_key
            self._loaded_path = path
            if prompts is not None:
                identity = f"{model_identity(path)}:{self.n_ctx}"
                self._saved = SavedPrompts(prompts, identity, server.listening_address, api_key)
            self.threads_in_use = threads
            return server

    def _prompts_directory(self) -> Path | None:
        """Where saved prompt states live (`<cache>/prompts`), created if needed; None: off or unusable."""
        if not self.save_prompts:
            return None
        directory = cache_dir(self.cache_dir) / "prompts"
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
        return directory

    # -- ChatModel ----------------------------------------------------------------------------------------

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """Sends `request` and returns the whole response."""
        events = self._events(request)
        try:
            async for event in events:
                if isinstance(event, ResponseComplete):
                    return event.response
        finally:
            await events.aclose()
        raise BadResponseError("the local model's stream ended without a response", provider=_PROVIDER)

    def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        """Sends `request` and yields its events as they are generated, ending with `ResponseComplete`."""
        return self._events(request)

    async def count_tokens(self, request: ChatRequest) -> TokenCount:
        """The prompt tokens of the first pass `request` would run (the tool-call pass when tools are
        offered, else the answer pass), counted by the model's own chat template and tokenizer: exact.
        Loads the model if it is not loaded yet."""
        refuse_media(request.messages, provider=_PROVIDER, model="the embedded local model")
        specs, allow_no_call = offered_tools(request.tool_specifications, request.tool_choice)
        if specs:
            messages = render_protocol(request.messages, specs, allow_no_call=allow_no_call)
        else:
            messages = render_plain(request.messages)
            if request.response_format is not None:
                messages = _with_schema(messages, dict(request.response_format.schema))
        server = await self._ensure_server()
        assert self._api_key is not None
        try:
            tokens = await anyio.to_thread.run_sync(
                count_prompt_tokens, server.listening_address, self._api_key, valid_value(messages)
            )
        except (OSError, ValueError, KeyError) as exc:
            raise BadResponseError(
                f"the local model could not count the prompt's tokens: {exc}", provider=_PROVIDER
            ) from exc
        return TokenCount(tokens=tokens, exact=True)

    async def _events(self, request: ChatRequest) -> AsyncGenerator[ModelEvent, None]:
        """`_passes`, with anything but an `AgentLoopError` turned into a `ModelError` (as every provider)."""
        refuse_media(request.messages, provider=_PROVIDER, model="the embedded local model")
        async with contextlib.aclosing(self._passes(request)) as events:
            try:
                async for event in events:
                    yield event
            except AgentLoopError:
                raise
            except Exception as exc:
                raise ModelError(
                    f"local: unexpected {type(exc).__name__} while generating: {exc}", provider=_PROVIDER
                ) from exc

    async def _passes(self, request: ChatRequest) -> AsyncGenerator[ModelEvent, None]:
        specs, allow_no_call = offered_tools(request.tool_specifications, request.tool_choice)
        parameters = self._parameters(request.parameters, constrained=bool(specs))
        server = await self._ensure_server()

        usage: TokenUsage | None = None
        if specs:
            schema = tool_calls_schema(specs, allow_no_call=allow_no_call, max_calls=self.max_tool_calls)
            payload = valid_value(  # lone surrogates repaired (see agentloop._values._text)
                {
                    **{key: value for key, value in parameters.items() if key not in ("stop", "max_tokens")},
                    "max_tokens": self.tool_call_max_tokens,
                    "messages": render_protocol(request.messages, specs, allow_no_call=allow_no_call),
                    "response_format": {"type": "json_schema", "json_schema": {"schema": schema}},
                }
            )
            # The tool prompt's state from an earlier process, if saved (`_local_prompts`); saved after this
            # pass when this is the first time this model sees that prompt and nothing was restored.
            saved, key = self._saved, None
            if saved is not None:
                key = saved.key(payload["messages"])
                if key is not None and key not in self._seen_prompts:
                    self._seen_prompts.add(key)
                    if await anyio.to_thread.run_sync(saved.restore, key):
                        key = None
                else:
                    key = None
            scanner = ToolCallScanner()
            calls: list[ToolExecutionRequest] = []
            # A small model may repeat a call it already has the result of, round after round: with the
            # answer option open, such a repeat is dropped and, if nothing else is called, the model answers.
            answered = answered_calls(request.messages) if allow_no_call else frozenset()
            # Checked calls are given once all are known and checked; unchecked ones as each is written.
            check = self.check_calls and allow_no_call
            decided = _Pass()
            async with contextlib.aclosing(self._generate(server, payload, decided, True)) as pieces:
                async for piece in pieces:
                    if not isinstance(piece, str):
                        yield piece
                        continue
                    for call in scanner.feed(piece):
                        if call_key(call) in answered:
                            continue
                        calls.append(call)
                        if not check:
                            yield ToolCallDelta(len(calls) - 1, call.id, call.name, call.arguments)
                            yield ToolCallComplete(len(calls) - 1, call)
                    if scanner.chose_answer:
                        break  # the answer comes from the plain pass below; stop decoding the JSON one
            usage = decided.usage
            if saved is not None and key is not None:
                await anyio.to_thread.run_sync(saved.save, key)
            if not (scanner.complete or scanner.chose_answer):
                raise BadResponseError(
                    f"the local model stopped ({decided.finish}) before finishing its tool calls "
                    f"{scanner.text!r}; raise tool_call_max_tokens or n_ctx",
                    provider=_PROVIDER,
                )
            if check:
                checked = _Pass()
                calls = await self._checked(server, request, specs, payload, calls, answered, checked)
                usage = _plus(usage, checked.usage)
                for index, call in enumerate(calls):
                    yield ToolCallDelta(index, call.id, call.name, call.arguments)
                    yield ToolCallComplete(index, call)
            if calls:
                message = AiMessage(tool_execution_requests=calls)
                response = ChatResponse(
                    message, usage, FinishReason.TOOL_EXECUTION, self.model_name, decided.id
                )
                yield ResponseComplete(response)
                return

        payload = {**parameters, "messages": render_plain(request.messages)}
        if request.response_format is not None:  # structured output: a grammar from the schema
            schema = dict(request.response_format.schema)
            payload["response_format"] = {"type": "json_schema", "json_schema": {"schema": schema}}
            # The grammar fixes the form; the schema in the prompt tells the model what each field means.
            payload["messages"] = _with_schema(payload["messages"], schema)
        payload = valid_value(payload)
        answer = _Pass()
        async with contextlib.aclosing(self._generate(server, payload, answer, False)) as pieces:
            async for piece in pieces:
                yield TextDelta(piece) if isinstance(piece, str) else piece
        usage = _plus(usage, answer.usage)
        finish = _FINISH.get(answer.finish or "", FinishReason.OTHER)
        response = ChatResponse(AiMessage(answer.text), usage, finish, self.model_name, answer.id)
        yield ResponseComplete(response)

    async def _checked(
        self,
        server: Any,
        request: ChatRequest,
        specs: Sequence[ToolSpecification],
        payload: dict[str, Any],
        calls: list[ToolExecutionRequest],
        answered: frozenset[tuple[str, str]],
        spent: _Pass,
    ) -> list[ToolExecutionRequest]:
        """The decision's calls that pass `_local_checks`; `spent.usage` gets what the checks cost.

        A turn's first decision of no call is asked again with a call required (a small model declines live
        facts asked indirectly); what that pass writes is kept only when grounded in the conversation and
        fitting. When it is not, the pass is asked once more with the rejected tools left out of the grammar
        only: the prompt stays the same, so llama.cpp's cache makes the retry a few tokens of decoding.
        """
        if calls or answered or not _turn_opens(request):
            return await self._kept(server, request, specs, calls, spent, required=False)
        offered = list(specs)
        for _ in range(_FORCED_TRIES):
            schema = tool_calls_schema(offered, allow_no_call=False, max_calls=self.max_tool_calls)
            again = {**payload, "response_format": {"type": "json_schema", "json_schema": {"schema": schema}}}
            scanner = ToolCallScanner()
            forced: list[ToolExecutionRequest] = []
            async with contextlib.aclosing(self._generate(server, again, spent, False)) as pieces:
                async for piece in pieces:
                    if isinstance(piece, str):
                        forced += scanner.feed(piece)
            kept = await self._kept(server, request, specs, forced, spent, required=True)
            rejected = {call.name for call in forced}
            offered = [spec for spec in offered if spec.name not in rejected]
            if kept or not offered:
                return kept
        return []

    async def _kept(
        self,
        server: Any,
        request: ChatRequest,
        specs: Sequence[ToolSpecification],
        calls: list[ToolExecutionRequest],
        spent: _Pass,
        *,
        required: bool,
    ) -> list[ToolExecutionRequest]:
        """The calls grounded in the conversation whose described arguments fit (`_local_checks`)."""
        text = conversation_text(request.messages)
        by_name = {spec.name: spec for spec in specs}
        kept = []
        for call in calls:
            spec = by_name.get(call.name)
            if spec is None:
                continue
            found = grounded(call, spec, text)
            if found is False or (found is None and required):
                continue
            fits = True
            for question in fit_questions(call, spec):
                if not await self._yes(server, question, spent):
                    fits = False
                    break
            if fits:
                kept.append(call)
        return kept

    async def _yes(self, server: Any, question: str, spent: _Pass) -> bool:
        """The model's one-token yes/no answer to `question` (P(yes) against P(no), unconstrained)."""
        payload = {
            **self._parameters(None, constrained=False),
            "messages": [{"role": "user", "content": question}],
            "temperature": 0.0,
            "max_tokens": 1,
            "logprobs": True,
            "top_logprobs": 20,
            "grammar": YES_NO_GRAMMAR,
        }
        payload.pop("return_progress", None)
        answer = _Pass()
        async with contextlib.aclosing(self._generate(server, valid_value(payload), answer, False)) as pieces:
            async for _ in pieces:
                pass
        spent.usage = _plus(spent.usage, answer.usage)
        top = [(item.token, item.logprob) for item in answer.first_top or ()]
        return yes_probability(top) >= 0.5

    def _parameters(self, overrides: Mapping[str, Any] | None, *, constrained: bool) -> dict[str, Any]:
        parameters = dict(self._defaults)
        if overrides:
            reserved = sorted(set(overrides) & (_RESERVED | (_CONSTRAINTS if constrained else frozenset())))
            if reserved:
                raise IllegalConfigurationError(
                    f"LocalChatModel sets {reserved} itself"
                    + (" when tools are offered (constrained tool-call decoding)" if constrained else "")
                    + "; remove them from ChatRequest.parameters"
                )
            parameters.update(overrides)
        parameters["stream"] = True
        parameters["stream_options"] = {"include_usage": True}
        parameters["timings_per_token"] = True
        parameters["return_progress"] = True
        return parameters

    async def _generate(
        self, server: Any, payload: dict[str, Any], result: _Pass, count_tokens: bool
    ) -> AsyncGenerator[str | GenerationProgress, None]:
        """Runs one generation pass in a worker thread, yielding its text pieces; fills `result` at the end.

        Also yields a `GenerationProgress` after each step of the prompt's evaluation and, with
        `count_tokens` (a pass whose text the caller does not show), after each generated token.

        Leaving early (consumer gone, cancelled) tells the worker to stop at its next token; llama.cpp cannot
        interrupt a prompt evaluation already under way, so the thread may finish that in the background.
        """
        handoff = _Handoff(_BUFFER)

        def on_chunk(chunk: dict[str, Any]) -> bool:
            return not handoff.put(chunk)  # True tells llama.cpp to stop generating

        def work() -> None:
            outcome = _Done()
            try:
                server.handle_chat_completions(payload, on_chunk)
            except BaseException as exc:
                outcome = _Done(exc)
            finally:
                handoff.finish(outcome)
                self._workers.discard(threading.current_thread())

        pieces: list[str] = []
        prompt: tuple[int, int, int] | None = None  # the last prompt progress: processed, total, cached
        worker = threading.Thread(target=work, name=_WORKER_NAME, daemon=True)
        self._workers.add(worker)
        worker.start()
        try:
            while True:
                item = await handoff.get()
                if isinstance(item, _Done):
                    if item.error is not None:
                        raise _model_error(item.error) from item.error
                    break
                chunk = _chunk_from_builtins(item, _Chunk)
                if chunk.error is not None:
                    raise _error_from_payload(chunk.error)
                if chunk.id is not None:
                    result.id = chunk.id
                if chunk.prompt_progress is not None:
                    step = chunk.prompt_progress
                    prompt = (step.processed, step.total, step.cache)
                    yield GenerationProgress(*prompt)
                if chunk.usage is not None:
                    usage = chunk.usage
                    cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
                    result.usage = TokenUsage(
                        usage.prompt_tokens, usage.completion_tokens, cache_read_tokens=cached
                    )
                elif chunk.timings is not None:
                    timings = chunk.timings
                    read = timings.cache_n + timings.prompt_n
                    result.usage = TokenUsage(read, timings.predicted_n, cache_read_tokens=timings.cache_n)
                for choice in chunk.choices:
                    if result.first_top is None and choice.logprobs is not None and choice.logprobs.content:
                        result.first_top = choice.logprobs.content[0].top_logprobs
                    if choice.finish_reason is not None:
                        result.finish = choice.finish_reason
                    content = choice.delta.content
                    if content:
                        pieces.append(content)
                        yield content
                        if count_tokens and prompt is not None:
                            yield GenerationProgress(prompt[1], prompt[1], prompt[2], len(pieces))
        finally:
            handoff.close()  # the worker stops at its next token (or right away if it waits for room)
            result.text = "".join(pieces)


def _plus(first: TokenUsage | None, second: TokenUsage | None) -> TokenUsage | None:
    return second if first is None else first if second is None else first + second


def _turn_opens(request: ChatRequest) -> bool:
    """Whether no tool round answered since the last user message (the turn's first decision)."""
    for message in reversed(request.messages):
        if isinstance(message, UserMessage):
            return True
        if isinstance(message, ToolExecutionResultMessage):
            return False
    return True


class _Handoff:
    """Carries one pass's chunks from its worker thread to the event loop; the worker never waits on the loop.

    Created on the event loop. The buffer is a deque with one thread-semaphore permit per chunk in flight
    (back-pressure). A consumer with nothing to read parks on an `anyio.Event` that the worker sets through
    a posted callback, which never waits for the loop to run it (see `_poster`). The worker's only wait, for
    room, is bounded: every `_CHECK_EVERY` seconds it checks `stopped` and that the consumer's loop still
    runs, so neither a consumer that left nor an event loop that ended can keep it.
    """

    __slots__ = ("_items", "_lock", "_next_check", "_post", "_room", "_size", "_waiter", "stopped")

    def __init__(self, size: int) -> None:
        self._items: deque[Any] = deque()
        self._lock = threading.Lock()
        self._post = _poster()
        self._room = threading.Semaphore(size)
        self._size = size
        self._waiter: anyio.Event | None = None
        self._next_check = 0.0  # when `put` next asks whether the consumer's loop still runs
        self.stopped = threading.Event()

    # -- worker thread ----------------------------------------------------------------------------------

    def put(self, item: Any) -> bool:
        """Queues a chunk, waiting while `size` are unread; False once the consumer or its loop is gone."""
        while not self._room.acquire(timeout=_CHECK_EVERY):
            if self.stopped.is_set() or not self._loop_runs():
                return False
        now = time.monotonic()
        if self._items and now >= self._next_check:
            # Chunks wait unread, so no post of the consumer's wake-up tells whether its loop still runs:
            # ask it now and then (a slow model on a loop that ended would otherwise fill the whole buffer).
            self._next_check = now + _CHECK_EVERY
            self._loop_runs()
        return not self.stopped.is_set() and self._push(item)

    def _loop_runs(self) -> bool:
        """Whether the consumer's event loop still runs (a no-op posted to it); sets `stopped` when not."""
        if self._post(_noop):
            return True
        self.stopped.set()
        return False

    def finish(self, item: Any) -> None:
        """Queues the pass's last item (never waits: it needs no room, nobody may be left to make any)."""
        self._push(item)

    def _push(self, item: Any) -> bool:
        with self._lock:
            self._items.append(item)
            waiter, self._waiter = self._waiter, None
        if waiter is not None and not self._post(waiter.set):
            self.stopped.set()  # the loop has ended: nobody will read this pass
            return False
        return True

    # -- event loop -------------------------------------------------------------------------------------

    async def get(self) -> Any:
        """The next item, waiting for the worker when there is none."""
        while True:
            with self._lock:
                if self._items:
                    self._room.release()
                    return self._items.popleft()
                self._waiter = waiter = anyio.Event()
            await waiter.wait()

    def close(self) -> None:
        """Tells the worker to stop at its next token, waking it if it waits for room."""
        self.stopped.set()
        self._room.release(self._size)


def _poster() -> Callable[[Callable[[], object]], bool]:
    """Returns a thread-safe way to run a callback on the current event loop that never waits for it to run.

    `anyio.from_thread.run_sync` waits until the loop has run the call, which a loop that stopped or closed
    meanwhile never does. The returned function only queues the callback (asyncio's `call_soon_threadsafe`,
    trio's `TrioToken.run_sync_soon`) and returns False, without queuing, once that loop is closed or its
    run has ended; a callback queued on a loop that then stops for good is dropped, and nobody waits for it.
    """
    native: Any = anyio.lowlevel.current_token().native_token
    post: Callable[[Callable[[], object]], object] = (
        native.call_soon_threadsafe if isinstance(native, asyncio.AbstractEventLoop) else native.run_sync_soon
    )

    def run_soon(callback: Callable[[], object]) -> bool:
        try:
            post(callback)
        except RuntimeError:  # asyncio: "Event loop is closed"; trio: RunFinishedError
            return False
        return True

    return run_soon


def _noop() -> None:
    pass


def known_names() -> str:
    """The names `LocalChatModel` knows, for messages: `qwen2.5-coder-1.5b (the default), ...`."""
    return ", ".join(
        f"{name} (the default)" if spec is DEFAULT_WEIGHTS else name for name, spec in KNOWN_WEIGHTS.items()
    )


def _looks_like_a_path(text: str) -> bool:
    """Whether a model string names a file, not a model: a GGUF suffix, a directory, or an existing file."""
    separators = {os.sep, "/"} | ({os.altsep} if os.altsep else set())
    text = text.strip()
    return (
        text.lower().endswith(".gguf")
        or any(separator in text for separator in separators)
        or text.startswith("~")
        or Path(text).is_file()
    )


def _with_schema(messages: list[dict[str, str]], schema: dict[str, Any]) -> list[dict[str, str]]:
    note = f"Answer with a JSON object that matches this JSON schema:\n{msgspec.json.encode(schema).decode()}"
    if messages and messages[0]["role"] == "system":
        return [{"role": "system", "content": f"{messages[0]['content']}\n\n{note}"}, *messages[1:]]
    return [{"role": "system", "content": note}, *messages]


def _model_error(error: BaseException) -> ModelError:
    if isinstance(error, ValueError):
        # xllamacpp raises ValueError for requests llama.cpp rejects up front (a schema it cannot compile).
        return BadRequestError(f"llama.cpp rejected the request: {error}", provider=_PROVIDER)
    return BadResponseError(f"llama.cpp failed: {error!r}", provider=_PROVIDER)


def _error_from_payload(error: dict[str, Any]) -> ModelError:
    message = str(error.get("message", error))
    code = error.get("code")
    kind = error.get("type")
    status = code if isinstance(code, int) else None
    error_type = kind if isinstance(kind, str) else None
    text = f"llama.cpp rejected the request: {message}"
    if status is not None and 400 <= status < 500:
        return BadRequestError(
            text, provider=_PROVIDER, status_code=status, error_type=error_type, provider_message=message
        )
    return BadResponseError(
        text, provider=_PROVIDER, status_code=status, error_type=error_type, provider_message=message
    )


def _release(holder: list[Any], workers: list[threading.Thread]) -> None:
    """Drops the server once `workers` (passes still inside llama.cpp) have returned: freeing it under a
    request in flight crashes the process."""
    for worker in workers:
        worker.join()
    holder.clear()


def _print_progress(line: str) -> None:
    print(f"agentloop: {line}", file=sys.stderr, flush=True)


def _silent(line: str) -> None:
    del line
