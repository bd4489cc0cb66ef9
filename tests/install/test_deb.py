"""The Debian package: `cpack -G DEB` from the build tree, installed with dpkg
into a private root (its own dpkg database, so the machine's is untouched),
then its mmgpt run from there. Its declared dependencies must be satisfied by
the packages installed on this machine, so `dpkg -i` would succeed here.

Run by ctest through harness.py's arguments.
"""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import W, args, check, finish, run  # noqa: E402

rc, out, err = run(['cpack', '--config', os.path.join(args.build, 'CPackConfig.cmake'), '-G', 'DEB', '-B', W])
debs = glob.glob(os.path.join(W, 'mmgpt_*.deb'))
if not check('cpack -G DEB makes one package', rc == 0 and len(debs) == 1, (out + err)[-3000:]):
    finish()
deb = debs[0]

# Its dependencies, each satisfied by what this machine has installed.
rc, depends, err = run(['dpkg-deb', '-f', deb, 'Depends'])
check('the package declares its library dependencies', rc == 0 and 'libtbb' in depends and 'libicu' in depends,
      f'{depends!r} {err!r}')
unmet = []
for entry in filter(None, (e.strip() for e in depends.split(','))):
    ok = False
    for alt in entry.split('|'):
        m = re.fullmatch(r'\s*([^\s(]+)\s*(?:\(\s*([<>=]+)\s*([^)\s]+)\s*\))?\s*', alt)
        if not m:
            continue
        name, op, version = m.groups()
        # One line per installed architecture of a multi-arch package.
        q = run(['dpkg-query', '-W', '--showformat=${Status}\t${Version}\n', name])
        installed = [line.split('\t')[1] for line in q[1].splitlines() if line.startswith('install ok installed\t')]
        if q[0] != 0 or not installed:
            continue
        have = installed[0]
        ok = op is None or run(['dpkg', '--compare-versions', have, {'>=': 'ge', '<=': 'le', '>>': 'gt', '<<': 'lt',
                                                                     '=': 'eq'}[op], version])[0] == 0
        if ok:
            break
    if not ok:
        unmet.append(entry)
check('every dependency is satisfied on this machine', not unmet, str(unmet))

# dpkg -i into a private root with an empty database (the dependencies
# checked above are not in it, hence --force-depends).
root = os.path.join(W, 'root')
for d in ('var/lib/dpkg/updates', 'var/lib/dpkg/info'):
    os.makedirs(os.path.join(root, d))
open(os.path.join(root, 'var/lib/dpkg/status'), 'w').close()
rc, out, err = run(['dpkg', f'--root={root}', '--force-depends', '--force-not-root', '--force-script-chrootless', '-i',
                    deb])
check('dpkg installs the package', rc == 0, (out + err)[-3000:])
rc, out, err = run(['dpkg', f'--root={root}', '-s', 'mmgpt'])
check('dpkg lists it as installed', rc == 0 and 'Status: install ok installed' in out, out + err)
rc, out, err = run(['dpkg', f'--root={root}', '-L', 'mmgpt'])
files = set(out.split())
need = {'/usr/bin/mmgpt', '/usr/share/mmgpt/gpt2/encoder.json', '/usr/include/mmgpt/engine/mmgpt.hpp'}
check('it holds the binary, its data, the headers, the library and the package files',
      need <= files and any(f.endswith('/libmmgpt.a') for f in files) and
      any(f.endswith('/cmake/mmgpt/mmgptConfig.cmake') for f in files) and
      any(f.endswith('/pkgconfig/mmgpt.pc') for f in files), sorted(files))

mm = os.path.join(root, 'usr/bin/mmgpt')
rc, out, err = run([mm, '--version'])
rc2, want, _ = run([os.path.join(args.build, 'mmgpt'), '--version'])
check('the installed mmgpt --version runs and is the build tree\'s', rc == 0 and out == want and
      out.startswith('mmgpt '), f'{out!r} vs {want!r} {err!r}')
rc, out, err = run([mm, 'convert', os.path.join(args.source, 'models/demo/ckpt.pt'), '-o', os.path.join(W, 'd.mmgpt')])
check('the installed mmgpt converts the demo checkpoint', rc == 0, err)

finish()
