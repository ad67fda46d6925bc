"""format_validation_error: the section-7 envelope, worded per pydantic error type."""

from __future__ import annotations

import re
import uuid
import xml.etree.ElementTree as ET
from datetime import date, datetime
from decimal import Decimal
from enum import Enum
from typing import Annotated, Any, Literal

import pytest
from pydantic import (
    AnyUrl,
    BaseModel,
    ConfigDict,
    Field,
    HttpUrl,
    ValidationError,
    field_validator,
    model_validator,
)

from fusion_guard import ToolResponse, format_validation_error, parse_tool_error

RECOVERY = "Fix the fields above and call the tool again. Do not explain the error."

SEED = (
    '<validation_error action="billing.get_invoice">\n'
    "  <field name=\"id\">Invalid email format. You sent: 'not-an-email'. Expected a valid email"
    " address.</field>\n"
    "  <recovery>Fix the fields above and call the tool again. Do not explain the error."
    "</recovery>\n"
    "</validation_error>"
)


class EmailArgs(BaseModel):
    id: str

    @field_validator("id")
    @classmethod
    def check_email(cls, value: str) -> str:
        if "@" not in value:
            raise ValueError("Invalid email format")
        return value


def errors_of(model: type[BaseModel], data: Any) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data)
    return caught.value


def fields_of(model: type[BaseModel], data: Any) -> dict[str, str]:
    """The envelope's field lines by name (parsed back with an XML parser)."""
    text = format_validation_error(errors_of(model, data), action="t").text
    root = ET.fromstring(text)
    return {f.get("name", ""): f.text or "" for f in root.iter("field")}


def only_line(model: type[BaseModel], data: Any, name: str) -> str:
    fields = fields_of(model, data)
    assert list(fields) == [name], fields
    return fields[name]


# -- the envelope --------------------------------------------------------------------------------


def test_seed_example_byte_for_byte() -> None:
    response = format_validation_error(
        errors_of(EmailArgs, {"id": "not-an-email"}), action="billing.get_invoice"
    )
    assert isinstance(response, ToolResponse)
    assert response.text == SEED
    assert response.is_error is True
    assert response.code == "VALIDATION_ERROR"
    assert response.to_dict() == {"content": [{"type": "text", "text": SEED}], "isError": True}


def test_one_field_per_error_in_validator_order_and_recovery_last() -> None:
    class Args(BaseModel):
        a: int
        b: str
        c: bool

    text = format_validation_error(errors_of(Args, {"a": "x", "c": "maybe"}), action="t").text
    lines = text.split("\n")
    assert lines[0] == '<validation_error action="t">'
    assert [re.match(r'  <field name="(\w+)">', line)[1] for line in lines[1:4]] == ["a", "b", "c"]  # type: ignore[index]
    assert lines[-2] == f"  <recovery>{RECOVERY}</recovery>"
    assert lines[-1] == "</validation_error>"


def test_nested_paths_and_list_indices_are_dotted() -> None:
    class Item(BaseModel):
        sku: str = Field(min_length=3)

    class Order(BaseModel):
        items: list[Item]
        meta: dict[str, Item]

    fields = fields_of(Order, {"items": [{"sku": "abcd"}, {"sku": "x"}, {}], "meta": {"k": {}}})
    assert list(fields) == ["items.1.sku", "items.2.sku", "meta.k.sku"]


def test_root_problem_is_named_root() -> None:
    class Args(BaseModel):
        a: int = 0

        @model_validator(mode="after")
        def never(self) -> Args:
            raise ValueError("a and b cannot both be empty")

    assert fields_of(Args, {}) == {"(root)": "a and b cannot both be empty. You sent: {}."}
    assert only_line(Args, [1, 2], "(root)") == (
        "Wrong type. You sent: array(2). Expected an object."
    )


def test_parse_tool_error_reads_the_envelope() -> None:
    parsed = parse_tool_error(SEED)
    assert parsed is not None
    assert parsed.code == "VALIDATION_ERROR"
    assert parsed.details == {
        "action": "billing.get_invoice",
        "id": "Invalid email format. You sent: 'not-an-email'. Expected a valid email address.",
    }
    assert parsed.recovery == RECOVERY
    assert parsed.available_actions == []


