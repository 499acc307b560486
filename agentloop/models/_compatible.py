"""The servers reached through `OpenAIChatModel` (they speak OpenAI Chat Completions), named.

`Agent("<name>:<model>")` builds an `OpenAIChatModel` for one of them: its base URL (overridable with the
`<NAME>_BASE_URL` environment variable, e.g. `VLLM_BASE_URL`) and its key variable. docs/models.md lists
the same table (a test keeps the two equal).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["COMPATIBLE", "Compatible"]


@dataclass(frozen=True, slots=True)
class Compatible:
    """One OpenAI-compatible provider: the prefix of its model strings, what it is, where, which key."""

    name: str
    title: str
    base_url: str
    key_variable: str
    key_required: bool

    @property
    def base_url_variable(self) -> str:
        """The environment variable that replaces `base_url` (a proxy, another host or port)."""
        return f"{self.name.upper()}_BASE_URL"


COMPATIBLE: tuple[Compatible, ...] = (
    Compatible("ollama", "Ollama", "http://localhost:11434/v1", "OLLAMA_API_KEY", False),
    Compatible("vllm", "vLLM", "http://localhost:8000/v1", "VLLM_API_KEY", False),
    Compatible("llamacpp", "llama.cpp server", "http://localhost:8080/v1", "LLAMACPP_API_KEY", False),
    Compatible("openrouter", "OpenRouter", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY", True),
    Compatible("groq", "Groq", "https://api.groq.com/openai/v1", "GROQ_API_KEY", True),
    Compatible("deepseek", "DeepSeek", "https://api.deepseek.com/v1", "DEEPSEEK_API_KEY", True),
    Compatible("mistral", "Mistral", "https://api.mistral.ai/v1", "MISTRAL_API_KEY", True),
    Compatible("together", "Together AI", "https://api.together.xyz/v1", "TOGETHER_API_KEY", True),
)
"""Every named OpenAI-compatible provider, in the order docs/models.md lists them."""
