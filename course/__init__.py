"""The course kit: graded assignments on image–text ranking, one teaching world per student.

Course material, not library code: it imports the toolkit, and no toolkit package imports it (the
import contract in ``.importlinter``).  Command line: ``python -m course {build,handout,grade}``;
instructor guide: ``course/README.md``.
"""
