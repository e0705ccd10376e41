"""examples/mock-tool-llm's answers, streamed as the vLLM backend streams them: a decoupled Python-backend
model that sends the text one token at a time (the mock's tokenizer.json splits it; one response per token,
finish_reason on the last), so the OpenAI frontend's parsers see a tool call arrive piece by piece, marker
tokens such as `<tool_call>` whole, as vLLM's detokenizer sends them. Without `stream` it sends the whole
text in one response. Test-only: tests/support/mock_stream.py puts it in a repository."""

import importlib.util
import inspect
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        path = os.path.join(args["model_repository"], args["model_version"], "mock_llm.py")  # the answers
        spec = importlib.util.spec_from_file_location("mock_llm", path)
        self.mock = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.mock)
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(os.path.join(args["model_repository"], args["model_version"],
                                                          "tokenizer.json"))

    def tokens(self, text):
        """The text cut where each of its tokens starts."""
        starts = [start for start, _ in self.tokenizer.encode(text, add_special_tokens=False).offsets]
        cuts = sorted({0, *starts})
        return [text[a:b] for a, b in zip(cuts, [*cuts[1:], len(text)], strict=True) if text[a:b]]

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)[0]
                stream = pb_utils.get_input_tensor_by_name(request, "stream")
                stream = bool(stream.as_numpy().reshape(-1)[0]) if stream is not None else False
                prompt = prompt.decode("utf-8") if isinstance(prompt, bytes) else str(prompt)
                params = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
                params = json.loads(params.as_numpy().reshape(-1)[0]) if params is not None else {}
                # answers that follow the request's constraint take its sampling parameters too
                takes_params = len(inspect.signature(self.mock.answer).parameters) > 1
                text = self.mock.answer(prompt, params) if takes_params else self.mock.answer(prompt)
                pieces = self.tokens(text) if stream else [text]
                for i, piece in enumerate(pieces):
                    last = i == len(pieces) - 1
                    sender.send(pb_utils.InferenceResponse(output_tensors=[
                        pb_utils.Tensor("text_output", np.array([piece.encode("utf-8")], dtype=object)),
                        pb_utils.Tensor("finish_reason", np.array([b"stop" if last else b""], dtype=object))]))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            except Exception as exc:  # one bad request must not end the others
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"{type(exc).__name__}: {exc}")),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
