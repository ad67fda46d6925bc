"""The public surface: what ``import fusion_guard`` offers, and that it stays light."""

from __future__ import annotations

import subprocess
import sys

import fusion_guard

# The public names are a promise (never renamed or dropped); additions are pinned here on purpose.
PUBLIC_NAMES = {
    "BackendError", "CallContext", "ChangeSeverity", "ConcurrencyGuard", "ConcurrencyStatistics",
    "ConfigurationError", "ContractAwareness", "ContractChange", "ContractDiff",
    "DistributedConcurrencyGuard", "ErrorBuilder", "ErrorCode", "FixedLimit", "FusionClientError",
    "FusionGuardError", "GradientLimit", "Guard", "GuardClosed", "GuardObserver", "GuardSettings",
    "HandlerTimeout", "InvalidSettings", "Lockfile",
    "Limit", "LogEventObserver", "MemoryBackend", "MetricsServer", "Outcome", "Permit",
    "Priority", "PrometheusObserver", "RateDecision",
    "RateLimit", "RateLimited", "RateLimiter", "RateLimits", "RedisRateLimitBackend", "Rejected",
    "ServerBusy",
    "Severity", "ShedReason", "Slot", "Ticket", "ToolContract", "ToolLimits", "ToolObserver",
    "ToolPolicy", "ToolResponse",
    "diff_contracts", "error", "format_validation_error", "internal_error", "parse_tool_error",
    "raise_for_tool_error", "serve_metrics", "success", "tool_error",
}  # fmt: skip

API_MD_NAMES = {
    "ErrorCode", "Severity", "ToolResponse", "tool_error", "error", "success",
    "format_validation_error", "parse_tool_error", "FusionClientError", "raise_for_tool_error",
    "ConcurrencyGuard", "ServerBusy", "RateLimiter", "Guard",
}  # fmt: skip


def test_all_is_pinned() -> None:
    assert set(fusion_guard.__all__) == PUBLIC_NAMES
    assert len(fusion_guard.__all__) == len(PUBLIC_NAMES)


def test_api_md_names_are_exported() -> None:
    assert set(fusion_guard.__all__) >= API_MD_NAMES


def test_what_the_docs_tell_users_to_pass_is_importable() -> None:
    # Guard(observer=...) takes a GuardObserver, whose for_tool gives a ToolObserver reporting
    # Outcome and ShedReason values: a user typing their own observer imports them from here.
    from fusion_guard import GuardObserver, Outcome, ShedReason, ToolObserver
    from fusion_guard.testing import RecordingObserver, ToolRecorder

    observer: GuardObserver = RecordingObserver()
    bound: ToolObserver = observer.for_tool("search", max_active=1)
    assert isinstance(bound, ToolRecorder)
    assert "cancelled" in Outcome.__args__  # type: ignore[attr-defined]
    assert "client_limit" in ShedReason.__args__  # type: ignore[attr-defined]


def test_the_per_tool_calls_api_md_writes_work() -> None:
    # docs/api.md writes ToolLimits(priority=...) and ToolLimits(overload_errors=...) as per-tool
    # configuration, and Guard(overload_errors=...) for every tool; guard.limits() stays resolved.
    from fusion_guard import Guard, Priority, ToolLimits

    class PoolExhausted(Exception):
        pass

    guard = Guard(
        overload_errors=(PoolExhausted,),
        tools={
            "index_*": ToolLimits(priority="background"),  # type: ignore[arg-type]
            "db_*": ToolLimits(overload_errors=(TimeoutError,)),
        },
    )
    limits = guard.configured_limits()
    assert limits["index_*"].priority is Priority.BACKGROUND
    assert limits["index_*"].overload_errors == (PoolExhausted,)
    assert limits["db_*"].overload_errors == (TimeoutError,)
    assert isinstance(limits["db_*"], ToolLimits)


def test_every_exported_name_exists() -> None:
    for name in fusion_guard.__all__:
        assert hasattr(fusion_guard, name), name


def test_import_loads_no_optional_integration() -> None:
    optional = ("mcp", "fastmcp", "redis", "matplotlib", "trio", "structlog")
    code = f"import sys, fusion_guard; print(','.join(m for m in {optional!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""
