from otter.test_files import test_case

from course import worlds
from course.checks import answer
from evaluation import evaluate
from kcca.solver import KCCA

OK_FORMAT = False
name = "q4"

#: Half-width of the accepted band around the reference solution's test R@10 (points of %).
BAND = 8.0


@test_case(points=3, hidden=True)
def test_test_r10_in_the_reference_band(env):
    G = worlds.kcca_grams(env["GRADER_SEED"])
    kappas = env.get("KAPPAS") if isinstance(env.get("KAPPAS"), tuple) else (0.05, 0.5, 5.0)
    dev = {}
    for reg in kappas:
        model = KCCA(reg=reg).fit(G["Kx_train"], G["Ky_train"])
        dev[reg] = (evaluate(model.affinity(G["Kx_dev"], G["Ky_dev"], n=20), G["gold_dev"]).metrics["R@10"], model)
    best = max(kappas, key=lambda r: (dev[r][0], -r))
    ref = evaluate(dev[best][1].affinity(G["Kx_test"], G["Ky_test"], n=20), G["gold_test"]).metrics["R@10"]
    got = float(answer(env, "my_test_r10"))
    assert abs(got - ref) <= BAND, (f"my_test_r10 = {got:.1f} is outside the band the reference solution gives on "
                                    f"your world")
