"""grafana/: the dashboard's structure, and the alert rules checked and unit-tested by promtool.

The dashboard's quantiles and the handler-time buckets are also checked by Prometheus' own
engine: ``promtool test rules`` evaluates the queries over series taken from a real
``PrometheusObserver``'s exposition.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]
from observability_support import (
    ALERT_TESTS,
    ALERTS,
    GRAFANA,
    alert_rules,
    dashboard,
    dashboard_exprs,
    panels,
    require_binary,
    samples,
)
from prometheus_client import CollectorRegistry, generate_latest

from fusion_guard import PrometheusObserver
from fusion_guard.observability._metric_definitions import metric_names

# A metric name in PromQL: fusion_guard_ followed by name characters (recording rules use ':').
METRIC = re.compile(r"\bfusion_guard_[a-z_]+\b")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def known_series() -> set[str]:
    """Every series name the library exposes (histograms with their suffixes)."""
    names = set()
    for name in metric_names():
        names.add(name)
        if name.endswith("_seconds"):
            names.update(name + suffix for suffix in HISTOGRAM_SUFFIXES)
    return names


def test_panel_ids_are_unique() -> None:
    ids = [p["id"] for p in dashboard()["panels"]]
    assert len(ids) == len(set(ids))


def test_every_panel_has_a_query() -> None:
    for panel in panels():
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_every_metric_the_dashboard_and_rules_name_exists_in_the_library() -> None:
    exprs = dashboard_exprs() + [rule["expr"] for rule in alert_rules()]
    named = {name for expr in exprs for name in METRIC.findall(expr)}
    assert named, "no metric found"
    assert named <= known_series(), named - known_series()


def test_datasource_and_tool_are_template_variables() -> None:
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["tool"]["type"] == "query"
    assert "fusion_guard_calls_total" in variables["tool"]["definition"]
    tool_scoped = [e for e in dashboard_exprs() if "backend_errors" not in e]
    assert all('tool=~"$tool"' in expr for expr in tool_scoped)


def test_the_panels_an_on_call_engineer_needs_are_there() -> None:
    titles = " | ".join(p["title"].lower() for p in panels())
    for needed in (
        "by outcome",
        "shed ratio",
        "shed by reason",
        "in-flight vs concurrency limit",
        "queue depth",
        "queue wait p50 / p95 / p99",
        "admitted by priority",
        "shed by priority",
        "queue wait p99 by priority",
        "handler duration p50 / p99",
        "retry_after",
        "backend errors",
        "fail-open",
    ):
        assert needed in titles, needed


def test_provisioning_points_at_the_dashboard_folder() -> None:
    provider = yaml.safe_load((GRAFANA / "provisioning/dashboards/fusion_guard.yml").read_text())
    assert provider["providers"][0]["type"] == "file"
    source = yaml.safe_load((GRAFANA / "provisioning/datasources/fusion_guard.yml").read_text())
    assert source["datasources"][0]["type"] == "prometheus"


def promtool(*args: str, cwd: Path = ALERTS.parent) -> str:
    """Run promtool (in the rules' folder by default); its output, after checking it succeeded."""
    done = subprocess.run(
        [require_binary("promtool"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output


def test_promtool_checks_the_rules() -> None:
    assert "4 rules found" in promtool("check", "rules", ALERTS.name)


def test_promtool_unit_tests_every_rule() -> None:
    tests = yaml.safe_load(ALERT_TESTS.read_text())["tests"]
    tested = {case["alertname"] for test in tests for case in test["alert_rule_test"]}
    assert tested == {rule["alert"] for rule in alert_rules()}
    assert "SUCCESS" in promtool("test", "rules", ALERT_TESTS.name)


# A quantile's grouping: histogram_quantile(q, sum by (labels) (...)).
QUANTILE_GROUPING = re.compile(r"histogram_quantile\(\s*[\d.]+\s*,\s*sum by \(([^)]*)\)")


def test_every_quantile_is_taken_per_tool() -> None:
    # Summed over tools, "All" would show one quantile of every tool's calls mixed together.
    exprs = dashboard_exprs() + [rule["expr"] for rule in alert_rules()]
    quantiles = [e for e in exprs if "histogram_quantile" in e]
    # queue wait x3 and by priority, handler time x2, retry_after
    assert len(quantiles) >= 7, quantiles
    for expr in quantiles:
        groupings = QUANTILE_GROUPING.findall(expr)
        assert groupings, f"a quantile not grouped with sum by (...): {expr}"
        for grouping in groupings:
            labels = {label.strip() for label in grouping.split(",")}
            assert {"le", "tool"} <= labels, expr


def test_every_per_tool_series_is_named_by_its_tool_in_the_legend() -> None:
    for panel in panels():
        for target in panel["targets"]:
            if re.search(r"by \([^)]*\btool\b", target["expr"]):
                assert "{{tool}}" in target["legendFormat"], (panel["title"], target["expr"])


def as_input_series(registry: CollectorRegistry) -> list[dict[str, str]]:
    """The registry's histogram buckets as promtool input series: each bucket count grows by
    its value every minute, so rates keep the proportions the observer recorded."""
    series = []
    for (name, labels), count in samples(generate_latest(registry).decode()).items():
        if name.endswith("_bucket"):
            selector = ", ".join(f'{key}="{value}"' for key, value in sorted(labels))
            series.append({"series": f"{name}{{{selector}}}", "values": f"0+{count:g}x10"})
    return series


def evaluate(tmp_path: Path, registry: CollectorRegistry, tests: list[dict[str, object]]) -> None:
    """Evaluate ``promql_expr_test`` cases over the registry's buckets with promtool."""
    case = {"interval": "1m", "input_series": as_input_series(registry), "promql_expr_test": tests}
    (tmp_path / "quantiles.test.yml").write_text(json.dumps({"tests": [case]}))
    assert "SUCCESS" in promtool("test", "rules", "quantiles.test.yml", cwd=tmp_path)


# Handlers of 1 to 5 s, each a little over its second as real handlers are (the worst case for a
# bucket bound at the whole second: every call lands at the bottom of the bucket above it).
HANDLER_SECONDS = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0)


@pytest.mark.parametrize("seconds", HANDLER_SECONDS)
def test_a_1_to_5_s_handlers_median_reads_within_20_percent(tmp_path: Path, seconds: float) -> None:
    registry = CollectorRegistry()
    bound = PrometheusObserver(registry).for_tool("slow", max_active=1)
    for _ in range(60):
        bound.admitted(0.0)
        bound.finished("ok", seconds + 0.002)
    p50 = (
        "histogram_quantile(0.5, sum by (le, tool) "
        "(rate(fusion_guard_call_duration_seconds_bucket[5m])))"
    )
    evaluate(
        tmp_path,
        registry,
        [
            {
                "expr": f"abs({p50} - {seconds}) / {seconds} < bool 0.2",
                "eval_time": "10m",
                "exp_samples": [{"labels": '{tool="slow"}', "value": 1}],
            }
        ],
    )


def test_the_dashboard_quantiles_give_each_tool_its_own(tmp_path: Path) -> None:
    # Two tools a thousand times apart: every quantile of "fast" is under 0.5 s, of "slow" over.
    registry = CollectorRegistry()
    observer = PrometheusObserver(registry)
    for tool, seconds in (("fast", 0.002), ("slow", 2.0)):
        bound = observer.for_tool(tool, max_active=1)
        for _ in range(60):
            bound.admitted(seconds)
            bound.finished("ok", seconds)
            bound.shed("queue_full", 1, 0, seconds)
            bound.rate_limited("tool", seconds)
    tests = []
    for expr in dashboard_exprs():
        if "histogram_quantile" not in expr:
            continue
        query = expr.replace("$tool", ".*").replace("$__rate_interval", "5m")
        codes = ("SERVER_BUSY", "RATE_LIMITED") if "retry_after" in expr else (None,)
        # The calls carry no priority: a quantile by priority is the default priority's.
        by_priority = ['priority="interactive"'] if "priority" in expr else []
        expected = [
            {"labels": "{" + ", ".join(labels) + "}", "value": int(tool == "slow")}
            for tool in ("fast", "slow")
            for code in codes
            for labels in [[*by_priority, f'tool="{tool}"'] + ([f'code="{code}"'] if code else [])]
        ]
        tests.append({"expr": f"{query} > bool 0.5", "eval_time": "10m", "exp_samples": expected})
    evaluate(tmp_path, registry, tests)
