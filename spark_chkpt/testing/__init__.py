"""Running here: embedded brokers, the data generator, fail points."""
