"""``GuardSettings`` (global defaults, read from ``FUSION_GUARD_*``) and ``ToolPolicy`` (per-tool
overrides).

Precedence: explicit arguments over the environment over the defaults. Per-tool overrides live
in one variable, ``FUSION_GUARD_TOOLS``, holding JSON: environment variable names cannot portably
hold the ``.`` and ``*`` of tool names and globs (``billing.*``), nor their case, and JSON can.
Every invalid value and every unknown ``FUSION_GUARD_*`` variable is collected into one
``InvalidSettings`` error at construction (a typo must not silently disable protection).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, ClassVar, Protocol, Self, runtime_checkable

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from pydantic_settings import SettingsError as _PydanticSettingsError

from .._bounds import (
    LEASE_REFRESH_PERIOD,
    LEASE_REFRESHES,
    MAX_LEASE,
    lease_floor,
    rate_problem,
)
from .._priority import DEFAULT_PRIORITY_SHARE, Priority
from .._setting_names import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_LEASE,
    DEFAULT_PREFIX,
    DEFAULT_TIMEOUT,
)
from ._errors import (
    InvalidSettings,
    env_name,
    limit_sentence,
    show_value,
    translate_validation_error,
    unknown_variables,
)
from ._fields import (
    ACCEPTED,
    LIMIT_FIELDS,
    AutoBound,
    Backend,
    Burst,
    FailurePolicy,
    Lease,
    MaxActive,
    MaxQueue,
    OverloadErrors,
    PerClient,
    PriorityLevel,
    PriorityShare,
    Rate,
    RatePer,
    RateScope,
    RedisPrefix,
    RedisSeconds,
    RedisUrl,
    SecondsOrOff,
)
from ._overload_errors import EnvText, mark_env_names

__all__ = ["ENV_PREFIX", "GuardSettings", "ToolPolicy"]

ENV_PREFIX = "FUSION_GUARD_"
_TOOLS_VARIABLE = f"{ENV_PREFIX}TOOLS"
_OVERLOAD_VARIABLE = f"{ENV_PREFIX}OVERLOAD_ERRORS"

MAX_TOOLS_DEPTH = 10
"""``FUSION_GUARD_TOOLS`` nested deeper than this is refused before it is parsed."""
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")

ARGUMENT = "argument"
DEFAULT = "default"


class ToolPolicy(BaseModel):
    """Overrides for the tools matching one name or glob: only the keys given apply, every other
    limit comes from a less specific pattern or the global defaults.

    ``ToolPolicy(max_active=2, rate=5)``; in ``FUSION_GUARD_TOOLS`` the same is
    ``{"max_active": 2, "rate": 5}``. ``"off"`` (or null) switches a limit off for these tools.
    ``failure_policy`` (``"open"`` or ``"closed"``) overrides ``REDIS_FAILURE_POLICY``.
    ``overload_errors`` (exception classes; dotted names in ``FUSION_GUARD_TOOLS``) replaces the
    global list for these tools (``"off"`` or ``[]``: none).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_active: MaxActive = None
    max_queue: MaxQueue = None
    queue_timeout: SecondsOrOff = None
    timeout: SecondsOrOff = None
    rate: Rate = None
    rate_per: RatePer | None = None
    burst: Burst = None
    rate_scope: RateScope | None = None
    lifo: bool | None = None
    max_active_per_client: PerClient = None
    fair_queueing: bool | None = None
    # Defaults to the global REDIS_FAILURE_POLICY; what this tool's rate limit and fleet slots
    # do when their shared state (Redis) cannot be reached.
    failure_policy: FailurePolicy | None = None
    # The priority of these tools' calls, and the share of slots lower priorities may hold.
    priority: PriorityLevel | None = None
    priority_share: PriorityShare | None = None
    # Exceptions that mean the tool's backend is saturated: counted as drops, not as errors.
    # Never None (off is the empty tuple), so no _not_off; the default is never read unset.
    overload_errors: OverloadErrors = ()

    def __init__(self, /, **limits: Any) -> None:
        try:
            super().__init__(**limits)
        except ValidationError as exc:  # the settings' wording, not pydantic's report
            raise InvalidSettings(
                [
                    limit_sentence("ToolPolicy", error["loc"][0], error)
                    for error in exc.errors(include_url=False)
                ]
            ) from None

    # Validation inside GuardSettings (``tools=``) skips this __init__, as it skips pydantic's
    # own, so those errors keep their pattern and variable (pydantic reads this marker).
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @model_validator(mode="before")
    @classmethod
    def _lower_keys(cls, data: Any) -> Any:
        # MAX_ACTIVE and max_active are the same key, as they are for the global variables.
        if isinstance(data, Mapping):
            return {key.lower() if isinstance(key, str) else key: v for key, v in data.items()}
        return data

    @field_validator(
        "rate_per",
        "rate_scope",
        "lifo",
        "fair_queueing",
        "failure_policy",
        "priority",
        "priority_share",
        mode="after",
    )
    @classmethod
    def _not_off(cls, value: object) -> object:
        if value is None:
            raise ValueError("this limit cannot be switched off; leave the key out to inherit it")
        return value

    def overrides(self) -> dict[str, object]:
        """The keys this policy sets, in the documented order."""
        return {name: getattr(self, name) for name in LIMIT_FIELDS if name in self.model_fields_set}

    def __repr_args__(self) -> Iterator[tuple[str, object]]:
        yield from self.overrides().items()


