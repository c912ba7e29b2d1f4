from otter.test_files import test_case

from course import worlds
from course.checks import assert_close, call

OK_FORMAT = False
name = "q1"


@test_case(points=3, hidden=True)
def test_equals_neural_clipscore(clip_s, env):
    seed = worlds.HIDDEN_SEEDS[0]
    corpus, p = worlds.world(seed), worlds.pool(seed, "dev")
    ids = list(p.image_ids[:12])
    caps = [c.text for c in p.captions[:12]][::-1]           # mismatched pairs: some cosines are negative
    ref = worlds.clip_scorer().score([corpus.load_image(i) for i in ids], caps)
    got = call(clip_s, worlds.image_embeddings(seed, ids), worlds.text_embeddings(caps))
    assert_close(got, ref, atol=1e-6, what="CLIP-S on hidden images and captions")
