"""The grading engine on top of nbgrader: jobs, sandboxed warm kernels, judging and recording.

Runs in: the grader and its workers.

Runs on the instructor's side (the grader and its workers); no module here is imported into a
grading kernel, which imports only `course.lesson`.
"""
