"""Exact event formats of other systems (Kafka 0.10 messages, Databus events, namespaced
events), one module each."""
