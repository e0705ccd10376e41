"""A stand-in for backends/vllm/model.py: the same decoupled guard, no vLLM imports (keeps unit tests fast)."""
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        if not pb_utils.using_decoupled_model_transaction_policy(args["model_config"]):
            raise pb_utils.TritonModelException("the vllm backend needs decoupled: true")
