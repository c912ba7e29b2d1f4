"""One evaluator for every scorer: ranking metrics (Hodosh et al. 2013, Sec. 4.3), Borda fusion
(Sec. 4.1.3), significance tests, correlation with human judgments and classical n-gram caption metrics.

See ``docs/evaluation.md``.
"""
from evaluation.fusion import borda, borda_points, fuse
from evaluation.ranking import (
    RankingResult,
    ScoreMatrices,
    evaluate,
    evaluate_pool,
    pessimistic_order,
    validate_scores,
)

__all__ = [
    "RankingResult", "ScoreMatrices", "evaluate", "evaluate_pool", "pessimistic_order",
    "validate_scores", "borda", "borda_points", "fuse",
]
