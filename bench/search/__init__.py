"""Search latency and scale: nbmemory beside the SQLite reference, stage costs, profiles."""
