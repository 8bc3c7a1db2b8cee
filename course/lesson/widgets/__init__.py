"""Widgets and plots that show what autograd does.

Runs in: a student's kernel, and a grading kernel running the same notebook.

Each widget is a thin layer over a plain function that returns the numbers it plots
(``*_data``) and a function that draws them on matplotlib axes (``plot_*``); both are usable
and tested without a front end.
"""
