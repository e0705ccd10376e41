"""Hooks for the `custom` template: text -> bag of words -> linear lexicon score -> label.

They run inside Triton's Python backend; inputs and outputs are dicts of numpy arrays keyed by the
tensor names of tritonpkg.yaml."""

import json
import os
import re

import numpy as np

WORD = re.compile(r"[a-z']+")


def preprocess(inputs):
    texts = [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in inputs["TEXT"].reshape(-1)]
    return {"words": [WORD.findall(t.lower()) for t in texts]}


def load_model(context):
    with open(os.path.join(context["model_dir"], "lexicon.json")) as f:
        lexicon = json.load(f)
    weights, bias = lexicon["weights"], float(lexicon["bias"])

    def model(batch):
        scores = [bias + sum(weights.get(w, 0.0) for w in words) for words in batch["words"]]
        return {"score": np.asarray(scores, dtype=np.float32)}

    return model


def postprocess(outputs):
    score = outputs["score"]
    probability = 1.0 / (1.0 + np.exp(-score))
    labels = np.array([b"positive" if s > 0 else b"negative" if s < 0 else b"neutral" for s in score],
                      dtype=np.object_)
    return {"LABEL": labels, "SCORE": probability.astype(np.float32)}
