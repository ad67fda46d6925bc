"""Prometheus metrics and structured log events, plugged into the guard's observer interface."""
