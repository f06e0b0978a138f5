"""README.md and docs/*.md run as printed.

Every fenced block of those pages (docs/notes/ are investigations, not
instructions, and are not checked) is one of:

* `python`: run as a complete program (docs_runner.py: a fresh namespace and
  TFF's default context, as in a new interpreter), or, after
  `<!-- doctest: continue -->`, as the continuation of the page's previous
  Python block;
* `sh`: every command run from the repository root (`tff-ddp ...` through
  `tff_ddp.cli.main` in the page's process, anything else in bash), each
  line a command (`\\` continues it, `#` starts a comment);
* `text` after `<!-- doctest: output -->`: what the closest run block above
  printed. Its non-blank lines must appear in that order among the printed
  lines, exactly, except on lines named by `numbers vary on lines starting
  "PREFIX", ...`, where numbers are not compared (noise, seconds).

`<!-- doctest: core -->` marks a block (and the outputs shown after it) as
needing only the framework-free core: where TFF is not installed (the core
lane, `make test-core`) only the blocks of `CORE_PAGES` and the blocks so
marked run; elsewhere every block does.

`<!-- doctest: skip: REASON -->` leaves a block out, and `<!-- doctest: skip
"COMMAND": REASON -->` one command of an `sh` block; the reason is required.
A block of another language, a `text` block that is neither an output nor
skipped, or a directive that does not parse fails the fast tests here, so
nothing shown escapes the check. The fast tests also check the pages' links
and the README's length (at most 300 lines); running the pages is
slow (TFF rounds: the pages a session runs share one runner process).
"""

import dataclasses
import glob
import json
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
from typing import List, Optional, Tuple
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import pytest

from tff_ddp_tests import conftest
from tff_ddp_tests import script_module

ROOT = script_module.ROOT
README_MAX_LINES = 300
LANGUAGES = ('python', 'sh', 'text')
_FENCE = re.compile(r'^(\s*)```(\S*)\s*$')
_DIRECTIVE = re.compile(r'^<!--\s*doctest:\s*(.*?)\s*-->\s*$')
_SKIP_COMMAND = re.compile(r'^skip\s+"([^"]+)"\s*:\s*(\S.*)$')
_SKIP = re.compile(r'^skip\s*:\s*(\S.*)$')
_OUTPUT = re.compile(
    r'^output(?:\s*;\s*numbers vary on lines starting\s+(.+))?$')
_NUMBER = re.compile(r'[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?')
_CLI = ('.venv/bin/tff-ddp ', 'tff-ddp ')
# Pages whose every block needs only the core (no TFF).
CORE_PAGES = ('docs/accounting.md', 'docs/core.md')
# Where TFF is absent only core blocks run (the module docstring).
CORE_LANE = not conftest.has_tff()


def pages() -> List[str]:
  """The checked pages, relative to the repository root."""
  docs = sorted(
      os.path.relpath(p, ROOT)
      for p in glob.glob(os.path.join(ROOT, 'docs', '*.md')))
  return ['README.md'] + docs


def _named_pages(runnable=False):
  """(test name suffix, page): `test_..._docs_cli` runs docs/cli.md. With
  `runnable`, only the pages with blocks that run on this lane."""
  return [
      (re.sub(r'\W', '_',
              os.path.splitext(p)[0]), p)
      for p in pages()
      if not (runnable and CORE_LANE) or any(b.core for b in parse(p, _read(p)))
  ]


@dataclasses.dataclass
class Block:
  page: str
  line: int  # of the opening fence, 1-based
  language: str
  code: str
  directives: List[str]
  # Parsed from the directives:
  skip: Optional[str] = None
  skip_commands: dict = dataclasses.field(default_factory=dict)
  output: bool = False
  varying: Tuple[str, ...] = ()
  continues: bool = False
  core: bool = False

  @property
  def label(self) -> str:
    return f'{self.page}:{self.line}'

  @property
  def runs(self) -> bool:
    return self.language in ('python', 'sh') and self.skip is None


class DocError(ValueError):
  """A page breaks the rules of the module docstring."""


