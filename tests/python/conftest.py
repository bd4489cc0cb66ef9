"""Fixtures of the Python package's tests (tests/python, run by run_tests.sh
under Debian's /usr/bin/python3 against the package pip installed):
MMGPT_CLI is the mmgpt binary of the same build, whose outputs the package
must equal. The data the tests read is the project's data/ folder."""
import os
import subprocess
from pathlib import Path

import pytest

import mmgpt

ROOT = Path(__file__).resolve().parents[2]


def cli_path():
    path = os.environ.get("MMGPT_CLI")
    if not path or not os.access(path, os.X_OK):
        pytest.fail(f"MMGPT_CLI must name the mmgpt binary (got {path!r})")
    return path


@pytest.fixture(scope="session")
def cli():
    path = cli_path()

    def run(*args, check=True):
        p = subprocess.run([path, *map(str, args)], capture_output=True, timeout=300)
        if check and p.returncode != 0:
            raise AssertionError(f"mmgpt {' '.join(map(str, args))}: exit {p.returncode}: {p.stderr.decode()}")
        return p

    return run


@pytest.fixture(scope="session")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("mmgpt")


@pytest.fixture(scope="session")
def demo(work):
    """The bundled demo model (character level, Shakespeare), converted by the package."""
    out = work / "demo.mmgpt"
    mmgpt.convert(ROOT / "models" / "demo" / "ckpt.pt", out)
    return out


@pytest.fixture(scope="session")
def lm(demo):
    return mmgpt.load(demo)


@pytest.fixture(scope="session")
def data():
    """The project's data folder (tinyshakespeare, the GPT-2 vocabulary, tiny-gpt2-hf)."""
    return ROOT / "data"


@pytest.fixture(scope="session")
def gpt2(data, work):
    """A GPT-2 BPE model: the tiny Hugging Face GPT-2 (random weights) in data/models."""
    out = work / "tiny-gpt2.mmgpt"
    mmgpt.convert(data / "models" / "tiny-gpt2-hf", out)
    return mmgpt.load(out)
