"""One table of metric definitions: both stores expose exactly it, and the docs' table says it."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from fusion_guard import PrometheusObserver
from fusion_guard.observability._metric_definitions import METRICS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "observability.md"
ROW = re.compile(r"^\| `fusion_guard_(\w+)` \| (\w+) \| ([^|]+) \|", re.MULTILINE)


def _exposed(multiprocess: bool) -> dict[str, tuple[str, str]]:
    registry = CollectorRegistry()
    observer = PrometheusObserver(registry, multiprocess=multiprocess)
    observer.for_tool("t", max_active=2).finished("ok", 0.1)
    return {family.name: (family.type, family.documentation) for family in registry.collect()}


def test_both_stores_expose_the_table() -> None:
    expected = {
        f"fusion_guard_{m.suffix.removesuffix('_total')}": (m.kind, m.help) for m in METRICS
    }
    assert _exposed(multiprocess=False) == expected
    assert _exposed(multiprocess=True) == expected


def test_the_docs_metric_table_matches_the_definitions() -> None:
    rows = {name: (kind, labels) for name, kind, labels in ROW.findall(DOCS.read_text())}
    for metric in METRICS:
        kind, labels = rows[metric.suffix]
        assert kind == metric.kind, metric.suffix
        assert re.findall(r"`(\w+)`", labels)[: len(metric.labels)] == list(metric.labels)
