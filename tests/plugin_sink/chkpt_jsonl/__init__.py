"""``chkpt-jsonl``: a spark-chkpt sink that writes a folder of JSON-lines files exactly
once, a plugin of spark-chkpt's sink registry.

Phase 1 (a write task) stages one file per task under ``data/``; phase 2 (the driver's
:class:`~chkpt_jsonl.committer.JsonLinesCoordinator`, spark-chkpt's coordinator
template) makes a batch visible by one atomic step, the creation of ``_commits/<N>.json``
naming its files and carrying the snapshot record. Readers read only committed files
(:meth:`~chkpt_jsonl.folder.JsonLinesFolder.rows`). The kind
(:data:`~chkpt_jsonl.kind.JSONL`) answers spark-chkpt's tools: its rewind drops the
commits after snapshot N, its fork check refuses the savepoint's own folder.
"""
