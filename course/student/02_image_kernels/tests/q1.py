from otter.test_files import test_case

import numpy as np

from course.checks import assert_close, call

OK_FORMAT = False
name = "q1"


@test_case(points=1)
def test_shape_and_sum(colour_histogram, images):
    h = np.asarray(call(colour_histogram, images[0]))
    assert h.shape == (64,), f"colour_histogram: expected shape (64,), got {h.shape}"
    assert_close(h.sum(), 1.0, what="sum of the histogram")


@test_case(points=1)
def test_two_colour_image(colour_histogram):
    img = np.zeros((4, 4, 3), dtype=np.uint8)
    img[:, :1] = (255, 0, 0)                 # a quarter of the pixels red → word 48
    expected = np.zeros(64)
    expected[0], expected[48] = 0.75, 0.25
    assert_close(call(colour_histogram, img), expected, what="histogram of a red-and-black image")
