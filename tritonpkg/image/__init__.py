"""The toolkit image: NVIDIA's `<release>-vllm-python-py3` with the toolkit installed, its backend beside
NVIDIA's and `tritonpkg serve` as the entrypoint. One image per release, so the tag names both versions."""

from __future__ import annotations

from tritonpkg import __version__

IMAGE_NAME = "tritonpkg"


def default_tag(release: str) -> str:
    """The tag `tritonpkg image build --release R` gives its image (and Kubernetes' --toolkit-image default):
    the toolkit version and the Triton release, e.g. 'tritonpkg:0.1.0-26.07'."""
    from tritonpkg.compat import get_release

    return f"{IMAGE_NAME}:{__version__}-{get_release(release).release}"
