"""grafana/: the dashboard's structure, and the alert rules checked and unit-tested by promtool."""

from __future__ import annotations

import re
import subprocess

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
)

from fusion_guard.observability._metrics import metric_names

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


def promtool(*args: str) -> str:
    """Run promtool in the rules' folder; its output, after checking it succeeded."""
    done = subprocess.run(
        [require_binary("promtool"), *args],
        cwd=ALERTS.parent,
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
