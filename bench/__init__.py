"""Performance benchmarks for nbmemory (not part of the package)."""
