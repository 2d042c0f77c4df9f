"""Evaluation: BEIR harness, metrics via pytrec_eval, the memory scenario benchmark, diagnostics."""
