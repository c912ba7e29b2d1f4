"""Standard caption-evaluation benchmarks in their public release formats (Composite, Pascal-50S,
FOIL) and the table that runs any scorer on them in the layout of PAC-S (Sarto et al. 2023) Tables 1–3.
See ``docs/evaluation.md``, "Standard benchmarks".
"""
from evaluation.benchmarks.common import BenchmarkFormatError, normalise_caption
from evaluation.benchmarks.composite import (
    COMPOSITE_FILES,
    COMPOSITE_REFERENCE_FILES,
    CompositeJudgment,
    load_composite,
    parse_composite_csv,
)
from evaluation.benchmarks.foil import COCO_CAPTIONS_FILE, FOIL_TEST_FILE, load_foil, with_first_references
from evaluation.benchmarks.pascal50s import (
    PASCAL50S_CATEGORIES,
    PASCAL50S_CONSENSUS_FILE,
    PASCAL50S_PAIR_FILE,
    PASCAL50S_VOTES_PER_PAIR,
    find_pascal50s_files,
    load_pascal50s,
)
from evaluation.benchmarks.table import (
    BENCHMARKS,
    TABLE_COLUMNS,
    LoadedBenchmarks,
    benchmark_table,
    format_benchmark_table,
    load_benchmarks,
)

__all__ = [
    "BenchmarkFormatError", "normalise_caption",
    "COMPOSITE_FILES", "COMPOSITE_REFERENCE_FILES", "CompositeJudgment", "load_composite", "parse_composite_csv",
    "COCO_CAPTIONS_FILE", "FOIL_TEST_FILE", "load_foil", "with_first_references",
    "PASCAL50S_CATEGORIES", "PASCAL50S_CONSENSUS_FILE", "PASCAL50S_PAIR_FILE", "PASCAL50S_VOTES_PER_PAIR",
    "find_pascal50s_files", "load_pascal50s",
    "BENCHMARKS", "TABLE_COLUMNS", "LoadedBenchmarks", "benchmark_table", "format_benchmark_table",
    "load_benchmarks",
]
