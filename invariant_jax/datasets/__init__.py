"""Data sets: teacher-student data, tabular data (Breast Cancer, CSV), and regression
targets (modified Rosenbrock, Gaussian-process samples). One private module per family."""

from ._teacher import teacher_student
from ._tabular import TabularData, breast_cancer, load_csv, split_standardize
from ._targets import gp_data, gp_sample, matern32_kernel, modified_rosenbrock, rosenbrock_data
