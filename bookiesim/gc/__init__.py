"""Garbage collection and compaction of entry logs."""
