"""The layering of pyproject.toml's import-linter contracts holds: the CLI on top, then the demo,
the adapters, the Guard, observability, the policy table, admission, the backends, configuration,
contracts, and the wire contract at the bottom (pure text: it logs nothing and reaches no backend).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# In a process of its own: import-linter configures logging (dictConfig disables the loggers that
# exist), which would silence the library's loggers for the tests that run after this one.
LINT = (
    "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True))"
)


def test_every_import_contract_is_kept() -> None:
    done = subprocess.run(
        [sys.executable, "-c", LINT], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
