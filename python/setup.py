"""Builds jitccl's C library into the package: `pip install ./python` runs
`cargo build --release -p jitccl-capi` in the repository (Rust is needed, as for the rest
of jitccl) and ships target/release/libnccl.so as jitccl/lib/libnccl.so.2. With
JITCCL_NCCL_SO set to a built library, that one is shipped instead and nothing is built.

The wheel holds no Python extension, only the library it loads with ctypes: it is tagged
py3-none-<platform>, one wheel for every CPython 3.9 and newer. Built as `linux_x86_64`;
scripts/wheel.sh gives it the manylinux tag that auditwheel finds for the library."""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def library() -> Path:
    given = os.environ.get("JITCCL_NCCL_SO")
    if given:
        return Path(given)
    cargo = shutil.which("cargo")
    if cargo is None:
        raise SystemExit("jitccl: building the library needs Rust's cargo (https://rustup.rs), "
                         "or JITCCL_NCCL_SO=<path to a built libnccl.so.2>")
    subprocess.run([cargo, "build", "--release", "-p", "jitccl-capi"], cwd=REPO, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return target / "release" / "libnccl.so"


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        dest = Path(self.build_lib) / "jitccl" / "lib"
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(library(), dest / "libnccl.so.2")


class WithLibrary(Distribution):
    """A platform package: the library goes to platlib (the wheel's root), where auditwheel
    looks for what it has to tag, not to purelib."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        return "py3", "none", super().get_tag()[2]


setup(distclass=WithLibrary, cmdclass={"build_py": BuildWithLibrary, "bdist_wheel": PlatformWheel})
