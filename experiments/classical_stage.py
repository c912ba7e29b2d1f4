"""The main job's classical stage: the Hodosh et al. (2013) systems (kernels → KCCA, and the NN
baseline) on the test pool, and the KCCA affinity f(i, s) as a caption metric for the human-correlation
stage."""
from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence

from tqdm.auto import tqdm

from corpora.base import Corpus, RankingPool
from corpora.cache import DiskCache
from corpora.parallel import BlockExecutor
from corpora.jsondata import jsonable
from corpora.protocol import train_items
from corpora.scoring import PairScorer
from evaluation import evaluate_pool
from experiments.benchmark_stage import benchmarks_given
from experiments.cluster import stage_executor
from experiments.evaluation_stage import metrics_json
from experiments.options import RunOptions
from experiments.outputs import SystemOutput, split_timings
from experiments.runlog import JOB_LOGGER
from kcca.caption_metric import KCCACaptionMetric
from kcca.kernel_store import KernelStore
from kcca.runner import run_systems
from kcca.systems import get_system
from kernels.image.kernel import ImageKernel
from kernels.text.kernel import TextKernel
from kernels.text.preprocess import clear_preprocess_memo, lemmatizer
from kernels.threads import default_threads

log = logging.getLogger(JOB_LOGGER)


#: Training images above which the main job's KCCA takes the low-rank solver (incomplete Cholesky
#: factors of the training kernels, Bach & Jordan 2002, Sec. 5; :func:`kcca.solver.decompose`) instead of
#: exact N × N eigendecompositions: Flickr8k (6,000) stays exact as in the paper, Flickr30k (29,000) and
#: COCO (113,287) go low-rank.
LOWRANK_ABOVE = 10_000
#: The low-rank factors' largest rank (pivots) in the main job.
LOWRANK_MAX_RANK = 4_000


def kcca_solver(n_train: int) -> tuple[str, dict]:
    """``(solver, extra KCCA settings)`` of the main job for ``n_train`` training images: ``("exact", {})``
    up to :data:`LOWRANK_ABOVE`, else ``("lowrank", {"max_rank": LOWRANK_MAX_RANK})``."""
    if n_train > LOWRANK_ABOVE:
        return "lowrank", {"max_rank": LOWRANK_MAX_RANK}
    return "exact", {}


def solver_choice(corpus: Corpus, options: RunOptions, extra: dict) -> None:
    """Put the solver :func:`kcca_solver` chooses for this corpus' training split into ``extra`` (the
    settings of :func:`kcca.systems.run_system`) and print the choice."""
    n = len(train_items(corpus, skip_missing_images=options.skip_missing_images).image_ids)
    solver, kw = kcca_solver(n)
    if solver != "exact":
        extra["solver"] = solver
        extra["kcca_kwargs"] = {**extra.get("kcca_kwargs", {}), **kw}
    log.info(
        "KCCA solver: %s (%d training images; low-rank above %d)",
        "exact" if solver == "exact" else f"low-rank, incomplete Cholesky up to rank {kw['max_rank']}",
        n, LOWRANK_ABOVE)


def run_classical(corpus: Corpus, pools: Mapping[str, RankingPool], names: Sequence[str], options: RunOptions,
                  cache: DiskCache, executor: BlockExecutor | None = None
                  ) -> tuple[dict[str, SystemOutput], dict, KernelStore]:
    """Train every classical system (Hodosh Appendix B) and return its test score matrices.

    ``executor``: the job's block executor (:func:`experiments.cluster.stage_executor`); ``None``: one
    for this stage, from ``options.workers`` / ``options.scheduler``.

    Kernels, Gram matrices and KCCA decompositions are shared across systems in one
    :class:`~kcca.kernel_store.KernelStore` (one fit per image kernel kind, one per text kernel) and
    cached on disk.  Also returns the per-system run details (chosen
    p, d, (n, κ) models, dev metrics) for ``results.json``.  To bound memory, every system's fitted KCCA
    models and dev-pool matrices are released once its rankings exist, and a text kernel is dropped after
    the last system that uses it unless :func:`kcca_pair_scorers` will need it (TRI5SEM's, and the best
    system's by :func:`best_kcca_system`); an image kernel's kept training histograms are released after
    its last system, and without pair scorers the kernel itself (its decompositions) too.

    Returns
    -------
    outputs : dict
        ``{system: SystemOutput}`` (model-selection timings in ``SystemOutput.timings``).
    runs : dict
        ``{system: kcca.systems.SystemRun}``.
    store : KernelStore
        The kernels kept in memory (for :func:`kcca_pair_scorers`).
    """
    if executor is None:
        with stage_executor(options) as executor:
            return classical_systems(corpus, pools, names, options, cache, executor)
    return classical_systems(corpus, pools, names, options, cache, executor)


