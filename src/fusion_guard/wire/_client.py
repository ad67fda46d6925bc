"""The client side of the wire contract (section 8): an error result back into an exception.

The text comes from a remote server, so it is parsed with expat directly and refused at the first
sign of a DTD: a ``<!DOCTYPE`` (and with it every entity declaration, the entity-expansion bomb
included) raises before anything is declared or expanded. Both the indented layout the library
writes and a compact one without whitespace between elements are read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn
from xml.etree.ElementTree import Element, TreeBuilder
from xml.parsers import expat

from .._exceptions import FusionGuardError
from ._response import ToolResponse

__all__ = ["FusionClientError", "parse_tool_error", "raise_for_tool_error"]

_ENVELOPES = frozenset({"tool_error", "validation_error"})


class FusionClientError(FusionGuardError):
    """A tool result carried an error envelope; its fields, parsed.

    ``code`` is ``UNKNOWN`` when the server sent an error whose text is no envelope (the whole
    text is then the ``message``). ``raw`` is what was parsed: the result, or the text.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        recovery: str | None = None,
        available_actions: Sequence[str] = (),
        severity: str = "error",
        details: Mapping[str, str] | None = None,
        retry_after: float | None = None,
        raw: object = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.recovery = recovery
        self.available_actions = list(available_actions)
        self.severity = severity
        self.details: dict[str, str] = dict(details or {})
        self.retry_after = retry_after
        self.raw = raw

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


# -- parsing ------------------------------------------------------------------------------------


def _refuse_dtd(*_: object) -> NoReturn:
    raise ValueError(
        "refusing to parse a tool result that declares a DTD or entities (<!DOCTYPE ...>): "
        "an envelope never has one, and entity expansion from a remote server is unsafe"
    )


def _to_tree(text: str) -> Element | None:
    """The element tree of ``text``, None when it is not XML; ``ValueError`` on any DTD."""
    builder = TreeBuilder()
    parser = expat.ParserCreate()
    # The DOCTYPE handler fires before any declaration inside it is read: nothing is expanded.
    parser.StartDoctypeDeclHandler = _refuse_dtd
    parser.EntityDeclHandler = _refuse_dtd
    parser.ExternalEntityRefHandler = _refuse_dtd
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.buffer_text = True
    parser.StartElementHandler = builder.start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.data
    try:
        parser.Parse(text, True)
    except (expat.ExpatError, UnicodeEncodeError):  # a lone surrogate cannot be XML either
        return None
    return builder.close()


def parse_tool_error(text: str) -> FusionClientError | None:
    """The envelope in ``text`` as a ``FusionClientError`` (not raised), or None when ``text`` is
    no ``<tool_error>`` / ``<validation_error>`` envelope.

    Raises ``ValueError`` when the text declares a DTD or entities.
    """
    if not isinstance(text, str):
        raise TypeError(
            f"parse_tool_error expects the result text (str), not {type(text).__name__}"
        )
    if "<" not in text:
        return None
    root = _to_tree(text)
    if root is None or root.tag not in _ENVELOPES:
        return None
    if root.tag == "validation_error":
        return _from_validation_error(root, text)
    return _from_tool_error(root, text)


def _from_tool_error(root: Element, raw: str) -> FusionClientError:
    details = {d.get("key", ""): d.text or "" for d in _children(root, "details", "detail")}
    return FusionClientError(
        root.get("code") or "UNKNOWN",
        _child_text(root, "message") or "",
        recovery=_child_text(root, "recovery"),
        available_actions=_actions(root),
        severity=root.get("severity", "error"),
        details=details,
        retry_after=_retry_after(_child_text(root, "retry_after")),
        raw=raw,
    )


def _from_validation_error(root: Element, raw: str) -> FusionClientError:
    fields = [(f.get("name", ""), f.text or "") for f in root.iterfind("field")]
    action = root.get("action")
    details = {} if action is None else {"action": action}
    for name, line in fields:
        # The attribute wins over a field named "action"; the message keeps every field line.
        if name != "action" or action is None:
            details[name] = line
    message = "\n".join(f"{name}: {line}" for name, line in fields) or "Invalid arguments."
    return FusionClientError(
        "VALIDATION_ERROR",
        message,
        recovery=_child_text(root, "recovery"),
        available_actions=_actions(root),
        details=details,
        raw=raw,
    )


def _child_text(root: Element, tag: str) -> str | None:
    child = root.find(tag)
    return None if child is None else child.text or ""


def _children(root: Element, section: str, tag: str) -> list[Element]:
    container = root.find(section)
    return [] if container is None else container.findall(tag)


def _actions(root: Element) -> list[str]:
    # Only <available_actions> counts: <action> elements elsewhere (contract_awareness) do not.
    return [a.text or "" for a in _children(root, "available_actions", "action")]


def _retry_after(text: str | None) -> float | None:
    if not text:
        return None
    number, _, _unit = text.partition(" ")
    try:
        seconds = float(number)
    except ValueError:
        return None
    # The contract writes only finite values > 0; anything else from a server is no advice.
    return seconds if 0 < seconds < math.inf else None


# -- results ------------------------------------------------------------------------------------


def raise_for_tool_error(result: object) -> None:
    """Raise ``FusionClientError`` when ``result`` is an error result; warnings never raise.

    ``result`` is a ``ToolResponse``, the wire dict ``{"content": [...], "isError": bool}``, or
    the MCP SDK's ``CallToolResult`` (anything with ``content`` and ``is_error``/``isError``).
    """
    texts, is_error = _read_result(result)
    if not is_error:
        return
    for text in texts:
        parsed = parse_tool_error(text)
        if parsed is not None:
            if parsed.severity == "warning":
                return
            parsed.raw = result
            raise parsed
    raise FusionClientError("UNKNOWN", "\n".join(texts), raw=result)


def _read_result(result: object) -> tuple[list[str], bool]:
    """The text blocks and the ``isError`` flag of any accepted result shape."""
    if isinstance(result, ToolResponse):
        return [result.text], result.is_error
    if isinstance(result, Mapping):
        blocks = result.get("content") or []
        texts = [b["text"] for b in blocks if isinstance(b, Mapping) and "text" in b]
        return _check_texts(texts), bool(result.get("isError", False))
    if hasattr(result, "content"):
        flag = getattr(result, "is_error", None)
        if flag is None:
            flag = getattr(result, "isError", False)
        texts = [b.text for b in result.content if hasattr(b, "text")]
        return _check_texts(texts), bool(flag)
    raise TypeError(
        "raise_for_tool_error expects a ToolResponse, a dict {'content': [...], 'isError': bool}"
        f" or an MCP CallToolResult, not {type(result).__name__}"
    )


def _check_texts(texts: list[Any]) -> list[str]:
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"a text content block must hold a str, not {type(text).__name__}")
    return texts
