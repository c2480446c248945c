"""Numba kernels: plain functions over numpy arrays and scalars, in place, returning None.

This package is a leaf: it imports nothing of tinyopt outside ``kernels``.
"""