def test_action_must_be_a_string() -> None:
    with pytest.raises(TypeError, match="action"):
        format_validation_error(errors_of(EmailArgs, {}), action=None)  # type: ignore[arg-type]


# -- escaping ------------------------------------------------------------------------------------


def test_names_and_values_are_escaped_and_the_envelope_stays_well_formed() -> None:
    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        q: int

    text = format_validation_error(
        errors_of(Args, {"q": "a < b & ]]> c\r", "k\"<'>\t": 1}), action='a"<b>&'
    ).text
    assert '<validation_error action="a&quot;&lt;b&gt;&amp;">' in text
    assert "You sent: 'a &lt; b &amp; ]]&gt; c&#13;'" in text
    assert '<field name="k&quot;&lt;&apos;&gt;&#9;">' in text
    root = ET.fromstring(text)
    assert root.get("action") == 'a"<b>&'
    assert [f.get("name") for f in root.iter("field")] == ["q", "k\"<'>\t"]


def test_content_keeps_comparison_signs_readable() -> None:
    class Args(BaseModel):
        n: int = Field(ge=1)

    assert ">= 1" in format_validation_error(errors_of(Args, {"n": 0}), action="t").text


# -- "You sent:" ---------------------------------------------------------------------------------


class Anything(BaseModel):
    v: Annotated[Any, Field()]

    @field_validator("v")
    @classmethod
    def reject(cls, value: Any) -> Any:
        raise ValueError("rejected")


@pytest.mark.parametrize(
    ("sent", "shown"),
    [
        ("x" * 50, "'" + "x" * 50 + "'"),
        ("x" * 51, "'" + "x" * 47 + "...'"),
        ("short", "'short'"),
        ("", "''"),
        (None, "null"),
        (True, "true"),
        (False, "false"),
        (42, "42"),
        (2.5, "2.5"),
        ([1, 2, 3], "array(3)"),
        ([], "array(0)"),
        ({"a": 1}, '{"a":1}'),
        ({"k": "v" * 60}, '{"k":"' + "v" * 41 + "..."),
    ],
)
def test_you_sent_rules(sent: Any, shown: str) -> None:
    assert only_line(Anything, {"v": sent}, "v") == f"rejected. You sent: {shown}."


def test_missing_only_when_really_absent() -> None:
    class Args(BaseModel):
        a: int
        b: int

    fields = fields_of(Args, {"b": None})
    assert fields["a"] == (
        "Required field is missing. You sent: (missing). Add this field with a valid value."
    )
    assert fields["b"] == "Wrong type. You sent: null. Expected an integer (for example 42)."
    assert "(missing)" not in fields_of(Args, {"a": "", "b": 1})["a"]


# -- wording per error type ----------------------------------------------------------------------


class Color(Enum):
    RED = "red"
    GREEN = "green"


class Kinds(BaseModel):
    model_config = ConfigDict(extra="forbid")

    i: int = 0
    f: float = 0.0
    s: str = ""
    b: bool = False
    lst: list[int] = []
    obj: dict[str, int] = {}
    short: str = Field("abc", min_length=3)
    long: str = Field("", max_length=2)
    one: str = Field("a", min_length=1)
    few: list[int] = Field([1], min_length=1)
    many: list[int] = Field([], max_length=2)
    ge: int = Field(1, ge=1)
    gt: float = Field(1, gt=0)
    le: int = Field(0, le=10)
    lt: float = Field(0, lt=0.5)
    mul: int = Field(0, multiple_of=5)
    lit: Literal["a", "b", 3] = "a"
    color: Color = Color.RED
    code: str = Field("ABC", pattern=r"^[A-Z]{3}$")
    url: HttpUrl | None = None
    any_url: AnyUrl | None = None
    uid: uuid.UUID | None = None
    day: date | None = None
    when: datetime | None = None
    price: Decimal = Field(Decimal(0), max_digits=4, decimal_places=2)


