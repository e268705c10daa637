"""Operator tools run by the ``opsboard`` command: ``bench``, ``demo`` and the
provider ``sandbox``.

Above the core: they may import the web app and start worker processes; the
core never imports them.
"""
