"""Contract awareness: a lockfile of each tool's input schema, the diff of the live tools against
it, and the ``<contract_awareness>`` section that validation errors carry (docs/validation.md).

``Lockfile.from_tools(tools).write(path)`` records the known-good contracts from code (the
``fusion-guard contract lock`` command does the same from a server module)."""

from ._lockfile import Lockfile

__all__ = ["Lockfile"]
