"""One evaluator for every scorer: ranking metrics (Hodosh et al. 2013, Sec. 4.3), Borda fusion
(Sec. 4.1.3), significance tests (Sec. 4.2.2), preference on contrast twins, correlation with human
judgments and classical n-gram caption metrics.  See ``docs/evaluation.md``.
"""
from corpora.scoring import FunctionScorer, PairScorer, ScoreFn, borda, borda_points, fuse
from evaluation.caption_metrics import (
    METRICS,
    CIDErD,
    binarise,
    bleu,
    cider_d,
    cohen_kappa,
    corpus_bleu,
    hodosh_bleu,
    hodosh_preprocess,
    hodosh_rouge,
    ptb_tokenize,
    rouge_l,
)
from evaluation.meteor import meteor_available, meteor_nltk
from evaluation.correlation import (
    FoilRecord,
    JudgmentRows,
    PairwiseRecord,
    correlations,
    flickr8k_cf_rows,
    flickr8k_expert_rows,
    foil_accuracy,
    human_correlation,
    kappa_sweep,
    kendall_tau,
    pairwise_accuracy,
    score_rows,
    text_metric,
)
from evaluation.ranking import (
    RankingResult,
    ScoreMatrices,
    evaluate,
    evaluate_pool,
    pessimistic_order,
    validate_scores,
)
from evaluation.compositionality import twin_pairs, twin_preference
from evaluation.significance import (
    Comparison,
    TestResult,
    compare,
    mcnemar_test,
    paired_randomization_test,
    ranking_agreement,
    significance_marker,
)
from evaluation.benchmarks import (
    BenchmarkFormatError,
    LoadedBenchmarks,
    benchmark_table,
    format_benchmark_table,
    load_benchmarks,
    load_composite,
    load_foil,
    load_pascal50s,
)

__all__ = [
    # ranking
    "RankingResult", "ScoreMatrices", "evaluate", "evaluate_pool", "pessimistic_order",
    "validate_scores",
    # fusion and the scoring contract (corpora.scoring)
    "borda", "borda_points", "fuse", "FunctionScorer", "PairScorer", "ScoreFn",
    # significance
    "Comparison", "TestResult", "compare", "mcnemar_test", "paired_randomization_test",
    "ranking_agreement", "significance_marker",
    # compositionality (contrast twins)
    "twin_pairs", "twin_preference",
    # human correlation
    "FoilRecord", "JudgmentRows", "PairwiseRecord", "correlations", "flickr8k_cf_rows",
    "flickr8k_expert_rows", "foil_accuracy", "human_correlation", "kappa_sweep", "kendall_tau", "pairwise_accuracy",
    "score_rows", "text_metric",
    # caption metrics
    "METRICS", "CIDErD", "binarise", "bleu", "cider_d", "cohen_kappa", "corpus_bleu", "hodosh_bleu",
    "hodosh_preprocess", "hodosh_rouge", "ptb_tokenize", "rouge_l",
    # METEOR (the official 1.5 is evaluation.meteor.meteor15; the NLTK variant is its labelled fallback)
    "meteor_available", "meteor_nltk",
    # standard benchmarks (Composite, Pascal-50S, FOIL; PAC-S Tables 1–3)
    "BenchmarkFormatError", "LoadedBenchmarks", "benchmark_table", "format_benchmark_table", "load_benchmarks",
    "load_composite", "load_foil", "load_pascal50s",
]
