"""What the install tests share: arguments, checks, running a command.

Each test is run by ctest as
    /usr/bin/python3 test_X.py --build DIR --source DIR --workdir DIR [--cxx COMPILER]
and ends with the line 'N passed, M failed' (exit status 1 on any failure).
"""
import argparse
import os
import shutil
import subprocess
import sys

parser = argparse.ArgumentParser()
parser.add_argument('--build', required=True, help='the build tree')
parser.add_argument('--source', required=True, help='the source tree')
parser.add_argument('--workdir', required=True, help='emptied, then holds everything the test writes')
parser.add_argument('--cxx', help='the C++ compiler of the build tree')
args = parser.parse_args()
W = args.workdir
shutil.rmtree(W, ignore_errors=True)
os.makedirs(W)
counts = {'passed': 0, 'failed': 0}


def check(name, ok, detail=''):
    counts['passed' if ok else 'failed'] += 1
    print(f'[PASS] {name}' if ok else f'[FAIL] {name}: {detail}')
    return ok


def run(argv, env=None, timeout=600):
    """(exit status, stdout, stderr); env: variables set on top of this process's."""
    p = subprocess.run(argv, capture_output=True, timeout=timeout, env=None if env is None else {**os.environ, **env})
    return p.returncode, p.stdout.decode('utf-8', 'replace'), p.stderr.decode('utf-8', 'replace')


def finish():
    print(f"{counts['passed']} passed, {counts['failed']} failed")
    sys.exit(1 if counts['failed'] else 0)
