from otter.test_files import test_case

from course import worlds
from course.checks import answer, assert_close

OK_FORMAT = False
name = "q4"


@test_case(points=2, hidden=True)
def test_your_world(env):
    seed = env["GRADER_SEED"]
    docs = worlds.image_documents(seed, "train")
    weights, unseen = worlds.reference_idf(docs)
    caps = [worlds.tokens(c.text) for c in worlds.pool(seed, "test").captions[:20]]
    assert_close(answer(env, "my_bow"), worlds.reference_bow_gram(caps, docs[:40], weights, unseen), atol=1e-6,
                 what="my_bow on your world")
    assert_close(answer(env, "my_tri"), worlds.reference_tri_gram(caps, caps), atol=1e-5, what="my_tri on your world")
