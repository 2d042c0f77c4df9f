"""Code the benchmarks share: the BEIR chunk corpus, the vector cache, the SQLite reference, timing helpers, paths."""
