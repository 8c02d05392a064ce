"""Runnable pipelines: each module works with spark-submit and ``python -m``."""
