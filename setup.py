"""Install script for the image–text ranking and caption-evaluation toolkit."""
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent

setup(
    name="image-text-ranking",
    version="0.1.0",
    description=(
        "Image–text ranking and caption evaluation: Hodosh et al. (2013) KCCA and "
        "CLIP-family caption metrics on one evaluator"
    ),
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["corpora*", "kernels*", "kcca*", "neural*", "evaluation*",
                                    "experiments*"]),
    # C sources compiled on first use (ctypes); numpy/torch fallbacks exist when no compiler is found.
    # The pretrained teaching CLIP (neural/teaching_clip.py, docs/teaching_clip.md): fp16 weights + record.
    # The shipped PAC-S, L-CLIPScore, BRIDGE and SPECS (neural/shipped_scorers.py, docs/shipped_scorers.md).
    package_data={"kernels.text": ["_softtri.c", "_tagrank.c"],
                  "neural": ["weights/*.safetensors", "weights/*.json", "weights/scorers/manifest.json",
                             "weights/scorers/*/*.json", "weights/scorers/*/*.safetensors"]},
    install_requires=[
        "numpy>=1.24",
        "scipy>=1.10",
        "scikit-learn>=1.3",
        "threadpoolctl>=3.1",
        "opencv-python-headless>=4.8",
        "nltk>=3.9",  # the averaged_perceptron_tagger_eng resource (JSON, not pickled) needs 3.9
        "torch>=2.1",
        "torchvision>=0.16",
        "open_clip_torch>=2.24",
        "safetensors>=0.4",
        "statsmodels>=0.14",
        "tqdm>=4.66",
        "matplotlib>=3.7",
        "pillow>=10",
        # --workers / --scheduler (corpora/parallel.py, docs/scaling.md): blocks of image features and
        # Gram rows go out as tasks of an existing engine, Dask's distributed scheduler (local cluster,
        # `dask scheduler` / `dask worker`, dask-jobqueue on SLURM), instead of a home-made scheduler
        "dask[distributed]>=2024.1",
    ],
    extras_require={
        "test": ["pytest>=7.4", "import-linter>=2.1", "pycocoevalcap>=1.2",
                 # the course kit's tests (tests/test_course*.py) build, hand out and grade the notebooks
                 "otter-grader>=6", "nbclient>=0.10", "nbformat>=5.9", "ipykernel>=6", "jupytext>=1.16"],
        # The course kit (course/README.md): otter-grader's checks and test runner, notebooks run
        # with nbclient, masters as jupytext text files, JupyterLab for students.
        "course": ["otter-grader>=6", "nbclient>=0.10", "nbformat>=5.9", "ipykernel>=6", "jupytext>=1.16",
                   "jupyterlab>=4", "nbconvert>=7"],
        # The official METEOR 1.5 (Java jar + paraphrase table) of the COCO caption evaluation;
        # needs a Java runtime (evaluation/meteor.py).
        "meteor": ["pycocoevalcap>=1.2"],
        # Third-party CCA implementations compared against ours in benchmarks/kcca.py.
        # mvlearn 0.5.0 pins matplotlib <= 3.3.4 (no wheels for Python >= 3.10): 0.4.1 is the last usable one.
        "bench": ["pyrcca", "cca-zoo", "mvlearn<0.5"],
    },
)
