"""Kafka clients: settings, consumers and their pool, outages, topics."""
