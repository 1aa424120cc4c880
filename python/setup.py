"""Builds jitccl's C library into the package: `pip install ./python` runs
`cargo build --release -p jitccl-capi` in the repository (Rust is needed, as for the rest
of jitccl) and ships target/release/libnccl.so as jitccl/lib/libnccl.so.2. With
JITCCL_NCCL_SO set to a built library, that one is shipped instead and nothing is built.

The wheel holds no Python extension, only the library it loads with ctypes: it is tagged
py3-none-<platform>, one wheel for every CPython 3.9 and newer."""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from wheel.bdist_wheel import bdist_wheel

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


class PlatformWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        return "py3", "none", super().get_tag()[2]


setup(cmdclass={"build_py": BuildWithLibrary, "bdist_wheel": PlatformWheel})
