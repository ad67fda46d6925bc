"""Helpers of the observability tests: finding binaries, free ports, parsing an exposition."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
GRAFANA = REPO / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "fusion_guard.json"
ALERTS = GRAFANA / "prometheus" / "fusion_guard_alerts.yml"
ALERT_TESTS = GRAFANA / "prometheus" / "fusion_guard_alerts.test.yml"


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def dashboard_exprs() -> list[str]:
    return [t["expr"] for p in panels() for t in p["targets"]]


def alert_rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(ALERTS.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


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


class Prometheus:
    """A real ``prometheus`` server on a free loopback port, scraping ``targets`` every second."""

    def __init__(self, binary: str, workdir: Path, targets: list[str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        config.write_text(
            "global:\n"
            "  scrape_interval: 1s\n"
            "  scrape_timeout: 1s\n"
            "  evaluation_interval: 1s\n"
            "scrape_configs:\n"
            "  - job_name: fusion_guard\n"
            "    static_configs:\n"
            f"      - targets: {json.dumps(targets)}\n"
        )
        self._log = (workdir / "prometheus.log").open("w")
        self._process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.workdir = workdir

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)  # polling a child process: there is no event to wait on
        raise TimeoutError(f"prometheus not ready after {timeout} s: {self.log_tail()}")

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The result of an instant query; raises with Prometheus' message when it fails."""
        address = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(address, timeout=5) as answer:
                body = json.loads(answer.read())
        except urllib.error.HTTPError as failure:
            body = json.loads(failure.read())
        if body.get("status") != "success":
            raise AssertionError(f"{expr!r}: {body.get('errorType')}: {body.get('error')}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def poll(
        self, expr: str, done: Callable[[list[dict[str, Any]]], bool], timeout: float = 20.0
    ) -> list[dict[str, Any]]:
        """Query until ``done(result)``; the last result when the bounded wait ends."""
        deadline = time.monotonic() + timeout
        result = self.query(expr)
        while not done(result) and time.monotonic() < deadline:
            time.sleep(0.25)  # the next scrape comes on Prometheus' own clock
            result = self.query(expr)
        return result

    def log_tail(self) -> str:
        self._log.flush()
        return (self.workdir / "prometheus.log").read_text()[-2000:]

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()