PatternKey = Annotated[str, StringConstraints(min_length=1)]


@runtime_checkable
class Overrides(Protocol):
    """A per-tool override object: ``ToolPolicy``, or a ``ToolLimits`` written by hand (a type
    of a higher layer, so named here by what it does)."""

    def overrides(self) -> dict[str, object]: ...


class GuardSettings(BaseSettings):
    """Everything the guard is configured with: global defaults and per-tool overrides.

    ``GuardSettings(**values)`` reads ``FUSION_GUARD_*`` (the values given win);
    ``GuardSettings.from_values(**values)`` ignores the environment. Both raise
    ``InvalidSettings`` (a ``ConfigurationError``) listing every problem.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        case_sensitive=False,
        frozen=True,
        extra="forbid",
        validate_default=False,
    )

    # Defaults for a typical MCP server; the README's configuration table gives the reasoning.
    max_active: MaxActive = "auto"
    # Bounds of an automatic max_active ("auto"), for every tool that has one.
    auto_min_active: AutoBound = 1
    auto_max_active: AutoBound = 200
    auto_initial_active: AutoBound = 4
    max_queue: MaxQueue = None
    queue_timeout: SecondsOrOff = 5.0
    timeout: SecondsOrOff = 50.0
    rate: Rate = None
    rate_per: RatePer = 1.0
    burst: Burst = None
    rate_scope: RateScope = "tool"
    lifo: bool = False
    # Fair shares across client keys (on whenever calls carry one), and an optional cap.
    max_active_per_client: PerClient = None
    fair_queueing: bool = True
    # The priority of a tool's calls unless set per tool, per client or per call, and the share
    # of a tool's slots calls below the highest priority waiting may hold (docs/priorities.md).
    priority: PriorityLevel = Priority.INTERACTIVE
    priority_share: PriorityShare = DEFAULT_PRIORITY_SHARE
    # Exceptions that mean a tool's backend is saturated (docs/overload-errors.md). Not decoded
    # as JSON: the variable holds comma-separated dotted names, marked in _initialise.
    overload_errors: Annotated[OverloadErrors, NoDecode] = ()
    metrics: bool = True
    expose_exceptions: bool = False
    # A per-tool pattern that matches none of the server's tools: a warning, or (strict) an error.
    strict_tools: bool = False
    backend: Backend = "memory"
    # A SecretUrl: repr, errors and reports mask its password; get_secret_value() to connect.
    redis_url: RedisUrl | None = None
    # Used with BACKEND=redis only; defaults shared with the Redis backend's own.
    redis_failure_policy: FailurePolicy = "open"
    redis_timeout: RedisSeconds = DEFAULT_TIMEOUT
    redis_connect_timeout: RedisSeconds = DEFAULT_CONNECT_TIMEOUT
    redis_lease: Lease = DEFAULT_LEASE
    redis_prefix: RedisPrefix = DEFAULT_PREFIX
    tools: Annotated[dict[PatternKey, ToolPolicy], NoDecode] = Field(default_factory=dict)

    _origins: dict[tuple[str, str], str] = PrivateAttr(default_factory=dict)

    variables: ClassVar[tuple[str, ...]]
    """Every variable name this class reads (set below, once the fields exist)."""

    def __init__(self, **values: Any) -> None:
        _initialise(self, values, os.environ)

    @classmethod
    def from_values(cls, **values: Any) -> Self:
        """Settings from the defaults and ``values`` only: the environment is not read."""
        settings = cls.__new__(cls)
        _initialise(settings, values, None)
        return settings

    def with_values(self, **values: Any) -> Self:
        """A copy with ``values`` on top (per-tool overrides merged key by key)."""
        merged = {name: getattr(self, name) for name in self.model_fields_set} | values
        if "tools" in values and "tools" in self.model_fields_set:
            merged["tools"] = merge_tools(self.tools, values["tools"])
        settings = type(self).from_values(**merged)
        settings._origins = {**self._origins, **settings._origins_of(values, ARGUMENT)}
        return settings

    def origin(self, field: str, pattern: str | None = None) -> str:
        """Where a value came from: ``default``, ``argument`` or ``env VARIABLE``."""
        return self._origins.get((pattern or "", field), DEFAULT)

    @field_validator("tools", mode="before")
    @classmethod
    def _tools_json(cls, value: object) -> object:
        if isinstance(value, str | bytes):
            return parse_tools_json(value)
        if isinstance(value, Mapping):  # a ToolLimits given as a policy applies what it was given
            return {
                pattern: policy.overrides() if _foreign_overrides(policy) else policy
                for pattern, policy in value.items()
            }
        return value

    @model_validator(mode="after")
    def _redis_needs_url(self) -> Self:
        if self.backend == "redis" and self.redis_url is None:
            raise ValueError("BACKEND is 'redis' but no REDIS_URL is set")
        return self

    @model_validator(mode="after")
    def _auto_bounds_in_order(self) -> Self:
        low, start, high = self.auto_min_active, self.auto_initial_active, self.auto_max_active
        if not low <= start <= high:
            raise ValueError(
                f"{ENV_PREFIX}AUTO_MIN_ACTIVE ({low}) <= {ENV_PREFIX}AUTO_INITIAL_ACTIVE ({start})"
                f" <= {ENV_PREFIX}AUTO_MAX_ACTIVE ({high}) must hold"
            )
        return self

    @model_validator(mode="after")
    def _per_client_within_max_active(self) -> Self:
        # Where the two are set together (globally, or by one pattern over the globals); a
        # composition through several patterns is checked when the tool's gate is made.
        scopes = [("", self.max_active, self.max_active_per_client)]
        for pattern, policy in self.tools.items():
            given = policy.model_fields_set
            scopes.append((
                pattern,
                policy.max_active if "max_active" in given else self.max_active,
                policy.max_active_per_client
                if "max_active_per_client" in given
                else self.max_active_per_client,
            ))  # fmt: skip
        for pattern, max_active, cap in scopes:
            if isinstance(max_active, int) and cap is not None and cap > max_active:
                where = f" for tools {pattern!r}" if pattern else ""
                raise ValueError(
                    f"{ENV_PREFIX}MAX_ACTIVE_PER_CLIENT ({cap}) is above {ENV_PREFIX}MAX_ACTIVE"
                    f" ({max_active}){where}: a client's cap must be at most max_active"
                )
        return self

    @model_validator(mode="after")
    def _rates_within_bounds(self) -> Self:
        # As for the client cap: globally, and each pattern over the globals; a composition
        # through several patterns is checked when the tool's gate is made.
        scopes = [("", self.rate, self.rate_per, self.burst)]
        for pattern, policy in self.tools.items():
            given = policy.model_fields_set
            scopes.append((
                pattern,
                policy.rate if "rate" in given else self.rate,
                policy.rate_per or self.rate_per,  # never off: None when not given
                policy.burst if "burst" in given else self.burst,
            ))  # fmt: skip
        for pattern, rate, per, burst in scopes:
            problem = None if rate is None else rate_problem(rate, per, burst)
            if problem is not None:
                where = f" for tools {pattern!r}" if pattern else ""
                raise ValueError(f"{ENV_PREFIX}RATE={rate:g}, RATE_PER={per:g}{where}: {problem}")
        return self

    @model_validator(mode="after")
    def _lease_above_floor(self) -> Self:
        floor = lease_floor(self.redis_timeout)
        if self.redis_lease < floor:
            raise ValueError(
                f"{ENV_PREFIX}REDIS_LEASE={self.redis_lease:g} is below its floor of {floor:g}"
                f" seconds ({LEASE_REFRESHES} refreshes of {LEASE_REFRESH_PERIOD:g} s, plus"
                f" REDIS_TIMEOUT={self.redis_timeout:g} for the last one's round trip);"
                f" accepted: {floor:g} to {MAX_LEASE:.0f} seconds"
            )
        return self

    def _origins_of(self, values: Mapping[str, Any], origin: str) -> dict[tuple[str, str], str]:
        origins = {("", name): origin for name in values if name != "tools"}
        for pattern, policy in _tool_overrides(values.get("tools")).items():
            origins.update({(pattern, key): origin for key in policy})
        return origins


GuardSettings.variables = tuple(env_name(name) for name in GuardSettings.model_fields)


def parse_tools_json(value: str | bytes) -> object:
    """``FUSION_GUARD_TOOLS`` as an object, or a ``ValueError`` saying where the JSON breaks."""
    depth = _nesting(value if isinstance(value, str) else value.decode("utf-8", "replace"))
    if depth > MAX_TOOLS_DEPTH:
        # Checked before parsing: json and repr recurse once per level and would overflow.
        raise ValueError(
            f"nested {depth} levels deep; at most {MAX_TOOLS_DEPTH} are read (the accepted value"
            " nests 3: patterns, their limits, a list of overload_errors)"
        )
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    if not isinstance(parsed, dict):
        raise ValueError(f"expected a JSON object, got a JSON {type(parsed).__name__}")
    for policy in parsed.values():  # dotted names are accepted from JSON, not from code
        if isinstance(policy, dict):
            for key, value in policy.items():
                if isinstance(key, str) and key.lower() == "overload_errors":
                    policy[key] = mark_env_names(value)
    return parsed


def _nesting(text: str) -> int:
    """How deep the arrays and objects of JSON ``text`` nest (brackets in strings skipped)."""
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_JSON_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def merge_tools(base: object, top: object) -> dict[str, object]:
    """Per-tool overrides ``top`` over ``base``, key by key within each pattern."""
    merged: dict[str, object] = dict(_tool_overrides(base))
    for pattern, policy in _tool_overrides(top).items():
        below = merged.get(pattern)
        merged[pattern] = {**below, **policy} if isinstance(below, dict) else policy
    return merged


def _tool_overrides(tools: object) -> dict[str, Any]:
    """Patterns to override mappings, from ToolPolicy or ToolLimits objects or plain mappings
    (as given)."""
    if not isinstance(tools, Mapping):
        return {}
    return {
        pattern: policy.overrides() if isinstance(policy, Overrides) else policy
        for pattern, policy in tools.items()
        if isinstance(policy, Overrides | Mapping)
    }


def _foreign_overrides(policy: object) -> bool:
    """An override object other than a ``ToolPolicy`` (which validates as itself)."""
    return isinstance(policy, Overrides) and not isinstance(policy, ToolPolicy | Mapping)


def _fusion_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``FUSION_GUARD_*`` variables, names upper-cased (they are matched ignoring case)."""
    return {
        name.upper(): value
        for name, value in environ.items()
        if name.upper().startswith(ENV_PREFIX)
    }


