"""Configuration from arguments and ``FUSION_GUARD_*`` environment variables."""

from ._errors import InvalidSettings
from ._settings import GuardSettings, ToolPolicy

__all__ = ["GuardSettings", "InvalidSettings", "ToolPolicy"]
