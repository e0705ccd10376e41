"""The wheel's package list: tritonpkg's own packages, plus the checkout's top-level templates/ and backends/
installed as tritonpkg/templates and tritonpkg/backends, where `tritonpkg.paths` finds them once installed.
pyproject.toml's `packages.find` cannot place a folder from outside the package tree, so that one mapping is
made here; everything else about the build is in pyproject.toml and MANIFEST.in."""

from setuptools import find_namespace_packages, find_packages, setup

ASSETS = {"tritonpkg.templates": "templates", "tritonpkg.backends": "backends"}
"""Installed package -> folder of the checkout; MANIFEST.in grafts each folder, so every file in it ships."""


def asset_packages(package: str, folder: str) -> list[str]:
    return [package, *(f"{package}.{sub}" for sub in find_namespace_packages(folder, exclude=["*__pycache__*"]))]


setup(
    packages=[*find_packages(include=["tritonpkg", "tritonpkg.*"]),
              *(name for package, folder in ASSETS.items() for name in asset_packages(package, folder))],
    package_dir=ASSETS,
)
