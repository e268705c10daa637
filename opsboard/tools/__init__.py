"""Operator tools run by the ``opsboard`` command: ``demo`` and the provider
``sandbox`` (the benchmarks, ``opsboard bench``, are the ``opsboard_bench`` package
beside this one).

Above the core: they may import the web app and start worker processes; the
core never imports them.
"""