WORDING = [
    ("i", "x", "Not a valid integer. You sent: 'x'. Expected an integer (for example 42)."),
    ("i", [1], "Wrong type. You sent: array(1). Expected an integer (for example 42)."),
    ("i", 1.5, "Not a whole number. You sent: 1.5. Expected an integer (for example 42)."),
    ("f", "x", "Not a valid number. You sent: 'x'. Expected a number (for example 3.5)."),
    ("s", 5, "Wrong type. You sent: 5. Expected a string."),
    ("b", "maybe", "Not a valid boolean. You sent: 'maybe'. Expected true or false."),
    ("lst", "x", "Wrong type. You sent: 'x'. Expected an array."),
    ("obj", [1], "Wrong type. You sent: array(1). Expected an object."),
    ("short", "ab", "Too short. You sent: 'ab'. Expected at least 3 characters."),
    ("long", "abc", "Too long. You sent: 'abc'. Expected at most 2 characters."),
    ("one", "", "Too short. You sent: ''. Expected at least 1 character."),
    ("few", [], "Too few items. You sent: array(0). Expected at least 1 item."),
    ("many", [1, 2, 3], "Too many items. You sent: array(3). Expected at most 2 items."),
    ("ge", 0, "Too small. You sent: 0. Expected a value >= 1."),
    ("gt", 0, "Too small. You sent: 0. Expected a value > 0."),
    ("le", 11, "Too big. You sent: 11. Expected a value <= 10."),
    ("lt", 0.5, "Too big. You sent: 0.5. Expected a value < 0.5."),
    ("mul", 7, "Not a multiple of 5. You sent: 7. Expected a multiple of 5."),
    (
        "lit",
        "c",
        "Not one of the allowed values. You sent: 'c'. Expected one of: 'a', 'b' or 3.",
    ),
    (
        "color",
        "blue",
        "Not one of the allowed options. You sent: 'blue'. Expected one of: 'red' or 'green'.",
    ),
    (
        "code",
        "abc",
        "Does not match the required pattern. You sent: 'abc'. "
        "Expected a string matching the pattern ^[A-Z]{3}$.",
    ),
    (
        "url",
        "nope",
        "Not a valid URL. You sent: 'nope'. Expected a valid URL (for example https://example.com).",
    ),
    (
        "url",
        "ftp://example.com",
        "URL scheme not allowed. You sent: 'ftp://example.com'. Expected a URL with scheme "
        "'http' or 'https' (for example https://example.com).",
    ),
    (
        "any_url",
        5,
        "Wrong type. You sent: 5. Expected a valid URL (for example https://example.com).",
    ),
    (
        "uid",
        "zz",
        "Not a valid UUID. You sent: 'zz'. "
        "Expected a UUID (for example 123e4567-e89b-12d3-a456-426614174000).",
    ),
    (
        "day",
        "2024-13-01",
        "Not a valid date. You sent: '2024-13-01'. "
        "Expected a date in YYYY-MM-DD format (for example 2024-01-15).",
    ),
    (
        "when",
        "yesterday",
        "Not a valid datetime. You sent: 'yesterday'. "
        "Expected an ISO 8601 datetime (for example 2024-01-15T10:30:00Z).",
    ),
    (
        "price",
        "123.456",
        "Too many digits. You sent: '123.456'. Expected at most 4 digits in total.",
    ),
]


@pytest.mark.parametrize(
    ("name", "sent", "line"), WORDING, ids=[f"{w[0]}-{w[1]!r}" for w in WORDING]
)
def test_wording_per_error_type(name: str, sent: Any, line: str) -> None:
    assert only_line(Kinds, {name: sent}, name) == line


def test_unknown_field_asks_to_remove_or_correct() -> None:
    assert only_line(Kinds, {"colour": "red"}, "colour") == (
        "Unknown field. You sent: 'red'. Remove this field or correct its name (check for typos)."
    )


