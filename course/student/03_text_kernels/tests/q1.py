from otter.test_files import test_case

import math

from course.checks import assert_close, call

OK_FORMAT = False
name = "q1"


@test_case(points=1)
def test_small(idf):
    docs = [["a", "dog", "a", "dog"], ["a", "cat"], ["a", "bird"], ["the", "bird"]]
    weights, unseen = call(idf, docs)
    assert_close(weights["dog"], math.log(4 / 2), what="idf of a word in one of four documents")
    assert_close(weights["a"], 0.0, what="idf of a word in three of four documents (clipped at 0)")
    assert_close(unseen, math.log(4), what="idf of an unseen word")
