"""Configuration from arguments and ``FUSION_GUARD_*`` environment variables."""
