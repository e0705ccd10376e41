"""The least a Triton Python-backend model can do to stream tokens: no vLLM, no tritonpkg backend.

A decoupled model with the generate I/O of tritonpkg's vLLM backend (`text_input`, `stream`,
`sampling_parameters` with `max_tokens`, `return_num_output_tokens` -> `text_output`, `num_output_tokens`).
One thread steps every TRITONPKG_BENCH_STEP_S seconds, as an engine does, and sends each live request one
response holding one token's text; the last one carries the final flag. bench/response_floor.py measures
with it what the Python-backend stub and tritonserver cost per streamed response when the model costs next
to nothing."""

import json
import os
import threading

import numpy as np
import triton_python_backend_utils as pb_utils

WORD = b" token"


class TritonPythonModel:
    def initialize(self, args):
        self.pace = float(os.environ.get("TRITONPKG_BENCH_STEP_S", "0.01") or 0.01)
        self.live = []  # [sender, tokens left, return_num_output_tokens]
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="floor-steps", daemon=True)
        self.thread.start()

    def execute(self, requests):
        for request in requests:
            params = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
            raw = params.as_numpy().reshape(-1)[0] if params is not None else b"{}"
            tokens = int(json.loads(raw.decode() if isinstance(raw, bytes) else raw).get("max_tokens", 16))
            flag = pb_utils.get_input_tensor_by_name(request, "return_num_output_tokens")
            count = bool(flag.as_numpy().reshape(-1)[0]) if flag is not None else False
            with self.lock:
                self.live.append([request.get_response_sender(), max(1, tokens), count])

    def _run(self):
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        while not self.stop.wait(self.pace):
            with self.lock:
                step, self.live = self.live, []
            keep = []
            for entry in step:
                sender, left, count = entry
                tensors = [pb_utils.Tensor("text_output", np.asarray([WORD], dtype=np.object_))]
                if count:
                    tensors.append(pb_utils.Tensor("num_output_tokens", np.asarray([1], dtype=np.uint32)))
                entry[1] = left = left - 1
                sender.send(pb_utils.InferenceResponse(output_tensors=tensors), flags=final if left == 0 else 0)
                if left:
                    keep.append(entry)
            with self.lock:
                self.live = keep + self.live

    def finalize(self):
        self.stop.set()
        self.thread.join(timeout=5)
