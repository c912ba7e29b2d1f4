"""Benchmark of the text kernels on the real Flickr8k captions (issue 5, Sec. 4).

    python benchmarks/text_kernels.py --data ../shared/data/flickr8k --json
    python benchmarks/text_kernels.py --data ../shared/data/flickr8k --quick      # 1,000 items, 200 queries

Measures (seconds, exact kernels, no approximation):

* ``tri5_gram_s``     TRI5 training Gram (6,000 x 6,000 items, 25 caption pairs each), explicit features;
* ``tri5sem_gram_s``  soft TRI5 with kappa = max(kappa_A, kappa_{D_ic}) and sqrt(idf)
                      (``TRI5_A,D_ic^sqrtidf``, "TRI5SEM-like") training Gram, DP;
* ``test_gram_s``     that kernel's queries: the 1,000 Hodosh test captions x 6,000 items;
* ``tri5_test_gram_s`` the same for TRI5; ``*_fit_s`` preprocessing / similarity training times;
* ``tagrank_gram_s``, ``tagrank_test_gram_s`` with ``--tagrank``;
* ``peak_rss_mb``     peak resident memory of the process.

Also prints the vocabulary sizes (paper: 1,928 words >= 5 occurrences, 1,180 noun and 143 verb lemmas)
and the five nearest words of a few probes under kappa_A (paper Fig. 3).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import emit, peak_rss_mb  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="Flickr8k folder (default: the shared one)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--quick", action="store_true", help="1,000 training items and 200 queries")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads of the soft-TRI DP, compiled kernel and torch fallback alike (default: the "
                         "compiled kernel on every core -- its result does not depend on the number of "
                         "threads -- and the torch fallback on 1)")
    ap.add_argument("--sem", default="A,D_ic", help="similarity of the soft kernel (default A,D_ic)")
    ap.add_argument("--tagrank", action="store_true", help="also time the TagRank Gram and queries")
    ap.add_argument("--cache", default=None, help="DiskCache folder for similarity tables (default: none, "
                                                  "everything recomputed and timed)")
    args = ap.parse_args(argv)

    from corpora.base import CorpusError
    from corpora.flickr8k import load_flickr8k
    from corpora.paths import ensure_nltk_data_path, shared_flickr8k_dir
    from corpora.protocol import hodosh_pool
    from kernels.text import TextKernel
    from kernels.text.kernel import parse_similarity
    from kernels.text.similarity import pos_vocabularies

    try:
        parse_similarity(args.sem)
    except ValueError as exc:
        ap.error(f"--sem: {exc}")
    import torch  # noqa: F401  (imported up front so that no timed step pays for the import)

    ensure_nltk_data_path()
    data = Path(args.data) if args.data else shared_flickr8k_dir()
    if not data.is_dir():
        ap.error(f"{data}: no Flickr8k folder (pass --data PATH, or set ITR_SHARED to the folder holding "
                 "data/flickr8k)")
    try:
        corpus = load_flickr8k(data, with_images=False)
    except (CorpusError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    train = list(corpus.split("train"))
    queries = list(hodosh_pool(corpus, "test").captions)
    if args.quick:
        train, queries = train[:1000], queries[:200]
    from kernels.threads import default_threads

    out: dict = {"n_train_items": len(train), "n_queries": len(queries),
                 "threads": args.threads or default_threads(),
                 "quick": bool(args.quick)}
    log = (lambda *a: print(*a, file=sys.stderr)) if args.json else print

    t = time.perf_counter()
    threads = {"n_threads": args.threads or 1, "native_threads": args.threads}
    tri = TextKernel("TRI", 5, show_progress=not args.json, **threads).fit(corpus, train)
    out["tri5_fit_s"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    K = tri.gram_train()
    out["tri5_gram_s"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    tri.gram_queries(queries)
    out["tri5_test_gram_s"] = round(time.perf_counter() - t, 2)
    log(f"TRI5: fit {out['tri5_fit_s']} s, Gram {K.shape} {out['tri5_gram_s']} s, "
        f"queries {out['tri5_test_gram_s']} s")
    del tri, K

    t = time.perf_counter()
    from corpora.cache import DiskCache

    cache = DiskCache(args.cache) if args.cache else None
    sem = TextKernel("TRI", 5, idf="sqrt", similarity=args.sem, show_progress=not args.json,
                     cache=cache, **threads).fit(corpus, train)
    out["tri5sem_fit_s"] = round(time.perf_counter() - t, 2)
    out["tri5sem_similarity"] = args.sem
    if cache is not None:
        cache.enabled = False        # time the Gram itself, not a cache hit
    t = time.perf_counter()
    K = sem.gram_train()
    out["tri5sem_gram_s"] = round(time.perf_counter() - t, 2)
    out["tri5sem_backend"] = getattr(sem, "last_backend", None)
    t = time.perf_counter()
    sem.gram_queries(queries)
    out["test_gram_s"] = round(time.perf_counter() - t, 2)
    log(f"TRI5_{args.sem}^sqrtidf: fit {out['tri5sem_fit_s']} s, Gram {out['tri5sem_gram_s']} s, "
        f"queries {out['test_gram_s']} s")

    sem._W = None            # free the weighted word kernel before the next phase
    del K
    if args.tagrank:
        tr = TextKernel("TagRank", 5, show_progress=not args.json).fit(corpus, train)
        t = time.perf_counter()
        tr.gram_train()
        out["tagrank_gram_s"] = round(time.perf_counter() - t, 2)
        t = time.perf_counter()
        tr.gram_queries(queries)
        out["tagrank_test_gram_s"] = round(time.perf_counter() - t, 2)
        log(f"TagRank: Gram {out['tagrank_gram_s']} s, queries {out['tagrank_test_gram_s']} s")

    counts = sem.vocab.counts
    out["vocab_words"] = len(counts)
    out["vocab_ge5"] = sum(1 for c in counts.values() if c >= 5)
    if "A" in sem.sim_parts:
        nouns, verbs, _, _ = pos_vocabularies(sem.tagged)
        out["noun_lemmas"], out["verb_lemmas"] = len(nouns), len(verbs)
        probes = {}
        for w in ("rider", "swim", "dog", "beach", "climb"):
            if w in sem.vocab:
                probes[w] = [(x, round(v, 3)) for x, v in sem.word_kernel.nearest(w, 5, part="A")]
        out["nearest_A"] = probes
        for w, nb in probes.items():
            log(f"  kappa_A nearest to {w!r}: {nb}")
    out["peak_rss_mb"] = round(peak_rss_mb(), 1)
    emit(out, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
