from otter.test_files import test_case

from course import worlds
from course.checks import assert_close, call

OK_FORMAT = False
name = "q2"


@test_case(points=3, hidden=True)
def test_equals_neural_refclipscore(ref_clip_s, env):
    ims, cands, refs, _ = worlds.expert_items(worlds.HIDDEN_SEEDS[1], limit=15)
    corpus = worlds.world(worlds.HIDDEN_SEEDS[1])
    ref = worlds.clip_scorer(reference_based=True).score([corpus.load_image(i) for i in ims], cands, refs)
    got = call(ref_clip_s, worlds.image_embeddings(worlds.HIDDEN_SEEDS[1], ims), worlds.text_embeddings(cands),
               worlds.grouped_text_embeddings(refs))
    assert_close(got, ref, atol=1e-6, what="RefCLIP-S on hidden judged captions")
