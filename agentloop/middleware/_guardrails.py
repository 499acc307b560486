"""`InputGuardrail` and `OutputGuardrail`: checks of yours that stop an invocation."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .._runtime._seam import InvocationCall, Middleware, ModelCall, NextInvocation, NextModelCall
from .._values._errors import IllegalConfigurationError
from .._values._messages import ChatResponse
from ._errors import GuardrailTripped

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
    before the answer reaches memory. A streaming consumer has seen the answer's text as it streamed."""

    async def wrap_model_call(self, call: ModelCall, call_next: NextModelCall) -> ChatResponse:
        response = await call_next(call)
        ai = response.ai_message
        if not ai.tool_execution_requests:
            await self._check(ai.text or "", "the model's answer")
            return response
        output_tool = _output_tool_name(call)
        for request in ai.tool_execution_requests:
            if output_tool is not None and request.name.startswith(output_tool):
                await self._check(request.arguments, f"the output call {request.name!r}")
        return response


def _output_tool_name(call: ModelCall) -> str | None:
    """The name output tools start with (`final_result` unless the agent chose another)."""
    agent = call.context.agent
    name = agent.output_tool_name if agent is not None else None
    return name if isinstance(name, str) else None
