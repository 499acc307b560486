"""Resources and prompts a served toolset offers besides its tools: `server_from(resources=, prompts=)`.

Given as the SDK's own objects (`mcp.server.mcpserver` `Resource` / `ResourceTemplate` / `Prompt`), or as
plain functions: `resources={"docs://readme": read_me, "users://{id}/profile": profile}` (a URI with
`{name}` parts is a template whose parts become the function's arguments), `prompts=[summarise]` (the
function's parameters are the prompt's arguments; it returns a string, a content block, or a list).
"""

from __future__ import annotations

import base64
import inspect
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Union

import mcp_types as types
from mcp.server.mcpserver.prompts.base import Prompt
from mcp.server.mcpserver.resources.base import Resource
from mcp.server.mcpserver.resources.templates import ResourceTemplate
from mcp.server.mcpserver.resources.types import FunctionResource

from .. import DocumentContent, IllegalConfigurationError, ImageContent

__all__ = ["Catalog", "PromptsLike", "ResourcesLike", "catalog_of"]

ResourcesLike = Union[Mapping[str, Union[Callable[..., Any], Resource, ResourceTemplate]], Iterable[Any]]
PromptsLike = Iterable[Union[Callable[..., Any], Prompt]]


@dataclass(frozen=True)
class Catalog:
    """The resources, resource templates and prompts of one server, by URI and by name."""

    resources: Mapping[str, Resource]
    templates: tuple[ResourceTemplate, ...]
    prompts: Mapping[str, Prompt]

    def list_resources(self) -> list[types.Resource]:
        return [
            types.Resource(
                name=r.name or r.uri,
                title=r.title,
                uri=r.uri,
                description=r.description,
                mime_type=r.mime_type,
            )
            for r in self.resources.values()
        ]

    def list_templates(self) -> list[types.ResourceTemplate]:
        return [
            types.ResourceTemplate(
                name=t.name,
                title=t.title,
                uri_template=t.uri_template,
                description=t.description,
                mime_type=t.mime_type,
            )
            for t in self.templates
        ]

    def list_prompts(self) -> list[types.Prompt]:
        return [
            types.Prompt(
                name=p.name,
                title=p.title,
                description=p.description,
                arguments=[
                    types.PromptArgument(name=a.name, description=a.description, required=a.required)
                    for a in p.arguments or ()
                ],
            )
            for p in self.prompts.values()
        ]

    async def read(self, uri: str) -> types.ReadResourceResult:
        """The contents of the resource at `uri` (a listed one, or one a template makes)."""
        resource = self.resources.get(uri)
        if resource is None:
            for template in self.templates:
                params = template.matches(uri)
                if params is not None:
                    made = await template.create_resource(uri, params, None)  # type: ignore[arg-type]
                    if not isinstance(made, Resource):
                        raise ValueError(f"resource template {template.uri_template} gave no resource")
                    resource = made
                    break
        if resource is None:
            raise ValueError(f"Unknown resource: {uri}")
        return types.ReadResourceResult(contents=[_contents(uri, resource.mime_type, await _read(resource))])

    async def get_prompt(self, name: str, arguments: Mapping[str, str] | None) -> types.GetPromptResult:
        prompt = self.prompts.get(name)
        if prompt is None:
            raise ValueError(
                f"Unknown prompt: {name!r}; this server offers {', '.join(self.prompts) or 'none'}"
            )
        messages = await prompt.render(dict(arguments or {}), None)  # type: ignore[arg-type]
        if not isinstance(messages, list):
            raise ValueError(f"prompt {name!r} asked for input, which agentloop's server does not support")
        return types.GetPromptResult(
            description=prompt.description,
            messages=[types.PromptMessage(role=m.role, content=m.content) for m in messages],
        )


async def _read(resource: Resource) -> Any:
    if isinstance(resource, FunctionResource):
        value = resource.fn()  # agentloop content and bytes are kept as they are, not turned into JSON
        if inspect.isawaitable(value):
            value = await value
        return value
    return await resource.read()


def _contents(
    uri: str, mime_type: str, value: Any
) -> types.TextResourceContents | types.BlobResourceContents:
    if isinstance(value, (ImageContent, DocumentContent)):
        if value.data is None:
            raise ValueError(f"resource {uri}: a URL cannot be served as contents; return the bytes")
        return types.BlobResourceContents(uri=uri, mime_type=value.media_type, blob=value.base64)
    if isinstance(value, (bytes, bytearray)):
        mime = mime_type if mime_type != "text/plain" else "application/octet-stream"
        return types.BlobResourceContents(uri=uri, mime_type=mime, blob=base64.b64encode(value).decode())
    if isinstance(value, str):
        return types.TextResourceContents(uri=uri, mime_type=mime_type, text=value)
    mime = mime_type if mime_type != "text/plain" else "application/json"
    return types.TextResourceContents(uri=uri, mime_type=mime, text=json.dumps(value, default=str))


def catalog_of(resources: ResourcesLike | None, prompts: PromptsLike | None) -> Catalog:
    """The catalog of `server_from(resources=, prompts=)`; `IllegalConfigurationError` on a bad entry."""
    by_uri: dict[str, Resource] = {}
    templates: list[ResourceTemplate] = []
    entries: Iterable[tuple[str | None, Any]]
    if resources is None:
        entries = ()
    elif isinstance(resources, Mapping):
        entries = resources.items()
    else:
        entries = ((None, item) for item in resources)
    for uri, item in entries:
        if isinstance(item, ResourceTemplate):
            templates.append(item)
        elif isinstance(item, Resource):
            by_uri[item.uri] = item
        elif callable(item) and uri is not None:
            name = getattr(item, "__name__", uri)
            if "{" in uri:
                templates.append(ResourceTemplate.from_function(item, uri, name=name))
            else:
                by_uri[uri] = FunctionResource.from_function(item, uri, name=name)
        else:
            raise IllegalConfigurationError(
                f"server_from(resources=...): {item!r} is not a resource; give {{uri: function}} or the "
                "SDK's Resource / ResourceTemplate objects"
            )
    by_name: dict[str, Prompt] = {}
    for entry in prompts or ():
        prompt = entry if isinstance(entry, Prompt) else None
        if prompt is None:
            if not callable(entry):
                raise IllegalConfigurationError(
                    f"server_from(prompts=...): {entry!r} is not a prompt; give functions or the SDK's "
                    "Prompt objects"
                )
            prompt = Prompt.from_function(entry)
        if prompt.name in by_name:
            raise IllegalConfigurationError(
                f"server_from(prompts=...): two prompts are named {prompt.name!r}"
            )
        by_name[prompt.name] = prompt
    return Catalog(by_uri, tuple(templates), by_name)
