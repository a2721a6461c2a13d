"""Upstream's admin HTTP routes that need a BookKeeper client (so they cannot live in the
bookie package, which sits beside the client): served by a companion of the bookie process.
"""
