"""Benchmarks of nbmemory (not part of the package): run each as ``python -m bench.<folder>.<script>``
from the repository root; ``bench/README.md`` lists them all."""
