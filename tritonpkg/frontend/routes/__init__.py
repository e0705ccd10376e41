"""The frontend's routes, one router per endpoint family: models, health, generation (completions, chat),
vectors (embeddings, rerank). State comes from the app (common.backend_of / catalog_of / settings_of)."""
