"""The tenants scenario: clients of different appetite through one guard, fair queueing on and
off on the same arrivals, and what the command prints, writes and refuses."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fusion_guard.cli import main
from fusion_guard.demo._tenants import (
    GREEDY,
    POLITE,
    TenantsResult,
    TenantsScenario,
    crowd_appetites,
    jain_index,
    run_tenants,
)
from fusion_guard.demo._tenants_report import (
    check_tenants_targets,
    format_tenants,
    tenants_figures,
    write_tenants_chart,
    write_tenants_json,
)
from virtual_time import demo_guards_on_the_loops_clock, run_virtual


@pytest.fixture(scope="module")
def pair() -> TenantsResult:
    """The pair's 2 s in virtual time: the point is what fair queueing decides, which a loaded
    machine's late wake-ups would blur (the command's test below runs it in real time)."""
    scenario = TenantsScenario(warmup_s=0.5, duration_s=1.5, seed=2)
    with demo_guards_on_the_loops_clock():
        return run_virtual(functools.partial(run_tenants, scenario, ("pair",)), "asyncio")


def test_jain_index_spans_one_over_n_to_one() -> None:
    assert jain_index([0.2, 0.2, 0.2, 0.2]) == pytest.approx(1.0)
    assert jain_index([0.8, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain_index([0.0, 0.0]) == 1.0  # nobody served: nobody favoured


def test_the_crowd_asks_for_more_than_its_fair_share() -> None:
    scenario = TenantsScenario(clients=10, crowd_appetite=(1.5, 16.0))
    appetites = list(crowd_appetites(scenario).values())
    assert len(appetites) == 10
    assert appetites[0] == pytest.approx(0.15)  # 1.5x a tenth of the capacity
    assert appetites[-1] == pytest.approx(1.6)
    assert appetites == sorted(appetites)


def test_fair_queueing_answers_the_polite_client_that_fifo_sheds(pair: TenantsResult) -> None:
    on, off = pair.run("pair", True), pair.run("pair", False)
    # The same arrivals reach both guards.
    for name in (GREEDY, POLITE):
        assert on.client(name).calls == off.client(name).calls > 0
    assert on.client(POLITE).ok_rate >= 0.9
    assert off.client(POLITE).ok_rate <= 0.5
    assert on.client(GREEDY).refused.get("fair_share", 0) > 0  # gave way to the polite one
    assert "fair_share" not in off.client(GREEDY).refused
    for run in (on, off):
        for client in run.clients:  # every call is accounted for, once
            assert client.ok + sum(client.refused.values()) + client.timeouts == client.calls
        assert 0.5 <= run.goodput <= 1.3


def test_the_table_json_and_chart_carry_the_figures(pair: TenantsResult, tmp_path: Path) -> None:
    table = format_tenants(pair)
    assert "polite calls answered OK" in table
    assert "fair queueing on" in table
    assert "fair queueing off" in table
    assert "crowd" not in table  # only the part that ran
    targets = check_tenants_targets(pair)  # fair queueing on only
    assert len(targets) == 4
    assert all(t.name.startswith("pair: ") for t in targets)
    figures = tmp_path / "tenants.json"
    write_tenants_json(pair, figures)
    data = json.loads(figures.read_text())
    assert set(data["figures"]) == {"pair/fair_on", "pair/fair_off"}
    assert data["figures"] == json.loads(json.dumps(tenants_figures(pair)))
    assert data["scenario"]["greedy_load"] == 8.0
    assert {c["client"] for run in data["runs"] for c in run["clients"]} == {GREEDY, POLITE}
    chart = tmp_path / "tenants.png"
    write_tenants_chart(pair, chart)
    assert chart.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.slow
def test_the_command_runs_the_crowd_and_writes_json_and_chart(tmp_path: Path) -> None:
    figures, chart = tmp_path / "tenants.json", tmp_path / "tenants.png"
    done = subprocess.run(
        [
            sys.executable, "-m", "fusion_guard", "demo", "--no-check", "--scenario", "tenants",
            "--mode", "crowd", "--clients", "12", "--duration", "1", "--json", str(figures),
            "--chart", str(chart),
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "== crowd: 12 clients" in done.stdout
    assert "Jain's index of the served shares" in done.stdout
    assert "targets with fair queueing on (docs/demo.md):" in done.stdout
    assert "[1/1] crowd" in done.stderr
    assert "--duration 1 s is too short" in done.stderr
    data = json.loads(figures.read_text())
    assert set(data["figures"]) == {"crowd/fair_on", "crowd/fair_off"}
    assert 1 / 12 <= data["figures"]["crowd/fair_on"]["jain"] <= 1.0
    assert chart.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--scenario", "tenants", "--loads", "1"], "--loads apply to the overload scenario only"),
        (["--scenario", "tenants", "--metrics-port", "9000"], "--metrics-port apply to the"),
        (["--mode", "crowd"], "--mode apply to the tenants scenario only"),
        (["--scenario", "shifting", "--clients", "5"], "--clients apply to the tenants scenario"),
        (["--scenario", "tenants", "--mode", "pair", "--clients", "5"], "drop it with --mode pair"),
    ],
)
def test_options_that_do_not_fit_are_refused_in_one_line(
    args: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--no-chart", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert complaint in err
