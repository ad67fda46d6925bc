"""Helpers of the wire-contract tests: the golden vectors and the U+FFFD oracle."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data" / "envelopes.json"

# Written from the contract (docs/wire-contract.md), not imported from the implementation:
# the oracle of the round-trip property must not share the code it checks.
_XML_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_safe(text: str) -> str:
    """``text`` as the contract says it comes back: XML-forbidden characters become U+FFFD."""
    return _XML_FORBIDDEN.sub("\ufffd", text)


def load_vectors(path: Path = DATA) -> list[dict[str, Any]]:
    """The golden vectors, with ``"nan"``/``"inf"`` retry_after strings as floats."""
    vectors: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    for vector in vectors:
        retry_after = vector["input"].get("retry_after")
        if isinstance(retry_after, str):  # JSON has no NaN/inf: "nan"/"inf" stand for them
            vector["input"]["retry_after"] = float(retry_after)
    return vectors
