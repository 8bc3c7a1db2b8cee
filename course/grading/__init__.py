"""The grading engine on top of nbgrader: jobs, sandboxed warm kernels, scans and recording.

Runs on the instructor's side, except `guard`, which the grader loads into each grading kernel.
Kept empty so that the kernel's ``import course.grading.guard`` loads nothing else.
"""
