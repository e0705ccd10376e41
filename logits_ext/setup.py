"""Builds the C++ core (tritonpkg_logits._core); metadata lives in pyproject.toml."""

from pybind11.setup_helpers import Pybind11Extension, build_ext, has_flag
from setuptools import setup


class BuildExt(build_ext):
    """Adds OpenMP where the compiler has it: rows are then masked on the process's OpenMP team
    (torch's), otherwise on the calling thread."""

    def build_extensions(self):
        if has_flag(self.compiler, "-fopenmp"):
            for ext in self.extensions:
                ext.extra_compile_args.append("-fopenmp")
                ext.extra_link_args.append("-fopenmp")
        super().build_extensions()


setup(
    ext_modules=[
        Pybind11Extension(
            "tritonpkg_logits._core",
            ["src/engine.cpp"],
            cxx_std=17,
            extra_compile_args=["-O3"],
        )
    ],
    cmdclass={"build_ext": BuildExt},
)
