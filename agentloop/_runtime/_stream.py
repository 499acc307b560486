"""`TokenStream`: one streaming invocation, consumed once by `async for`, by `events()`, or by callbacks.

Iterating runs the invocation in a task of its own (the producer), connected to the consumer by a small
bounded queue: a consumer that stops reading stalls the model stream instead of growing memory.

Who owns the producer, and why not a task group of the consumer (docs/runtime.md, "Backpressure and
cancellation"): a bare `async for` gives no scope to open one in, and under `async with` a task group would
be a cancel scope held across the block's body, which breaks the moment that body is an async generator
that yields inside it (a web handler streaming SSE: trio reports "Nursery misnesting", asyncio's anyio
"Attempted to exit a cancel scope that isn't the current task's current cancel scope"). So the producer runs
under the event loop (trio's system nursery; an asyncio task the loop cancels at shutdown) and the
consumer's side stops it at fixed points, each waiting until the model response is closed and every tool
observed the cancellation: the end, an error, a cancellation while waiting for an item, `aclose()`, the
exit of `async with`. The one exit Python reports to no one, leaving a bare `async for` by `break` or an
exception, drops the iterator: its finalizer posts the stop to the event loop (as both loops do for an
abandoned async generator) and the producer closes everything in its own task. (An async generator in
place of the iterator would leave that to the event loop's own finalizer, but trio then warns about every
such `break` under `python -X dev`, and the finalizer's task outlives the stream.) No module-level set of
tasks: on asyncio the producer holds its own task while it runs.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic

import anyio
from typing_extensions import TypeVar

from .._values._errors import AgentLoopError
from .._values._events import (
    ApprovalRequired,
    BeforeToolExecution,
    CompleteResponse,
    IntermediateResponse,
    ModelProgress,
    PartialOutput,
    PartialResponse,
    PartialThinking,
    PartialToolCall,
    StreamEvent,
    ToolExecuted,
    ToolOutputDelta,
    ToolProgress,
    ToolRetrying,
)
from .._values._messages import ChatResponse, UserMessage
from .._values._records import ToolExecution
from .._values._result import Result
from ._flag import Flag
from ._handle import RunHandle
from ._loop import Listener  # for real: TokenStream's annotations name it (help(), get_type_hints())

if TYPE_CHECKING:
    import asyncio

__all__ = ["TokenStream"]

logger = logging.getLogger("agentloop")

T = TypeVar("T")
OutputT = TypeVar("OutputT", default=str)
Callback = Callable[[T], Any]
Runner = Callable[["Listener"], Awaitable[Result[OutputT]]]

BUFFER_SIZE = 32
"""How many events may wait for a slow consumer, beside the batch it took and is working through: at most
twice this many between the invocation and the consumer."""

TEXT_BUFFER_SIZE = 512
"""The same for pieces of text alone (at most 1,024 in all, about 60 KB): a whole answer the server sent
in one burst is handed over in one go rather than a few dozen pieces per two task switches."""

_OUTPUT_KINDS: frozenset[type[Any]] = frozenset({PartialOutput, CompleteResponse})
"""The events `outputs()` reads: no other is queued for it."""


class TokenStream(Generic[OutputT]):
    """A streaming invocation. Iterate it for text, `events()` for typed events, `outputs()` for the output
    as it grows, or register callbacks and `await start()`. Consumed once; `result` holds the `Result` once
    it finished. `structured` says the invocation ends in a structured output rather than text."""

    def __init__(
        self,
        runner: Runner[OutputT],
        *,
        description: str = "",
        structured: bool = False,
        handle: RunHandle | None = None,
    ) -> None:
        self._runner = runner
        self._handle = handle
        self._structured = structured
        self._description = description
        self._callbacks: dict[type[Any], list[Callback[Any]]] = {}
        self._on_error: Callback[BaseException] | None = None
        self._ignore_errors = False
        self._consumed = False
        self._result: Result[OutputT] | None = None
        self._task: _Producer | None = None  # the producer of `async for` / `events()` / `outputs()`
        self._driver: _Driver | None = None  # what `start()` runs in, for `aclose()` from another task
        self._closed = False  # aclose() came before anything consumed it
        self.output_attempt = 1
        """The attempt (`PartialOutput.attempt`) of the last value `outputs()` yielded: when it grows, the
        model is correcting an invalid output and the partials start again from nothing."""

    # -- run control --------------------------------------------------------------------------------------

    async def cancel(self, *, after_round: bool = False, reason: str | None = None) -> None:
        """Stops the invocation, from any task: at once (the model call and running tools are cancelled,
        nothing of the round in flight is committed) or, with `after_round=True`, once the round in flight
        has committed. The stream then ends as usual; its Result has `finish_reason` `CANCELLED` and
        `cancel_reason` `reason`. Nothing happens once the invocation has ended (docs/runtime.md, "Stopping
        and steering a run")."""
        await self._control().cancel(after_round=after_round, reason=reason)

    async def steer(self, message: UserMessage | str) -> None:
        """Hands the running invocation a user message, added before its next model call (in order); an
        invocation about to finish calls the model once more to answer it. Raises `AgentLoopError` once the
        invocation has ended."""
        await self._control().steer(message)

    def _control(self) -> RunHandle:
        if self._handle is None:
            raise AgentLoopError(
                "This TokenStream has no run control (it was not made by Agent.stream() or resume_stream())"
            )
        return self._handle

    # -- callbacks ----------------------------------------------------------------------------------------

    def on_partial_response(self, callback: Callback[str]) -> TokenStream[OutputT]:
        """Calls `callback(text)` for every piece of answer text."""
        return self._add(PartialResponse, callback, lambda e: e.text)

    def on_partial_thinking(self, callback: Callback[str]) -> TokenStream[OutputT]:
        """Calls `callback(text)` for every piece of reasoning."""
        return self._add(PartialThinking, callback, lambda e: e.text)

    def on_partial_tool_call(self, callback: Callback[PartialToolCall]) -> TokenStream[OutputT]:
        """Calls `callback(event)` for every piece of a tool call as the model streams it."""
        return self._add(PartialToolCall, callback)

    def on_model_progress(self, callback: Callback[ModelProgress]) -> TokenStream[OutputT]:
        """Calls `callback(event)` while the model reads its prompt and writes a tool-call decision (models
        that report their progress: the local model)."""
        return self._add(ModelProgress, callback)

    def on_partial_output(self, callback: Callback[Any]) -> TokenStream[OutputT]:
        """Calls `callback(partial)` for every partial structured output as the model writes it."""
        return self._add(PartialOutput, callback, lambda e: e.output)

    def on_intermediate_response(self, callback: Callback[ChatResponse]) -> TokenStream[OutputT]:
        """Calls `callback(response)` for every complete response that asked for tools."""
        return self._add(IntermediateResponse, callback, lambda e: e.response)

    def before_tool_execution(self, callback: Callback[BeforeToolExecution]) -> TokenStream[OutputT]:
        """Calls `callback(event)` just before a tool call runs."""
        return self._add(BeforeToolExecution, callback)

    def on_tool_retrying(self, callback: Callback[ToolRetrying]) -> TokenStream[OutputT]:
        """Calls `callback(event)` when `ToolRetry` runs a failed tool call again (attempt 2 on)."""
        return self._add(ToolRetrying, callback)

    def on_tool_progress(self, callback: Callback[ToolProgress]) -> TokenStream[OutputT]:
        """Calls `callback(event)` when a running tool reports its progress (`ctx.report_progress`)."""
        return self._add(ToolProgress, callback)

    def on_tool_output_delta(self, callback: Callback[ToolOutputDelta]) -> TokenStream[OutputT]:
        """Calls `callback(event)` for each value a streaming tool (an async generator) yields."""
        return self._add(ToolOutputDelta, callback)

    def on_tool_executed(self, callback: Callback[ToolExecution]) -> TokenStream[OutputT]:
        """Calls `callback(execution)` as each tool call finishes (completion order)."""
        return self._add(ToolExecuted, callback, lambda e: e.execution)

    def on_approval_required(self, callback: Callback[ApprovalRequired]) -> TokenStream[OutputT]:
        """Calls `callback(event)` when the invocation pauses because tool calls wait for approval."""
        return self._add(ApprovalRequired, callback)

    def on_complete_response(self, callback: Callback[ChatResponse]) -> TokenStream[OutputT]:
        """Calls `callback(response)` with the final response once the invocation finished."""
        return self._add(CompleteResponse, callback, lambda e: e.response)

    def on_error(self, callback: Callback[BaseException]) -> TokenStream[OutputT]:
        """`start()` hands a failure to `callback(error)` instead of raising it."""
        self._on_error = callback
        return self

    def ignore_errors(self) -> TokenStream[OutputT]:
        """`start()` logs a failure (warning) instead of raising it."""
        self._ignore_errors = True
        return self

    def _add(
        self, kind: type[Any], callback: Callback[Any], select: Callable[[Any], Any] | None = None
    ) -> TokenStream[OutputT]:
        if self._consumed:
            raise AgentLoopError("Register callbacks before the TokenStream starts")
        if select is not None:
            original = callback

            def callback(event: Any) -> Any:
                return original(select(event))

        self._callbacks.setdefault(kind, []).append(callback)
        return self

    async def _dispatch(self, event: StreamEvent) -> None:
        for callback in self._callbacks.get(type(event), ()):
            outcome = callback(event)
            if inspect.isawaitable(outcome):
                await outcome

    # -- running ------------------------------------------------------------------------------------------

    async def start(self) -> Result[OutputT] | None:
        """Runs the invocation in this task, calling the callbacks; returns the Result.

        Without `on_error` (or `ignore_errors()`) a failure is raised; with it, the callback receives it and
        `start()` returns None. An exception raised by a callback is a failure like any other.
        """
        self._claim()
        if self._closed:
            return None
        driver = self._driver = _Driver()
        try:
            with driver.scope:
                result = self._result = await self._runner(_Callbacks(self._dispatch))
                await self._dispatch(_complete(result))
            if driver.scope.cancelled_caught:
                return None  # stopped by aclose()
        except Exception as error:
            if self._on_error is not None:
                outcome = self._on_error(error)
                if inspect.isawaitable(outcome):
                    await outcome
                return None
            if self._ignore_errors:
                logger.warning("TokenStream failed; error ignored: %r", error)
                return None
            raise
        finally:
            driver.finished.set()
        return self._result

    def __aiter__(self) -> AsyncIterator[str]:
        return self._iterate(tokens_only=True)

    def events(self) -> AsyncIterator[StreamEvent]:
        """Iterates every typed event of the invocation (their order: docs/runtime.md, "Event order")."""
        return self._iterate(tokens_only=False)

    def outputs(self) -> AsyncIterator[OutputT]:
        """Iterates the output as it grows: each partial structured output (`PartialOutput`), then the final
        validated value. For a plain text invocation: the answer text so far after each piece, then the whole
        answer. Leaving the loop early stops the invocation. After an invalid output is sent back for
        correction the partials start again from nothing, and `output_attempt` grows."""
        text = not self._structured
        kinds = _OUTPUT_KINDS | {PartialResponse} if text else _OUTPUT_KINDS
        return _Outputs(self._iterate(tokens_only=False, kinds=kinds), self, text=text)

    def _iterate(self, *, tokens_only: bool, kinds: frozenset[type[Any]] | None = None) -> _Iterator[Any]:
        self._claim()
        producer = self._task = _Producer(self, tokens_only, kinds)
        if self._closed:  # closed before it started: iterating ends at once
            producer.never_start()
        return _Iterator(producer)

    def _claim(self) -> None:
        if self._consumed:
            raise AgentLoopError(
                "This TokenStream was already consumed; call agent.stream(...) again for a new invocation"
            )
        self._consumed = True

    @property
    def result(self) -> Result[OutputT]:
        """The invocation's Result, once the stream has finished."""
        if self._result is None:
            raise AgentLoopError(
                "The TokenStream has not finished: iterate it to the end or `await stream.start()` first"
            )
        return self._result

    @property
    def done(self) -> bool:
        """True once the invocation finished, failed or was cancelled."""
        running = self._task or self._driver
        return self._result is not None or (running is not None and running.finished.is_set())

    async def aclose(self) -> None:
        """Stops the invocation if it still runs (model request and tools are cancelled) and waits for it.

        Works from any task; a `start()` stopped this way returns None. Called from a callback of the stream
        itself, it stops the invocation once the callback returns (waiting there would wait for itself).
        Before the stream started, it makes sure it never does: `start()` returns None, iterating ends.
        """
        if self._task is not None:
            await self._task.stop()
        elif self._driver is not None:
            await self._driver.stop()
        else:
            self._closed = True  # not started yet: it never will

    async def __aenter__(self) -> TokenStream[OutputT]:
        """Nothing: the block holds no cancel scope of the stream's, so it may sit in an async generator
        that yields inside it (a web handler). Its exit stops the invocation and waits for it."""
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        state = "finished" if self.done else ("running" if self._consumed else "not started")
        return f"<TokenStream {self._description} {state}>"


class _Producer:
    """Runs the invocation in its own task and hands its items to the consumer through a bounded queue.

    The queue is a list with one shared wake-up event on each side, so handing over an item that fits is a
    few attribute operations: no lock, no task switch. The consumer takes the whole list at once and reads
    it at its pace while the invocation fills a new one (an idle stream holds an empty list, not a deque's
    block of 64 slots).
    """

    __slots__ = (
        "closed",
        "dispatch",
        "error",
        "finished",
        "items",
        "kinds",
        "loop",
        "reader",
        "scope",
        "started",
        "stopped",
        "stream",
        "task",
        "text_only",
        "text_sink",
        "tokens_only",
        "writer",
    )

    def __init__(
        self, stream: TokenStream[Any], tokens_only: bool, kinds: frozenset[type[Any]] | None = None
    ) -> None:
        self.stream: TokenStream[Any] | None = stream  # dropped at the end: no cycle for the collector
        self.kinds = kinds  # the only events queued (None: all)
        self.loop: Callable[[Callable[[], None]], object] | None = None  # posts a call to the event loop
        self.dispatch = stream._dispatch if stream._callbacks else None
        self.tokens_only = tokens_only
        self.text_only = tokens_only and not stream._callbacks  # text goes straight into the queue
        self.text_sink: Callable[[str], bool] | None = self.text_nowait if self.text_only else None
        self.items: list[Any] = []  # what the consumer has not taken yet
        self.closed = False  # the invocation ended: nothing more will come
        self.stopped = False  # the consumer went away: nothing more is wanted
        self.reader: anyio.Event | None = None  # set when an item arrives (the consumer waits on it)
        self.writer: anyio.Event | None = None  # set when room frees up (the invocation's tasks wait on it)
        self.scope = anyio.CancelScope()
        self.finished = Flag()
        self.error: BaseException | None = None
        self.started = False
        self.task: asyncio.Task[None] | None = None  # asyncio keeps only weak references to its tasks

    def start(self) -> None:
        self.started = True
        import asyncio  # loaded already on asyncio; `import agentloop` does not load it

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio: trio
            import trio

            context = contextvars.copy_context()
            trio.lowlevel.spawn_system_task(self._main, name="agentloop.TokenStream", context=context)
            self.loop = trio.lowlevel.current_trio_token().run_sync_soon
        else:
            self.loop = loop.call_soon_threadsafe
            # create_task runs the producer in a copy of the consumer's context, as trio's branch does.
            self.task = loop.create_task(self._main(), name="agentloop.TokenStream")

    # -- the invocation's side (a Listener) ----------------------------------------------------------------

    def text_nowait(self, text: str, round: int = 0) -> bool:
        """Queues a piece of answer text if nothing else wants it and there is room (the hot path). Also the
        `text_sink` a model pushes its text to (`round` is not needed: text alone is queued)."""
        items = self.items
        if not self.text_only or len(items) >= TEXT_BUFFER_SIZE or self.stopped:
            return False
        items.append(text)
        if self.reader is not None:
            self._wake_reader()
        return True

    async def __call__(self, event: StreamEvent) -> None:
        """Delivers one event: to the callbacks, then (as text, or whole) to the queue, waiting for room.

        A `PartialOutput` the consumer has not taken yet (the last item queued) is replaced by the next one
        of the same attempt: a consumer behind gets the latest partial, never a queue of stale ones."""
        if self.dispatch is not None:
            await self.dispatch(event)
        kind = type(event)
        if self.tokens_only:
            if not isinstance(event, PartialResponse):
                return
            item: Any = event.text
        else:
            if self.kinds is not None and kind not in self.kinds:
                return
            item = event
        items = self.items
        if isinstance(event, PartialOutput) and items and not self.stopped:
            last = items[-1]
            if type(last) is PartialOutput and last.attempt == event.attempt:
                items[-1] = event
                return
        while len(self.items) >= BUFFER_SIZE and not self.stopped:  # the consumer swaps the list: re-read
            # Several tasks (the tools) may wait at once: they share one event and re-check when it fires.
            writer = self.writer
            if writer is None:
                writer = self.writer = anyio.Event()
            await writer.wait()
        if self.stopped:
            raise anyio.BrokenResourceError  # the consumer went away: end the invocation
        self.items.append(item)
        self._wake_reader()

    async def _main(self) -> None:
        stream = self.stream
        assert stream is not None
        try:
            with self.scope:
                result = stream._result = await stream._runner(self)
                if not self.text_only:
                    await self(_complete(result))
        except anyio.BrokenResourceError:
            pass  # the consumer went away
        except BaseException as error:
            if isinstance(error, anyio.get_cancelled_exc_class()):
                raise  # cancellation from outside (event loop shutting down)
            self.error = error  # KeyboardInterrupt, SystemExit...: raised again in the consumer's task
        finally:
            self.stream = self.dispatch = self.text_sink = None  # no cycle left for the collector
            self.closed = True
            self._wake_reader()
            self.finished.set()
            self.task = None  # no cycle through the finished task

    # -- the consumer's side -----------------------------------------------------------------------------

    async def wait_for_item(self) -> None:
        """Waits until an item is queued; raises the invocation's error, or StopAsyncIteration at its end."""
        while not self.items or self.stopped:
            if self.closed or self.stopped:  # finished, or aclose() from anywhere
                await self.finished.wait()
                if self.error is not None:
                    raise self.error from self.error.__cause__  # its own cause, not this frame
                raise StopAsyncIteration
            reader = self.reader
            if reader is None:
                reader = self.reader = anyio.Event()
            try:
                await reader.wait()
            except BaseException:
                # Cancelled (or interrupted) while waiting: stop the invocation before letting it propagate.
                await self.stop()
                raise

    def take(self) -> list[Any]:
        """Everything queued, for the consumer (never empty: called once `wait_for_item` returned); the
        invocation's tasks waiting for room go on."""
        items = self.items
        self.items = []
        self.wake_writers()
        return items

    def wake_writers(self) -> None:
        writer = self.writer
        if writer is not None:
            self.writer = None
            writer.set()

    def _wake_reader(self) -> None:
        reader = self.reader
        if reader is not None:
            self.reader = None
            reader.set()

    def abandon(self) -> None:
        """The consumer is gone: cancel the invocation and let nothing more in."""
        self.stopped = True
        self.scope.cancel()
        self._wake_reader()
        self.wake_writers()

    def never_start(self) -> None:
        """Stopped before it started: iterating ends at once and nothing ever runs."""
        self.started = self.closed = self.stopped = True
        self.stream = self.dispatch = self.text_sink = None
        self.finished.set()

    async def stop(self) -> None:
        if not self.started:
            self.never_start()
            return
        self.abandon()
        with anyio.CancelScope(shield=True):
            await self.finished.wait()


class _Driver:
    """The cancel scope `start()` runs the invocation in, so `aclose()` can stop it from another task."""

    __slots__ = ("finished", "scope", "task")

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self.finished = Flag()
        self.task = anyio.get_current_task().id

    async def stop(self) -> None:
        self.scope.cancel()
        if anyio.get_current_task().id != self.task:
            with anyio.CancelScope(shield=True):
                await self.finished.wait()


_TAKEN: list[Any] = []  # an iterator's batch once read (never appended to)


class _Iterator(Generic[T]):
    """The consumer's side: what `async for` iterates. Dropping it (leaving the loop) cancels the producer."""

    __slots__ = ("_batch", "_next", "_producer")

    def __init__(self, producer: _Producer) -> None:
        self._producer = producer
        self._batch: list[Any] = []  # the items taken from the producer, read from `_next` on
        self._next = 0

    def __aiter__(self) -> _Iterator[T]:
        return self

    async def __anext__(self) -> T:
        producer = self._producer
        batch = self._batch
        index = self._next
        if index < len(batch) and not producer.stopped:  # the hot path: an item is in hand
            self._next = index + 1
            return batch[index]  # type: ignore[no-any-return]
        self._batch = _TAKEN  # what was read is let go while waiting
        if not producer.items or producer.stopped:
            if not producer.started:
                producer.start()
            await producer.wait_for_item()
        batch = self._batch = producer.take()
        self._next = 1
        return batch[0]  # type: ignore[no-any-return]

    def __del__(self) -> None:
        # `break` (or an exception) out of a bare `async for` drops the iterator, and Python tells it nothing
        # else. Touch no event-loop state from here (a finalizer may run in the middle of any code, or in
        # another thread): post the stop to the event loop, as asyncio and trio do for an abandoned async
        # generator. The producer then cancels the invocation in its own task and closes everything itself.
        producer = self._producer
        post = producer.loop
        if post is not None and not producer.finished.is_set():
            try:
                post(producer.abandon)
            except RuntimeError:  # the event loop is closed: its shutdown cancelled the producer already
                pass


class _Outputs(Generic[OutputT]):
    """What `TokenStream.outputs()` iterates: the partial outputs among the events, then the final one."""

    __slots__ = ("_done", "_events", "_stream", "_text")

    def __init__(self, events: _Iterator[Any], stream: TokenStream[Any], *, text: bool) -> None:
        self._events = events
        self._stream = stream
        self._text: list[str] | None = [] if text else None  # a text answer so far
        self._done = False

    def __aiter__(self) -> _Outputs[OutputT]:
        return self

    async def __anext__(self) -> OutputT:
        events = self._events
        while not self._done:
            event = await events.__anext__()
            kind = type(event)
            if kind is PartialOutput:
                self._stream.output_attempt = event.attempt
                return event.output  # type: ignore[no-any-return]
            if kind is PartialResponse and self._text is not None:
                self._text.append(event.text)
                return "".join(self._text)  # type: ignore[return-value]
            if kind is CompleteResponse:
                self._done = True  # the invocation finished: nothing more comes
                return event.result.output  # type: ignore[no-any-return]
        raise StopAsyncIteration


class _Callbacks:
    """The Listener of `start()`: every event goes to the callbacks (text included, as PartialResponse)."""

    __slots__ = ("_dispatch",)
    text_only = False
    text_sink: Callable[[str], bool] | None = None

    def __init__(self, dispatch: Callable[[StreamEvent], Awaitable[None]]) -> None:
        self._dispatch = dispatch

    async def __call__(self, event: StreamEvent) -> None:
        await self._dispatch(event)

    def text_nowait(self, text: str, round: int) -> bool:
        return False


def _complete(result: Result[Any]) -> CompleteResponse:
    assert result.final_response is not None
    return CompleteResponse(result.final_response, result.token_usage, result)
