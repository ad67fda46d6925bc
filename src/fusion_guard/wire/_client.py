"""The client side of the wire contract: an error result back into an exception.

The text comes from a remote server, so it is parsed with expat directly and refused at the first
sign of a DTD: a ``<!DOCTYPE`` (and with it every entity declaration, the entity-expansion bomb
included) raises before anything is declared or expanded. Its size is bounded too: text longer
than ``MAX_ENVELOPE_CHARS`` is refused before parsing starts, and parsing stops at the element
after ``MAX_ENVELOPE_ELEMENTS``, so neither time nor memory grows with what a server sends. Both
the indented layout the library writes and a compact one without whitespace between elements
are read.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn
from xml.etree.ElementTree import Element, TreeBuilder
from xml.parsers import expat

from .._exceptions import FusionGuardError
from ._meta import META_KEY
from ._response import ToolResponse

__all__ = [
    "MAX_ENVELOPE_CHARS",
    "MAX_ENVELOPE_ELEMENTS",
    "FusionClientError",
    "parsed_facts",
    "parse_tool_error",
    "raise_for_tool_error",
]

MAX_ENVELOPE_CHARS = 256 * 1024
"""The longest text parsed as an envelope (256 KiB of characters; a real one is a few KB).
Parsing the worst text of this length (one element with thousands of attributes) takes tens of
milliseconds."""
MAX_ENVELOPE_ELEMENTS = 1024
"""The most elements parsed in one envelope (a real one has a few dozen: one per detail,
action or invalid field)."""
_MAX_ATTRIBUTES = 16  # per element; an envelope's elements have at most four

_ENVELOPES = frozenset({"tool_error", "validation_error"})
# An XML document's first character, after any blanks (and a byte order mark), is "<".
_MARKUP = re.compile(r"[ \t\r\n\ufeff]*<")


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


def _refuse_size(text: str) -> None:
    if len(text) > MAX_ENVELOPE_CHARS:
        raise ValueError(
            f"refusing to parse a tool result of {len(text):,} characters: an envelope is at most"
            f" {MAX_ENVELOPE_CHARS:,} (MAX_ENVELOPE_CHARS)"
        )


def _counted_start(builder: TreeBuilder) -> Callable[[str, dict[str, str]], Element]:
    """``builder.start``, refusing the element after ``MAX_ENVELOPE_ELEMENTS`` and any element
    with more than ``_MAX_ATTRIBUTES`` attributes (before either is built)."""
    started = itertools.count(1)

    def start(tag: str, attributes: dict[str, str]) -> Element:
        if next(started) > MAX_ENVELOPE_ELEMENTS:
            raise ValueError(
                f"refusing to parse a tool result of more than {MAX_ENVELOPE_ELEMENTS:,}"
                " elements (MAX_ENVELOPE_ELEMENTS): an envelope has a few dozen"
            )
        if len(attributes) > _MAX_ATTRIBUTES:
            raise ValueError(
                f"refusing to parse a tool result with an element of {len(attributes):,}"
                f" attributes: an envelope's elements have at most {_MAX_ATTRIBUTES}"
            )
        return builder.start(tag, attributes)

    return start


def _to_tree(text: str) -> Element | None:
    """The element tree of ``text``, None when it is not XML; ``ValueError`` on any DTD or on
    more than ``MAX_ENVELOPE_ELEMENTS`` elements."""
    builder = TreeBuilder()
    parser = expat.ParserCreate()
    # The DOCTYPE handler fires before any declaration inside it is read: nothing is expanded.
    parser.StartDoctypeDeclHandler = _refuse_dtd
    parser.EntityDeclHandler = _refuse_dtd
    parser.ExternalEntityRefHandler = _refuse_dtd
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.buffer_text = True
    parser.StartElementHandler = _counted_start(builder)
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

    Raises ``ValueError``, before anything is expanded or built, when the text declares a DTD or
    entities, is markup longer than ``MAX_ENVELOPE_CHARS`` (256 KiB) characters, or holds more
    than ``MAX_ENVELOPE_ELEMENTS`` (1,024) elements or an element with more than 16 attributes:
    no envelope does, and a server sending one is broken or hostile. Text that is no markup
    (its first character after blanks is not ``<``) is None whatever its length.
    """
    if not isinstance(text, str):
        raise TypeError(
            f"parse_tool_error expects the result text (str), not {type(text).__name__}"
        )
    if _MARKUP.match(text) is None:
        return None
    _refuse_size(text)
    root = _to_tree(text)
    if root is None or root.tag not in _ENVELOPES:
        return None
    if root.tag == "validation_error":
        return _from_validation_error(root, text)
    return _from_tool_error(root, text)


