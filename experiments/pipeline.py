"""The stages of the main job (``python -m experiments.flickr8k_kcca``).

corpus → pools (Hodosh protocol) → classical systems (kernels → KCCA / NN) and neural scorers (CLIP
family) → score matrices → one evaluator (R@k, median rank, S@k, R-precision, significance) → human
correlation → specificity → report.

Each stage is timed (``results["timings_s"]``) and every expensive artefact is cached in a
:class:`corpora.cache.DiskCache`, so a warm re-run only re-evaluates.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shlex
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from corpora.base import Corpus, RankingPool, _fingerprint
from corpora.cache import DiskCache, array_digest
from evaluation import ScoreMatrices, evaluate_pool

log = logging.getLogger("experiments.flickr8k_kcca")

#: Default classical systems: NN, BoW1, BoW5, TagRank, TRI5, TRI5SEM and the ^Histo contrasts.
DEFAULT_SYSTEMS = ("NN5_F1^idf", "BoW1", "BoW5", "BoW5^Histo", "TagRank", "TRI5", "TRI5^Histo",
                   "TRI5SEM")
QUICK_SYSTEMS = ("NN5_F1^idf", "BoW1", "BoW5", "TRI5", "TRI5^Histo", "TRI5SEM")
#: Neural scorers that rank (retrieval) and score pairs (human correlation).
ALL_NEURAL = ("CLIP-S", "RefCLIP-S", "PAC-S", "RefPAC-S", "L-CLIPScore", "RefL-CLIPScore", "BRIDGE", "SPECS")
DEFAULT_NEURAL = ALL_NEURAL
#: Reference-based scorers cannot rank a pool (their references would leak the answer): they only
#: enter the human-correlation table.
REFERENCE_BASED = ("RefCLIP-S", "RefPAC-S", "RefL-CLIPScore")
NGRAM_METRICS = ("BLEU-1", "BLEU-4", "ROUGE-L", "CIDEr-D")


class PipelineError(RuntimeError):
    """A user-facing failure (missing data, weights, NLTK resource) with a message saying what to do."""


def available_systems() -> list[str]:
    from kcca.systems import list_systems

    return list_systems()


@dataclass
class SystemOutput:
    """What every scorer – classical or neural – hands to the evaluator."""

    name: str
    family: str  # "baseline" | "classical" | "neural"
    test: ScoreMatrices
    config: dict = field(default_factory=dict)
    #: ``score_pairs(image_ids, captions, references) -> scores`` for human correlation (or None).
    score_pairs: Callable | None = None


class Timer:
    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str, index: int | None = None, total: int | None = None):
        head = f"[{index}/{total}] " if index is not None else ""
        log.info("%s%s …", head, name)
        t0 = time.perf_counter()
        yield
        dt = time.perf_counter() - t0
        self.timings[name] = self.timings.get(name, 0.0) + dt
        log.info("%s%s done in %.1f s", head, name, dt)


# ---------------------------------------------------------------------------------------------- stages
def check_data_options(args) -> None:
    """Reject ``--teaching-size`` values that cannot work (below 60, or given with ``--data``) and a
    ``--data`` path that is not a folder, before the output folder is created."""
    if args.data is None:
        n = teaching_size(args)
        if n < 60:
            raise PipelineError(f"--teaching-size must be at least 60 (got {n})")
        return
    root = Path(args.data).expanduser()
    if not root.exists():
        raise PipelineError(f"--data {root}: no such folder")
    if not root.is_dir():
        raise PipelineError(f"--data {root}: is a file; give the Flickr8k root folder (the one holding "
                            f"Flicker8k_Dataset/ or Images/ and the caption files)")
    if getattr(args, "teaching_size", None) is not None:
        raise PipelineError("--teaching-size sets the size of the built-in teaching set; it does not apply "
                            "with --data (drop one of the two)")


def teaching_size(args) -> int:
    """The number of teaching-set images: ``--teaching-size``, else 600 with ``--quick``, else 2000."""
    ts = getattr(args, "teaching_size", None)
    return ts if ts is not None else (600 if args.quick else 2000)


def load_corpus(args) -> Corpus:
    check_data_options(args)
    if args.data is None:
        from corpora.teaching import make_teaching_set

        n = teaching_size(args)
        n_train = int(round(n * 0.7))
        n_dev = int(round(n * 0.15))
        return make_teaching_set(n_images=n, n_train=n_train, n_dev=n_dev, seed=args.seed)
    from corpora.base import CorpusError
    from corpora.flickr8k import load_flickr8k

    root = Path(args.data).expanduser()   # a folder: check_data_options above
    try:
        return load_flickr8k(root)
    except (CorpusError, FileNotFoundError) as exc:
        raise PipelineError(str(exc)) from exc


def missing_images_message(exc) -> str:
    """The command line's advice for a :class:`corpora.base.MissingImagesError`: its option
    ``--skip-missing-images`` rather than the library's keyword argument."""
    n = exc.n_present
    present = f"the {n} image{'' if n == 1 else 's'} present" if n is not None else "the images present"
    return (f"{exc.what}. Put the images there, or pass --skip-missing-images to run on "
            f"{present} (results are then not comparable with the full splits).")


def build_pools(corpus: Corpus, args) -> tuple[dict[str, RankingPool], int]:
    """Dev and test pools (Hodosh Sec. 4.1.2) and the number of images skipped (missing on disk)."""
    from corpora.base import MissingImagesError
    from corpora.protocol import hodosh_pool, skipped_images

    pools, skipped = {}, 0
    for split in ("dev", "test"):
        try:
            pool = hodosh_pool(corpus, split, seed=args.seed, require_images=True,
                               skip_missing_images=args.skip_missing_images)
        except MissingImagesError as exc:
            raise PipelineError(missing_images_message(exc)) from exc
        skipped += len(skipped_images(pool))
        pools[split] = pool
    return pools, skipped


def significance_table(results: Mapping, reference: str, *, permutations: int, seed: int,
                       cache: DiskCache | None = None) -> dict[str, dict]:
    """``{system: {"markers", "p_values"}}`` of :func:`evaluation.compare` against ``reference`` (its
    default metrics), cached under a digest of every system's per-query values, the reference, the test
    settings, the code of :mod:`evaluation.significance` and the versions of numpy (the reassignments'
    random draws), scipy and statsmodels (McNemar) — the randomisation tests are the evaluation stage's
    only slow part."""
    from evaluation import compare
    from evaluation.significance import _default_metrics

    def compute() -> dict[str, dict]:
        table = compare(results, reference=reference, n_permutations=permutations, seed=seed)
        return {s: {"markers": table[s]["markers"], "p_values": table[s]["p_values"]} for s in results}

    if cache is None or not cache.enabled:
        return compute()
    data = array_digest({f"{name}\0{m}": r.per_query(m) for name, r in results.items() for m in _default_metrics(r)})
    key = {"what": "significance", "reference": reference, "permutations": int(permutations),
           "seed": int(seed), "data": data, "code": _source_digest(("evaluation/significance.py",)),
           "libraries": _library_versions(("numpy", "scipy", "statsmodels"))}
    hit = cache.load("significance", key)
    if hit is not None:
        return json.loads(str(hit["table"]))
    table = compute()
    cache.store("significance", key, {"table": np.array(json.dumps(table))})
    return table


