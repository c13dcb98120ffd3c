"""Which share of a sweep this writer takes: from `jax.distributed`, the job-array
variables of a batch scheduler, or the caller."""

from __future__ import annotations

import os

import jax


def job_array_share(environ=None) -> tuple[int, int] | None:
    """`(process_index, process_count)` of a job-array task from the environment (Slurm
    `SLURM_ARRAY_TASK_ID/_MIN/_COUNT`, Grid Engine `SGE_TASK_ID/_FIRST/_LAST/_STEPSIZE`),
    or `None` outside a job array (or when the count is not known)."""
    env = os.environ if environ is None else environ
    if env.get("SLURM_ARRAY_TASK_ID") and env.get("SLURM_ARRAY_TASK_COUNT"):
        first = int(env.get("SLURM_ARRAY_TASK_MIN") or 0)
        step = int(env.get("SLURM_ARRAY_TASK_STEP") or 1)
        return (int(env["SLURM_ARRAY_TASK_ID"]) - first) // step, int(env["SLURM_ARRAY_TASK_COUNT"])
    if env.get("SGE_TASK_ID", "undefined") != "undefined" and env.get("SGE_TASK_LAST", "undefined") != "undefined":
        first, last = int(env.get("SGE_TASK_FIRST") or 1), int(env["SGE_TASK_LAST"])
        step = int(env.get("SGE_TASK_STEPSIZE") or 1)
        return (int(env["SGE_TASK_ID"]) - first) // step, (last - first) // step + 1
    return None


def writer_share(process_index: int | None, process_count: int | None) -> tuple[int, int]:
    """`(process_index, process_count)` of this writer: as given, else
    `jax.process_index()`/`jax.process_count()` after `jax.distributed.initialize()`, else
    the job-array variables (`job_array_share`), else `(0, 1)`. Raises `ValueError` unless
    `0 <= process_index < process_count`."""
    if process_index is None and process_count is None:
        if jax.process_count() > 1:
            pi, pc = jax.process_index(), jax.process_count()
        else:
            pi, pc = job_array_share() or (0, 1)
    else:
        pi = 0 if process_index is None else int(process_index)
        pc = jax.process_count() if process_count is None else int(process_count)
    if not (0 <= pi < pc):
        raise ValueError(f"Need 0 <= process_index < process_count; got {pi}, {pc}.")
    return pi, pc
