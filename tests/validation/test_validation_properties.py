"""Property: for any field names and sent strings, the envelope is well-formed XML that reads
back to the same names and "You sent:" values (after the U+FFFD replacement)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, ValidationError

from fusion_guard import format_validation_error
from fusion_guard.wire._validation import format_sent_value

_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


def readable(text: str) -> str:
    return _FORBIDDEN.sub("\ufffd", text)


@given(
    sent=st.dictionaries(st.text(min_size=1), st.text(), min_size=1, max_size=4),
    action=st.text(),
)
def test_any_names_and_values_round_trip(sent: dict[str, str], action: str) -> None:
    try:
        Closed.model_validate(sent)
    except ValidationError as exc:
        text = format_validation_error(exc, action=action).text
    root = ET.fromstring(text)
    assert root.get("action") == readable(action)
    fields = [(f.get("name"), f.text or "") for f in root.iter("field")]
    assert [name for name, _ in fields] == [readable(k) for k in sent]
    for (_, line), value in zip(fields, sent.values(), strict=True):
        assert f"You sent: {readable(format_sent_value(value))}." in line
    assert text.endswith(
        "  <recovery>Fix the fields above and call the tool again. Do not explain the error."
        "</recovery>\n</validation_error>"
    )


@given(st.text())
def test_strings_longer_than_50_are_cut_to_47_plus_dots(value: str) -> None:
    shown = format_sent_value(value)
    if len(value) > 50:
        assert shown == f"'{value[:47]}...'"
    else:
        assert shown == f"'{value}'"