def parsed_facts(parsed: FusionClientError) -> dict[str, Any]:
    """The facts (as ``ToolResponse.facts`` states them) of an envelope known only as a text,
    once parsed: one a tool wrote itself, not one the library rendered."""
    facts: dict[str, Any] = {
        "code": parsed.code,
        "severity": parsed.severity,
        "message": parsed.message,
    }
    if parsed.recovery is not None:
        facts["recovery"] = parsed.recovery
    if parsed.retry_after is not None:
        facts["retry_after"] = parsed.retry_after
    if parsed.available_actions:
        facts["available_actions"] = list(parsed.available_actions)
    if parsed.details:
        facts["details"] = dict(parsed.details)
    return facts


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
    When the result carries the envelope's facts in its ``_meta`` (under ``META_KEY``, as the
    adapters send them), they are read from there; malformed or absent facts fall back to
    parsing the text.
    Raises ``ValueError`` for an error result whose text ``parse_tool_error`` refuses (a DTD,
    or markup over ``MAX_ENVELOPE_CHARS`` or ``MAX_ENVELOPE_ELEMENTS``): that is no tool error
    to handle but a server to distrust. Success results are never parsed.
    """
    texts, is_error = _read_result(result)
    if not is_error:
        return
    from_meta = _from_meta(_meta_of(result), result)
    if from_meta is not None:  # the facts beside the text: no XML to parse
        if from_meta.severity == "warning":
            return
        raise from_meta
    for text in texts:
        parsed = parse_tool_error(text)
        if parsed is not None:
            if parsed.severity == "warning":
                return
            parsed.raw = result
            raise parsed
    raise FusionClientError("UNKNOWN", "\n".join(texts), raw=result)


def _meta_of(result: object) -> object:
    meta = result.get("_meta") if isinstance(result, Mapping) else getattr(result, "meta", None)
    return meta.get(META_KEY) if isinstance(meta, Mapping) else None


def _from_meta(facts: object, raw: object) -> FusionClientError | None:
    """The error the ``_meta`` facts describe; None unless every field has its documented type
    (they come from a remote server: anything else falls back to the text)."""
    if not isinstance(facts, Mapping):
        return None
    code, message, severity = facts.get("code"), facts.get("message"), facts.get("severity")
    recovery = facts.get("recovery")
    retry_after = facts.get("retry_after")
    actions = facts.get("available_actions", [])
    details = facts.get("details", {})
    well_formed = (
        _short_text(code)
        and isinstance(message, str)
        and severity in ("error", "critical", "warning")
        and (recovery is None or isinstance(recovery, str))
        and (retry_after is None or _seconds(retry_after))
        and isinstance(actions, list)
        and all(isinstance(action, str) for action in actions)
        and isinstance(details, Mapping)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in details.items())
    )
    if not well_formed:
        return None
    return FusionClientError(
        str(code),
        str(message),
        recovery=recovery,
        available_actions=actions,
        severity=str(severity),
        details=details,
        retry_after=None if retry_after is None else float(retry_after),
        raw=raw,
    )


def _short_text(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 64


def _seconds(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


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
