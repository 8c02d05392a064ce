"""The package version (one place: setup.cfg reads it, the driver checks workers against it)."""

__version__ = "0.1.0"
