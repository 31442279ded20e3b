"""POET's C backend: a validated schedule compiled to a self-contained C99 training step.

What it is made of (data flows one way, as in the rest of POET):

* ``opspec`` and ``ops_*``: how each aten op (or tile kernel) becomes one call of a C kernel;
* ``runtime/``: the kernels (``kernels_*.c``, one calling convention in ``pk.h``), the step
  runtime and what a target provides (``pk_platform.h``: files for paging and results, markers
  for the instruction counter);
* ``hostlib``: the kernels as a host shared library, callable on torch tensors (tests, profiling).
"""
