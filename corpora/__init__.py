"""Corpora: the data layer (Flickr8k, Karpathy JSON, the built-in teaching set, the Hodosh protocol)."""
from corpora.base import (
    CROWD_RELEVANCE_THRESHOLD,
    Caption,
    Corpus,
    CorpusError,
    CrowdJudgment,
    ExpertJudgment,
    GeneratedCorpus,
    MissingImagesError,
    RankingPool,
    caption_id,
    split_caption_id,
)
from corpora.cache import DiskCache, cache_key, default_cache_dir
from corpora.flickr8k import load_captions_csv, load_flickr8k
from corpora.images import read_image
from corpora.karpathy import load_karpathy
from corpora.protocol import caption_pools, every_caption_pool, hodosh_pool, relevance_stats, train_items

__all__ = [
    "CROWD_RELEVANCE_THRESHOLD", "Caption", "Corpus", "CorpusError", "CrowdJudgment", "ExpertJudgment", "GeneratedCorpus",
    "MissingImagesError", "RankingPool", "caption_id", "split_caption_id", "DiskCache", "cache_key",
    "default_cache_dir", "load_flickr8k", "load_captions_csv", "load_karpathy", "read_image", "hodosh_pool",
    "caption_pools", "every_caption_pool", "relevance_stats", "train_items",
]
