"""`BedrockChatModel` against `FakeBedrockServer` (which verifies SigV4 signatures), over loopback sockets."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentloop import (
    Agent,
    AiMessage,
    AuthenticationError,
    BadRequestError,
    BadResponseError,
    ChatRequest,
    ChatResponse,
    DocumentContent,
    FinishReason,
    IllegalConfigurationError,
    ImageContent,
    ModelConnectionError,
    ModelError,
    RateLimitError,
    ResponseFormat,
    ServerError,
    SystemMessage,
    TokenUsage,
    ToolChoice,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolSpecification,
    UserMessage,
    tool,
)
from agentloop.models import (
    BedrockChatModel,
    ModelEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallDelta,
    infer_model,
)
from agentloop.testing import FakeBedrockServer
from agentloop.testing._fake_server import FakeServer, Reply
from tests.provider_helpers import TIME, WEATHER, bedrock_model, collect, final

pytest.importorskip("botocore")

MODEL_ID = "anthropic.claude-3-5-haiku-20241022-v1:0"
SESSION_TOKEN = "IQoJb3JpZ2luX2VjEFAKE-session-token-for-agentloop-tests//////////wEaCXVzLWVhc3QtMSJH"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
PDF = b"%PDF-1.4\n%fake\n"
QUESTION = ChatRequest([UserMessage("What is the weather like in Seattle?")])
CALLS = (
    ToolExecutionRequest("tooluse_a", "get_weather", '{"location": "Seattle"}'),
    ToolExecutionRequest("tooluse_b", "get_time", "{}"),
)


@pytest.fixture(autouse=True)
def clean_aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No credentials, region or profile from the machine: each test sets what it uses."""
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def server() -> Iterator[FakeBedrockServer]:
    with FakeBedrockServer() as fake:
        yield fake


def model_for(server: FakeBedrockServer, model_id: str = MODEL_ID, **options: Any) -> BedrockChatModel:
    options.setdefault("max_retries", 0)
    return bedrock_model(server, model_id, **options)


# -- streaming and the request shape ------------------------------------------------------------------------


async def test_a_stream_is_asked_of_converse_stream_signed_with_sigv4(server: FakeBedrockServer) -> None:
    """What streams back is in tests/models/test_provider_contract.py, for every provider."""
    server.add("Grey.")
    async with model_for(server) as model:
        assert final(await collect(model.stream(QUESTION))).text == "Grey."
    request = server.requests[0]
    assert request.path == "/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream"
    assert request.headers["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={server.access_key}/")
    assert "/us-east-1/bedrock/aws4_request" in request.headers["authorization"]
    assert request.headers["accept"] == "application/vnd.amazon.eventstream"


@pytest.mark.parametrize("frame_pieces", [1, 5, 13, 64])
async def test_frames_cut_anywhere_by_the_network_read_the_same(frame_pieces: int) -> None:
    scripted = AiMessage("Checking both.", CALLS, thinking="Two tools at once.")
    with FakeBedrockServer([scripted], frame_pieces=frame_pieces) as server:
        async with model_for(server) as model:
            events = await collect(model.stream(ChatRequest([UserMessage("go")], [WEATHER, TIME])))
    response = final(events)
    assert response.text == "Checking both."
    assert response.ai_message.thinking == "Two tools at once."
    assert response.ai_message.tool_execution_requests == CALLS
    assert response.finish_reason is FinishReason.TOOL_EXECUTION
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [(d.index, d.id, d.name) for d in deltas if d.id] == [
        (0, "tooluse_a", "get_weather"),
        (1, "tooluse_b", "get_time"),
    ]
    assert "".join(d.arguments for d in deltas if d.index == 0) == '{"location": "Seattle"}'
    assert [e.request for e in events if isinstance(e, ToolCallComplete)] == list(CALLS)
    assert [e for e in events if isinstance(e, ThinkingDelta)]


