"""Benchmarks behind ``bookiesim bench``: each reports its figures beside a baseline measured
in the same run (raw disk write, raw read, raw fdatasync), because absolute figures on shared
machines vary from run to run by more than the effects we care about. Each benchmark module
has a ``register(subparsers)`` that :mod:`bookiesim.cli.bench_command` calls."""