def _initialise(
    settings: GuardSettings, values: dict[str, Any], environ: Mapping[str, str] | None
) -> None:
    errors: list[str] = []
    variables = _fusion_variables(environ) if environ is not None else {}
    errors.extend(unknown_variables(variables, GuardSettings.variables))
    arguments = values
    if "tools" in values and _TOOLS_VARIABLE in variables:
        values = {**values, "tools": _merge_env_tools(variables[_TOOLS_VARIABLE], values, errors)}
    if _OVERLOAD_VARIABLE in variables and "overload_errors" not in values:
        # Read here rather than by the settings source, marked as the environment's text: only
        # there are dotted names accepted (an argument wins, as for every setting).
        values = {**values, "overload_errors": EnvText(variables[_OVERLOAD_VARIABLE])}
    try:
        if environ is None:
            BaseModel.__init__(settings, **values)
        else:
            BaseSettings.__init__(settings, **values)
    except ValidationError as exc:
        errors.extend(translate_validation_error(exc, arguments))
    except _PydanticSettingsError as exc:  # a source failed before validation could start
        errors.append(f"{exc} ({exc.__cause__})" if exc.__cause__ else str(exc))
    if errors:
        raise InvalidSettings(errors)
    settings._origins = _origins(settings, arguments, variables)


def _merge_env_tools(raw: str, values: Mapping[str, Any], errors: list[str]) -> object:
    try:
        env_tools = parse_tools_json(raw)
    except ValueError as exc:
        errors.append(
            f"{_TOOLS_VARIABLE}={show_value(raw)} is invalid: {exc}; accepted: {ACCEPTED['tools']}"
        )
        return values["tools"]
    return merge_tools(env_tools, values["tools"])


def _origins(
    settings: GuardSettings, values: Mapping[str, Any], variables: Mapping[str, str]
) -> dict[tuple[str, str], str]:
    origins: dict[tuple[str, str], str] = {}
    for name in GuardSettings.model_fields:
        variable = env_name(name)
        if variable in variables and name != "tools":
            origins[("", name)] = f"env {variable}"
    if _TOOLS_VARIABLE in variables:
        for pattern, policy in _tool_overrides(settings.tools).items():
            origins.update({(pattern, key): f"env {_TOOLS_VARIABLE}" for key in policy})
    origins.update(settings._origins_of(values, ARGUMENT))
    return origins
