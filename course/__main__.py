"""``python -m course``: see :mod:`course.cli`."""
import sys

from course.cli import main

sys.exit(main())
