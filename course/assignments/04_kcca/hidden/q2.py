from otter.test_files import test_case

import numpy as np

from course import worlds
from course.checks import assert_close, call
from kcca.solver import KCCA

OK_FORMAT = False
name = "q2"


def _hidden_kernels(seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(45, 6))
    Y = X @ rng.normal(size=(6, 5)) + 0.8 * rng.normal(size=(45, 5))
    Kx = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / 12.0)
    Ky = (Y @ Y.T / 5.0 + 1.0) ** 2
    return Kx, Ky


@test_case(points=3, hidden=True)
def test_correlations_equal_the_toolkit(kcca, env):
    for seed in (env["GRADER_SEED"], *worlds.HIDDEN_SEEDS):
        Kx, Ky = _hidden_kernels(seed)
        for reg in (0.1, 1.0):
            ref = KCCA(reg=reg).fit(Kx, Ky)
            rho, alpha, beta = call(kcca, Kx, Ky, reg, 8)
            assert_close(rho, ref.correlations_[:8], atol=1e-6, what=f"canonical correlations (κ = {reg})")
            Kc = Kx - Kx.mean(0) - Kx.mean(1)[:, None] + Kx.mean()
            a = np.asarray(alpha)[:, 0]
            assert_close(a @ (Kc @ Kc + reg * Kc) @ a, 1.0, atol=1e-6, what="normalisation of alpha")
