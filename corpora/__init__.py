"""Corpora: the data layer (Flickr8k, Karpathy JSON, the built-in teaching set, the Hodosh protocol)."""
from corpora.base import (
    CROWD_RELEVANCE_THRESHOLD,
    Caption,
    Corpus,
    CorpusError,
    CrowdJudgment,
    ExpertJudgment,
    MissingImagesError,
    RankingPool,
    caption_id,
    split_caption_id,
)
from corpora.cache import DiskCache, cache_key, default_cache_dir

__all__ = [
    "CROWD_RELEVANCE_THRESHOLD", "Caption", "Corpus", "CorpusError", "CrowdJudgment", "ExpertJudgment",
    "MissingImagesError", "RankingPool", "caption_id", "split_caption_id", "DiskCache", "cache_key",
    "default_cache_dir",
]
