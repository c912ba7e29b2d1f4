from otter.test_files import test_case

from course import worlds
from course.checks import assert_close, call

OK_FORMAT = False
name = "q1"


@test_case(points=2, hidden=True)
def test_hidden_worlds(idf, env):
    for seed in (env["GRADER_SEED"], worlds.HIDDEN_SEEDS[0]):
        docs = worlds.image_documents(seed, "train")
        ref, ref_unseen = worlds.reference_idf(docs)
        weights, unseen = call(idf, docs)
        assert set(weights) == set(ref), "idf: the dict must have one entry per word of the documents"
        words = sorted(ref)
        assert_close([weights[w] for w in words], [ref[w] for w in words], what="idf over training images")
        assert_close(unseen, ref_unseen, what="idf of an unseen word")
