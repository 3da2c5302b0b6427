"""Benchmarks and the ``mqbench`` suite: scenarios, Spark load jobs, scoring, reports and comparisons."""
