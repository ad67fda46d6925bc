"""Where limiter state lives: in memory (the default) or in Redis (shared by a fleet)."""