def evaluate_systems(outputs: Mapping[str, SystemOutput], pool: RankingPool, *, permutations: int,
                     seed: int, cache: DiskCache | None = None,
                     reference_system: str | None = None) -> tuple[dict, dict, dict]:
    """Evaluate every system on the test pool; significance against ``reference_system`` in both tasks
    when given (``--reference``), else against the best system per task (:func:`significance_table`,
    cached in ``cache`` when given).

    Returns ``(systems_json, per_query, reference)``.
    """
    evals = {name: evaluate_pool(o.test, pool) for name, o in outputs.items()}
    if reference_system is not None and reference_system not in evals:
        raise PipelineError(f"--reference {reference_system}: it did not run (ran: {', '.join(evals)})")
    systems: dict = {}
    reference: dict[str, str] = {}
    for task in ("annotation", "search"):
        # Best system: highest R@10, then R@1, then lowest median rank, then name (deterministic).
        ranked = sorted(evals, key=lambda s: (-evals[s][task].metrics["R@10"], -evals[s][task].metrics["R@1"],
                                              evals[s][task].metrics["median_rank"], s))
        reference[task] = reference_system or ranked[0]
    markers: dict[str, dict[str, dict[str, str]]] = {s: {} for s in evals}
    pvalues: dict[str, dict[str, dict[str, float]]] = {s: {} for s in evals}
    for task in ("annotation", "search"):
        table = significance_table({s: evals[s][task] for s in evals}, reference[task],
                                   permutations=permutations, seed=seed, cache=cache)
        for s in evals:
            markers[s][task] = table[s]["markers"]
            pvalues[s][task] = table[s]["p_values"]
    for name, o in outputs.items():
        systems[name] = {
            "family": o.family,
            "annotation": _metrics(evals[name]["annotation"]),
            "search": _metrics(evals[name]["search"]),
            "significance": markers[name],
            "p_values": pvalues[name],
            "config": o.config,
        }
    return systems, evals, reference


def _metrics(res) -> dict:
    keys = ("R@1", "R@5", "R@10", "median_rank", "mean_rank", "S@1", "S@5", "S@10", "R-precision")
    out = {k: round(float(res.metrics[k]), 4) for k in keys if k in res.metrics}
    out["n_queries"] = int(res.n_queries)
    out["n_ties"] = int(res.n_ties)
    return out


def _command_line() -> str:
    """The command as a user would type it again: ``python -m experiments.flickr8k_kcca`` for the module
    (``sys.argv[0]`` is then its file path), arguments quoted for a POSIX shell."""
    if not sys.argv:
        return ""
    prog = Path(sys.argv[0])
    head = (["python", "-m", f"experiments.{prog.stem}"] if prog.parent.name == "experiments" and prog.suffix == ".py"
            else [prog.name])
    return shlex.join(head + sys.argv[1:])


