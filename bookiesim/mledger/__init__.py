"""Pulsar-style managed ledger and cursors (PIP-404, PIP-146, PIP-345)."""
