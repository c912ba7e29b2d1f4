from otter.test_files import test_case

from course import worlds
from course.checks import assert_close, call

OK_FORMAT = False
name = "q2"


@test_case(points=2, hidden=True)
def test_hidden_captions(bow_kernel, env):
    for seed in (env["GRADER_SEED"], worlds.HIDDEN_SEEDS[1]):
        docs = worlds.image_documents(seed, "train")
        weights, unseen = worlds.reference_idf(docs)
        caps = [worlds.tokens(c.text) for c in worlds.pool(seed, "dev").captions[:15]] + [["zebra", "unicorn"]]
        ref = worlds.reference_bow_gram(caps, docs[:30], weights, unseen)
        assert_close(call(bow_kernel, caps, docs[:30], weights, unseen), ref, atol=1e-6, what="BoW kernel on hidden captions")
