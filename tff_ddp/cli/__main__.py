"""`python -m tff_ddp.cli ...` runs the tff-ddp command."""

from tff_ddp.cli import console_main

if __name__ == '__main__':
  console_main()
