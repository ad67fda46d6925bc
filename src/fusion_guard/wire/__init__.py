"""The wire error contract: pure text in, text out, no I/O."""