def classical_systems(corpus: Corpus, pools: Mapping[str, RankingPool], names: Sequence[str],
                      options: RunOptions, cache: DiskCache,
                      executor: BlockExecutor) -> tuple[dict[str, SystemOutput], dict, KernelStore]:
    """:func:`run_classical` with its block executor (``--workers`` / ``--scheduler``: the image kernels'
    features and Gram row blocks run on Dask workers; in-process otherwise)."""
    start_warm_up(corpus, names, options, cache)
    store = KernelStore(executor, park_root=cache.root if cache.enabled else None, park=True,
                        show_progress=not options.no_progress)
    outputs: dict[str, SystemOutput] = {}
    runs: dict = {}
    # Default: image power p = 2 and text diagonal factor d = 1 fixed in advance for every kernel pair
    # (on the teaching set, choosing d on dev overfits: see docs/teaching_set.md), float32 KCCA; the
    # 15-model selection always sweeps all four κ and 46 n on dev.  --full-selection chooses (p, d) on
    # dev over p ∈ {2, 3} × d ∈ {1, 2, 5, 10, 15} with all κ and float64 KCCA.  float32 runs at its
    # numerical rank (jitter="auto": eigenvalues above N·eps32·λ_max, see kcca.solver).
    extra: dict = {} if options.full_selection else {
        "powers": (2,), "diag_factors": (1.0,), "kcca_kwargs": {"dtype": "float32", "jitter": "auto"}}
    if options.codebook_images is not None:   # --codebook-images: the paper's 200 x 1,000 sampling of a folder
        extra["image_kwargs"] = {"codebook_dir": str(options.codebook_images)}
    if any(get_system(n).model == "kcca" for n in names):
        solver_choice(corpus, options, extra)
    if executor.distributed:   # not part of any cache key: the numbers do not depend on where blocks run
        extra.setdefault("image_kwargs", {})["executor"] = executor
    # Memory (Flickr8k: ~0.3 GB per text kernel, ~1 GB of fitted models per system): a text kernel is
    # dropped after the last system that uses it unless a KCCA pair scorer will need it (TRI5SEM's and
    # the best system's so far, chosen as kcca_pair_scorers chooses); fitted models are always released.
    keep_pairs = pair_scorers_wanted(corpus, options)   # else no text kernel outlives its systems
    texts: dict[str, str] = {}      # KCCA system -> its text kernel
    last_use: dict[str, int] = {}   # text kernel -> index of the last system that uses it
    last_image: dict[str, int] = {}   # image kernel -> index of the last system that uses it
    for i, n in enumerate(names):
        c = get_system(n)
        last_image[c.image_kind] = i
        if c.model == "kcca":
            texts[c.name], last_use[c.text] = c.text, i
    r10: dict[str, float] = {}
    # The systems run side by side on the cores (kcca.runner: BLAS held to one thread, so the numbers do
    # not depend on ITR_NUM_THREADS); results come back in `names` order.  With a Dask cluster the blocks
    # are the parallel work and the systems run one at a time here (one caller of the executor).
    bar = tqdm(total=len(names), desc="classical systems", unit="system", disable=options.no_progress)
    finished = run_systems(names, corpus, store=store, n_jobs=1 if executor.distributed else None,
                           seed=options.seed, cache=cache, pools=pools, show_progress=not options.no_progress,
                           skip_missing_images=options.skip_missing_images, **extra)
    for i, (name, r) in enumerate(zip(names, finished, strict=True)):
        bar.set_postfix_str(name)
        bar.update(1)
        cfg = get_system(name)
        family = "baseline" if cfg.model == "nn" else "classical"
        config, timings = split_timings(jsonable(r.config))
        outputs[r.name] = SystemOutput(name=r.name, family=family, test=r.test_matrices, config=config,
                                       timings=timings)
        # The fitted KCCA models (hundreds of MB per system on Flickr8k) are not needed for retrieval any
        # more; the KCCA pair scorers refit the one model they use.  The kernel decompositions stay.
        r.release_models()
        r.release_dev_matrices()   # the selection is made; nothing later reads them
        runs[r.name] = r
        # the training histograms an image kernel keeps for the NN baseline's pool rows and the low-rank
        # columns (on the cluster: 2.4 GB per worker at COCO size) serve every system of that kernel; its
        # decompositions (a low-rank view: 1.8 GB at COCO size) outlive them only for the pair scorers
        for kind in [k for k, last in last_image.items() if last == i and k in store.image_kinds()]:
            if keep_pairs:
                store.image_entry(kind).release_rows()
            else:
                store.drop_image(kind)
        if cfg.model == "kcca":
            r10[r.name] = metrics_json(evaluate_pool(r.test_matrices, pools["test"])["annotation"])["R@10"]
            needed = {texts[n] for n in ("TRI5SEM", best_kcca_system(r10)) if n in texts} if keep_pairs else set()
            for t, last in last_use.items():
                if last <= i and t not in needed:
                    store.drop_text(t)
        if extra.get("solver") == "lowrank":
            # the decompositions later systems reuse (1.8 GB each at COCO size) wait on disk, not in
            # memory, while the next kernel's incomplete Cholesky factor fills (KernelStore.park_views)
            store.park_views()
    bar.close()
    clear_preprocess_memo()  # the kernels are built; later captions (human judgments) are new ones
    # what later stages ask of the kept kernels (the human judgments' rows) is computed in this process
    for kind in store.image_kinds():
        store.image_entry(kind).kernel.executor = None
    for name in store.text_names():
        store.text_entry(name).kernel.executor = None
    return outputs, runs, store


