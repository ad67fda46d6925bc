"""``benchmarks/virtual_demo.py`` on short runs: in virtual time the demos run many times faster
than real time, a command repeats its figures exactly, and bad arguments fail with a one-line
error. The script must set the guard's clock before fusion_guard is imported, so it runs in a
process of its own here."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from virtual_demo import main

SCRIPT = Path(__file__).with_name("virtual_demo.py")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
    )


def test_levels_run_in_virtual_time_and_repeat_exactly(tmp_path: Path) -> None:
    outputs = []
    for name in ("first.json", "second.json"):
        began = time.monotonic()
        done = _run("--seeds", "1", "--loads", "0.8,1.5", "--json", str(tmp_path / name))
        elapsed = time.monotonic() - began
        assert done.returncode == 0, done.stderr
        # 0.8x and 1.5x take 20.5 s of demo time (warm-up, 7 s windows, 2.5 s of recovery): on
        # the real clock no run could end sooner. In virtual time one takes about 2 s; the bound
        # is the claim itself (faster than real time), not a speed a loaded machine could miss.
        assert elapsed < 20.5
        outputs.append(done.stdout)
    first = json.loads((tmp_path / "first.json").read_text())
    assert first == json.loads((tmp_path / "second.json").read_text())
    assert outputs[0] == outputs[1]
    levels = {r["load"]: r for r in first["1"]["results"]}
    assert set(levels) == {0.8, 1.5}
    assert set(first["1"]["sheds"]) == {"0.8", "1.5"}
    # The sheds by rule add up to what the clients were refused (nothing else refuses here).
    for load, level in levels.items():
        assert sum(first["1"]["sheds"][str(load)].values()) >= level["shed"]
    assert levels[1.5]["shed"] > 0  # 1.5x capacity cannot all be served
    assert 0.5 < levels[1.5]["goodput"] <= 1.1
    line, summary = outputs[0].splitlines()[0], outputs[0].splitlines()[1]
    assert line.startswith("seed  1, ")
    met = all(t["met"] for t in first["1"]["targets"])
    assert summary == f"{int(met)} of 1 seeds met every target"


def test_the_shifting_scenario_compares_auto_with_the_oracle(tmp_path: Path) -> None:
    done = _run(
        "--scenario",
        "shifting",
        "--seeds",
        "2",
        "--phase",
        "1.5",
        "--json",
        str(tmp_path / "s.json"),
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads((tmp_path / "s.json").read_text())["2"]
    phases = figures["phases"]
    assert sorted({p["policy"] for p in phases}) == ["auto", "fixed", "oracle"]
    assert [p["workers"] for p in phases if p["policy"] == "oracle"] == [2, 8, 1, 4]
    shares = [
        a["goodput_slo"] / max(o["goodput_slo"], 1e-9)
        for a, o in zip(
            [p for p in phases if p["policy"] == "auto"],
            [p for p in phases if p["policy"] == "oracle"],
            strict=True,
        )
    ]
    assert figures["worst_share"] == pytest.approx(min(shares))
    assert "worst phase, auto / oracle" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seeds", "5-1"], "expected N or N-M (0 <= N <= M), got '5-1'"),
        (["--max-active", "0"], "expected 'auto' or a whole number >= 1, got '0'"),
        (["--loads", "0.8,x"], "expected positive numbers separated by commas, got '0.8,x'"),
        (["--scenario", "shifting", "--phase", "-1"], "--phase must be a positive number"),
    ],
)
def test_bad_arguments_fail_with_one_line(args: list[str], message: str) -> None:
    done = _run(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_it_refuses_to_run_where_the_guard_already_has_the_real_clock(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import fusion_guard  # noqa: F401  (this process has it already: the script must say so)

    with pytest.raises(SystemExit) as exit_info:
        main(["--seeds", "1"])
    assert exit_info.value.code == 2
    assert "fusion_guard was imported before this script could set its clock" in (
        capsys.readouterr().err
    )
