"""Text side of Hodosh et al. (2013): preprocessing, BoW / TagRank / TRI kernels with lexical
similarities, and the nearest-neighbour baseline.  See ``docs/text_kernels.md``.

>>> from kernels.text import TextKernel, NearestNeighbour
"""
from kernels.text.ibm import IBMModel2
from kernels.text.kernel import PAPER_NAMES, TextKernel, parse_similarity
from kernels.text.nn import NearestNeighbour
from kernels.text.preprocess import MissingResourceError, Preprocessor, ProcessedCaption, Vocabulary
from kernels.text.similarity import WordKernel
from kernels.text.tagrank import TagRank

__all__ = ["TextKernel", "NearestNeighbour", "PAPER_NAMES", "parse_similarity", "Preprocessor",
           "ProcessedCaption", "Vocabulary", "MissingResourceError", "IBMModel2", "WordKernel", "TagRank"]
