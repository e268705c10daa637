"""Operator tools run by the ``opsboard`` command: ``bench`` and ``demo``.

Above the core: they may import the web app and start worker processes; the
core never imports them.
"""
