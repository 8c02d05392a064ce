"""The shared two-phase-commit protocol: coordinator template, record, store, checkpoint reader."""
