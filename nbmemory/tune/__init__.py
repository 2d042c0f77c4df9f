"""Self-supervised fine-tuning from keyword-vs-vector disagreement (the vstash method).

* :mod:`nbmemory.tune.mine`: pseudo-queries from the memory, disagreement mining, triples;
* :mod:`nbmemory.tune.train`: MultipleNegativesRankingLoss fine-tuning (the ``[train]`` extra);
* :mod:`nbmemory.tune.gate`: the adoption gate on held-out queries;
* :mod:`nbmemory.tune.versions`: model versions kept next to the memory file;
* :mod:`nbmemory.tune.beir`: the same on a BEIR corpus, scored on its judged test queries.
"""

from nbmemory.tune.gate import GateDecision, decide
from nbmemory.tune.mine import MiningReport, PseudoQuery, Triple, mine_triples, pseudo_queries
from nbmemory.tune.train import TrainConfig, TrainReport, train_model

__all__ = [
    "GateDecision",
    "MiningReport",
    "PseudoQuery",
    "TrainConfig",
    "TrainReport",
    "Triple",
    "decide",
    "mine_triples",
    "pseudo_queries",
    "train_model",
]
