"""The overload scenario of docs/benchmarks.md: a simulated scarce tool, an open-loop Poisson load
generator, the policies compared, and the figures they produce. Used by ``fusion-guard demo``
and by the full-length run in ``benchmarks/``."""
