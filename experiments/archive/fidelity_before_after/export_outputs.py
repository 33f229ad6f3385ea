"""Export a finished run's outputs (new layout) for scoring with another miaudit version."""
import sys

import numpy as np

from miaudit import load_config
from miaudit.auditor import stages as pipeline
from miaudit.auditor.rundir import RunDir

cfg = load_config(sys.argv[1])
planned = pipeline.plan_audit(cfg)
logits = pipeline.load_all_outputs(RunDir(planned.run_dir), planned)
split = planned.plan.split
np.savez(sys.argv[2], logits=logits, labels=planned.pool.y.numpy(), keep=planned.plan.keep,
         audited=split.audited, population=split.population, queries=np.array(cfg.queries))
print(planned.run_dir)
