"""What a student's kernel imports: the notebooks' check helpers and widgets.

Runs in: a student's kernel, a grading kernel and the reference's kernel.

Everything here ships to every student (Binder, `make lab`), so it holds no answers, no hidden
inputs and nothing of nbgrader.
"""
