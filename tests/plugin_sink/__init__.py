"""A sink written as a user's plugin (``chkpt_jsonl``: a folder of JSON-lines files),
outside ``spark_chkpt/``, registered through the entry point group ``spark_chkpt.sinks``
as ``pip install`` would, and proven by the project's chains (docs: Write your own sink)."""
