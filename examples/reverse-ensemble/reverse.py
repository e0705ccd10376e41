"""The ensemble's middle step: token ids in, the same ids reversed out (a stand-in for a real model
that works on ids, so the ensemble's wiring is visible in its output)."""

import numpy as np


def reverse_tokens(inputs):
    return {"OUTPUT_IDS": np.ascontiguousarray(inputs["INPUT_IDS"][::-1]).astype(np.int64)}
