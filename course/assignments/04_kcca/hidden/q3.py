from otter.test_files import test_case

from course import worlds
from course.checks import assert_close, call
from kcca.solver import KCCA

OK_FORMAT = False
name = "q3"


@test_case(points=3, hidden=True)
def test_affinity_equals_the_toolkit(affinity, env):
    for seed in (env["GRADER_SEED"], worlds.HIDDEN_SEEDS[1]):
        G = worlds.kcca_grams(seed)
        ref = KCCA(reg=0.5).fit(G["Kx_train"], G["Ky_train"])
        for n in (5, 20):
            S = call(affinity, G["Kx_train"], G["Ky_train"], G["Kx_test"], G["Ky_test"], ref.alpha_, ref.beta_, n)
            assert_close(S, ref.affinity(G["Kx_test"], G["Ky_test"], n=n), atol=2e-5, what=f"Eq. 4 affinity (n = {n})")