def _apply(block: Block, directive: str) -> None:
  if directive == 'continue':
    block.continues = True
    return
  if directive == 'core':
    block.core = True
    return
  match = _SKIP_COMMAND.match(directive)
  if match:
    block.skip_commands[match.group(1)] = match.group(2)
    return
  match = _SKIP.match(directive)
  if match:
    block.skip = match.group(1)
    return
  match = _OUTPUT.match(directive)
  if match:
    block.output = True
    if match.group(1):
      prefixes = re.findall(r'"([^"]+)"', match.group(1))
      if not prefixes or re.sub(r'"[^"]+"|[\s,]', '', match.group(1)):
        raise DocError(f'{block.label}: write the prefixes as "A", "B": '
                       f'{directive!r}')
      block.varying = tuple(prefixes)
    return
  raise DocError(f'{block.label}: unknown doctest directive {directive!r}')


def parse(page: str, text: str) -> List[Block]:
  """The fenced blocks of a page, with their directives checked."""
  blocks, directives = [], []
  lines = text.split('\n')
  i = 0
  while i < len(lines):
    line = lines[i]
    directive = _DIRECTIVE.match(line.strip())
    if directive:
      directives.append(directive.group(1))
      i += 1
      continue
    fence = _FENCE.match(line)
    if not fence:
      if line.strip().startswith('<!--') and 'doctest' in line:
        raise DocError(f'{page}:{i + 1}: a doctest directive is one line '
                       f'"<!-- doctest: ... -->": {line.strip()!r}')
      if directives:
        raise DocError(f'{page}:{i}: a doctest directive must be right '
                       'above its block')
      i += 1
      continue
    indent = fence.group(1)  # a block inside a list item is indented
    end = i + 1
    while end < len(lines) and lines[end].rstrip() != indent + '```':
      end += 1
    if end == len(lines):
      raise DocError(f'{page}:{i + 1}: the block is not closed')
    code = '\n'.join(
        line[len(indent):] if line.startswith(indent) else line.lstrip()
        for line in lines[i + 1:end])
    block = Block(page, i + 1, fence.group(2), code, directives)
    for d in directives:
      _apply(block, d)
    if page in CORE_PAGES:
      block.core = True
    elif block.output and blocks and blocks[-1].core:
      block.core = True  # the output of a core block
    _check(block, blocks)
    blocks.append(block)
    directives = []
    i = end + 1
  return blocks


def _check(block: Block, previous: List[Block]) -> None:
  where = block.label
  if block.language not in LANGUAGES:
    raise DocError(f'{where}: say the language of the block, one of '
                   f'{LANGUAGES} (got {block.language!r})')
  if block.language == 'text':
    if block.output == (block.skip is not None):
      raise DocError(f'{where}: a text block is either `output` (compared '
                     'with what the block above printed) or `skip: REASON`')
    if block.output and not block.code.strip():
      raise DocError(f'{where}: an empty output')
    if block.output and not any(b.runs for b in previous):
      raise DocError(f'{where}: an output with no run block above it')
  elif block.output:
    raise DocError(f'{where}: `output` marks a text block')
  if block.continues and (block.language != 'python' or
                          not any(b.language == 'python' and b.runs
                                  for b in previous)):
    raise DocError(f'{where}: `continue` needs a Python block above it')
  if block.core and block.continues and not [
      b for b in previous if b.language == 'python' and b.runs
  ][-1].core:
    raise DocError(f'{where}: a core block cannot continue a block that '
                   'needs TFF')
  if block.skip_commands:
    if block.language != 'sh':
      raise DocError(f'{where}: `skip "COMMAND"` is for sh blocks')
    missing = set(block.skip_commands) - set(commands(block.code))
    if missing:
      raise DocError(f'{where}: no command {sorted(missing)} in the block')


def commands(code: str) -> List[str]:
  """The commands of an sh block: continuations joined, comments dropped."""
  result, current = [], ''
  for line in code.split('\n'):
    line = re.sub(r'(^|\s)#.*$', '', line).rstrip()
    if line.endswith('\\'):
      current += line[:-1] + ' '
      continue
    current = (current + line).strip()
    if current:
      result.append(re.sub(r'\s+', ' ', current))
    current = ''
  if current.strip():
    result.append(current.strip())
  return result


