"""Metadata store: one interface, SQLite and ZooKeeper backends."""
