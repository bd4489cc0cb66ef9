"""Fixtures of the Python package's tests (tests/python, run by run_tests.sh
under Debian's /usr/bin/python3 against the package pip installed):
MMGPT_CLI is the mmgpt binary of the same build, whose outputs the package
must equal; MMGPT_SHARED the shared data folder (../shared)."""
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
def shared():
    path = Path(os.environ.get("MMGPT_SHARED") or ROOT.parent / "shared")
    if not (path / "data" / "models" / "tiny-gpt2-hf").is_dir():
        pytest.fail(f"these tests need the shared data folder (../shared beside the checkout, or MMGPT_SHARED): "
                    f"{path}/data/models/tiny-gpt2-hf is missing")
    return path


@pytest.fixture(scope="session")
def gpt2(shared, work):
    """A GPT-2 BPE model: the tiny Hugging Face GPT-2 (random weights) from ../shared."""
    out = work / "tiny-gpt2.mmgpt"
    mmgpt.convert(shared / "data" / "models" / "tiny-gpt2-hf", out)
    return mmgpt.load(out)