async def test_request_has_the_converse_shape(server: FakeBedrockServer) -> None:
    server.add("ok")
    history = [
        SystemMessage("Be brief."),
        UserMessage("Weather?"),
        AiMessage("Checking.", CALLS),
        ToolExecutionResultMessage("tooluse_a", "get_weather", "9°C"),
        ToolExecutionResultMessage("tooluse_b", "get_time", "boom", is_error=True),
        UserMessage("And tomorrow?"),
    ]
    request = ChatRequest(history, [WEATHER, TIME], ToolChoice.REQUIRED, {"temperature": 0.2, "stop": "END"})
    async with model_for(server, max_tokens=256) as model:
        assert (await model.chat(request)).text == "ok"
    body = server.requests[0].json
    assert server.requests[0].path.endswith("/converse")
    assert body["system"] == [{"text": "Be brief."}]
    assert body["inferenceConfig"] == {"maxTokens": 256, "temperature": 0.2, "stopSequences": ["END"]}
    assert body["toolConfig"] == {
        "tools": [
            {
                "toolSpec": {
                    "name": "get_weather",
                    "description": WEATHER.description,
                    "inputSchema": {"json": WEATHER.parameters},
                }
            },
            {"toolSpec": {"name": "get_time", "inputSchema": {"json": TIME.parameters}}},
        ],
        "toolChoice": {"any": {}},
    }
    assert body["messages"] == [
        {"role": "user", "content": [{"text": "Weather?"}]},
        {
            "role": "assistant",
            "content": [
                {"text": "Checking."},
                {
                    "toolUse": {
                        "toolUseId": "tooluse_a",
                        "name": "get_weather",
                        "input": {"location": "Seattle"},
                    }
                },
                {"toolUse": {"toolUseId": "tooluse_b", "name": "get_time", "input": {}}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"toolResult": {"toolUseId": "tooluse_a", "content": [{"text": "9°C"}]}},
                {"toolResult": {"toolUseId": "tooluse_b", "content": [{"text": "boom"}], "status": "error"}},
                {"text": "And tomorrow?"},
            ],
        },
    ]


def test_tool_choice_mapping(server: FakeBedrockServer) -> None:
    model = model_for(server)
    ask = [UserMessage("hi")]
    assert model.build_body(ChatRequest(ask, [WEATHER], ToolChoice.tool("get_weather")))["toolConfig"][
        "toolChoice"
    ] == {"tool": {"name": "get_weather"}}
    assert "toolChoice" not in model.build_body(ChatRequest(ask, [WEATHER], ToolChoice.AUTO))["toolConfig"]
    # Converse has no "none": the tools are left out, unless the history holds tool blocks (they must stay)
    assert "toolConfig" not in model.build_body(ChatRequest(ask, [WEATHER], ToolChoice.NONE))
    used = [
        UserMessage("hi"),
        AiMessage(None, CALLS[:1]),
        ToolExecutionResultMessage("tooluse_a", "get_weather", "x"),
    ]
    assert "toolConfig" in model.build_body(ChatRequest(used, [WEATHER], ToolChoice.NONE))


async def test_reasoning_goes_back_verbatim_and_survives_a_store(server: FakeBedrockServer) -> None:
    server.add(AiMessage(None, CALLS[:1], thinking="I need the weather."))
    server.add("done")
    server.add("refused")
    async with model_for(server) as model:
        request = ChatRequest([UserMessage("Weather?")], [WEATHER])
        response = final(await collect(model.stream(request)))
        reasoning = response.ai_message.provider_state["bedrock"]["reasoning"]
        assert reasoning[0]["reasoningContent"]["reasoningText"]["text"] == "I need the weather."
        stored = msgspec.json.decode(msgspec.json.encode(response.ai_message), type=AiMessage)
        result = ToolExecutionResultMessage("tooluse_a", "get_weather", "rain")
        assert (await model.chat(ChatRequest([*request.messages, stored, result], [WEATHER]))).text == "done"
        forged = AiMessage(
            None,
            CALLS[:1],
            provider_state={
                "bedrock": {
                    "reasoning": [
                        {"reasoningContent": {"reasoningText": {"text": "x", "signature": "forged"}}}
                    ]
                }
            },
        )
        with pytest.raises(BadRequestError, match="Invalid signature"):
            await model.chat(ChatRequest([*request.messages, forged, result], [WEATHER]))
    sent = server.requests[1].json["messages"][1]["content"]
    assert sent[0] == reasoning[0]
    assert "toolUse" in sent[1]


