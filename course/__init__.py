"""autograd-course.

Runs in: every place: it is the package's root and imports nothing.

- `course.lesson`: what the notebooks import (checks, widgets); it runs in a student's kernel.
- `course.grading`: the engine that grades submissions (jobs, sandboxed kernels, recording).
- the modules at this level: the instructor's commands (`python -m course ...`) on top of both.
"""
