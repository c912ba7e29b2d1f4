"""Kernel CCA for image–text ranking (Hodosh, Young & Hockenmaier 2013, Sec. 3.2 and 4.1.3).

* :mod:`kcca.solver` – exact and low-rank (incomplete Cholesky) KCCA, Eq. 3–4, sweeps over n;
* :mod:`kcca.lowrank` – kernel values on demand and the incomplete Cholesky factor of the low-rank solver;
* :mod:`kcca.selection` – dev-set model selection over (n, κ) and Borda ensembles;
* :mod:`kcca.kernel_store` – the fitted kernels, Gram rows and decompositions shared by the systems;
* :mod:`kcca.systems` – the named systems of Appendix B (Tables 11–12) and ``run_system``;
* :mod:`kcca.run_cache` – the on-disk cache of system runs;
* :mod:`kcca.caption_metric` – a trained system's affinity (Eq. 4) as a caption metric.

See ``docs/kcca.md``.
"""
from kcca.caption_metric import KCCACaptionMetric, pair_scorer
from kcca.kernel_store import ImageKernelEntry, KernelStore, TextKernelEntry
from kcca.selection import (
    PAPER_KAPPAS, SelectionResult, SweepTable, choose_power_and_diag, fit_models, scale_diagonal,
    select_and_ensemble, sweep_dev,
)
from kcca.solver import (
    KCCA, KernelSource, KernelView, cosine_affinity, cosine_sweep, decompose, incomplete_cholesky, log_spaced_ns,
)
from kcca.systems import PAPER_TABLE_ORDER, SYSTEMS, SystemRun, canonical_name, get_system, run_system

__all__ = [
    "KCCA", "KernelSource", "incomplete_cholesky", "cosine_affinity", "cosine_sweep", "log_spaced_ns",
    "PAPER_KAPPAS", "SelectionResult", "SweepTable", "select_and_ensemble", "sweep_dev", "fit_models",
    "choose_power_and_diag", "scale_diagonal", "KernelView", "decompose",
    "SYSTEMS", "PAPER_TABLE_ORDER", "SystemRun", "canonical_name", "get_system", "run_system",
    "KernelStore", "ImageKernelEntry", "TextKernelEntry", "KCCACaptionMetric", "pair_scorer",
]