async def test_usage_counts_cache_reads_and_writes_as_input(server: FakeBedrockServer) -> None:
    usage = TokenUsage(1500, 40, cache_read_tokens=1000, cache_write_tokens=300)
    server.add(ChatResponse(AiMessage("ok"), usage))
    server.add(ChatResponse(AiMessage("ok"), usage))
    async with model_for(server) as model:
        assert final(await collect(model.stream(QUESTION))).token_usage == usage
        assert (await model.chat(QUESTION)).token_usage == usage


async def test_structured_output_goes_as_output_config(server: FakeBedrockServer) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    server.add('{"city": "Seattle"}')
    async with model_for(server) as model:
        response = await model.chat(
            ChatRequest([UserMessage("JSON please")], response_format=ResponseFormat(schema))
        )
    assert json.loads(response.text or "") == {"city": "Seattle"}
    text_format = server.requests[0].json["outputConfig"]["textFormat"]
    assert text_format["type"] == "json_schema"
    definition = text_format["structure"]["jsonSchema"]
    assert definition["name"] == "output"
    assert json.loads(definition["schema"])["properties"] == schema["properties"]


async def test_an_agent_runs_a_tool_loop_on_bedrock(
    server: FakeBedrockServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    @tool
    def get_weather(location: str) -> str:
        """Get the current weather in a given location."""
        return f"rain in {location}"

    server.add(AiMessage(None, [ToolExecutionRequest("t1", "get_weather", '{"location": "Seattle"}')]))
    server.add("It rains in Seattle.")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", server.secret_key)
    monkeypatch.setenv("AWS_REGION", server.region)
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", server.base_url)
    result = await Agent(f"bedrock:{MODEL_ID}", tools=[get_weather]).chat("Weather in Seattle?")
    assert result.content == "It rains in Seattle."
    answer = server.requests[1].json["messages"][-1]["content"][0]["toolResult"]
    assert answer == {"toolUseId": "t1", "content": [{"text": "rain in Seattle"}]}


# -- credentials and regions --------------------------------------------------------------------------------


async def test_credentials_from_the_environment_with_a_session_token(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeBedrockServer(["ok"], region="eu-west-3") as server:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", server.access_key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", server.secret_key)
        monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION_TOKEN)
        monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-3")
        caplog.set_level(logging.DEBUG)
        async with BedrockChatModel(MODEL_ID, endpoint_url=server.base_url) as model:
            assert model.region == "eu-west-3"
            assert (await model.chat(QUESTION)).text == "ok"
    assert server.requests[0].headers["x-amz-security-token"] == SESSION_TOKEN  # signed, and verified
    assert server.secret_key not in caplog.text
    assert SESSION_TOKEN not in caplog.text


async def test_credentials_and_region_from_a_profile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with FakeBedrockServer(["from the profile"], region="ap-southeast-2") as server:
        (tmp_path / "credentials").write_text(
            f"[work]\naws_access_key_id = {server.access_key}\naws_secret_access_key = {server.secret_key}\n"
        )
        (tmp_path / "config").write_text("[profile work]\nregion = ap-southeast-2\n")
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
        monkeypatch.setenv("AWS_PROFILE", "work")
        model = infer_model(f"bedrock:{MODEL_ID}")
        assert isinstance(model, BedrockChatModel)
        assert model.region == "ap-southeast-2"
        async with BedrockChatModel(MODEL_ID, endpoint_url=server.base_url) as model:
            assert (await model.chat(QUESTION)).text == "from the profile"


def test_without_a_region_the_error_says_how_to_set_one() -> None:
    with pytest.raises(IllegalConfigurationError, match=r"needs an AWS region.*AWS_REGION"):
        BedrockChatModel(MODEL_ID)
    with pytest.raises(IllegalConfigurationError, match="together"):
        BedrockChatModel(MODEL_ID, region="us-east-1", aws_access_key_id="AKID")


