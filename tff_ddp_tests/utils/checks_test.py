"""Argument checks: the one home of every type and range rule."""

import math

from absl.testing import parameterized
import numpy as np

from tff_ddp.utils import checks


class RealTest(parameterized.TestCase):

  @parameterized.parameters((1,), (1.5,), (np.float32(0.5),), (np.int64(3),),
                            (np.array(2.0),), (2**70,))
  def test_accepts_numbers_and_returns_floats(self, value):
    out = checks.real(value, 'x')
    self.assertIsInstance(out, float)
    self.assertEqual(out, float(np.asarray(value)))

  @parameterized.parameters(('1',), (None,), (True,), (np.bool_(True),),
                            ([1.0],), (np.array([1.0]),), ({
                                'x': 1
                            },), (1j,))
  def test_wrong_types(self, value):
    with self.assertRaisesRegex(TypeError, 'x must be'):
      checks.real(value, 'x')

  @parameterized.parameters(float('nan'), float('inf'), -float('inf'))
  def test_non_finite(self, value):
    with self.assertRaisesRegex(ValueError, 'x must be a finite number'):
      checks.real(value, 'x')
    self.assertEqual(checks.real(float('inf'), 'x', allow_inf=True), math.inf)

  def test_ranges_and_messages(self):
    with self.assertRaisesRegex(ValueError,
                                r'x must be a number in \(0, 1\], got 0'):
      checks.real(0, 'x', 0.0, 1.0, low_open=True)
    with self.assertRaisesRegex(ValueError, r'x must be a finite number > 0'):
      checks.positive(-1e-300, 'x')
    self.assertEqual(checks.positive(5e-324, 'x'), 5e-324)
    self.assertEqual(checks.probability(1, 'q'), 1.0)
    with self.assertRaisesRegex(ValueError, r'q must be a number in \(0, 1\]'):
      checks.probability(0.0, 'q')
    self.assertEqual(checks.probability(0.0, 'q', allow_zero=True), 0.0)


class IntegerTest(parameterized.TestCase):

  @parameterized.parameters((3,), (np.int32(3),), (np.uint8(3),),
                            (np.array(3),))
  def test_accepts(self, value):
    out = checks.integer(value, 'n', 1)
    self.assertIsInstance(out, int)
    self.assertEqual(out, 3)

  @parameterized.parameters((3.0,), (2.5,), (True,), ('3',), (None,), ([3],),
                            (np.float64(3),))
  def test_wrong_types(self, value):
    with self.assertRaisesRegex(TypeError, 'n must be an integer'):
      checks.integer(value, 'n')

  def test_ranges(self):
    with self.assertRaisesRegex(ValueError, r'n must be an integer in \[1, 30\]'
                                ', got 31'):
      checks.integer(31, 'n', 1, 30)
    with self.assertRaisesRegex(ValueError, 'n must be an integer >= 1'):
      checks.integer(0, 'n', 1)
    self.assertEqual(checks.integer(2**80, 'n', 1), 2**80)
    self.assertIsNone(checks.optional_integer(None, 'n', 1))
    self.assertEqual(checks.seed(7), 7)
    with self.assertRaises(ValueError):
      checks.seed(2**63)


class OtherTest(parameterized.TestCase):

  def test_choice(self):
    self.assertEqual(checks.choice('a', 'mode', ('a', 'b')), 'a')
    with self.assertRaisesRegex(
        ValueError, r"mode must be one of \('a', "
        r"'b'\), got 'c'"):
      checks.choice('c', 'mode', ('a', 'b'))
    with self.assertRaisesRegex(TypeError, 'mode must be one of'):
      checks.choice(1, 'mode', ('a', 'b'))

  def test_member(self):
    # A user's string becomes the enum member once; the member itself and
    # an entry point's own aliases are accepted, nothing else.
    import enum

    class Mode(enum.StrEnum):
      A = 'a'
      B = 'b'

    self.assertIs(checks.member('a', 'mode', Mode), Mode.A)
    self.assertIs(checks.member(Mode.B, 'mode', Mode), Mode.B)
    self.assertIs(checks.member('bee', 'mode', Mode, {'bee': Mode.B}), Mode.B)
    with self.assertRaisesRegex(
        ValueError, r"mode must be one of \('a', "
        r"'b', 'bee'\), got 'c'"):
      checks.member('c', 'mode', Mode, {'bee': Mode.B})
    with self.assertRaisesRegex(TypeError, 'mode must be one of'):
      checks.member(1, 'mode', Mode)

  def test_boolean(self):
    self.assertTrue(checks.boolean(np.bool_(True), 'flag'))
    for bad in (1, 'True', None):
      with self.assertRaisesRegex(TypeError, 'flag must be True or False'):
        checks.boolean(bad, 'flag')

  def test_real_sequence(self):
    self.assertEqual(checks.real_sequence((0.1, np.float32(0.5)), 'q', 0, 1),
                     [0.1, 0.5])
    self.assertEqual(checks.real_sequence(np.array([0.1, 0.2]), 'q'),
                     [0.1, 0.2])
    with self.assertRaisesRegex(TypeError, 'q must be a sequence'):
      checks.real_sequence('0.5', 'q')
    with self.assertRaisesRegex(TypeError, 'q must be a sequence'):
      checks.real_sequence(np.array(0.5), 'q')  # 0-d: a scalar
    with self.assertRaisesRegex(ValueError, 'at least 1'):
      checks.real_sequence([], 'q')
    with self.assertRaisesRegex(ValueError, r'q\[1\] must be'):
      checks.real_sequence([0.5, 1.5], 'q', 0.0, 1.0)