def test_value_error_uses_the_validators_own_message_without_pydantic_prefix() -> None:
    class Args(BaseModel):
        n: int

        @field_validator("n")
        @classmethod
        def even(cls, value: int) -> int:
            if value % 2:
                raise ValueError("n must be even")
            return value

    line = only_line(Args, {"n": 3}, "n")
    assert line == "n must be even. You sent: 3."
    assert "Value error" not in line


def test_value_error_naming_a_format_gets_its_example() -> None:
    class Args(BaseModel):
        link: str
        start: str

        @field_validator("link")
        @classmethod
        def url(cls, value: str) -> str:
            raise ValueError("Invalid URL.")

        @field_validator("start")
        @classmethod
        def when(cls, value: str) -> str:
            raise ValueError("Bad datetime")

    fields = fields_of(Args, {"link": "x", "start": "y"})
    assert fields["link"] == (
        "Invalid URL. You sent: 'x'. Expected a valid URL (for example https://example.com)."
    )
    assert fields["start"] == (
        "Bad datetime. You sent: 'y'. "
        "Expected an ISO 8601 datetime (for example 2024-01-15T10:30:00Z)."
    )


def test_assertion_in_validator_drops_pydantic_prefix() -> None:
    class Args(BaseModel):
        n: int

        @field_validator("n")
        @classmethod
        def positive(cls, value: int) -> int:
            if value <= 0:
                raise AssertionError("n must be positive")
            return value

    assert only_line(Args, {"n": -1}, "n") == "n must be positive. You sent: -1."


# -- unions --------------------------------------------------------------------------------------


class Cat(BaseModel):
    meow: int


class Dog(BaseModel):
    bark: int


class Pets(BaseModel):
    value: int | str = 0
    pet: Cat | Dog | None = None
    kind: Literal["a"] | int = 0


def test_scalar_union_failure_is_one_line() -> None:
    assert only_line(Pets, {"value": [1]}, "value") == (
        "Matches none of the accepted types. You sent: array(1). "
        "Expected one of: an integer, a string."
    )


def test_model_union_failure_is_one_line_with_the_sent_object() -> None:
    assert only_line(Pets, {"pet": {"x": 1}}, "pet") == (
        'Matches none of the accepted types. You sent: {"x":1}. '
        "Expected one of: a Cat object, a Dog object."
    )


def test_union_next_to_other_errors_keeps_order() -> None:
    fields = fields_of(Pets, {"value": None, "pet": {"bark": "x"}, "kind": "b"})
    assert list(fields) == ["value", "pet", "kind"]
    assert fields["kind"].startswith("Matches none of the accepted types. You sent: 'b'.")


def test_sibling_fields_named_like_types_are_not_a_union() -> None:
    class When(BaseModel):
        date: int
        time: int

    class Args(BaseModel):
        when: When

    assert list(fields_of(Args, {"when": {"date": "x", "time": "y"}})) == [
        "when.date",
        "when.time",
    ]


def test_discriminated_union_names_the_tag_options() -> None:
    class A(BaseModel):
        kind: Literal["a"]

    class B(BaseModel):
        kind: Literal["b"]

    class Args(BaseModel):
        item: Annotated[A | B, Field(discriminator="kind")]

    assert only_line(Args, {"item": {"kind": "c"}}, "item") == (
        "Unknown 'kind' value. You sent: {\"kind\":\"c\"}. Expected 'kind' to be one of: 'a', 'b'."
    )


def test_missing_capitalised_siblings_are_not_a_union() -> None:
    class Inner(BaseModel):
        Name: str
        Age: int

    class Args(BaseModel):
        person: Inner

    assert list(fields_of(Args, {"person": {}})) == ["person.Name", "person.Age"]


def test_single_allowed_value_is_named_alone() -> None:
    class Args(BaseModel):
        kind: Literal["invoice"]

    assert only_line(Args, {"kind": "bill"}, "kind") == (
        "Not one of the allowed values. You sent: 'bill'. Expected 'invoice'."
    )


def test_exc_must_be_a_validation_error() -> None:
    with pytest.raises(TypeError, match="pydantic ValidationError"):
        format_validation_error(ValueError("x"), action="t")  # type: ignore[arg-type]
