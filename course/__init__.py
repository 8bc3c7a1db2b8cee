"""autograd-course: helpers for the notebooks (checks, widgets) and the instructor's pipeline."""