def steps(blocks: List[Block]) -> List[Tuple[Block, dict]]:
  """(block, runner step) for every command and Python block that runs
  (on the core lane: every core block that runs)."""
  result = []
  for block in blocks:
    if not block.runs or CORE_LANE and not block.core:
      continue
    if block.language == 'python':
      result.append((block,
                     dict(kind='python',
                          code=block.code,
                          fresh=not block.continues,
                          label=block.label)))
      continue
    for command in commands(block.code):
      if command in block.skip_commands:
        continue
      cli = next((p for p in _CLI if command.startswith(p)), None)
      if cli:
        result.append((block,
                       dict(kind='cli',
                            argv=shlex.split(command[len(cli):]),
                            label=f'{block.label} {command}')))
      else:
        result.append((block,
                       dict(kind='shell',
                            command=command,
                            label=f'{block.label} {command}')))
  return result


def _masked(line: str) -> str:
  # Numbers masked, and the spacing around brackets too: numpy pads an
  # array's numbers to a common width ('[1.92 2.62 3.7 ]' vs '[... 3.93]').
  masked = ' '.join(_NUMBER.sub('#', line).split())
  return re.sub(r' ?([\[\]]) ?', r'\1', masked)


def missing_lines(shown: str, printed: str, varying=()) -> List[str]:
  """The shown lines not found, in order, among the printed ones."""
  actual = [line.rstrip() for line in printed.split('\n')]
  position, missing = 0, []
  for line in (l.rstrip() for l in shown.split('\n')):
    if not line.strip():
      continue
    vary = any(line.startswith(p) for p in varying)
    want = _masked(line) if vary else line
    for k in range(position, len(actual)):
      if (_masked(actual[k]) if vary else actual[k]) == want:
        position = k + 1
        break
    else:
      missing.append(line)
  return missing


def outputs(blocks: List[Block]):
  """(output block, the run block whose output it shows), for the run
  blocks of this lane."""
  source = None
  for block in blocks:
    if block.runs:
      source = block
    elif block.output and not (CORE_LANE and not source.core):
      yield block, source


def _read(page: str) -> str:
  with open(os.path.join(ROOT, page), encoding='utf-8') as f:
    return f.read()


_LINK = re.compile(r'\]\(([^)\s]+)\)')


def _anchors(text: str) -> set:
  """GitHub's heading anchors of a page."""
  anchors = set()
  for line in text.split('\n'):
    if line.startswith('#'):
      title = line.lstrip('#').strip().lower()
      anchors.add(re.sub(r'[^\w\- ]', '', title).replace(' ', '-'))
  return anchors


