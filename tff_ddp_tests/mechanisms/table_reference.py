"""This test suite's own reading of an `alias_table.AliasTable`.

Written from the layout the module's docstring states (t(j) = top 2^189 +
l1 2^126 + l2 2^63 + l3 with top = packed[j] >> b, alias(j) = packed[j] mod
2^b, capacity 2^(252 - b); `low` stores rows j < K only, a missing row is
three zero words), not from the module's decoder, so that the table tests
of both laws check the arrays against an independent reading.
"""

W = 2**252


def threshold(table, j: int) -> int:
  """t(j), the weight column j keeps (out of 2^(252 - b))."""
  b = table.log2_columns
  row = table.low[j] if j < len(table.low) else (0, 0, 0)
  l1, l2, l3 = (int(v) for v in row)
  return (int(table.packed[j]) >> b) * 2**189 + l1 * 2**126 + l2 * 2**63 + l3


def decode(table):
  """{value: weight out of 2^252}: P(output = value) times W."""
  b = table.log2_columns
  cap = 2**(252 - b)
  weights = {}
  for j in range(2**b):
    keep = threshold(table, j)
    alias = int(table.packed[j]) % 2**b
    weights[j - table.t] = weights.get(j - table.t, 0) + keep
    weights[alias - table.t] = weights.get(alias - table.t, 0) + cap - keep
  return weights


def crafted_draws(table, k, rng):
  """(columns, u_tops, tie words, U) over every column of `table`: U equal
  to t(J)'s digits (k top bits, 63 - b - k mid bits, three 63-bit words) up
  to each level, then one below, equal or one above, the rest random; plus
  one uniform U per column. Bit 63 of the tie words is junk to ignore."""
  b = table.log2_columns
  sizes = [k, 63 - b - k, 63, 63, 63]
  cols, u_tops, ties, us = [], [], [], []
  for j in range(2**b):
    t_digits, rest = [], threshold(table, j)
    for size in reversed(sizes):
      t_digits.insert(0, rest % 2**size)
      rest //= 2**size
    cases = [[int(rng.integers(0, 2**size)) for size in sizes]]
    if k >= 31 - b:  # the first level's 31 - b bits tie, the rest random
      digits = [int(rng.integers(0, 2**size)) for size in sizes]
      low_bits = k - (31 - b)
      digits[0] = (
          (t_digits[0] >> low_bits) << low_bits) | (digits[0] % 2**low_bits)
      cases.append(digits)
    for level in range(5):
      for delta in (-1, 0, 1):
        digits = list(t_digits)
        digits[level] = min(max(digits[level] + delta, 0), 2**sizes[level] - 1)
        for i in range(level + 1, 5):
          digits[i] = int(rng.integers(0, 2**sizes[i]))
        cases.append(digits)
    for digits in cases:
      u = 0
      for digit, size in zip(digits, sizes):
        u = u * 2**size + digit
      junk = int(rng.integers(0, 2)) << 63
      words = [(digits[1] << b) | junk | j] + [d | junk for d in digits[2:]]
      cols.append(j)
      u_tops.append(digits[0] << (63 - k))
      ties.append([w - 2**64 if w >= 2**63 else w for w in words])
      us.append(u)
  return cols, u_tops, ties, us
