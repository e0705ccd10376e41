"""Errors of the engine core. The core runs where tritonpkg is not importable (inside Triton's stub),
so it has its own exception; its message already says which input, what was found and what to do."""


class EmbeddingInputError(ValueError):
    """A request the engine cannot serve as asked (too long with truncation off, bad dimensions, ...)."""

    def __init__(self, message: str, *, field: str | None = None, expected: str | None = None) -> None:
        self.message = message
        self.field = field
        self.expected = expected
        text = f"{field}: {message}" if field else message
        if expected:
            text += f" (expected {expected})"
        super().__init__(text)
