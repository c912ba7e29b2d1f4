"""Image side of Hodosh et al. (2013), Sec. 3.3: colour (CIELAB), texture (MR8) and dense-SIFT visual
words, global and spatial-pyramid histograms, histogram-intersection / pyramid-match / combined kernels.

Flow: image → :mod:`~kernels.image.descriptors` → :mod:`~kernels.image.codebook` (visual words) →
:mod:`~kernels.image.histograms` → :mod:`~kernels.image.gram`; :class:`ImageKernel` runs it end to end
with caching.  See ``docs/image_kernels.md``.
"""
from kernels.image.codebook import DEFAULT_N_WORDS, fit_codebook, quantise
from kernels.image.descriptors import (
    FEATURES,
    DescriptorParams,
    GridSpec,
    dense_sift,
    extract_descriptors,
    lab_descriptors,
    make_rfs_filters,
    mr8_responses,
    texture_descriptors,
    weber_normalise,
    working_image,
)
from kernels.image.gram import (
    combine_kernels,
    histogram_intersection_gram,
    intersection_gram,
    intersection_naive,
    pyramid_match_gram,
)
from kernels.image.histograms import (
    global_histogram,
    global_histograms,
    level_slices,
    pyramid_column_weights,
    pyramid_histogram,
    pyramid_histograms,
    pyramid_level_weights,
)
from kernels.image.kernel import ImageKernel

__all__ = [
    "ImageKernel", "FEATURES", "DEFAULT_N_WORDS", "DescriptorParams", "GridSpec",
    "working_image", "lab_descriptors", "texture_descriptors", "dense_sift", "extract_descriptors",
    "make_rfs_filters", "mr8_responses", "weber_normalise",
    "fit_codebook", "quantise",
    "global_histogram", "global_histograms", "pyramid_histogram", "pyramid_histograms",
    "pyramid_level_weights", "pyramid_column_weights", "level_slices",
    "intersection_gram", "intersection_naive", "histogram_intersection_gram", "pyramid_match_gram",
    "combine_kernels",
]
