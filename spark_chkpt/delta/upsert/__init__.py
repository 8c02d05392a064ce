"""DeltaUpsert: staging (phase 1), the keyed MERGE, committer (phase 2)."""
