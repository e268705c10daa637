"""``opsboard bench``: the benchmarks, a package beside the product.

Installed with the ``bench`` extra (``pip install 'opsboard[bench]'``) and run by ``opsboard bench``, which
imports it only when that command runs.  Nothing in ``opsboard`` (but that command) or ``worker`` imports
it (an import contract in pyproject.toml).

:mod:`.harness` is what every scenario shares (the scratch database, worker processes, timing, the table
and the JSON); one module per scenario imports it; :mod:`.scenarios` lists them and :mod:`.cli` runs them.
The helper processes a scenario starts are modules of their own (:mod:`.receiver`, :mod:`.stream_client`,
:mod:`.peer_workers`).
"""
