"""``benchmarks/level_trace.py`` on a short level: the trace it prints the docs' figures from
reads the guard as it is (a fixed limit stays put and is never exceeded, an adaptive one reports
its estimates), and bad arguments fail with a one-line error. Each level runs on the real clock
(the script traces what a real event loop does) for 1.5 s, so each scenario runs on one loop:
the script's own run (``main``) and the adaptive one on asyncio, the fixed limit on trio, and
the sheds on asyncio."""

from __future__ import annotations

import json
import math
from pathlib import Path

import anyio
import pytest

from fusion_guard.demo._scenario import Scenario
from level_trace import main, report, trace_level

SHORT = Scenario(seed=1, duration_s=0.5, recovery_s=0.5)


def test_a_fixed_limit_is_traced_as_it_is() -> None:
    trace = anyio.run(trace_level, 1.5, SHORT, 2, backend="trio")
    assert trace.overload == pytest.approx((0.5, 1.0), abs=0.05)
    assert len(trace.during_overload()) >= 10  # one sample every 20 ms
    assert {s.limit for s in trace.samples} == {2}
    assert max(s.active for s in trace.samples) <= 2
    assert all(s.parallelism is None and s.baseline_ms is None for s in trace.samples)
    assert trace.limit_one_share() == 0.0
    for share in (trace.idle_worker_share(), trace.empty_and_idle_share()):
        assert 0.0 <= share <= 1.0
    assert trace.level.calls > 0
    assert 0 <= trace.beyond_slo_first_second + trace.beyond_slo_after <= trace.level.ok


def test_an_adaptive_limit_reports_its_estimates() -> None:
    trace = anyio.run(trace_level, 1.5, SHORT, "auto")
    first = trace.samples[0]
    assert first.limit == 4  # a new adaptive limit starts at its initial limit
    assert first.parallelism is not None
    later = trace.samples[-1]
    assert later.baseline_ms is not None
    assert later.baseline_ms > 0
    assert all(s.limit >= 1 for s in trace.samples)
    text = report(trace)
    assert "load 1.5x" in text
    assert "limit 1 for" in text
    assert not math.isnan(trace.idle_worker_share())


def test_the_sheds_are_told_by_rule() -> None:
    trace = anyio.run(trace_level, 10.0, SHORT, 2, backend="asyncio")
    sheds = trace.sheds
    # The guard counts the whole level; the level's figure, the overload window's calls.
    assert sheds.total >= trace.level.shed > 0
    assert sheds.standing > 0  # 10x is sustained overload: the standing queue is held
    assert min(sheds.queue_full, sheds.predicted, sheds.late) >= 0
    assert sheds.max_queue == 20  # the default: 10 per slot
    assert f"{sheds.standing} by the standing-queue limit" in report(trace)


def test_the_json_holds_the_level_and_every_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "trace.json"
    argv = ["--load", "1.5", "--duration", "0.5", "--max-active", "2", "--json", str(out)]
    assert main(argv) == 0
    written = json.loads(out.read_text(encoding="utf-8"))
    assert written["level"]["load"] == 1.5
    assert written["level"]["policy"] == "fusion_guard"
    assert len(written["samples"]) >= 10
    assert {s["limit"] for s in written["samples"]} == {2}
    assert set(written["sheds"]) == {"queue_full", "standing", "predicted", "late", "max_queue"}
    assert "load 1.5x" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-active", "0"], "expected 'auto' or a whole number >= 1, got '0'"),
        (["--max-active", "automatic"], "got 'automatic'"),
        (["--load", "-1"], "--load must be a positive number, got -1.0"),
        (["--duration", "nan"], "--duration must be a positive number of seconds, got nan"),
        (["--json", "/nonexistent-dir/trace.json"], "can't open '/nonexistent-dir/trace.json'"),
    ],
)
def test_bad_arguments_fail_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
