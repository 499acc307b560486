"""The server the MCP conformance suite's server scenarios expect, written with agentloop's public API.

`python -m agentloop.mcp serve tests.mcp_conformance_server:server --http 127.0.0.1:PORT`; the suite
(`@modelcontextprotocol/conformance server --url http://127.0.0.1:PORT/mcp`) then checks each scenario.
Every tool, resource and prompt below is the one a scenario names, built the way a user would build it.
"""

from __future__ import annotations

import base64
import json
from typing import Annotated, Any

import anyio
import mcp_types as types

from agentloop import ImageContent, P, ToolContext, ToolSpecification, tool
from agentloop.mcp import server_from

# A 1x1 red PNG and a minimal WAV file.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
WAV_BASE64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="


@tool("Tests simple text content response")
def test_simple_text() -> str:
    return "This is a simple text response for testing."


@tool("Tests image content response")
def test_image_content() -> ImageContent:
    return ImageContent(data=PNG, media_type="image/png")


@tool("Tests audio content response")
def test_audio_content() -> types.AudioContent:
    return types.AudioContent(type="audio", data=WAV_BASE64, mime_type="audio/wav")


def _text_resource(uri: str, mime_type: str, text: str) -> types.EmbeddedResource:
    return types.EmbeddedResource(
        type="resource", resource=types.TextResourceContents(uri=uri, mime_type=mime_type, text=text)
    )


@tool("Tests embedded resource content response")
def test_embedded_resource() -> types.EmbeddedResource:
    return _text_resource("test://embedded-resource", "text/plain", "This is an embedded resource content.")


@tool("Tests response with multiple content types (text, image, resource)")
def test_multiple_content_types() -> list[Any]:
    return [
        "Multiple content types test:",
        ImageContent(data=PNG, media_type="image/png"),
        _text_resource(
            "test://mixed-content-resource", "application/json", json.dumps({"test": "data", "value": 123})
        ),
    ]


@tool("Tests tool that emits log messages during execution")
async def test_tool_with_logging(ctx: ToolContext) -> str:
    ctx.info("Tool execution started")
    await anyio.sleep(0.05)
    ctx.info("Tool processing data")
    await anyio.sleep(0.05)
    ctx.info("Tool execution completed")
    return "Tool with logging executed successfully"


@tool("Tests tool that reports progress notifications")
async def test_tool_with_progress(ctx: ToolContext) -> str:
    for step in (0, 50, 100):
        await ctx.report_progress(step, 100, f"Completed step {step} of 100")
        if step < 100:
            await anyio.sleep(0.05)
    return "Progress reported"


@tool("Tests error response handling")
def test_error_handling() -> str:
    raise RuntimeError("This tool intentionally returns an error for testing")


@tool("Tests server-initiated sampling (LLM completion request)")
async def test_sampling(prompt: Annotated[str, P("The prompt to send to the LLM")], ctx: ToolContext) -> str:
    answer = await ctx.sample(prompt, max_tokens=100)
    return f"LLM response: {answer}"


async def _elicited(ctx: ToolContext, message: str, schema: dict[str, Any], prefix: str) -> str:
    result = await ctx.elicit(message, schema)
    return f"{prefix}action={result.action}, content={json.dumps(result.content or {})}"


@tool("Tests server-initiated elicitation (user input request)")
async def test_elicitation(
    message: Annotated[str, P("The message to show the user")], ctx: ToolContext
) -> str:
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    return await _elicited(ctx, message, schema, "User response: ")


@tool("Tests elicitation with default values per SEP-1034")
async def test_elicitation_sep1034_defaults(ctx: ToolContext) -> str:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "User name", "default": "John Doe"},
            "age": {"type": "integer", "description": "User age", "default": 30},
            "score": {"type": "number", "description": "User score", "default": 95.5},
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {"type": "boolean", "description": "Verification status", "default": True},
        },
        "required": [],
    }
    return await _elicited(
        ctx, "Please review and update the form fields with defaults", schema, "Elicitation completed: "
    )


@tool("Tests elicitation with enum schema improvements per SEP-1330")
async def test_elicitation_sep1330_enums(ctx: ToolContext) -> str:
    titled = [
        {"const": f"value{i}", "title": f"{word} Option"}
        for i, word in ((1, "First"), (2, "Second"), (3, "Third"))
    ]
    choices = [
        {"const": f"value{i}", "title": f"{word} Choice"}
        for i, word in ((1, "First"), (2, "Second"), (3, "Third"))
    ]
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
            "titledSingle": {"type": "string", "oneOf": titled},
            "legacyEnum": {
                "type": "string",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {
                "type": "array",
                "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
            },
            "titledMulti": {"type": "array", "items": {"anyOf": choices}},
        },
        "required": [],
    }
    return await _elicited(
        ctx, "Please select options from the enum fields", schema, "Elicitation completed: "
    )


JSON_SCHEMA_2020_12 = ToolSpecification(
    name="json_schema_2020_12_tool",
    description="Tool with JSON Schema 2020-12 features",
    parameters={
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
            }
        },
        "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
        "additionalProperties": False,
    },
)


async def _echo_arguments(request: Any, context: Any) -> str:
    return request.arguments


def static_text() -> str:
    """A static text resource for testing"""
    return "This is the content of the static text resource."


def static_binary() -> ImageContent:
    """A static binary resource (image) for testing"""
    return ImageContent(data=PNG, media_type="image/png")


def template_data(id: str) -> dict[str, Any]:
    """A resource template with parameter substitution"""
    return {"id": id, "templateTest": True, "data": f"Data for ID: {id}"}


def watched_resource() -> str:
    """A resource that can be subscribed to"""
    return "Watched resource content"


def test_simple_prompt() -> str:
    """A simple prompt without arguments"""
    return "This is a simple prompt for testing."


def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
    """A prompt with required arguments"""
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


def test_prompt_with_embedded_resource(resourceUri: str) -> list[Any]:
    """A prompt that includes an embedded resource"""
    return [
        _text_resource(resourceUri, "text/plain", "Embedded resource content for testing."),
        "Please process the embedded resource above.",
    ]


def test_prompt_with_image() -> list[Any]:
    """A prompt that includes image content"""
    image = types.ImageContent(type="image", data=base64.b64encode(PNG).decode(), mime_type="image/png")
    return [image, "Please analyze the image above."]


server = server_from(
    [
        test_simple_text,
        test_image_content,
        test_audio_content,
        test_embedded_resource,
        test_multiple_content_types,
        test_tool_with_logging,
        test_tool_with_progress,
        test_error_handling,
        test_sampling,
        test_elicitation,
        test_elicitation_sep1034_defaults,
        test_elicitation_sep1330_enums,
        (JSON_SCHEMA_2020_12, _echo_arguments),
    ],
    resources={
        "test://static-text": static_text,
        "test://static-binary": static_binary,
        "test://template/{id}/data": template_data,
        "test://watched-resource": watched_resource,
    },
    prompts=[
        test_simple_prompt,
        test_prompt_with_arguments,
        test_prompt_with_embedded_resource,
        test_prompt_with_image,
    ],
    name="agentloop-conformance-server",
)
