"""Score exported outputs with the OLD miaudit definitions (run with PYTHONPATH=/tmp/old/src).
The old code knows no population set: it gets the audited columns only (its RMIA z and
Attack-P population were the target's own non-members)."""
import json
import sys

import numpy as np

from miaudit import ATTACKS
from miaudit.attacks import AttackInput
from miaudit.config import attack_label
from miaudit.stats import metrics

data = np.load(sys.argv[1])
audited = data["audited"]
inp = AttackInput(logits=data["logits"][:, audited], labels=data["labels"][audited],
                  keep=data["keep"][:, audited], query_names=[str(q) for q in data["queries"]])
out = {}
for spec in ["loss", "song_mittal:signal=mentr", "watson", "shokri", "attack_p", "attack_r",
             "rmia_simple", "rmia", "lira", "lira:offline=true,fixed_variance=true"]:
    label, name, options = attack_label(spec)
    attack = ATTACKS.build(name, **options)
    M = inp.keep.shape[0]
    scores = np.stack([attack.score(inp, t, np.array([m for m in range(M) if m != t]))
                       for t in range(M)])
    members = inp.keep
    s = metrics.summarize(scores.ravel(), members.ravel())
    out[label] = {k: s[k] for k in ("auc", "tpr@0.1%", "tpr@1%", "tpr@0.1%_ci")}
    print(label, out[label], flush=True)
json.dump(out, open(sys.argv[2], "w"), indent=1)
