"""The fakes' token-count endpoints, driven by the providers' official SDKs: their wire shapes are the real
ones (the SDKs build the requests and parse the answers), and the counts match the fakes' usage."""

from __future__ import annotations

from typing import Any

import anthropic
import boto3
from botocore import config as botocore_config
from google import genai
from google.genai import types

from agentloop.testing import FakeAnthropicServer, FakeBedrockServer, FakeGeminiServer

MESSAGES = [{"role": "user", "content": "How many tokens is this question?"}]


async def test_anthropic_sdk_counts_on_the_fake() -> None:
    with FakeAnthropicServer(["Fine."]) as server:
        client = anthropic.AsyncAnthropic(base_url=server.base_url, api_key="test", max_retries=0)
        counted = await client.messages.count_tokens(
            model="claude-test",
            system="Be terse.",
            messages=MESSAGES,  # type: ignore[arg-type]
        )
        answer = await client.messages.create(
            model="claude-test",
            max_tokens=20,
            system="Be terse.",
            messages=MESSAGES,  # type: ignore[arg-type]
        )
        await client.close()
    assert counted.input_tokens == answer.usage.input_tokens
    assert server.requests[0].path == "/v1/messages/count_tokens"


def test_gemini_sdk_counts_on_the_fake() -> None:
    with FakeGeminiServer(["Fine."]) as server:
        client: Any = genai.Client(
            api_key="test-key", http_options=types.HttpOptions(base_url=server.base_url, api_version="v1beta")
        )
        counted = client.models.count_tokens(model="gemini-2.5-flash", contents="How many tokens is this?")
        answer = client.models.generate_content(model="gemini-2.5-flash", contents="How many tokens is this?")
        client.close()
    assert counted.total_tokens == answer.usage_metadata.prompt_token_count
    assert server.requests[0].path == "/v1beta/models/gemini-2.5-flash:countTokens"


def test_bedrock_sdk_counts_on_the_fake() -> None:
    model_id = "anthropic.claude-3-5-haiku-20241022-v1:0"
    messages = [{"role": "user", "content": [{"text": "How many tokens is this question?"}]}]
    with FakeBedrockServer(["Fine."]) as server:
        client = boto3.client(
            "bedrock-runtime",
            region_name=server.region,
            endpoint_url=server.base_url,
            aws_access_key_id=server.access_key,
            aws_secret_access_key=server.secret_key,
            config=botocore_config.Config(retries={"total_max_attempts": 1, "mode": "standard"}),
        )
        counted = client.count_tokens(modelId=model_id, input={"converse": {"messages": messages}})
        answer = client.converse(modelId=model_id, messages=messages)
    assert counted["inputTokens"] == answer["usage"]["inputTokens"]
