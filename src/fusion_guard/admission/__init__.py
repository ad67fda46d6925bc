"""Admission control: what decides whether a call runs now, waits, or is shed."""
