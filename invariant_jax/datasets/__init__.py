"""Data sets: teacher-student data, tabular data (Breast Cancer, CSV), and regression
targets (modified Rosenbrock, Gaussian-process samples). One private module per family."""

from ._tabular import TabularData, breast_cancer, load_csv, split_standardize
from ._targets import (
    PAPER_GP_SCALINGS,
    gp_data,
    gp_sample,
    matern32_kernel,
    modified_rosenbrock,
    regular_grid,
    rosenbrock_data,
    rosenbrock_grid,
)
from ._teacher import teacher_student
