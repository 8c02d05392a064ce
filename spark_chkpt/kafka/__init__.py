"""Kafka: the clients, the chkpt-kafka source and the chkpt-kafka sink."""
