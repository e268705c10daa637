"""Tools that may import the web app and the worker: sandbox (and later bench, demo)."""
