"""Helpers of the observability tests: finding binaries, free ports, parsing an exposition."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
GRAFANA = REPO / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "fusion_guard.json"
ALERTS = GRAFANA / "prometheus" / "fusion_guard_alerts.yml"
ALERT_TESTS = GRAFANA / "prometheus" / "fusion_guard_alerts.test.yml"


def require_binary(name: str) -> str:
    """The binary's path; skip when missing, but fail under CI=true (CI installs it)."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (apt-get install prometheus)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}; CI must install it")
        pytest.skip(message)
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    """Every sample of an exposition, keyed by (name, labels)."""
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(found: Samples, name: str, **labels: str) -> float:
    return found[(name, frozenset(labels.items()))]
