"""Self-supervised fine-tuning from keyword-vs-vector disagreement (the vstash method).

* :mod:`nbmemory.tune.mine`: pseudo-queries from the memory, disagreement mining, triples;
* :mod:`nbmemory.tune.train`: MultipleNegativesRankingLoss fine-tuning (the ``[train]`` extra);
* :mod:`nbmemory.tune.gate`: the adoption gate on held-out queries;
* :mod:`nbmemory.tune.versions`: model versions kept next to the memory file;
* :mod:`nbmemory.eval.tune_beir`: the same on a BEIR corpus, scored on its judged test queries.
"""
