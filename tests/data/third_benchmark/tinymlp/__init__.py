"""A third benchmark, kept as test data: a two-layer perceptron on generated clusters of points.

tests/test_third_benchmark.py copies this folder into a models/ package of its own and runs every public
entry point on it, with no file of suite/ changed; docs/adding-a-benchmark.md walks through it.
"""
