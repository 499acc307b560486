"""`PartialTracker`: the partial value of a structured output while it streams, in time that does not grow
with the document.

The partial-JSON parser keeps the document as live containers that only grow at one end: in an object every
key but the last is whole, in a list every item but the last is whole. So a model's (or `TypedDict`'s)
fields are validated once each when they are whole, a list field's items once each, and only the part
still being written (the last field, the last item of a list) is validated again as more arrives. Other
output types (a dataclass, a union, a scalar) are validated whole each time, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Literal, get_args, get_origin

if TYPE_CHECKING:
    import pydantic

    from ._types import OutputMember

__all__ = ["PartialTracker", "list_item_adapter"]

_FAILED: Any = object()
_PARTIAL: Final[Literal["trailing-strings"]] = "trailing-strings"


def list_item_adapter(annotation: Any) -> pydantic.TypeAdapter[Any] | None:
    """The item validator of a plain `list[T]` (None for anything else, constrained lists included)."""
    import pydantic

    if get_origin(annotation) is list:
        args = get_args(annotation)
        if len(args) == 1:
            return pydantic.TypeAdapter(args[0])
    return None


class _ListField:
    """One list being written: its whole items validated once each, the last one again as it grows."""

    __slots__ = ("adapter", "count", "failed", "items", "source")

    def __init__(self, adapter: pydantic.TypeAdapter[Any], source: list[Any]) -> None:
        self.adapter = adapter
        self.source = source  # the parser's live list
        self.items: list[Any] = []
        self.count = 0
        self.failed = False

    def update(self, raw: list[Any], final: bool) -> Any:
        import pydantic

        if self.failed:
            return _FAILED
        n = len(raw)
        whole = n if final else n - 1
        while self.count < whole:
            try:
                self.items.append(self.adapter.validate_python(raw[self.count]))
            except pydantic.ValidationError:
                self.failed = True  # a whole item that does not validate: the list never will
                return _FAILED
            self.count += 1
        if self.count < n:  # the last item, still being written: left out while it does not validate
            try:
                last = self.adapter.validate_python(raw[-1], experimental_allow_partial=_PARTIAL)
            except pydantic.ValidationError:
                return list(self.items)
            return [*self.items, last]
        return list(self.items)


class PartialTracker:
    """The partial values of one output member in one streamed answer (see the module docstring)."""

    __slots__ = ("_done", "_lists", "_member")

    def __init__(self, member: OutputMember) -> None:
        self._member = member
        self._done: dict[str, Any] = {}  # whole fields: their validated value (or _FAILED)
        self._lists: dict[str, _ListField] = {}

    def update(self, raw: Any) -> tuple[Any, Any] | None:
        """The partial value of `raw` (the parser's live document) and the part of it the value stands for,
        or None when nothing validates yet."""
        member = self._member
        if not isinstance(raw, dict):
            return None
        raw = member.restored(raw)
        if member.wrapped:
            items = member.result_items
            result = raw.get("result")
            if items is None or not isinstance(result, list):
                return member.partial(raw)
            value = self._list("result", items, result, final=False)
            return None if value is _FAILED else (value, {"result": result})
        fields, build = member.fields, member.build
        if fields is None or build is None:
            return member.partial(raw)
        last = next(reversed(raw), None)
        kept: dict[str, Any] = {}
        used: dict[str, Any] = {}
        for key, item in raw.items():
            field = fields.get(key)
            if field is None:
                continue
            final = key != last
            value = self._done.get(key, _FAILED) if final and key in self._done else None
            if value is None:
                value = self._field(key, field.adapter, item, final)
                if final:
                    self._done[key] = value
            if value is _FAILED:
                continue
            kept[field.name] = value
            used[key] = item
        if not used:
            return None
        return build(kept), used

    def _field(self, key: str, adapter: pydantic.TypeAdapter[Any], item: Any, final: bool) -> Any:
        import pydantic

        items = self._member.list_items.get(key)
        if items is not None and isinstance(item, list):
            return self._list(key, items, item, final)
        try:
            return adapter.validate_python(item, experimental_allow_partial=_PARTIAL)
        except pydantic.ValidationError:
            return _FAILED

    def _list(self, key: str, items: pydantic.TypeAdapter[Any], raw: list[Any], final: bool) -> Any:
        tracked = self._lists.get(key)
        if tracked is None or tracked.source is not raw:  # a new list (a repeated key replaced it)
            tracked = self._lists[key] = _ListField(items, raw)
        return tracked.update(raw, final)
