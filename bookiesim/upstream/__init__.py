"""Upstream Apache BookKeeper as this machine has it (:mod:`.installation`)."""
