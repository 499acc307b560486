"""`InputGuardrail` and `OutputGuardrail`: checks of yours that stop an invocation."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .._runtime._seam import InvocationCall, Middleware, ModelCall, NextInvocation, NextModelCall
from .._values._errors import IllegalConfigurationError
from .._values._messages import ChatResponse
from ._errors import GuardrailTripped
from ._held import HeldStream, Hold

__all__ = ["InputGuardrail", "OutputGuardrail"]


class _Guardrail(Middleware):
    kind = ""

    def __init__(self, fn: Callable[[str], Any], *, name: str | None = None) -> None:
        if not callable(fn):
            raise IllegalConfigurationError(f"{type(self).__name__}(fn) needs a function, got {fn!r}")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", None) or type(fn).__name__

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"

    async def _check(self, text: str, what: str) -> None:
        value = self.fn(text)
        if inspect.isawaitable(value):
            value = await value
        if value:
            raise GuardrailTripped(
                f"{type(self).__name__} {self.name!r} tripped on {what} (it returned {value!r}); the "
                "invocation stopped and nothing of its current round was stored",
                guardrail=self.name,
                value=value,
            )


class InputGuardrail(_Guardrail):
    """Checks the user's message before the invocation starts: `fn(text)` (sync or async) returning something
    truthy (True, or a reason) raises `GuardrailTripped` and nothing runs or is stored."""

    async def wrap_invocation(self, call: InvocationCall, call_next: NextInvocation) -> Any:
        await self._check(call.message.text or "", "the user's message")
        return await call_next(call)


class OutputGuardrail(_Guardrail):
    """Checks each answer before it is used: `fn(text)` (sync or async) gets the text of a model response
    that ends the invocation (plain text, or the JSON of a structured output in the native and prompted
    modes) and, in the tool mode, the arguments of an output tool call. Truthy raises `GuardrailTripped`
    before the answer reaches memory.

    Streamed, the answer's text is held until checked (`hold`): `"answer"` (the default) releases it once
    the whole answer passed; `"sentence"` releases each sentence once the text up to its end passed
    (`fn` then also sees the answer so far); an int N every N characters likewise; None streams it
    unchecked and checks only the whole answer (a consumer may have seen what trips it)."""

    def __init__(self, fn: Callable[[str], Any], *, name: str | None = None, hold: Hold = "answer") -> None:
        super().__init__(fn, name=name)
        if not (hold in (None, "answer", "sentence") or (type(hold) is int and hold > 0)):
            raise IllegalConfigurationError(
                f"OutputGuardrail(hold=...) takes 'answer', 'sentence', a number of characters > 0 or None, "
                f"got {hold!r}"
            )
        self.hold = hold

    async def wrap_model_call(self, call: ModelCall, call_next: NextModelCall) -> ChatResponse:
        held = None
        if self.hold is not None and call.model is not None:
            held = HeldStream(call.model, self.hold, lambda text: self._check(text, "the model's answer"))
            call = call.replace(model=held)
        response = await call_next(call)
        ai = response.ai_message
        if not ai.tool_execution_requests:
            if held is None or held.checked is None or held.checked != ai.text:  # not checked as it streamed
                await self._check(ai.text or "", "the model's answer")
            return response
        output_tools = call.context.output_tools  # by what they are: a function tool's name is no sign
        for request in ai.tool_execution_requests:
            if request.name in output_tools:
                await self._check(request.arguments, f"the output call {request.name!r}")
        return response
