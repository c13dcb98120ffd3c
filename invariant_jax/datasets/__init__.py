"""Data sets: teacher-student data, tabular data (Breast Cancer, CSV), and regression
targets (modified Rosenbrock, Gaussian-process samples). One private module per family."""

from ._teacher import teacher_student
