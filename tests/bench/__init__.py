"""Tests of ``bookiesim.bench``: the benchmarks, at small sizes."""
