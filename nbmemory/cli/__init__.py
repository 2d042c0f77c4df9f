"""The command line, ``nbmemory``: the facade's verbs (:mod:`nbmemory.cli.main`) plus ``mcp``,
``serve``, ``stop`` and ``eval``."""

from nbmemory.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
