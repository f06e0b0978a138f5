"""The `tff-ddp` command.

  tff-ddp demo       federated mean estimation with DDG vs Gaussian (make demo)
  tff-ddp privacy    epsilon of a mechanism over rounds, or calibrate its noise
  tff-ddp quantiles  federated DP quantiles (flat / tree / Haar, DDG / cPBM)
  tff-ddp frequency  federated frequency estimation (TFFE, MFFE, baselines)
  tff-ddp superquantile  DP-Delta-FL / DP-FedAvg on the B.3 task, per round
  tff-ddp train      DP-FedAvg on EMNIST / Stack Overflow (DDG paper 6.2)

Every epsilon printed names the adversary it holds against. User errors
print one line and exit with status 2; every TFF worker a command started is
ended before it returns. `privacy` needs only the core; the other commands
run TFF and, without it, say so in one line.
"""

import contextlib
import io
import sys
from typing import Optional, Sequence, Tuple

from tff_ddp.cli import common  # sets TF_CPP_MIN_LOG_LEVEL first
from tff_ddp.cli import demo
from tff_ddp.cli import frequency
from tff_ddp.cli import privacy
from tff_ddp.cli import quantiles
from tff_ddp.cli import superquantile
from tff_ddp.cli import train
from tff_ddp.utils import requires

# The commands that need only the framework-free core (no TFF).
CORE_COMMANDS = ('privacy',)


def build_parser() -> common.Parser:
  parser = common.Parser(prog='tff-ddp', description=__doc__)
  subparsers = parser.add_subparsers(dest='command',
                                     required=True,
                                     parser_class=common.Parser)
  demo.add_parser(subparsers)
  privacy.add_parser(subparsers)
  quantiles.add_parser(subparsers)
  frequency.add_parser(subparsers)
  superquantile.add_parser(subparsers)
  train.add_parser(subparsers)
  return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Parses `argv` (default: sys.argv[1:]) and runs the command."""
  args = build_parser().parse_args(argv)

  def body():
    if args.command not in CORE_COMMANDS:
      requires.require_tff(f'tff-ddp {args.command}')
    return args.body(args)

  return common.run(args.command, body)


def run_captured(argv: Sequence[str]) -> Tuple[int, str, str]:
  """Runs `tff-ddp argv` in this process: (exit status, stdout, stderr).

  What a notebook or a script calls to run a command and read its report;
  argparse's exits (`--help`, usage errors) come back as their status.
  """
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
      code = main(list(argv))
    except SystemExit as e:
      code = e.code
  return code, out.getvalue(), err.getvalue()


def console_main():
  """Entry point of the `tff-ddp` script: exits with main's status."""
  sys.exit(main())
