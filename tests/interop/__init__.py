"""Conformance with upstream Apache BookKeeper 4.17.4: recorded vectors and live runs."""