def provenance(args, corpus: Corpus, extra: Mapping | None = None) -> dict:
    versions = _library_versions(("numpy", "scipy", "scikit-learn", "opencv-python-headless", "nltk", "torch",
                                  "open_clip_torch", "statsmodels", "matplotlib", "image-text-ranking"))
    prov = {
        "command": _command_line(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "seed": args.seed,
        "corpus_fingerprint": corpus.fingerprint,
        "data_checksums": data_checksums(args.data),
        "cache": None if args.no_cache else "enabled",
    }
    if extra:
        prov.update(extra)
    return prov


def data_checksums(data: str | None) -> dict:
    """SHA-256 of the text files of a Flickr8k folder (what the numbers depend on besides images)."""
    if data is None:
        return {"teaching_set": "generated from the seed; see corpus fingerprint"}
    out = {}
    root = Path(data)
    seen: set[str] = set()
    # os.walk with followlinks: a linked text folder (``Flickr8k_text -> /data/...``) is read too; each real
    # folder once, so a link cycle ends
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:
            dirnames[:] = []
            continue
        seen.add(real)
        for name in filenames:
            p = Path(dirpath) / name
            if p.suffix in (".txt", ".csv", ".json") and p.is_file() and p.stat().st_size < 64 << 20:
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    return dict(sorted(out.items()))


def _log_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` while the job runs: the message alone (loader notes, skipped images),
    logged to the console and ``run.log`` — not the ``file.py:103: UserWarning:`` + source-line form."""
    logging.getLogger("py.warnings").warning("warning: %s", message)


def _printed_by_its_own_logger(record: logging.LogRecord) -> bool:
    """Whether ``record`` was printed by a console handler before it reached the root logger: a library
    logger with its own stderr/stdout handler that also propagates (huggingface_hub installs one when it is
    imported) would otherwise print each message twice, once there and once through the job's console
    handler.  A handler whose level is above the record's did not print it.  Such records still reach
    ``run.log``."""
    lg = logging.getLogger(record.name)
    while lg is not None and lg is not logging.root:
        for h in lg.handlers:
            if (isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
                    and record.levelno >= h.level
                    and getattr(h, "stream", None) in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)):
                return True
        if not lg.propagate:
            return False
        lg = lg.parent
    return False


class _ConsoleHandler(logging.StreamHandler):
    """Console log lines printed through ``tqdm.write``: the progress bars on the stream are cleared
    first and redrawn below the message, instead of the message landing inside a bar's line.

    Only tqdm's write lock serialises the output: :meth:`handle` does not take the handler's own lock,
    because tqdm issues warnings (which the job logs) while holding its lock, and taking the two locks in
    opposite orders in two threads would deadlock."""

    def handle(self, record: logging.LogRecord):
        if _printed_by_its_own_logger(record):   # e.g. huggingface_hub's: printed once already
            return False
        rv = self.filter(record)
        if isinstance(rv, logging.LogRecord):   # Python ≥ 3.12: a filter may return a replacement record
            record = rv
        if rv:
            self.emit(record)
        return rv

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm.auto import tqdm

            tqdm.write(self.format(record), file=self.stream)
        except Exception:  # noqa: BLE001 - logging must never raise (as logging.StreamHandler)
            self.handleError(record)


def setup_logging(out_dir: Path) -> logging.Handler:
    """Log to the console and ``out_dir/run.log``; warnings are logged too.  Undo with
    :func:`teardown_logging`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fh = logging.FileHandler(out_dir / "run.log", mode="w", encoding="utf-8")
    fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.addHandler(fh)
    if not any(isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
               for h in root.handlers):
        sh = _ConsoleHandler(sys.stderr)
        sh.setFormatter(logging.Formatter("%(message)s"))
        root.addHandler(sh)
    fh.prev_showwarning = warnings.showwarning  # type: ignore[attr-defined]
    warnings.showwarning = _log_warning
    return fh


def teardown_logging(handler: logging.Handler) -> None:
    """Remove the ``run.log`` handler of :func:`setup_logging` and restore ``warnings.showwarning``."""
    logging.getLogger().removeHandler(handler)
    handler.close()
    prev = getattr(handler, "prev_showwarning", None)
    if prev is not None:
        warnings.showwarning = prev


def default_out_dir(corpus_name: str) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{corpus_name}-{stamp}"


def parse_list(value: str | None, default: Sequence[str], allowed: Sequence[str] | None, what: str) -> list[str]:
    if value is None:
        return list(default)
    if value.strip().lower() == "none":
        return []
    if value.strip().lower() == "all" and allowed is not None:
        return list(allowed)
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise PipelineError(f"--{what}: no names in {value!r} (give a comma-separated list, or 'none' to run "
                            f"no {what})")
    if allowed is not None:
        by_lower = {a.lower(): a for a in allowed}  # clip-s == CLIP-S
        items = [by_lower.get(v.lower(), v) for v in items]
        bad = [v for v in items if v not in allowed]
        if bad:
            raise PipelineError(f"unknown {what}: {', '.join(bad)} (choose from {', '.join(allowed)})")
    return items


def requested_methods(args) -> tuple[list[str], list[str]]:
    """The classical systems (canonical names) and neural scorers that ``--systems`` / ``--metrics``
    ask for (defaults: :data:`DEFAULT_SYSTEMS` or :data:`QUICK_SYSTEMS`, :data:`DEFAULT_NEURAL`);
    an unknown name is a :class:`PipelineError` listing the choices."""
    from kcca.systems import canonical_name, split_system_list

    value = (args.systems or "").strip()
    if args.systems is not None and not value.replace(",", "").strip():
        raise PipelineError(f"--systems: no names in {args.systems!r} (give a comma-separated list, 'all', or "
                            f"'none' to run no classical system)")
    try:
        if value.lower() == "all":
            systems = available_systems()
        elif value.lower() == "none":
            systems = []
        elif value:   # names may contain commas themselves (TRI5_A,D_ext)
            systems = list(dict.fromkeys(split_system_list(value)))
        else:
            systems = [canonical_name(s) for s in (QUICK_SYSTEMS if args.quick else DEFAULT_SYSTEMS)]
    except ValueError as exc:
        raise PipelineError(str(exc)) from exc
    return systems, parse_list(args.metrics, DEFAULT_NEURAL, ALL_NEURAL, "metrics")


def reference_choice(args, systems: Sequence[str], neural: Sequence[str]) -> str | None:
    """``--reference`` as the name of a requested system or scorer (canonical spelling), or ``None`` for
    'best'; an unknown or unrequested name is a :class:`PipelineError`."""
    value = (getattr(args, "reference", None) or "best").strip()
    if value.lower() == "best":
        return None
    from kcca.systems import canonical_name

    by_lower = {n.lower(): n for n in neural}
    try:
        name = by_lower.get(value.lower()) or canonical_name(value)
    except ValueError:
        name = value
    if name not in set(systems) | set(neural):
        raise PipelineError(f"--reference {value}: not among the requested systems and scorers "
                            f"({', '.join(list(systems) + list(neural)) or 'none'}); use one of them or 'best'")
    return name


def check_neural_options(args) -> None:
    """Reject ``--clip-model`` / ``--clip-pretrained`` / ``--pacs-positives`` values that cannot work,
    before the corpus is loaded: weights for the tiny CLIP, an unknown open_clip architecture, a weights
    file that does not exist, an untrusted TorchScript archive, a pretrained tag that is unknown or neither
    cached nor downloadable (downloads off, host unreachable), a CUDA device on a machine without one, a
    PAC-S tuples file that is unreadable, malformed or names missing images."""
    if args.device not in (None, "auto", "cpu"):  # "auto" and "cpu" always resolve: no torch import needed
        from neural.backbone import resolve_device

        try:
            resolve_device(args.device)
        except RuntimeError as exc:
            raise PipelineError(f"--device: {exc}") from exc
    if getattr(args, "pacs_positives", None):
        from neural.positives import check_positives_file

        try:
            check_positives_file(args.pacs_positives, min_tuples=MIN_PACS_TUPLES)
        except (ValueError, FileNotFoundError) as exc:
            raise PipelineError(f"--pacs-positives: {exc}") from exc
    if uses_tiny_clip(args):
        if args.clip_pretrained:
            raise PipelineError(f"--clip-pretrained needs an open_clip architecture in --clip-model (the "
                                f"architecture of the weights, e.g. ViT-B-32, or auto); --clip-model "
                                f"{args.clip_model or 'tiny'} is the tiny CLIP, which is always trained here")
        return
    if args.clip_model != "auto":
        from neural.backbone import check_architecture

        try:
            check_architecture(args.clip_model.replace("/", "-"))
        except ValueError as exc:
            raise PipelineError(f"--clip-model: {exc}") from exc
    from neural.backbone import check_pretrained_tag, looks_like_weights_file
    from neural.checkpoints import MissingWeightsError

    pretrained = args.clip_pretrained or "openai"   # backbone_for's default tag
    p = Path(pretrained).expanduser()
    if p.is_file():
        from neural.checkpoints import (
            is_torchscript_archive,
            torchscript_refused,
            torchscript_trusted,
            weights_file_format,
        )

        if weights_file_format(p) is None:
            raise PipelineError(f"--clip-pretrained {p}: not a weights file (neither safetensors, a PyTorch "
                                f"zip archive / TorchScript nor a legacy torch.save file)")
        if is_torchscript_archive(p) and not torchscript_trusted():
            raise PipelineError(f"--clip-pretrained {torchscript_refused(p)}")
        return
    if looks_like_weights_file(pretrained):
        raise PipelineError(f"--clip-pretrained {p}: weights file not found")
    if args.clip_model == "auto":
        raise PipelineError(f"--clip-model auto infers the architecture from a weights file, but "
                            f"--clip-pretrained {pretrained!r} is not a file; give the file, or name the "
                            f"architecture (e.g. --clip-model ViT-B-32) for a pretrained tag")
    try:  # a tag: known, and cached or downloadable now (nothing is downloaded here)
        check_pretrained_tag(args.clip_model, pretrained)
    except (ValueError, MissingWeightsError) as exc:
        raise PipelineError(str(exc)) from exc


# ---------------------------------------------------------------------------------------------- classical
def run_classical(corpus: Corpus, pools: Mapping[str, RankingPool], names: Sequence[str], args,
                  cache: DiskCache) -> tuple[dict[str, SystemOutput], dict, object]:
    """Train every classical system (Hodosh Appendix B) and return its test score matrices.

    Kernels, Gram matrices and KCCA decompositions are shared across systems in one
    :class:`~kcca.kernel_store.KernelStore` (one fit per image kernel kind, one per text kernel) and
    cached on disk.  Returns ``(outputs, runs, store)``: the per-system run details (chosen p, d, (n, κ)
    models, dev metrics) for ``results.json`` and the store :func:`kcca_pair_scorers` needs.  To bound
    memory on Flickr8k, every system's fitted KCCA models are released once its rankings exist, and a
    text kernel is dropped after the last system that uses it unless :func:`kcca_pair_scorers` will need
    it (TRI5SEM's, and the best system's by :func:`best_kcca_system`).
    """
    from tqdm.auto import tqdm

    from kcca.kernel_store import KernelStore
    from kcca.systems import get_system, run_system

    store = KernelStore()
    outputs: dict[str, SystemOutput] = {}
    runs: dict = {}
    # Default: image power p = 2 and text diagonal factor d = 1 fixed in advance for every kernel pair
    # (on the teaching set, choosing d on dev overfits: see docs/teaching_set.md), float32 KCCA; the
    # 15-model selection always sweeps all four κ and 46 n on dev.  --full-selection chooses (p, d) on
    # dev over p ∈ {2, 3} × d ∈ {1, 2, 5, 10, 15} with all κ and float64 KCCA.  float32 runs at its
    # numerical rank (jitter="auto": eigenvalues above N·eps32·λ_max, see kcca.solver).
    extra: dict = {} if getattr(args, "full_selection", False) else {
        "powers": (2,), "diag_factors": (1.0,), "kcca_kwargs": {"dtype": "float32", "jitter": "auto"}}
    # Memory (Flickr8k: ~0.3 GB per text kernel, ~1 GB of fitted models per system): a text kernel is
    # dropped after the last system that uses it unless a KCCA pair scorer will need it (TRI5SEM's and
    # the best system's so far, chosen as kcca_pair_scorers chooses); fitted models are always released.
    texts: dict[str, str] = {}      # KCCA system -> its text kernel
    last_use: dict[str, int] = {}   # text kernel -> index of the last system that uses it
    for i, n in enumerate(names):
        c = get_system(n)
        if c.model == "kcca":
            texts[c.name], last_use[c.text] = c.text, i
    r10: dict[str, float] = {}
    bar = tqdm(names, desc="classical systems", unit="system", disable=args.no_progress)
    for i, name in enumerate(bar):
        bar.set_postfix_str(name)
        cfg = get_system(name)
        r = run_system(name, corpus, store=store, seed=args.seed, cache=cache, pools=pools,
                       show_progress=not args.no_progress, skip_missing_images=args.skip_missing_images, **extra)
        family = "baseline" if cfg.model == "nn" else "classical"
        outputs[r.name] = SystemOutput(name=r.name, family=family, test=r.test_matrices,
                                       config=_jsonable(r.config))
        # The fitted KCCA models (hundreds of MB per system on Flickr8k) are not needed for retrieval any
        # more; the KCCA pair scorers refit the one model they use.  The kernel decompositions stay.
        r.release_models()
        runs[r.name] = r
        if cfg.model == "kcca":
            r10[r.name] = _metrics(evaluate_pool(r.test_matrices, pools["test"])["annotation"])["R@10"]
            needed = {texts[n] for n in ("TRI5SEM", best_kcca_system(r10)) if n in texts}
            for t, last in last_use.items():
                if last <= i and t not in needed:
                    store.drop_text(t)
    from kernels.text.preprocess import clear_preprocess_memo

    clear_preprocess_memo()  # the kernels are built; later captions (human judgments) are new ones
    return outputs, runs, store


def best_kcca_system(r10: Mapping[str, float]) -> str | None:
    """The classical system whose KCCA affinity the human-correlation table reports besides TRI5SEM's:
    the highest test annotation R@10 (as rounded in results.json), ties to the later name."""
    return max(r10, key=lambda n: (r10[n], n)) if r10 else None


def kcca_pair_scorers(corpus: Corpus, runs: Mapping, store, systems_json: Mapping) -> dict[str, Callable]:
    """The KCCA affinity f(i, s) (Hodosh Eq. 4) as a caption metric, for TRI5SEM and the best classical
    system (single best (n, κ) model on dev; see :class:`kcca.caption_metric.KCCACaptionMetric`), over
    the :class:`~kcca.kernel_store.KernelStore` ``store`` that :func:`run_classical` returned."""
    from kcca.caption_metric import KCCACaptionMetric
    from kcca.systems import get_system

    kcca_runs = [n for n in runs if get_system(n).model == "kcca"]
    if not kcca_runs:
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


def _jsonable(obj):
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj


# ---------------------------------------------------------------------------------------------- humans
def _cached_row_scores(cache: DiskCache | None, corpus: Corpus, name: str, fn: Callable, tag: str, rows,
                       image_based: bool = False):
    """Per-row scores of one scorer on one protocol, cached under the scorer's identity
    (``fn.identity``) + the rows, their candidates and references included
    (:meth:`~evaluation.correlation.JudgmentRows.items_digest`) (+ the signatures of the rows' image files
    for an image-based scorer); scorers without an identity are recomputed."""
    from evaluation.correlation import score_rows

    ident = getattr(fn, "identity", None)
    if cache is None or ident is None:
        return score_rows(rows, fn)
    key = {"what": "human_rows", "scorer": name, "identity": ident, "corpus": corpus.fingerprint,
           "protocol": tag, "rows": rows.items_digest(), "n": len(rows),
           "images": corpus.images_fingerprint(dict.fromkeys(rows.image_ids)) if image_based else None}
    return cache.get_or_compute("human_scores", key, lambda: {"s": score_rows(rows, fn)})["s"]


def human_correlation_table(corpus: Corpus, scorers: Mapping[str, Callable],
                            image_based: set[str] | frozenset = frozenset(),
                            cache: DiskCache | None = None) -> dict:
    """Flickr8k-Expert and Flickr8k-CF correlations (×100) for every pair scorer.

    ``scorers`` maps a name to ``score_fn(image_ids, candidates, references) -> scores``.  Scorers named in
    ``image_based`` only see the rows whose image is on disk; ``n_expert`` / ``n_cf`` report the rows used.
    """
    from evaluation.correlation import flickr8k_cf_rows, flickr8k_expert_rows, human_correlation

    if not corpus.expert and not corpus.crowd:
        return {}
    protocols = []
    if corpus.expert:
        protocols.append(("expert", flickr8k_expert_rows(corpus)))
    if corpus.crowd:
        try:
            protocols.append(("cf", flickr8k_cf_rows(corpus)))
        except ValueError as exc:   # e.g. an image whose every caption is judged for it: no references left
            raise PipelineError(f"human correlation, Flickr8k-CF protocol: {exc}") from exc
    restricted = {tag: restrict_rows(rows, [corpus.has_image(i) for i in rows.image_ids])
                  for tag, rows in protocols}
    out: dict[str, dict] = {}
    for name, fn in scorers.items():
        row: dict = {}
        for tag, rows in protocols:
            use = restricted[tag] if name in image_based else rows
            if len(use) < 3:
                row[f"n_{tag}"] = len(use)
                continue
            hc = human_correlation(use, _cached_row_scores(cache, corpus, name, fn, tag, use,
                                                           image_based=name in image_based))
            # 4 decimals: the report rounds once, to 1 (2-decimal values rounded again would go both ways)
            row[f"{tag}_tau_b"] = round(100 * hc["tau_b"], 4)
            row[f"{tag}_tau_c"] = round(100 * hc["tau_c"], 4)
            row[f"{tag}_rho"] = round(100 * hc["spearman"], 4)
            row[f"n_{tag}"] = int(hc["n"])
        out[name] = row
    return out


def restrict_rows(rows, keep: Sequence[bool]):
    """The judgment rows whose ``keep`` flag is true (``pair_index`` renumbered)."""
    import dataclasses

    keep = np.asarray(keep, dtype=bool)
    if keep.all():
        return rows
    idx = np.flatnonzero(keep)
    _, new_pair = np.unique(rows.pair_index[idx], return_inverse=True)
    return dataclasses.replace(
        rows, image_ids=[rows.image_ids[i] for i in idx], candidate_ids=[rows.candidate_ids[i] for i in idx],
        candidates=[rows.candidates[i] for i in idx], references=[rows.references[i] for i in idx],
        human=rows.human[idx], pair_index=new_pair.astype(np.int64),
        notes=list(rows.notes) + [f"restricted to {len(idx)} of {len(keep)} rows whose image is on disk"])


# ---------------------------------------------------------------------------------------------- neural
def uses_tiny_clip(args) -> bool:
    """Whether ``--clip-model`` selects the tiny CLIP trained here: absent, ``tiny`` or ``tiny-clip``
    (:data:`neural.names.TINY_MODEL_NAMES`)."""
    from neural.names import is_tiny_model

    return is_tiny_model(getattr(args, "clip_model", None), default=True)


def neural_train_ids(corpus: Corpus, args) -> list[str] | None:
    """The training images of the trained neural scorers (L-CLIPScore, BRIDGE, SPECS): with
    ``--skip-missing-images`` only the train-split images on disk (as the classical systems), else
    ``None`` (the whole split; a missing image is an error)."""
    if not getattr(args, "skip_missing_images", False):
        return None
    return [i for i in corpus.split("train") if corpus.has_image(i)]


def load_neural_backbone(corpus: Corpus, args, cache: DiskCache):
    """The tiny CLIP trained here (default, offline) or an open_clip backbone (name + tag / file), via
    :func:`neural.factory.backbone_for`; loading failures become :class:`PipelineError`."""
    from neural.checkpoints import WeightsError
    from neural.factory import backbone_for

    tiny = uses_tiny_clip(args)
    if tiny and args.clip_pretrained:
        raise PipelineError("--clip-pretrained needs --clip-model (the architecture of the weights, "
                            "e.g. ViT-B-32); the tiny CLIP is always trained here")
    steps = args.clip_steps if getattr(args, "clip_steps", None) is not None else (40 if args.quick else None)
    try:
        return backbone_for(corpus, None if tiny else args.clip_model, args.clip_pretrained, seed=args.seed,
                            cache=cache, device=args.device, show_progress=not args.no_progress,
                            **({"steps": steps} if tiny else {}))
    except (WeightsError, FileNotFoundError, RuntimeError, ValueError) as exc:
        raise PipelineError(str(exc)) from exc


#: ``--pacs-positives`` needs this many tuples: at least 2 for validation and 2 for training.
MIN_PACS_TUPLES = 4


def _split_tuples(tuples, *, seed: int, val_share: float = 0.1):
    """Seeded train / validation split of user-supplied PAC-S tuples (validation: ≥ 2 tuples)."""
    from neural.pacs import PositiveTuples

    n = len(tuples)
    if n < MIN_PACS_TUPLES:
        raise PipelineError(f"--pacs-positives: need at least {MIN_PACS_TUPLES} tuples (got {n})")
    perm = np.random.default_rng(seed).permutation(n)
    n_val = max(2, int(round(n * val_share)))
    parts = []
    for idx, tag in ((perm[n_val:], "train"), (perm[:n_val], "val")):
        ident = None if tuples.identity is None else {**tuples.identity, "part": tag, "seed": seed}
        parts.append(PositiveTuples(images=[tuples.images[i] for i in idx], texts=[tuples.texts[i] for i in idx],
                                    gen_images=[tuples.gen_images[i] for i in idx],
                                    gen_texts=[tuples.gen_texts[i] for i in idx], identity=ident))
    return parts[0], parts[1]


def run_neural(corpus: Corpus, pools: Mapping[str, RankingPool], names: Sequence[str], args,
               cache: DiskCache) -> tuple[dict[str, SystemOutput], dict[str, Callable], dict, dict]:
    """Train / load the CLIP family and score the test pool.

    Returns ``(retrieval outputs, pair scorers for human correlation, specificity rates, provenance)``.
    Reference-based variants (RefCLIP-S, RefPAC-S, RefL-CLIPScore) only score pairs: ranking a pool
    with the pool's own references would leak the answer.  With ``--skip-missing-images`` the trained
    scorers see only the training images on disk; an image that is still missing raises
    :class:`PipelineError`.
    """
    from corpora.base import MissingImagesError

    try:
        return _run_neural(corpus, pools, names, args, cache)
    except MissingImagesError as exc:
        if getattr(args, "skip_missing_images", False):
            raise PipelineError(f"neural scorers: {exc.what}") from exc
        raise PipelineError("neural scorers: " + missing_images_message(exc)) from exc


def _run_neural(corpus: Corpus, pools: Mapping[str, RankingPool], names: Sequence[str], args,
                cache: DiskCache) -> tuple[dict[str, SystemOutput], dict[str, Callable], dict, dict]:
    names = list(names)
    if not names:
        return {}, {}, {}, {}
    from corpora.base import GeneratedCorpus, MissingImagesError
    from neural.base import CorpusPairScorer, affinity_for_pool
    from neural.clipscore import CLIPScore

    timings: dict[str, float] = {}
    t = time.perf_counter()
    bb = load_neural_backbone(corpus, args, cache)
    timings["backbone"] = time.perf_counter() - t
    prov = {"backbone": bb.provenance()}
    show = not args.no_progress
    train_ids = neural_train_ids(corpus, args)   # None: the whole train split
    scorers: dict[str, object] = {}      # retrieval + pair scoring
    ref_scorers: dict[str, object] = {}  # pair scoring with references
    if "CLIP-S" in names or "RefCLIP-S" in names:
        scorers["CLIP-S"] = CLIPScore(bb)
        ref_scorers["RefCLIP-S"] = CLIPScore(bb, reference_based=True)
    if "PAC-S" in names or "RefPAC-S" in names:
        from neural.pacs import PACScore, RefPACScore, finetune_pacs, load_tuples, teaching_tuples

        t = time.perf_counter()
        pacs_bb = bb
        if getattr(args, "pacs_positives", None):
            try:
                tuples = load_tuples(args.pacs_positives)
            except (ValueError, MissingImagesError) as exc:  # the file changed since the up-front check
                raise PipelineError(f"--pacs-positives: {exc}") from exc
            train, val = _split_tuples(tuples, seed=args.seed)
            pacs_bb = finetune_pacs(bb, train, val, cache=cache, show_progress=show)
        elif isinstance(corpus, GeneratedCorpus):
            n_img = 300 if args.quick else 700
            train = teaching_tuples(corpus, "train", seed=args.seed, max_images=n_img)
            val = teaching_tuples(corpus, "dev", seed=args.seed, max_images=150)
            pacs_bb = finetune_pacs(bb, train, val, cache=cache, show_progress=show)
        else:
            log.warning("PAC-S: no generated positives for %s (pass --pacs-positives FILE, or load the "
                        "official PAC-S checkpoint with --clip-pretrained); scoring with the PAC-S formula "
                        "on the backbone as given", corpus.name)
        prov["pacs_backbone"] = pacs_bb.provenance()
        scorers["PAC-S"] = PACScore(pacs_bb)
        ref_scorers["RefPAC-S"] = RefPACScore(pacs_bb)
        timings["PAC-S"] = time.perf_counter() - t
    if "L-CLIPScore" in names or "RefL-CLIPScore" in names:
        from neural.lclip import LCLIPConfig, LCLIPScore, train_lclip_on_corpus

        t = time.perf_counter()
        student = train_lclip_on_corpus(bb, corpus, "train", LCLIPConfig(seed=args.seed), cache=cache,
                                        show_progress=show, image_ids=train_ids)
        prov["lclip_student"] = student.provenance()
        scorers["L-CLIPScore"] = LCLIPScore(student)
        ref_scorers["RefL-CLIPScore"] = LCLIPScore(student, name="RefL-CLIPScore")
        timings["L-CLIPScore"] = time.perf_counter() - t
    bridge = None
    if "BRIDGE" in names:
        from neural.bridge import BRIDGE, BridgeConfig, BridgePairScorer

        t = time.perf_counter()
        bridge = BRIDGE(bb, BridgeConfig(seed=args.seed)).fit(corpus, "train", cache=cache, show_progress=show,
                                                              image_ids=train_ids)
        timings["BRIDGE"] = time.perf_counter() - t
    specs_scorer = None
    if "SPECS" in names:
        from neural.specs import SPECSConfig, SPECSScore, train_specs

        t = time.perf_counter()
        cfg = SPECSConfig.for_tiny(seed=args.seed) if uses_tiny_clip(args) else SPECSConfig(seed=args.seed)
        specs_bb = train_specs(bb, corpus, "train", cfg, cache=cache, show_progress=show, image_ids=train_ids)
        prov["specs_backbone"] = specs_bb.provenance()
        specs_scorer = SPECSScore(specs_bb)
        scorers["SPECS"] = specs_scorer
        timings["SPECS"] = time.perf_counter() - t

    # Retrieval on the test pool: every reference-free scorer.
    pool = pools["test"]
    outputs: dict[str, SystemOutput] = {}
    t = time.perf_counter()
    for name, sc in scorers.items():
        if name not in names:
            continue
        S = affinity_for_pool(sc, corpus, pool, cache=cache)
        outputs[name] = SystemOutput(name=name, family="neural", test=ScoreMatrices.from_affinity(S),
                                     config={"backbone": sc.backbone.name, "weights_id": sc.backbone.weights_id})
    if bridge is not None:   # templates from the source chosen at fit time (BRIDGE.affinity)
        S = affinity_for_pool(bridge, corpus, pool, cache=cache)
        outputs["BRIDGE"] = SystemOutput(name="BRIDGE", family="neural", test=ScoreMatrices.from_affinity(S),
                                         config={"backbone": bb.name, "weights_id": bb.weights_id,
                                                 "template_source": getattr(bridge, "template_source", None)})
    timings["neural retrieval"] = time.perf_counter() - t

    # Pair scorers for the human-correlation tables.
    pair: dict[str, Callable] = {}
    for name, sc in scorers.items():
        if name in names:
            pair[name] = CorpusPairScorer(sc, corpus, cache, use_references=False)
    for name, sc in ref_scorers.items():
        if name in names:
            pair[name] = CorpusPairScorer(sc, corpus, cache, use_references=True)
    if bridge is not None:
        pair["BRIDGE"] = BridgePairScorer(bridge, corpus)

    # Specificity rate (SPECS Eqs. 1-2) where the corpus can produce detail units.
    specificity: dict = {}
    if isinstance(corpus, GeneratedCorpus):
        from neural.specs import specificity_on_corpus

        t = time.perf_counter()
        # cached per scorer (under its identity); the scorers not in the cache are computed in one call,
        # which builds the detail units and loads the images once for all of them
        keys = {k: {"what": "specificity", "scorer": v.cache_identity(), "corpus": corpus.name,
                    "fingerprint": corpus.fingerprint, "split": "test", "max_images": 100, "seed": args.seed}
                if hasattr(v, "cache_identity") else None
                for k, v in scorers.items() if k in names}
        sr = {k: hit for k, key in keys.items()
              if key is not None and (hit := cache.load("specificity", key)) is not None}
        missing = {k: scorers[k] for k in keys if k not in sr}
        if missing:
            fresh = specificity_on_corpus(missing, corpus, "test", max_images=100, seed=args.seed)
            for k in missing:
                sr[k] = {m: np.asarray(float(fresh[k][m])) for m in ("SR_pos", "SR_neg")}
                if keys[k] is not None:
                    cache.store("specificity", keys[k], sr[k])
        specificity = {k: {"SR_pos": round(float(v["SR_pos"]), 4), "SR_neg": round(float(v["SR_neg"]), 4)}
                       for k, v in sr.items()}
        timings["specificity"] = time.perf_counter() - t
        for k, v in specificity.items():
            log.info("specificity %-14s SR_pos %5.1f %%  SR_neg %5.1f %%", k, 100 * v["SR_pos"], 100 * v["SR_neg"])
    prov["neural_timings_s"] = {k: round(v, 2) for k, v in timings.items()}
    return outputs, pair, specificity, prov


# ---------------------------------------------------------------------------------------------- neural stage cache
#: Layout version of the ``neural_stage`` cache entries (bump when what is stored changes).
NEURAL_STAGE_VERSION = 1
#: Source files whose code decides the neural stage's numbers (besides the libraries): a change to any of
#: them gives the stage a new cache key (the per-scorer entries below it keep theirs).
NEURAL_STAGE_SOURCES = ("neural", "corpora", "experiments/pipeline.py")


def _source_digest(paths: Sequence[str] = NEURAL_STAGE_SOURCES) -> str:
    """SHA-256 prefix of the ``.py`` files under ``paths`` (relative to the repository root), names and
    contents, in sorted order."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for rel in paths:
        p = root / rel
        for f in (sorted(p.rglob("*.py")) if p.is_dir() else [p] if p.is_file() else []):
            h.update(f.relative_to(root).as_posix().encode() + b"\0")
            h.update(f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _library_versions(names: Sequence[str] = ("torch", "torchvision", "open_clip_torch", "numpy", "pillow",
                                             "nltk", "opencv-python-headless", "opencv-python")) -> dict:
    """``{distribution: installed version or None}`` (read from the package metadata, nothing imported)."""
    import importlib.metadata as md

    out = {}
    for n in names:
        try:
            out[n] = md.version(n)
        except md.PackageNotFoundError:
            out[n] = None
    return out


def neural_stage_key(corpus: Corpus, pools: Mapping[str, RankingPool], names: Sequence[str], args) -> dict | None:
    """Cache key of the whole neural stage (:func:`neural_stage`), computed without importing torch.

    It holds what decides the stage's outputs: the corpus (name, fingerprint of captions and splits, the
    signatures of every image the stage reads: training, dev and test-pool images), the test pool, the
    scorers asked for, the options that reach them (``--seed``, ``--quick``, ``--clip-model``,
    ``--clip-pretrained`` — a weights file by path, size and modification time —, ``--clip-steps``,
    ``--device``, with ``auto`` the NVIDIA driver's presence and ``CUDA_VISIBLE_DEVICES``,
    ``--skip-missing-images``' training images), the versions of the libraries that compute
    them, and a digest of the code (:data:`NEURAL_STAGE_SOURCES`).  ``None`` (not cached as a whole) with
    ``--pacs-positives``: the tuples file names images whose identity only :mod:`neural.pacs` can read.
    """
    if getattr(args, "pacs_positives", None):
        return None
    weights_file = None
    if args.clip_pretrained:
        p = Path(args.clip_pretrained).expanduser()
        if p.is_file():
            st = p.stat()
            weights_file = {"path": str(p.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    train_ids = neural_train_ids(corpus, args)
    splits = getattr(corpus, "splits", {})
    pool = pools["test"]
    ids = list(dict.fromkeys([*(train_ids if train_ids is not None else splits.get("train", ())),
                              *splits.get("dev", ()), *pool.image_ids]))
    return {
        "what": "neural-stage", "version": NEURAL_STAGE_VERSION, "code": _source_digest(),
        "libraries": _library_versions(), "python": platform.python_version(),
        "corpus": corpus.name, "fingerprint": corpus.fingerprint,
        "images": corpus.images_fingerprint(ids), "n_images": len(ids),
        "train_ids": None if train_ids is None else _fingerprint(train_ids),
        "pool": {"split": pool.split, "image_ids": _fingerprint(pool.image_ids),
                 "caption_ids": _fingerprint(pool.caption_ids)},
        "names": list(names), "seed": int(args.seed), "quick": bool(args.quick),
        "clip_model": args.clip_model, "clip_pretrained": args.clip_pretrained, "weights_file": weights_file,
        "clip_steps": getattr(args, "clip_steps", None), "device": args.device,
        # "auto" means CUDA where torch sees it; without importing torch, the NVIDIA driver and the
        # visible-devices setting stand in (the provenance then names the device actually used)
        "cuda_hint": [Path("/proc/driver/nvidia/version").exists(), os.environ.get("CUDA_VISIBLE_DEVICES")]
        if args.device == "auto" else None,
    }


class _DeferredPairScorer:
    """A neural pair scorer restored from the neural-stage cache: its ``identity`` (the key of its cached
    human-judgment scores) is known, the backbone is only built — by running the neural stage on its
    per-scorer caches — if a score is actually asked for."""

    def __init__(self, name: str, identity, resolve: Callable[[], Mapping[str, Callable]]):
        self.name, self._resolve = name, resolve
        if identity is not None:  # without one (as the live scorer) its scores are never cached
            self.identity = identity

    def __call__(self, image_ids, candidates, references):
        return self._resolve()[self.name](image_ids, candidates, references)


def neural_stage(corpus: Corpus, pools: Mapping[str, RankingPool], names: Sequence[str], args,
                 cache: DiskCache) -> tuple[dict[str, SystemOutput], dict[str, Callable], dict, dict]:
    """:func:`run_neural`, with its results cached as a whole (namespace ``neural_stage``, key
    :func:`neural_stage_key`).

    A warm re-run then reads one entry — the test-pool score matrices, the pair scorers' identities, the
    specificity rates and the provenance — and neither imports torch nor builds a backbone.  The pair
    scorers come back deferred (:class:`_DeferredPairScorer`): the human-correlation stage finds their
    scores in its own cache; a scorer asked for a new score runs :func:`run_neural` once (from the
    per-scorer caches) and answers.  Returns what :func:`run_neural` returns.
    """
    names = list(names)
    key = neural_stage_key(corpus, pools, names, args) if names else None
    if key is None:
        return run_neural(corpus, pools, names, args, cache)
    t0 = time.perf_counter()
    hit = cache.load("neural_stage", key)
    if hit is None:
        outputs, pair, specificity, prov = run_neural(corpus, pools, names, args, cache)
        meta = {"outputs": {k: {"family": v.family, "config": _jsonable(v.config)} for k, v in outputs.items()},
                "pair": {k: _jsonable(getattr(f, "identity", None)) for k, f in pair.items()},
                "specificity": _jsonable(specificity), "provenance": _jsonable(prov)}
        arrays = {f"S::{k}": np.asarray(v.test.annotation, dtype=np.float32) for k, v in outputs.items()}
        arrays["meta"] = np.array(json.dumps(meta))
        cache.store("neural_stage", key, arrays)
        return outputs, pair, specificity, prov

    meta = json.loads(str(hit["meta"]))
    outputs = {k: SystemOutput(name=k, family=v["family"], test=ScoreMatrices.from_affinity(hit[f"S::{k}"]),
                               config=v["config"]) for k, v in meta["outputs"].items()}
    resolved: dict[str, Mapping[str, Callable]] = {}

    def resolve() -> Mapping[str, Callable]:
        if "pair" not in resolved:
            log.info("neural scorers: a human-judgment score is not cached; building the scorers")
            live = run_neural(corpus, pools, names, args, cache)[1]
            changed = sorted(k for k, f in live.items()
                             if k in meta["pair"] and _jsonable(getattr(f, "identity", None)) != meta["pair"][k])
            if changed:  # retrained with other weights (their caches were deleted; other threads or device)
                log.warning("neural scorers %s were rebuilt with other weights than the cached neural stage "
                            "used; their new human-judgment scores do not belong to the report's retrieval "
                            "numbers: delete %s (or run with --no-cache) for a consistent report",
                            ", ".join(changed), cache.path("neural_stage", key))
            resolved["pair"] = live
        return resolved["pair"]

    pair = {k: _DeferredPairScorer(k, ident, resolve) for k, ident in meta["pair"].items()}
    specificity = meta["specificity"]
    for k, v in specificity.items():
        log.info("specificity %-14s SR_pos %5.1f %%  SR_neg %5.1f %%", k, 100 * v["SR_pos"], 100 * v["SR_neg"])
    prov = meta["provenance"]
    prov["neural_timings_s"] = {"cached stage": round(time.perf_counter() - t0, 2)}
    log.info("neural scorers: %s read from the cache", ", ".join(outputs) or "human-correlation scores")
    return outputs, pair, specificity, prov


# ---------------------------------------------------------------------------------------------- n-grams
def ngram_scorers(names: Sequence[str] = NGRAM_METRICS) -> dict[str, Callable]:
    """Reference-based n-gram caption metrics as pair scorers (no images needed)."""
    from evaluation.caption_metrics import bleu, cider_d, rouge_l
    from evaluation.correlation import text_metric

    table = {
        # bleu(...) returns one column per order m (column m − 1 is BLEU-m).
        "BLEU-1": text_metric(lambda c, r: bleu(c, r, n=1)[:, 0]),
        "BLEU-4": text_metric(lambda c, r: bleu(c, r, n=4)[:, 3]),
        "ROUGE-L": text_metric(rouge_l),
        "CIDEr-D": text_metric(cider_d),
    }
    for k, fn in table.items():
        fn.identity = {"metric": k, "implementation": "evaluation.caption_metrics"}
    return {k: table[k] for k in names}


# ---------------------------------------------------------------------------------------------- gallery
def make_gallery(corpus: Corpus, pool: RankingPool, outputs: Mapping[str, SystemOutput],
                 systems_json: Mapping, k: int = 5):
    """One query image with the top-k captions of the best classical and the best neural system."""
    from experiments.report import GalleryItem

    def best(family):
        cands = [s for s, v in systems_json.items() if v["family"] == family]
        return max(cands, key=lambda s: (systems_json[s]["annotation"].get("R-precision", 0.0),
                                         systems_json[s]["annotation"]["R@10"], s)) if cands else None

    chosen = [s for s in (best("classical"), best("neural")) if s is not None]
    if not chosen:
        return []
    # The query: the first test image (deterministic) that has an image on disk.
    qi = next((i for i, im in enumerate(pool.image_ids) if corpus.has_image(im)), None)
    if qi is None:
        return []
    item = GalleryItem(image=corpus.load_image(pool.image_ids[qi]), image_id=pool.image_ids[qi],
                       gold_caption=pool.captions[int(pool.gold_caption[qi])].text)
    for s in chosen:
        row = np.asarray(outputs[s].test.annotation[qi], dtype=np.float64)
        top = np.argsort(-row, kind="stable")[:k]
        item.columns[f"{s} ({systems_json[s]['family']})"] = [
            (pool.captions[j].text, bool(pool.relevance[qi, j])) for j in top]
    return [item]


# ---------------------------------------------------------------------------------------------- run
def run(args) -> dict[str, Path]:
    """Run the whole job; returns the paths of the written report files."""
    from corpora.base import CorpusError
    from experiments.report import QueryOutcomes, write_report
    from kernels.text.preprocess import MissingResourceError

    if not 0 <= args.seed < 2 ** 32:
        raise PipelineError(f"--seed must be in [0, 2^32) (got {args.seed})")
    corpus_label = "teaching" if args.data is None else Path(args.data).resolve().name.lower() or "flickr8k"
    out_dir = Path(args.out) if args.out else default_out_dir(corpus_label)
    # options are checked before anything is loaded, trained or written
    check_data_options(args)
    systems, neural = requested_methods(args)
    if not systems and not neural:
        raise PipelineError("--systems none and --metrics none: nothing to run (the n-gram caption metrics "
                            "against human judgments alone: python -m experiments.caption_metrics_vs_humans)")
    reference_name = reference_choice(args, systems, neural)   # None: the best system per task
    if getattr(args, "pacs_positives", None) and not {"PAC-S", "RefPAC-S"} & set(neural):
        raise PipelineError("--pacs-positives fine-tunes PAC-S / RefPAC-S, which --metrics does not request")
    if neural:
        check_neural_options(args)
    cache = DiskCache(args.cache_dir, enabled=not args.no_cache)
    for what, folder in (("--cache-dir", cache.root if cache.enabled else None), ("--out", out_dir)):
        if folder is None:
            continue
        if folder.exists() and not folder.is_dir():
            raise PipelineError(f"{what} {folder}: exists and is not a folder")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PipelineError(f"{what} {folder}: cannot create the folder "
                                f"({exc.strerror or exc.__class__.__name__}: {exc.filename or folder})") from exc
    earlier_report = (out_dir / "results.json").exists()
    handler = setup_logging(out_dir)
    timer = Timer()
    total = 7
    try:
        log.info("Output folder: %s", out_dir)
        if earlier_report:
            log.warning("warning: %s holds an earlier run's report; its report files and plots are replaced",
                        out_dir)
        with timer.stage("corpus", 1, total):
            corpus = load_corpus(args)
            log.info("%s: %d images, %d captions", corpus.name, len(corpus.image_ids),
                     sum(len(v) for v in corpus.captions.values()))
        with timer.stage("pools", 2, total):
            pools, skipped = build_pools(corpus, args)
            n_train = sum(corpus.has_image(i) for i in corpus.split("train"))
            train_skipped = len(corpus.split("train")) - n_train if args.skip_missing_images else 0
            too_small = [f"{s} pool has {p.n_images} image(s) on disk" for s, p in pools.items() if p.n_images < 2]
            if n_train < 2:
                too_small.append(f"train split has {n_train} image(s) on disk")
            if too_small:
                rest = ("only the text-only human-correlation tables are computed"
                        if (corpus.expert or corpus.crowd) else "the corpus has no human judgments either")
                msg = "retrieval skipped: " + "; ".join(too_small) + f" (need at least 2 each); {rest}"
                log.warning(msg)
                corpus.notes.append(msg)
        systems_run, neural_run = (([], []) if too_small else (systems, neural))
        if too_small and (systems or neural):
            msg = "not run (retrieval skipped): " + ", ".join(systems + neural)
            log.warning(msg)
            corpus.notes.append(msg)
        outputs: dict[str, SystemOutput] = {}
        with timer.stage("classical systems (kernels, KCCA, NN)", 3, total):
            classical, runs, kernel_store = (
                run_classical(corpus, pools, systems_run, args, cache) if systems_run else ({}, {}, None))
            outputs.update(classical)
        with timer.stage("neural scorers (CLIP family)", 4, total):
            neural_out, pair_scorers, specificity, neural_prov = neural_stage(corpus, pools, neural_run, args,
                                                                              cache)
            outputs.update(neural_out)
        with timer.stage("evaluation and significance", 5, total):
            systems_json, evals, reference = ({}, {}, {}) if not outputs else evaluate_systems(
                outputs, pools["test"], permutations=args.permutations, seed=args.seed, cache=cache,
                reference_system=reference_name)
        with timer.stage("human correlation", 6, total):
            kcca_scorers = kcca_pair_scorers(corpus, runs, kernel_store, systems_json)
            scorers = {**ngram_scorers(), **pair_scorers, **kcca_scorers}
            human = human_correlation_table(corpus, scorers, image_based=set(pair_scorers) | set(kcca_scorers),
                                            cache=cache)
            kcca_models = {k: _jsonable(getattr(f, "model", {})) for k, f in kcca_scorers.items()}
        with timer.stage("report", 7, total):
            test = pools["test"]
            corpus_json = {
                **corpus.summary(),
                "pools": {s: {"images": p.n_images, "captions": p.n_captions,
                              "relevant_pairs": int(np.asarray(p.relevance).sum()),
                              "skipped_images": p.n_skipped} for s, p in pools.items()},
                "skipped_images": skipped + train_skipped,
                "skipped_images_by_split": {"train": train_skipped,
                                            **{s: p.n_skipped for s, p in pools.items()}},
            }
            results = {
                "corpus": corpus_json,
                "systems": systems_json,
                "significance_reference": reference,
                "human_correlation": human,
                "specificity": specificity,
                "timings_s": {k: round(v, 2) for k, v in timer.timings.items()},
                "provenance": provenance(args, corpus, {**neural_prov, "device_requested": args.device,
                                                        "permutations": args.permutations,
                                                        "significance_reference_rule": (
                                                            "chosen (--reference)" if reference_name
                                                            else "best R@10 per task"),
                                                        "systems_requested": systems,
                                                        "neural_requested": neural,
                                                        "systems_run": systems_run,
                                                        "neural_run": neural_run,
                                                        "kcca_caption_metric_models": kcca_models}),
            }
            outcomes = {s: {t: QueryOutcomes(ranks=evals[s][t].ranks, r_precision=evals[s][t].r_precision)
                            for t in ("annotation", "search")} for s in evals}
            gallery = make_gallery(corpus, test, outputs, systems_json) if outputs else []
            paths = write_report(results, out_dir, outcomes=outcomes, gallery=gallery, seed=args.seed)
        log.info("Done in %.1f s. Report: %s", sum(timer.timings.values()), paths["html"])
        return paths
    except (PipelineError, CorpusError, MissingResourceError) as exc:
        # run.log gets the error too (the command line prints it to the console)
        handler.handle(logging.LogRecord(log.name, logging.ERROR, __file__, 0, "error: %s", (exc,), None))
        if not isinstance(exc, PipelineError):  # an unreadable image file, a missing NLTK resource
            raise PipelineError(str(exc)) from exc
        raise
    finally:
        teardown_logging(handler)