class ParserTest(absltest.TestCase):
  """The rules of the module docstring, on small pages."""

  def test_blocks_and_directives(self):
    page = '\n'.join([
        'text', '```python', 'print(1)', '```', '<!-- doctest: continue -->',
        '```python', 'print(2)', '```',
        '<!-- doctest: output; numbers vary on lines starting "a", "b c" -->',
        '```text', '1', '```',
        '<!-- doctest: skip "make test": the suite itself -->', '```sh',
        'make demo  # comment', 'make test', '.venv/bin/tff-ddp privacy \\',
        '    --delta 1e-5', '```'
    ])
    blocks = parse('p.md', page)
    self.assertEqual([b.language for b in blocks],
                     ['python', 'python', 'text', 'sh'])
    self.assertFalse(blocks[0].continues)
    self.assertTrue(blocks[1].continues)
    self.assertEqual(blocks[2].varying, ('a', 'b c'))
    self.assertEqual(
        commands(blocks[3].code),
        ['make demo', 'make test', '.venv/bin/tff-ddp privacy --delta 1e-5'])
    with mock.patch.object(sys.modules[__name__], 'CORE_LANE', False):
      kinds = [(s['kind'], s.get('argv') or s.get('command') or s['fresh'])
               for _, s in steps(blocks)]
      self.assertEqual(kinds, [('python', True), ('python', False),
                               ('shell', 'make demo'),
                               ('cli', ['privacy', '--delta', '1e-5'])])
      self.assertEqual([(o.line, s.line) for o, s in outputs(blocks)],
                       [(10, 6)])

  def test_core_blocks_alone_run_on_the_core_lane(self):
    page = '\n'.join([
        '```python', 'import tensorflow_federated', '```',
        '<!-- doctest: output -->', '```text', 'a', '```',
        '<!-- doctest: core -->', '```python', 'print(1)', '```',
        '<!-- doctest: output -->', '```text', '1', '```'
    ])
    blocks = parse('p.md', page)
    self.assertEqual([b.core for b in blocks], [False, False, True, True])
    for lane, runs, shown in ((False, [1, 9], [5, 13]), (True, [9], [13])):
      with mock.patch.object(sys.modules[__name__], 'CORE_LANE', lane):
        self.assertEqual([b.line for b, _ in steps(blocks)], runs)
        self.assertEqual([o.line for o, _ in outputs(blocks)], shown)
    self.assertTrue(all(b.core for b in parse('docs/core.md', page)))
    with self.assertRaisesRegex(DocError, 'cannot continue'):
      parse(
          'p.md', '\n'.join([
              '```python', 'x = 1', '```', '<!-- doctest: core -->',
              '<!-- doctest: continue -->', '```python', 'print(x)', '```'
          ]))

  def test_what_is_refused(self):
    for page, message in (
        ('```\nx\n```', 'say the language'), ('```bash\nls\n```',
                                              'say the language'),
        ('```python\nx = 1\n```\n```text\n1\n```',
         'either `output`'), ('<!-- doctest: output -->\n```text\n1\n```',
                              'no run block'),
        ('<!-- doctest: skip -->\n```sh\nls\n```',
         'unknown doctest'), ('<!-- doctest: continue -->\n```python\nx\n```',
                              '`continue`'),
        ('<!-- doctest: output -->\n```python\nx\n```',
         'marks a text'), ('<!-- doctest: skip "ls -l": no -->\n```sh\nls\n```',
                           'no command'),
        ('```sh\nls\n```\n<!-- doctest: output; numbers vary on lines '
         'starting a -->\n```text\n1\n```',
         'prefixes'), ('<!-- doctest: skip: x -->\n\n```sh\nls\n```',
                       'right above'), ('```python\nx = 1\n', 'not closed')):
      with self.subTest(page=page), self.assertRaisesRegex(DocError, message):
        parse('p.md', page)

  def test_output_lines_in_order_numbers_masked_only_where_they_vary(self):
    printed = 'head\nnoise 0.98 (z = 1)\nepsilon 10.00\ntail\n'
    self.assertEqual(
        missing_lines('noise 0.91 (z = 1)\nepsilon 10.00', printed, ('noise',)),
        [])
    self.assertEqual(missing_lines('epsilon 10.01', printed, ('noise',)),
                     ['epsilon 10.01'])
    self.assertEqual(missing_lines('noise 0.91 (z = 1)', printed, ()),
                     ['noise 0.91 (z = 1)'])
    self.assertEqual(missing_lines('epsilon 10.00\nhead', printed),
                     ['head'])  # order matters
    self.assertEqual(missing_lines('noise 0.9 (c = 1)', printed, ('noise',)),
                     ['noise 0.9 (c = 1)'])  # only numbers are masked
    # numpy's padding of a varying array moves with its numbers.
    self.assertEqual(
        missing_lines('DP [1.87 2.69 3.93]', 'DP [2.04 2.61 3.7 ]', ('DP',)),
        [])
    self.assertEqual(
        missing_lines('DP [1.87 2.69]', 'DP [2.04 2.61 3.7 ]', ('DP',)),
        ['DP [1.87 2.69]'])


class PagesTest(parameterized.TestCase):
  """Every page parses under the rules, its links resolve, README is short."""

  @parameterized.named_parameters(*_named_pages())
  def test_page_follows_the_rules(self, page):
    blocks = parse(page, _read(page))
    for block in blocks:
      if block.skip is not None:
        self.assertGreater(len(block.skip.split()), 2,
                           f'{block.label}: say why it is not run')

  @parameterized.named_parameters(*_named_pages())
  def test_links_resolve(self, page):
    text = _read(page)
    for target in _LINK.findall(text):
      if re.match(r'^[a-z]+:', target):
        continue  # http(s), mailto
      path, _, anchor = target.partition('#')
      file = os.path.normpath(os.path.join(ROOT, os.path.dirname(page),
                                           path)) if path else os.path.join(
                                               ROOT, page)
      self.assertTrue(os.path.exists(file), f'{page}: broken link {target}')
      if anchor and file.endswith('.md'):
        with open(file, encoding='utf-8') as f:
          self.assertIn(anchor, _anchors(f.read()),
                        f'{page}: no heading for {target}')

  def test_readme_is_at_most_300_lines(self):
    self.assertLessEqual(
        len(_read('README.md').split('\n')) - 1, README_MAX_LINES)

  def test_every_docs_page_is_reachable_from_the_readme(self):
    readme = _read('README.md')
    for page in pages()[1:]:
      self.assertIn(f']({page})', readme)


