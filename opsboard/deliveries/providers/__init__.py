"""Provider clients: each turns a call into a classified outcome (see opsboard.retry)."""
