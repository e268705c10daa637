"""Job handlers, one module per job type (family)."""
