"""fusion-guard contract lock|diff with real server objects: output and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fusion_guard import Lockfile
from fusion_guard.cli import main

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def _servers_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))


def lock(server: str, out: Path) -> int:
    return main(["contract", "lock", "--server", f"contract_servers:{server}", "--out", str(out)])


def diff(server: str, lockfile: Path) -> int:
    return main(
        ["contract", "diff", "--server", f"contract_servers:{server}", "--lock", str(lockfile)]
    )


def test_lock_writes_the_lockfile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fusion-guard.lock.json"
    assert lock("mcp_v1", out) == 0
    assert capsys.readouterr().out == f"Locked 1 tool in {out}\n"
    locked = Lockfile.read(out)
    assert list(locked.tools) == ["billing.get_invoice"]
    assert locked.tools["billing.get_invoice"].input_schema["required"] == ["id"]


def test_lock_defaults_to_fusion_guard_lock_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["contract", "lock", "--server", "contract_servers:fast_v1"]) == 0
    assert list(Lockfile.read(tmp_path / "fusion-guard.lock.json").tools) == [
        "billing.list_invoices"
    ]


@pytest.mark.parametrize(("v1", "v2"), [("mcp_v1", "mcp_v2"), ("fast_v1", "fast_v2")])
def test_diff_without_breaking_change_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], v1: str, v2: str
) -> None:
    out = tmp_path / "lock.json"
    assert lock(v1, out) == 0
    assert diff(v1, out) == 0
    assert "No contract changes." in capsys.readouterr().out
    assert diff(v2, out) == 0
    table = capsys.readouterr().out
    assert "SAFE" in table
    assert "optional field added" in table
    assert "BREAKING" not in table


@pytest.mark.parametrize(("v1", "v2"), [("mcp_v1", "mcp_v3"), ("fast_v1", "fast_breaking")])
def test_diff_with_breaking_change_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], v1: str, v2: str
) -> None:
    out = tmp_path / "lock.json"
    assert lock(v1, out) == 0
    capsys.readouterr()
    assert diff(v2, out) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["SEVERITY", "TOOL", "FIELD", "CHANGE", "BEFORE", "AFTER"]
    assert lines[1].startswith("BREAKING")
    assert "BREAKING" in lines[-1]


def test_tools_json_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tools = {"tools": [{"name": "t", "inputSchema": {"type": "object", "properties": {}}}]}
    source = tmp_path / "tools.json"
    source.write_text(json.dumps({"jsonrpc": "2.0", "id": 1, "result": tools}))
    out = tmp_path / "lock.json"
    assert main(["contract", "lock", "--tools-json", str(source), "--out", str(out)]) == 0
    assert main(["contract", "diff", "--tools-json", str(source), "--lock", str(out)]) == 0
    source.write_text(json.dumps({"tools": []}))
    assert main(["contract", "diff", "--tools-json", str(source), "--lock", str(out)]) == 1
    assert "tool removed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["contract", "lock", "--server", "no_colon"], "MODULE:ATTRIBUTE"),
        (["contract", "lock", "--server", "no_such_module_xyz:app"], "cannot import"),
        (["contract", "lock", "--server", "contract_servers:missing"], "has no attribute"),
        (["contract", "lock", "--server", "contract_servers:not_a_server"], "list_tools"),
        (
            ["contract", "diff", "--server", "contract_servers:mcp_v1", "--lock", "/nonexistent/x"],
            "cannot read the contract lockfile",
        ),
        (
            ["contract", "lock", "--tools-json", "/nonexistent/tools.json"],
            "cannot read --tools-json",
        ),
    ],
)
def test_usage_and_configuration_errors_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_missing_source_is_an_argparse_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["contract", "diff"])
    assert exited.value.code == 2
    assert "--server" in capsys.readouterr().err
