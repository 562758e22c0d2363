"""Reference solutions for lab 12 (how tensor cores add)."""

from __future__ import annotations


def exercise1(a, b, c, F=13):
    """One step of Hopper's fp8 tensor core on the products a[i] * b[i] and the accumulator c:
    every term's exponent (e_a + e_b for a product, floor(log2|c|) for c), all terms aligned to
    the largest, each truncated toward zero to F fraction bits below it, the truncated terms
    added exactly, the sum rounded toward zero to 13 fraction bits (e8m13)."""
    import math

    def exponent(x):  # floor(log2 |x|) of a normal number
        return math.frexp(x)[1] - 1

    terms = [(x * y, exponent(x) + exponent(y)) for x, y in zip(a, b) if x * y != 0]
    if c != 0:
        terms.append((c, exponent(c)))
    if not terms:
        return 0.0
    grid = 2.0 ** (max(e for _, e in terms) - F)  # the last bit kept below the largest exponent
    total = sum(math.trunc(p / grid) for p, _ in terms) * grid  # truncate each term, add exactly
    if total == 0:
        return 0.0
    ulp = 2.0 ** (exponent(total) - 13)  # e8m13: 13 fraction bits, rounded toward zero
    return math.trunc(total / ulp) * ulp


def exercise2(p, k, F=13, L=32):
    """k copies of the product p summed by a chain of steps of L products each, from c = 0."""
    c = 0.0
    for start in range(0, k, L):
        n = min(L, k - start)
        c = exercise1([p] * n, [1.0] * n, c, F)
    return c
