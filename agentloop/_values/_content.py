"""What a message can hold besides plain text: pictures and documents (PDF), and the text between them.

`ImageContent` and `DocumentContent` hold either the raw bytes (`data`) or a `url` the provider fetches. The
bytes are kept once, raw; their base64 form is computed on first use and kept on the object, so a picture in
the history is not re-encoded for every model call of every round. Stores write a message once (in the round
that added it), as base64 inside the round's JSON.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
import os
from collections.abc import Iterable
from typing import Any, Final, Union
from urllib.parse import unquote_to_bytes, urlsplit

import msgspec

__all__ = [
    "IMAGE_MEDIA_TYPES",
    "URL_SCHEMES",
    "Content",
    "DocumentContent",
    "ImageContent",
    "TextContent",
    "contents_of",
    "text_of",
]

IMAGE_MEDIA_TYPES: Final = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The picture formats every provider agentloop speaks to accepts."""

DOCUMENT_MEDIA_TYPES: Final = ("application/pdf",)
"""The document formats `DocumentContent` takes."""

URL_SCHEMES: Final = ("http", "https", "s3", "gs")
"""What `url=` may be besides a data: URL: a web address, or a cloud storage URI (Bedrock reads `s3://`,
Gemini `gs://`; providers that cannot fetch one refuse it before sending anything)."""

_MAGIC: Final = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
)


def _sniff(data: bytes) -> str | None:
    """The media type the first bytes of `data` announce, for the formats agentloop takes."""
    for magic, media_type in _MAGIC:
        if data.startswith(magic):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _from_data_url(url: str) -> tuple[bytes, str]:
    """`data:<type>;base64,<data>` as (bytes, media type): kept as bytes so it is encoded only once."""
    head, sep, payload = url[5:].partition(",")
    if not sep:
        raise ValueError("a data: URL needs a comma between its media type and its data")
    media_type, _, encoding = head.partition(";")
    try:
        data = base64.b64decode(payload, validate=True) if encoding == "base64" else unquote_to_bytes(payload)
    except binascii.Error:
        raise ValueError("the base64 data of this data: URL is not valid base64") from None
    return data, media_type.strip().lower()


class _Media(msgspec.Struct, frozen=True, omit_defaults=True, dict=True):
    """What pictures and documents share: bytes or a URL, a media type, and the cached base64 form."""

    data: bytes | None = None
    url: str | None = None
    media_type: str | None = None

    def _validate(self, kind: str, allowed: tuple[str, ...]) -> None:
        if self.data is not None and type(self.data) is not bytes:
            msgspec.structs.force_setattr(self, "data", bytes(self.data))
        if (self.data is None) == (self.url is None):
            raise ValueError(f"{kind}: give exactly one of data= (the bytes) or url= (where to fetch it)")
        if self.url is not None:
            scheme = urlsplit(self.url).scheme.lower()
            if scheme == "data":
                data, embedded_type = _from_data_url(self.url)
                msgspec.structs.force_setattr(self, "data", data)
                msgspec.structs.force_setattr(self, "url", None)
                if self.media_type is None:
                    msgspec.structs.force_setattr(self, "media_type", embedded_type)
            elif scheme not in URL_SCHEMES:
                raise ValueError(
                    f"{kind}: url must be an http(s) URL, a data: URL, or a cloud storage URI (s3://, "
                    f"gs://), not {self.url[:40]!r}; for a file on disk use {kind}.from_path(path)"
                )
        media_type: str | None = self.media_type
        if media_type is None:
            if self.data is not None:
                media_type = _sniff(self.data)
            else:
                media_type = mimetypes.guess_type(urlsplit(self.url or "").path)[0]
                if media_type not in allowed:
                    media_type = None  # the provider finds it when it fetches the URL
            if media_type is None and self.data is not None:
                raise ValueError(
                    f"{kind}: cannot tell the format of these bytes; give media_type= (one of "
                    f"{', '.join(allowed)})"
                )
        else:
            media_type = media_type.strip().lower()
        if media_type is not None and media_type not in allowed:
            raise ValueError(f"{kind}: media_type {media_type!r} is not one of {', '.join(allowed)}")
        if media_type != self.media_type:
            msgspec.structs.force_setattr(self, "media_type", media_type)

    @property
    def is_web_url(self) -> bool:
        """True for an http(s) URL (what every provider that takes URLs fetches); False for bytes and cloud
        storage URIs (`s3://`, `gs://`)."""
        return self.url is not None and urlsplit(self.url).scheme.lower() in ("http", "https")

    @property
    def base64(self) -> str:
        """The bytes in base64, computed once per object (requests of later rounds reuse it)."""
        cache = self.__dict__
        found: str | None = cache.get("_base64")
        if found is None:
            if self.data is None:
                raise ValueError("this content is a URL; it has no bytes to encode")
            found = cache["_base64"] = base64.b64encode(self.data).decode("ascii")
        return found

    @property
    def data_url(self) -> str:
        """`data:<media type>;base64,...` for the bytes, or the URL itself."""
        if self.data is None:
            assert self.url is not None
            return self.url
        return f"data:{self.media_type};base64,{self.base64}"

    def _describe(self) -> str:
        where = f"{len(self.data)} bytes" if self.data is not None else repr(self.url)
        return f"{type(self).__name__}({where}, media_type={self.media_type!r})"


