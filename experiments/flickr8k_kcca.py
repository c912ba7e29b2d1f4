"""Main job (placeholder until the pipeline lands): load the teaching set and print its summary."""
from __future__ import annotations

import json


def main() -> None:
    from corpora.teaching import make_teaching_set

    print(json.dumps(make_teaching_set().summary(), indent=2))


if __name__ == "__main__":
    main()