# Pages whose blocks ran (page -> (plan, results, runner's stderr)): the
# pages a session selects run in one runner process (see `_run_pages`).
_RUNS = {}
# The pages of the RunTest tests this pytest session selected (None: not
# known, e.g. under unittest, where a test runs its own page alone).
_SELECTED = None
_RUN_TEST_PREFIX = 'test_page_runs_as_printed_'


@pytest.fixture(autouse=True)
def _pages_of_the_session(request):
  """Notes which pages this session's RunTest tests run (once)."""
  global _SELECTED
  if _SELECTED is None:
    names = dict(
        (_RUN_TEST_PREFIX + suffix, page) for suffix, page in _named_pages())
    _SELECTED = [
        names[item.name] for item in request.session.items if item.name in names
    ]
  yield


def _run_pages(pages):
  """Runs the blocks of `pages` in one docs_runner process (TensorFlow is
  imported once, not once a page; each page still starts as a new process
  would, see docs_runner) and stores each page's results in _RUNS. A page
  the runner did not reach gets fewer results than steps (its test says
  so)."""
  plans = {page: steps(parse(page, _read(page))) for page in pages}
  combined = [dict(s, page=page) for page in pages for _, s in plans[page]]
  with tempfile.TemporaryDirectory() as tmp:
    steps_path = os.path.join(tmp, 'steps.json')
    results_path = os.path.join(tmp, 'results.json')
    with open(steps_path, 'w', encoding='utf-8') as f:
      json.dump(combined, f)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', COLUMNS='80')
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([
        sys.executable, '-m', 'tff_ddp_tests.docs_runner', steps_path,
        results_path
    ],
                          cwd=ROOT,
                          env=env,
                          capture_output=True,
                          text=True,
                          timeout=1800 * len(pages),
                          check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # What the pages cost (pytest -s shows it): the runner and what it
    # started and reaped (TFF's workers, make).
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    print(f'{len(pages)} page(s), {len(combined)} steps, {cpu:.1f} s of CPU')
    results = []
    if os.path.exists(results_path):
      with open(results_path, encoding='utf-8') as f:
        results = json.load(f)
  for page in pages:
    mine = [r for r, s in zip(results, combined) if s['page'] == page]
    print(f'{page}: {sum(r["seconds"] for r in mine):.1f} s')
    _RUNS[page] = (plans[page], mine, done.stderr)


@pytest.mark.slow  # runs TFF rounds and the CLI: ~15-120 s of CPU a page
class RunTest(parameterized.TestCase):
  """Every page's blocks run; every shown output matches."""

  @parameterized.named_parameters(*_named_pages(runnable=True))
  def test_page_runs_as_printed(self, page):
    if page not in _RUNS:
      # This page and the session's other pages not run yet, in one go.
      _run_pages([page] +
                 [p for p in (_SELECTED or ()) if p not in _RUNS and p != page])
    plan, results, stderr = _RUNS[page]
    if not plan:
      return
    blocks = parse(page, _read(page))
    self.assertEqual(
        len(results), len(plan),
        f'the runner stopped after {len(results)} of {len(plan)}'
        f' steps:\n{stderr[-3000:]}')
    printed = {}
    for (block, step), result in zip(plan, results):
      self.assertIsNone(result['error'],
                        f"{step['label']} failed:\n{result['error']}")
      printed[block.label] = printed.get(block.label, '') + result['stdout']
    for output, source in outputs(blocks):
      missing = missing_lines(output.code, printed[source.label],
                              output.varying)
      self.assertEqual(
          missing, [], f'{output.label}: shown lines not printed by '
          f'{source.label}; it printed:\n{printed[source.label]}')