class TextContent(msgspec.Struct, frozen=True, tag="text"):
    """Text among pictures and documents in a message."""

    text: str


class ImageContent(_Media, frozen=True, tag="image", omit_defaults=True, dict=True):
    """A picture: `data=` its bytes (PNG, JPEG, GIF or WebP; the format is read from the bytes when
    `media_type` is not given) or `url=` an http(s) address the provider fetches (a `data:` URL is read
    into bytes). `ImageContent.from_path("cat.png")` reads a file."""

    def __post_init__(self) -> None:
        self._validate("ImageContent", IMAGE_MEDIA_TYPES)

    @classmethod
    def from_path(cls, path: str | os.PathLike[str], media_type: str | None = None) -> ImageContent:
        """The picture in the file at `path` (its format from the bytes, else from the file name)."""
        data, media_type = _read(path, media_type, IMAGE_MEDIA_TYPES)
        return cls(data=data, media_type=media_type)

    def __repr__(self) -> str:
        return self._describe()


class DocumentContent(_Media, frozen=True, tag="document", omit_defaults=True, dict=True):
    """A document (PDF): `data=` its bytes or `url=` where the provider fetches it. `name` is the file name
    providers show the model (OpenAI and Bedrock require one; it defaults to `document.pdf`)."""

    name: str | None = None

    def __post_init__(self) -> None:
        if self.media_type is None and self.data is not None and _sniff(self.data) is None:
            msgspec.structs.force_setattr(self, "media_type", "application/pdf")
        self._validate("DocumentContent", DOCUMENT_MEDIA_TYPES)

    @classmethod
    def from_path(cls, path: str | os.PathLike[str], name: str | None = None) -> DocumentContent:
        """The document in the file at `path`; its name is the file's unless `name` is given."""
        data, media_type = _read(path, None, DOCUMENT_MEDIA_TYPES)
        return cls(data=data, media_type=media_type, name=name or os.path.basename(os.fspath(path)))

    @property
    def filename(self) -> str:
        """The name to send: `name`, else the URL's last path segment, else `document.pdf`."""
        if self.name:
            return self.name
        if self.url:
            tail = urlsplit(self.url).path.rsplit("/", 1)[-1]
            if tail:
                return tail
        return "document.pdf"

    def __repr__(self) -> str:
        return self._describe()


def _read(
    path: str | os.PathLike[str], media_type: str | None, allowed: tuple[str, ...]
) -> tuple[bytes, str]:
    with open(path, "rb") as file:
        data = file.read()
    found = media_type or _sniff(data) or mimetypes.guess_type(os.fspath(path))[0]
    if found is None or found not in allowed:
        raise ValueError(
            f"{os.fspath(path)!r} is not a file of a format agentloop sends ({', '.join(allowed)}); give "
            "media_type= if it is one"
        )
    return data, found


Content = Union[TextContent, ImageContent, DocumentContent]
"""One part of a message: text, a picture or a document."""


def contents_of(parts: Iterable[Any]) -> tuple[Content, ...]:
    """`parts` (strings and content objects, in order) as content objects; anything else is an error."""
    result: list[Content] = []
    for part in parts:
        if isinstance(part, str):
            result.append(TextContent(part))
        elif isinstance(part, (TextContent, ImageContent, DocumentContent)):
            result.append(part)
        else:
            raise TypeError(
                f"A message's parts are strings, TextContent, ImageContent or DocumentContent, not "
                f"{type(part).__name__}"
            )
    return tuple(result)


def text_of(contents: Iterable[Content]) -> str:
    """The text parts of `contents`, joined by new lines (what text-only readers of a message see)."""
    return "\n".join(part.text for part in contents if isinstance(part, TextContent))