async def test_without_credentials_the_error_lists_where_they_come_from(server: FakeBedrockServer) -> None:
    async with BedrockChatModel(MODEL_ID, region="us-east-1", endpoint_url=server.base_url) as model:
        with pytest.raises(
            AuthenticationError, match=r"no AWS credentials found.*AWS_ACCESS_KEY_ID.*AWS_PROFILE"
        ):
            await model.chat(QUESTION)
    assert server.requests == []  # nothing was sent


async def test_a_wrong_secret_is_a_403_that_names_the_credentials_and_never_shows_them(
    server: FakeBedrockServer,
) -> None:
    wrong = "wrong/secret/key/that/must/never/be/printed/00"
    server.add("never")
    model = BedrockChatModel(
        MODEL_ID,
        region=server.region,
        endpoint_url=server.base_url,
        aws_access_key_id=server.access_key,
        aws_secret_access_key=wrong,
        max_retries=0,
    )
    async with model:
        with pytest.raises(AuthenticationError, match="signature we calculated does not match") as caught:
            await model.chat(QUESTION)
    error = caught.value
    assert error.error_type == "InvalidSignatureException"
    assert "check the AWS credentials (aws_access_key_id= / aws_secret_access_key=" in str(error)
    assert "bedrock:InvokeModel" in str(error)
    for text in (str(error), repr(error), repr(model)):
        assert wrong not in text
        assert server.access_key not in text  # shown masked only


async def test_a_wrong_region_is_refused(server: FakeBedrockServer) -> None:
    server.add("never")
    async with BedrockChatModel(
        MODEL_ID,
        region="us-west-2",
        endpoint_url=server.base_url,
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
        max_retries=0,
    ) as model:
        with pytest.raises(AuthenticationError, match="scoped to a valid region"):
            await model.chat(QUESTION)


# -- errors and retries -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exception", "cls"),
    [
        ("throttlingException", RateLimitError),
        ("modelStreamErrorException", ServerError),
        ("serviceUnavailableException", ServerError),
        ("validationException", BadRequestError),
    ],
)
async def test_an_exception_mid_stream_is_raised_and_not_retried(
    server: FakeBedrockServer, exception: str, cls: type[ModelError]
) -> None:
    server.add(server.stream_exception(exception, "Something broke", after="Partial"))
    server.add("never sent")
    received: list[ModelEvent] = []
    async with model_for(server, max_retries=3) as model:
        with pytest.raises(cls, match=f"{exception} in the response stream: Something broke") as caught:
            await collect(model.stream(QUESTION), into=received)
    assert caught.value.error_type == exception
    assert received == [TextDelta("Partial")]
    assert len(server.requests) == 1


async def test_a_stream_cut_or_corrupted_is_an_error(server: FakeBedrockServer) -> None:
    server.add("one two three four five six", disconnect_after_chunks=3)
    frames = FakeBedrockServer(["x"])._frames(ChatResponse(AiMessage("hello")), {})
    server.add(
        Reply.stream([frames[0], frames[1][:-1] + b"\0"], content_type="application/vnd.amazon.eventstream")
    )
    server.add(Reply.stream(frames[:2], content_type="application/vnd.amazon.eventstream"))
    async with model_for(server) as model:
        with pytest.raises(ModelConnectionError, match="broke before it was complete"):
            await collect(model.stream(QUESTION))
        with pytest.raises(BadResponseError, match="CRC mismatch"):
            await collect(model.stream(QUESTION))
        with pytest.raises(BadResponseError, match="ended before messageStop"):
            await collect(model.stream(QUESTION))


# -- pictures and documents ---------------------------------------------------------------------------------


