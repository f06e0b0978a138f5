"""`tff-ddp train`: the DDG paper's Section 6.2 on `tff_ddp.learning`.

Modules, imported by name: training (the run), paper_tasks (the tasks'
models, defaults, data), train_mechanisms (ddg / skellam / gaussian / none,
per-adversary ledger), databases (TFF's files: where, schema, check),
generated_databases (small ones in TFF's format, for tests and demos).
"""

from tff_ddp.utils import requires

requires.require_tff('tff_ddp.experiments')