def pair_scorers_wanted(corpus: Corpus, options: RunOptions) -> bool:
    """Whether the run scores caption pairs with the KCCA affinity (:func:`kcca_pair_scorers`): the corpus
    has human judgments (Flickr8k-Expert / CF) or a benchmark was given.  Otherwise (Flickr30k, COCO) no
    text kernel is kept past its last system (at COCO size a text kernel's decomposition is 1.8 GB)."""
    return bool(corpus.expert) or bool(corpus.crowd) or benchmarks_given(options)


def needs_wordnet(names: Sequence[str]) -> bool:
    """Whether a KCCA system of ``names`` has a D_ext word kernel, whose Brown corpus is lemmatised with
    WordNet (:func:`kernels.text.similarity.build_word_kernel`; seconds of one core to load)."""
    texts = {get_system(n).text for n in names if get_system(n).model == "kcca"}
    return any("D_ext" in p for t in texts for p in TextKernel.from_name(t, show_progress=False).sim_parts)


def start_warm_up(corpus: Corpus, names: Sequence[str], options: RunOptions,
                  cache: DiskCache) -> threading.Thread | None:
    """On a cold run whose systems need WordNet (:func:`needs_wordnet`), load it on a daemon thread while
    the image kernel is fitted, instead of on the one core the D_ext word kernel runs on later.  Not on one
    thread (``ITR_NUM_THREADS=1``, :func:`kernels.threads.default_threads`): the load would then take a
    second core that the job was not given.

    Only when the visual-word codebooks are not cached: descriptor extraction and k-means then keep the
    cores busy for tens of seconds, mostly outside the GIL, so the load (pure Python) costs little; a warm
    re-run does not load it.  The load changes no number and no process-wide state the image kernel uses:
    the lemmatiser waits for a load in progress (:func:`kernels.text.preprocess.lemmatizer`), the WordNet
    reader touches no warnings filter (:func:`corpora.nltk_resources.english_wordnet`), and scikit-learn,
    which NLTK's reader imports, is imported here first, so no native OpenMP runtime is loaded while the
    image kernel enters or leaves its threadpoolctl limits.  Returns the thread (``None``: nothing loaded).
    """
    if not needs_wordnet(names) or default_threads() == 1:   # one thread: no core to spare for it
        return None
    image_kwargs = {} if options.codebook_images is None else {"codebook_dir": str(options.codebook_images)}
    probe = ImageKernel(kind="pyramid", seed=options.seed, cache=cache, show_progress=False, **image_kwargs)
    try:
        ids = train_items(corpus, skip_missing_images=options.skip_missing_images).image_ids
        if probe.codebooks_cached(corpus, ids):
            return None
    except Exception:  # noqa: BLE001 - e.g. missing images: the image kernel's fit reports it
        return None
    # heavy (seconds), needed by k-means on a cold run anyway: its OpenMP runtime loads on this thread
    import sklearn.cluster  # noqa: F401

    def load() -> None:
        try:
            lemmatizer()
        except Exception as exc:  # noqa: BLE001 - the word kernel meets the problem again and reports it
            log.debug("WordNet warm-up failed: %s", exc)

    thread = threading.Thread(target=load, name="wordnet-warm-up", daemon=True)
    thread.start()
    return thread


def best_kcca_system(r10: Mapping[str, float]) -> str | None:
    """The classical system whose KCCA affinity the human-correlation table reports besides TRI5SEM's:
    the highest test annotation R@10 (as rounded in results.json), ties to the later name."""
    return max(r10, key=lambda n: (r10[n], n)) if r10 else None


def kcca_pair_scorers(corpus: Corpus, runs: Mapping, store: KernelStore | None,
                      systems_json: Mapping) -> dict[str, PairScorer]:
    """The KCCA affinity f(i, s) (Hodosh Eq. 4) as a caption metric, for TRI5SEM and the best classical
    system (single best (n, κ) model on dev; see :class:`kcca.caption_metric.KCCACaptionMetric`), over
    the store :func:`run_classical` returned.

    Returns
    -------
    dict
        ``{"KCCA f(i,s) [system]": KCCACaptionMetric}``, each with its ``identity`` (the key of its cached
        human-judgment scores).
    """

    kcca_runs = [n for n in runs if get_system(n).model == "kcca"]
    if not kcca_runs or store is None:
        return {}
    best = best_kcca_system({n: systems_json.get(n, {}).get("annotation", {}).get("R@10", 0.0) for n in kcca_runs})
    chosen = [n for n in dict.fromkeys(["TRI5SEM", best]) if n in kcca_runs]
    out = {}
    for n in chosen:
        if not store.has_text(get_system(n).text):
            # run_classical keeps the text kernels of the systems chosen here (same rule); a caller that
            # passes another store gets a warning instead of an error at the end of a long run
            log.warning("KCCA f(i,s) [%s]: its text kernel is no longer in memory; not scored", n)
            continue
        out[f"KCCA f(i,s) [{n}]"] = KCCACaptionMetric(runs[n], corpus, store=store, criterion="R@1")
    return out
