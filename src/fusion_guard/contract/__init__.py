"""Contract awareness: a lockfile of each tool's input schema, the diff of the live tools against
it, and the ``<contract_awareness>`` section that validation errors carry (wire contract
section 7)."""
