"""The layering of pyproject.toml's import-linter contracts holds: the CLI on top, then the demo,
the adapters, the Guard, observability, the policy table, admission, the backends, configuration,
contracts, and the wire contract at the bottom (pure text: it logs nothing and reaches no backend).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
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


def test_imports_for_type_checking_count_too() -> None:
    # An import under ``if TYPE_CHECKING:`` is still a dependency a reader follows: a lower layer
    # naming a higher one's type would hide an import circle from the contracts.
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert settings["tool"]["importlinter"]["exclude_type_checking_imports"] is False


#: The admission core's shape (issue 40): small parts, each with one job.
MAX_CLASS_LINES = 300
MAX_MODULE_LINES = 500  # in admission/


def test_no_class_is_over_300_lines_and_no_admission_module_over_500() -> None:
    package = ROOT / "src" / "fusion_guard"
    large_classes = {
        f"{path.relative_to(package)}:{node.name}": size
        for path in package.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
        and (size := (node.end_lineno or node.lineno) - node.lineno + 1) > MAX_CLASS_LINES
    }
    assert not large_classes, large_classes
    large_modules = {
        path.name: size
        for path in (package / "admission").glob("*.py")
        if (size := len(path.read_text(encoding="utf-8").splitlines())) >= MAX_MODULE_LINES
    }
    assert not large_modules, large_modules
