"""The shape of neural/: no import circle, no module importing another's private (``_name``) helpers, the
backbone below every scorer, neural/ never above its layer (evaluation, kcca, experiments); and the pair
scorers the human-correlation protocols use (CorpusPairScorer, BridgePairScorer) with their explicit
identity, scoring exactly as the scorer itself."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

NEURAL = Path(__file__).resolve().parent.parent / "neural"
SCORERS = {"bridge", "lclip", "pacs", "specs", "tiny_clip", "clipscore", "factory", "score"}


def _imports() -> dict[str, list[tuple[str, list[str]]]]:
    """``{module stem: [(imported module, [imported names]), …]}`` of every neural/*.py, every nesting level."""
    out = {}
    for f in sorted(NEURAL.glob("*.py")):
        found = []
        for n in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(n, ast.ImportFrom) and n.module:
                found.append((n.module, [a.name for a in n.names]))
            elif isinstance(n, ast.Import):
                found.extend((a.name, []) for a in n.names)
        out[f.stem] = found
    return out


def test_no_private_imports_and_no_layer_violation():
    for mod, imports in _imports().items():
        for target, names in imports:
            top = target.split(".")[0]
            assert top not in {"evaluation", "kcca", "experiments"}, (mod, target)
            if top in {"neural", "corpora", "kernels"}:
                private = [n for n in names if n.startswith("_") and n != "__future__"]
                assert not private, f"neural/{mod}.py imports private {private} from {target}"


def test_no_import_circle_and_backbone_imports_no_scorer():
    graph = {mod: {t.split(".")[1] for t, _ in imports if t.startswith("neural.")}
             for mod, imports in _imports().items()}
    assert not graph["backbone"] & SCORERS, graph["backbone"]
    for shared in ("training", "text_tower", "losses", "architectures", "pretrained", "checkpoints", "base"):
        assert not graph[shared] & (SCORERS | {"backbone"}), (shared, graph[shared])

    def reach(start):
        seen, todo = set(), [start]
        while todo:
            for d in graph.get(todo.pop(), ()):
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        return seen

    circles = [m for m in graph if m in reach(m)]
    assert not circles, circles


def test_corpus_pair_scorer_has_the_identity_and_scores_of_the_scorer(random_tiny_backbone, small_teaching_set):
    from corpora.scoring import PairScorer
    from neural.base import CorpusPairScorer
    from neural.clipscore import CLIPScore

    ts = small_teaching_set
    ids = list(ts.split("test"))[:4]
    ids = ids + ids[:2]                                     # repeated images are encoded once
    cands = [ts.captions_of(i)[0].text for i in ids]
    refs = [[c.text for c in ts.captions_of(i)[1:3]] for i in ids]
    for scorer, use_refs in ((CLIPScore(random_tiny_backbone), False),
                             (CLIPScore(random_tiny_backbone, reference_based=True), True)):
        ps = CorpusPairScorer(scorer, ts, None, use_references=use_refs)
        assert isinstance(ps, PairScorer)
        assert ps.identity == {"scorer": scorer.cache_identity(), "references": use_refs}
        v = random_tiny_backbone.encode_corpus_images(ts, ids)
        expect = scorer.score(v, cands, refs if use_refs else None)
        np.testing.assert_array_equal(ps(ids, cands, refs), expect)
    # a scorer without cache_identity: no identity, its scores are never cached
    bare = type("Bare", (), {"backbone": random_tiny_backbone, "score": lambda self, v, c, r: np.zeros(len(c))})()
    assert CorpusPairScorer(bare, ts, use_references=False).identity is None


def test_bridge_pair_scorer_identity_and_scores(random_tiny_backbone, small_teaching_set):
    from corpora.scoring import PairScorer
    from neural.bridge import BRIDGE, BridgeConfig, BridgePairScorer

    ts = small_teaching_set
    br = BRIDGE(random_tiny_backbone, BridgeConfig(steps=1, batch_size=4)).fit(
        ts, image_ids=list(ts.split("train"))[:8], show_progress=False)
    ps = BridgePairScorer(br, ts)
    assert isinstance(ps, PairScorer)
    assert ps.identity == {"scorer": br.cache_identity(), "template_source": "describe"}
    ids = list(ts.split("test"))[:3]
    cands = [ts.captions_of(i)[0].text for i in ids]
    np.testing.assert_array_equal(ps(ids, cands, [[]] * 3), br.score_corpus_pairs(ts, ids, cands))


def test_generator_methods_are_found_through_the_protocol(small_teaching_set):
    """PAC-S positives and SPECS units come from the generator only when the corpus is a GeneratedCorpus;
    a corpus without one is told so (PAC-S) or gets units from its captions (SPECS)."""
    from corpora.base import GeneratedCorpus
    from neural.pacs import teaching_tuples
    from neural.specs import specificity_data

    ts = small_teaching_set
    assert isinstance(ts, GeneratedCorpus)

    class Plain:                                            # captions and splits only, no generator
        name, fingerprint = "plain", "x"

        def split(self, s):
            return ts.split(s)

        def captions_of(self, i):
            return ts.captions_of(i)

    with pytest.raises(TypeError, match="cannot generate positives"):
        teaching_tuples(Plain(), "train")
    ids = list(ts.split("test"))[:3]
    units, negs = specificity_data(Plain(), ids, seed=0)
    assert units and all(isinstance(u, str) for us in units for u in us)
    gen_units, _ = specificity_data(ts, ids, seed=0)
    assert gen_units == [list(ts.describe(i)[1]) for i in ids]
