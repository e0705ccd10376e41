"""tritonpkg: from weights to a version-pinned Triton model repository, validated and served."""

__version__ = "0.1.0"
