"""Faults on real processes: nodes with their own network identity, a nemesis, a lazy file
system for power loss, recorded histories and their checker.

The simulator (``bookiesim.sim``) proves the code under virtual time; this package runs the
same kinds of faults against real bookie processes (bookiesim's, upstream's, or both in one
cluster), real sockets and real fsync, as Jepsen does. It sits beside ``sim`` in the layers:
neither imports the other.
"""
