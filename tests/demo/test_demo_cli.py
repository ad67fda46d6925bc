"""``fusion-guard demo``: help, option errors, and the chart and JSON it writes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from fusion_guard.cli import main
from fusion_guard.demo import _run as demo_run
from fusion_guard.demo._run import DemoResult
from fusion_guard.demo._scenario import LevelResult, Scenario


def test_help_lists_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--duration", "--loads", "--seed", "--chart", "--json", "--metrics-port"):
        assert option in out


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--duration", "0"], "expected a finite number > 0"),
        (["--duration", "soon"], "is not a number of seconds"),
        (["--loads", "1,x"], "comma-separated multiples of capacity"),
        (["--loads", "-1"], "each load must be > 0"),
        (["--policies", "fifo"], "subset of none,semaphore,fusion_guard,fusion_guard_lifo"),
        (["--metrics-port", "70000"], "expected a TCP port"),
        (["--seed", "x"], "invalid int value"),
        (["--max-active", "0"], "expected a whole number >= 1 or 'auto'"),
        (["--scenario", "tenants", "--clients", "1"], "from 2 to 1000"),
        (["--scenario", "tenants", "--clients", "many"], "expected a whole number of clients"),
        (["--scenario", "tenants", "--mode", "trio"], "invalid choice: 'trio'"),
    ],
)
def test_bad_values_exit_2_naming_the_problem(
    args: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", *args])
    assert exit_info.value.code == 2
    assert complaint in capsys.readouterr().err


def test_help_is_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    assert "``" not in capsys.readouterr().out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("fusion-guard ")


@pytest.mark.parametrize(
    ("chart", "complaint"),
    [
        ("out.txt", "unknown file type '.txt'; expected one of .png, .svg, .pdf"),
        ("out", "unknown file type '(none)'"),
        (".", "is a directory"),
        ("blocked/sub/out.png", "cannot write in"),
    ],
)
def test_a_bad_chart_path_is_refused_before_the_run(
    chart: str, complaint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "blocked").write_text("a file where a folder should be")
    assert main(["demo", "--chart", str(tmp_path / chart)]) == 2
    err = capsys.readouterr().err
    assert complaint in err
    assert "[1/" not in err  # no load was run: its progress line would come first


@pytest.mark.slow
def test_short_run_writes_json_and_chart(tmp_path: Path) -> None:
    figures, chart = tmp_path / "figures.json", tmp_path / "chart.png"
    done = subprocess.run(
        [
            sys.executable, "-m", "fusion_guard", "demo", "--no-check",
            "--duration", "0.6", "--loads", "0.5,2", "--policies", "semaphore,fusion_guard",
            "--json", str(figures), "--chart", str(chart),
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "== fusion_guard" in done.stdout
    assert "targets for fusion_guard" in done.stdout
    assert "[2/2] load 2x capacity" in done.stderr  # progress goes to stderr
    assert "--duration 0.6 s is too short for the figures to mean much" in done.stderr
    half_load_rows = [line for line in done.stdout.splitlines() if line.lstrip().startswith("0.5x")]
    assert half_load_rows
    assert all(row.rstrip().endswith("n/a") for row in half_load_rows)  # nothing to recover from
    data = json.loads(figures.read_text())
    assert data["capacity_rps"] == pytest.approx(100.0)
    assert data["uncontended_p99_ms"] == pytest.approx(124.0, abs=1.0)
    rows = {(r["policy"], r["load"]) for r in data["results"]}
    assert rows == {(p, x) for p in ("semaphore", "fusion_guard") for x in (0.5, 2.0)}
    keys = {"goodput", "goodput_slo", "p50_ms", "p99_ms", "shed_rate", "timeout_rate"}
    assert keys | {"shed_p99_ms", "recovery_s"} <= set(data["results"][0])
    assert chart.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert chart.stat().st_size > 10_000


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.slow
def test_metrics_port_serves_the_guards_metrics_while_it_runs() -> None:
    port = _free_port()
    demo = subprocess.Popen(
        [
            sys.executable, "-m", "fusion_guard", "demo", "--no-chart", "--no-check",
            "--duration", "3", "--loads", "4", "--policies", "fusion_guard",
            "--metrics-port", str(port),
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    scraped = ""
    try:
        deadline = time.monotonic() + 20
        while "fusion_guard_shed_total{" not in scraped and time.monotonic() < deadline:
            if demo.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as page:
                    scraped = page.read().decode()
            except OSError:
                time.sleep(0.1)  # the server is not up yet: poll, bounded by the deadline
                continue
            time.sleep(0.2)
    finally:
        _, err = demo.communicate(timeout=60)
    assert demo.returncode == 0, err
    labels = 'priority="interactive",reason="queue_full",tool="demo.scarce_tool"'
    assert f"fusion_guard_shed_total{{{labels}}}" in scraped
    assert "serving Prometheus metrics on" in err


def test_metrics_port_in_use_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["demo", "--metrics-port", str(port), "--loads", "1"]) == 2
    assert f"cannot serve /metrics on 127.0.0.1:{port}" in capsys.readouterr().err


@pytest.mark.slow
def test_the_guard_can_run_with_an_automatic_limit(tmp_path: Path) -> None:
    figures = tmp_path / "figures.json"
    done = subprocess.run(
        [
            sys.executable, "-m", "fusion_guard", "demo", "--no-chart", "--no-check",
            "--max-active", "auto", "--duration", "0.6", "--loads", "2",
            "--policies", "fusion_guard", "--json", str(figures),
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "fusion_guard's max_active: auto" in done.stderr
    assert json.loads(figures.read_text())["results"][0]["policy"] == "fusion_guard"


def _level(load: float, goodput: float) -> LevelResult:
    return LevelResult(
        policy="fusion_guard", load=load, goodput=goodput, goodput_slo=goodput, p50_ms=30.0,
        p99_ms=120.0, shed_rate=0.0 if load < 1 else 0.5, timeout_rate=0.0, shed_p99_ms=0.1,
        recovery_s=0.5, send_lag_p99_ms=1.0, calls=100, ok=100, shed=0, rate_limited=0,
        timeouts=0, errors=0, capacity_rps=100.0, peak_inside_tool=2,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("goodput", "option", "status"),
    [(0.97, [], 0), (0.5, [], 1), (0.5, ["--check"], 1), (0.5, ["--no-check"], 0)],
)
def test_a_missed_target_fails_the_demo_unless_no_check(
    goodput: float,
    option: list[str],
    status: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The run itself is replaced by figures made to meet or miss the goodput targets at 4x.
    async def run_demo(scenario: Scenario, *args: object, **kwargs: object) -> DemoResult:
        return DemoResult(scenario, (_level(0.8, 0.8), _level(4.0, goodput)))

    monkeypatch.setattr(demo_run, "run_demo", run_demo)
    assert main(["demo", "--no-chart", "--loads", "0.8,4", *option]) == status
    out, err = capsys.readouterr()
    assert ("[FAIL] goodput within timeout >= 0.95 at 1.5x-10x: min 0.50" in out) == (goodput < 0.9)
    missed = "fusion-guard demo: 2 of 6 targets missed; on a busy or noisy machine, --no-check"
    assert (missed in err) == (status == 1)