async def test_pictures_and_documents_go_as_bytes_with_valid_unique_names(server: FakeBedrockServer) -> None:
    server.add("Two reports and a cat.")
    message = UserMessage.of(
        [
            "Compare these",
            ImageContent(data=PNG),
            DocumentContent(data=PDF, name="Q3 report.final.pdf"),
            DocumentContent(data=PDF, name="Q3 report.final.pdf"),
        ]
    )
    async with model_for(server) as model:
        assert (await model.chat(ChatRequest([message]))).text == "Two reports and a cat."
    content = server.requests[0].json["messages"][0]["content"]
    assert content[0] == {"text": "Compare these"}
    assert content[1] == {"image": {"format": "png", "source": {"bytes": ImageContent(data=PNG).base64}}}
    assert [c["document"]["name"] for c in content[2:]] == ["Q3 report-final", "Q3 report-final (2)"]
    assert content[2]["document"]["format"] == "pdf"


def test_a_picture_at_a_web_address_is_refused_before_sending(server: FakeBedrockServer) -> None:
    for url in ("https://example.com/cat.png", "gs://bucket/cat.png"):
        message = UserMessage.of(["What is this?", ImageContent(url=url)])
        with pytest.raises(IllegalConfigurationError, match="as bytes or as s3:// locations only"):
            model_for(server).build_body(ChatRequest([message]))


async def test_pictures_and_documents_in_s3_go_as_s3_locations(server: FakeBedrockServer) -> None:
    server.add("Read both.")
    message = UserMessage.of(
        ["Compare", ImageContent(url="s3://bucket/cat.png"), DocumentContent(url="s3://bucket/q3.pdf")]
    )
    async with model_for(server) as model:
        assert (await model.chat(ChatRequest([message]))).text == "Read both."
    content = server.requests[0].json["messages"][0]["content"]
    assert content[1] == {
        "image": {"format": "png", "source": {"s3Location": {"uri": "s3://bucket/cat.png"}}}
    }
    assert content[2] == {
        "document": {"format": "pdf", "name": "q3", "source": {"s3Location": {"uri": "s3://bucket/q3.pdf"}}}
    }


@pytest.mark.parametrize(
    ("model_id", "inside"),
    [(MODEL_ID, True), ("us.amazon.nova-pro-v1:0", True), ("meta.llama3-1-70b-instruct-v1:0", False)],
)
async def test_a_picture_a_tool_returned(server: FakeBedrockServer, model_id: str, inside: bool) -> None:
    server.add("A chart.")
    shot = ToolExecutionRequest("s1", "screenshot", "{}")
    history = [
        UserMessage("Take a screenshot"),
        AiMessage(None, [shot]),
        ToolExecutionResultMessage("s1", "screenshot", "captured", contents=[ImageContent(data=PNG)]),
    ]
    specs = [ToolSpecification("screenshot", None, {"type": "object", "properties": {}})]
    async with model_for(server, model_id) as model:
        assert (await model.chat(ChatRequest(history, specs))).text == "A chart."
    content = server.requests[0].json["messages"][-1]["content"]
    image = {"image": {"format": "png", "source": {"bytes": ImageContent(data=PNG).base64}}}
    if inside:  # Claude and Nova take images inside the tool result
        assert content == [{"toolResult": {"toolUseId": "s1", "content": [{"text": "captured"}, image]}}]
    else:  # others get it right after the results, saying where it came from
        assert [next(iter(block)) for block in content] == ["toolResult", "text", "image"]
        assert "screenshot (call s1)" in content[1]["text"]


