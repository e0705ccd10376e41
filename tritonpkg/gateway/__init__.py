"""The embedding gateway: tokenize once in front of Triton, split a client batch into chunks that fit
the model's token budget, send them concurrently over Triton gRPC (streaming, as the models are
decoupled) to every replica, reassemble in order, and refuse work beyond a bound on in-flight tokens."""

from tritonpkg.gateway.admission import GatewayOverloaded, TokenAdmission
from tritonpkg.gateway.chunking import plan_chunks
from tritonpkg.gateway.client import EmbeddingGateway, Embeddings, Scores

__all__ = ["EmbeddingGateway", "Embeddings", "GatewayOverloaded", "Scores", "TokenAdmission", "plan_chunks"]
