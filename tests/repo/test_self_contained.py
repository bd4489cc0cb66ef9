#!/usr/bin/python3
"""The test suite reads nothing outside the project's tree.

A user's clone has only the project, so every file a test reads must be in
the tree (data/, models/, tests/) or made by the test. Two checks:

- the configured tests: every absolute path in the build tree's
  CTestTestfile.cmake files (each test's command, arguments, working
  directory and environment) lies in the source tree, the build tree, or a
  system directory (/usr, /bin, /lib, /etc, /tmp, /dev, /proc);
- the sources of the tests, the scripts and the benchmarks name no place
  outside the tree: no `../shared` or `shared/data`, no `/work/`, no
  `MMGPT_SHARED`, no path joined from '..' and 'shared'.

scripts/test.sh also runs the whole suite with a `../shared` beside the
checkout hidden, where the machine allows it (docs/install.md).

Run by ctest as: /usr/bin/python3 test_self_contained.py --source DIR --build DIR
"""
import argparse
import os
import re
import sys

parser = argparse.ArgumentParser()
parser.add_argument('--source', required=True)
parser.add_argument('--build', required=True)
args = parser.parse_args()
SOURCE = os.path.realpath(args.source)
BUILD = os.path.realpath(args.build)
SYSTEM = ('/usr/', '/bin/', '/lib/', '/lib64/', '/etc/', '/tmp/', '/dev/', '/proc/')
failures = {'configured tests': 0, 'sources': 0}


def fail(check, msg):
    failures[check] += 1
    print(f'[FAIL] {msg}', flush=True)


def inside(path):
    p = os.path.realpath(path)
    return any(p == root or p.startswith(root + '/') for root in (SOURCE, BUILD)) or p.startswith(SYSTEM)


# --- the configured tests
ABS_PATH = re.compile(r'(?<![\w.$])(/[A-Za-z0-9_.+@-][^\s"\';=]*)')
testfiles = []
for root, dirs, files in os.walk(BUILD):
    dirs[:] = [d for d in dirs if d not in ('Testing', 'CMakeFiles', 'node_modules')]
    if 'CTestTestfile.cmake' in files:
        testfiles.append(os.path.join(root, 'CTestTestfile.cmake'))
paths = 0
for tf in testfiles:
    for n, line in enumerate(open(tf, encoding='utf-8', errors='replace'), 1):
        if not line.startswith(('add_test', 'set_tests_properties')):
            continue
        for m in ABS_PATH.finditer(line):
            paths += 1
            if not inside(m.group(1)):
                fail('configured tests', f'{tf}:{n}: a test names {m.group(1)}, outside the source and build trees')
if not testfiles or paths == 0:
    fail('configured tests', f'no configured tests found under {BUILD}: this check read nothing')
print(f'configured tests: {paths} paths in {len(testfiles)} CTestTestfile.cmake files', flush=True)

# --- the sources
OUTSIDE = re.compile(r"""\.\./shared|shared/data|/work/|MMGPT_SHARED|['"]\.\.['"]\s*,\s*['"]shared['"]"""
                     r"""|parent\s*/\s*['"]shared['"]""")
SCANNED = ('tests', 'scripts', 'bench', 'tools', 'python', 'cmake', '.ci')
SUFFIXES = ('.py', '.sh', '.cpp', '.hpp', '.js', '.mjs', '.txt', '.cmake', '.toml', '')
me = os.path.realpath(__file__)
# scripts/test.sh names ../shared only to hide it for the run (a private mount
# namespace); it may name nothing else outside the tree.
HIDER = os.path.join('scripts', 'test.sh')
files = [os.path.join(SOURCE, 'CMakeLists.txt'), os.path.join(SOURCE, 'setup.py')]
for top in SCANNED:
    for root, dirs, names in os.walk(os.path.join(SOURCE, top)):
        dirs[:] = [d for d in dirs if d not in ('node_modules', '__pycache__', 'regressions', 'corpus')]
        files += [os.path.join(root, f) for f in names if os.path.splitext(f)[1] in SUFFIXES]
scanned = 0
for path in files:
    if os.path.realpath(path) == me or not os.path.isfile(path):
        continue
    try:
        text = open(path, encoding='utf-8').read()
    except UnicodeDecodeError:
        continue
    scanned += 1
    for n, line in enumerate(text.splitlines(), 1):
        m = OUTSIDE.search(line)
        if m and os.path.relpath(path, SOURCE) == HIDER and m.group(0) == '../shared' \
                and not OUTSIDE.search(line.replace('../shared', '')):
            continue
        if m:
            fail('sources', f'{os.path.relpath(path, SOURCE)}:{n}: names a place outside the tree ({m.group(0)!r}): {line.strip()}')
if scanned < 50:
    fail('sources', f'only {scanned} source files scanned under {SOURCE}: this check read too little')
print(f'sources: {scanned} files scanned', flush=True)

bad = sum(1 for n in failures.values() if n)
print(f'{len(failures) - bad} passed, {bad} failed')
sys.exit(1 if bad else 0)
