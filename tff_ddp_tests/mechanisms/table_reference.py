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
