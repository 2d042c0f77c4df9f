"""Search quality: the notes side-by-side, its margins, the no-answer flag, retrieval granularity."""