async def test_credentials_from_an_assumed_role(
    server: FakeBedrockServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A profile that assumes a role: botocore calls STS (a fake STS here, at AWS_ENDPOINT_URL_STS) in the
    model's worker thread, and the role's temporary credentials sign the Bedrock request."""
    token = "FwoGZXIvYXdzEFAKE-role-session-token-0000000000000000"
    sts_answer = f"""<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleResult>
    <Credentials>
      <AccessKeyId>{server.access_key}</AccessKeyId>
      <SecretAccessKey>{server.secret_key}</SecretAccessKey>
      <SessionToken>{token}</SessionToken>
      <Expiration>2099-01-01T00:00:00Z</Expiration>
    </Credentials>
    <AssumedRoleUser>
      <AssumedRoleId>AROAFAKE:agentloop</AssumedRoleId>
      <Arn>arn:aws:sts::123456789012:assumed-role/bedrock-caller/agentloop</Arn>
    </AssumedRoleUser>
  </AssumeRoleResult>
  <ResponseMetadata><RequestId>4f6c2a52-0000-0000-0000-000000000000</RequestId></ResponseMetadata>
</AssumeRoleResponse>"""
    (tmp_path / "credentials").write_text(
        "[base]\naws_access_key_id = AKIDBASEPROFILE00001\naws_secret_access_key = base/secret/0000000000\n"
    )
    (tmp_path / "config").write_text(
        "[profile caller]\nrole_arn = arn:aws:iam::123456789012:role/bedrock-caller\nsource_profile = base\n"
        "role_session_name = agentloop\nregion = us-east-1\n"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_PROFILE", "caller")
    server.add("signed by the role")
    # The role's credentials are botocore's RefreshableCredentials: found due for a refresh, they are
    # refreshed (the STS call) off the event loop.
    import botocore.credentials

    refreshed_on: list[int] = []
    refresh = botocore.credentials.RefreshableCredentials.get_frozen_credentials

    def recorded(credentials: Any) -> Any:
        refreshed_on.append(threading.get_ident())
        return refresh(credentials)

    monkeypatch.setattr(botocore.credentials.RefreshableCredentials, "get_frozen_credentials", recorded)
    with FakeServer([Reply(200, (("content-type", "text/xml"),), sts_answer.encode())]) as sts:
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts.base_url)
        async with BedrockChatModel(MODEL_ID, endpoint_url=server.base_url, max_retries=0) as model:
            assert (await model.chat(QUESTION)).text == "signed by the role"
    form = dict(pair.split("=", 1) for pair in sts.requests[0].body.decode().split("&"))
    assert form["Action"] == "AssumeRole"
    assert "bedrock-caller" in form["RoleArn"]
    assert (
        sts.requests[0]
        .headers["authorization"]
        .startswith("AWS4-HMAC-SHA256 Credential=AKIDBASEPROFILE00001/")
    )
    assert server.requests[0].headers["x-amz-security-token"] == token
    assert refreshed_on and threading.get_ident() not in refreshed_on


async def test_a_bedrock_api_key_is_sent_as_a_bearer_token(monkeypatch: pytest.MonkeyPatch) -> None:
    key = "ABSKQmVkcm9ja0FQSUtleS1mYWtlLWtleS1mb3ItYWdlbnRsb29wLXRlc3Rz"
    with FakeBedrockServer(["with a key", "never"], api_key=key) as server:
        monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", key)
        async with BedrockChatModel(MODEL_ID, region="us-east-1", endpoint_url=server.base_url) as model:
            assert (await model.chat(QUESTION)).text == "with a key"
        assert server.requests[0].headers["authorization"] == f"Bearer {key}"
        wrong = "ABSK-wrong-key-that-must-never-be-printed-00000000"
        async with BedrockChatModel(
            MODEL_ID, region="us-east-1", endpoint_url=server.base_url, api_key=wrong, max_retries=0
        ) as model:
            with pytest.raises(AuthenticationError, match="the Bedrock API key from api_key=") as caught:
                await model.chat(QUESTION)
    assert wrong not in str(caught.value) and wrong not in repr(model)


def test_botocore_is_imported_only_by_a_bedrock_model() -> None:
    import subprocess
    import sys

    code = (
        "import sys, agentloop, agentloop.models, agentloop.testing\n"
        "from agentloop.models import BedrockChatModel, GeminiChatModel\n"
        "assert 'botocore' not in sys.modules, 'botocore imported'\n"
        "sys.modules['botocore'] = None  # as if the extra were not installed\n"
        "try:\n"
        "    BedrockChatModel('m', region='us-east-1')\n"
        "except agentloop.IllegalConfigurationError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'agentloop-runtime[bedrock]'" in done.stdout
