"""The opsboard worker process (``python -m worker``): imports the core, never the reverse."""
