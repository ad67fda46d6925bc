"""The demos of ``fusion-guard demo``: a simulated scarce tool, an open-loop Poisson load
generator, and four scenarios with their figures and targets: *overload* (the policies compared
across loads, docs/benchmarks.md; also the full-length run in ``benchmarks/``), *shifting* (a
tool whose capacity moves: fixed, oracle and automatic limits, docs/adaptive.md), *tenants*
(clients of different appetite, fair queueing on and off, docs/demo.md) and *agents* (a fleet of
closed-loop agents through the MCP SDK's client, retry policies against the client helper,
docs/demo.md)."""
