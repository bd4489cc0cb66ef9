"""Builds the Python package mmgpt: python/mmgpt, and its native module
mmgpt._mmgpt compiled with CMake (python/CMakeLists.txt) against the
interpreter running this script. Offline, from the checkout root:

    pip install --no-build-isolation .      # into Debian's python3, or a venv made with --system-site-packages
    pip wheel --no-build-isolation .        # a wheel

MMGPT_BUILD_JOBS sets the compile jobs (default: the CPUs this process may use).
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        package_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        build_dir = Path(self.build_temp).resolve() / "cmake"
        build_dir.mkdir(parents=True, exist_ok=True)
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.run(
            ["cmake", "-S", str(ROOT), "-B", str(build_dir), *generator, "-DCMAKE_BUILD_TYPE=Release",
             "-DMMGPT_PYTHON=ON", "-DMMGPT_BUILD_TESTS=OFF", "-DMMGPT_BUILD_BENCH=OFF",
             f"-DPython3_EXECUTABLE={sys.executable}", f"-DMMGPT_PYTHON_OUTPUT_DIR={package_dir}"],
            check=True)
        jobs = os.environ.get("MMGPT_BUILD_JOBS") or str(len(os.sched_getaffinity(0)))
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "_mmgpt", "-j", jobs], check=True)
        # The bundled GPT-2 vocabulary, for checkpoints that come without tokenizer files.
        data = package_dir / "data" / "gpt2"
        data.mkdir(parents=True, exist_ok=True)
        for name in ("encoder.json", "vocab.bpe"):
            shutil.copyfile(ROOT / "data" / "gpt2" / name, data / name)


setup(
    package_dir={"": "python"},
    packages=["mmgpt"],
    package_data={"mmgpt": ["py.typed", "*.pyi"]},
    ext_modules=[CMakeExtension("mmgpt._mmgpt")],
    cmdclass={"build_ext": CMakeBuild},
    # Out of the source tree when MMGPT_PY_BUILD_DIR says where (tests/python/run_tests.sh).
    options={"build": {"build_base": os.environ.get("MMGPT_PY_BUILD_DIR") or "build-python"}},
    zip_safe=False,
)
