"""Statistics the harness shares (pyperf does the rest)."""

import statistics


def median_iqr(ratios):
    """Median, first and third quartile of paired ratios: the quartiles are
    the values a quarter from each end of the sorted list (as the
    workloads' t1_paired.py prints them)."""
    r = sorted(ratios)
    q = len(r) // 4
    return statistics.median(r), r[q], r[-q - 1]


def spread(values):
    """(max - min) / median: how far apart the rounds of one measurement are."""
    return (max(values) - min(values)) / statistics.median(values)
