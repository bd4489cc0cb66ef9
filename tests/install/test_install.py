"""The installed package: `cmake --install` of the build tree into a fresh
prefix, then, as a program outside the tree would use it:
  - the installed mmgpt runs (--version, convert) and finds its bundled GPT-2
    tokenizer in PREFIX/share/mmgpt;
  - tools/example configures and builds in a separate tree with
    find_package(mmgpt) against the prefix, and runs;
  - the same program builds with `pkg-config --cflags --libs mmgpt`, and runs.
Both builds must print what the in-tree mmgpt_embed_example prints.

Run by ctest through harness.py's arguments.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import W, args, check, finish, run  # noqa: E402

prefix = os.path.join(W, 'prefix')
if not check('the build tree\'s C++ compiler is given (--cxx)', bool(args.cxx)):
    finish()

# --- install
rc, out, err = run(['cmake', '--install', args.build, '--prefix', prefix])
check('cmake --install succeeds', rc == 0, err[-2000:])
expected = ['bin/mmgpt', 'share/mmgpt/gpt2/encoder.json', 'share/mmgpt/gpt2/vocab.bpe', 'include/mmgpt/engine/mmgpt.hpp']
libdirs = [d for d in ('lib', 'lib64', 'lib/x86_64-linux-gnu', 'lib/aarch64-linux-gnu')
           if os.path.isfile(os.path.join(prefix, d, 'libmmgpt.a'))]
check('the library is installed', len(libdirs) == 1, str(libdirs))
if not libdirs:
    finish()
libdir = os.path.join(prefix, libdirs[0])
expected_paths = [os.path.join(prefix, p) for p in expected] + [
    os.path.join(libdir, 'cmake/mmgpt/mmgptConfig.cmake'), os.path.join(libdir, 'cmake/mmgpt/mmgptConfigVersion.cmake'),
    os.path.join(libdir, 'pkgconfig/mmgpt.pc')]
missing = [p for p in expected_paths if not os.path.isfile(p)]
check('binary, data, headers, CMake package and pkg-config file are installed', not missing, str(missing))

# --- the installed binary
mm = os.path.join(prefix, 'bin', 'mmgpt')
rc, installed_version, err = run([mm, '--version'])
rc2, tree_version, _ = run([os.path.join(args.build, 'mmgpt'), '--version'])
check('installed mmgpt --version is the build tree\'s', rc == 0 and rc2 == 0 and installed_version == tree_version,
      f'{installed_version!r} vs {tree_version!r} {err!r}')
demo = os.path.join(W, 'demo.mmgpt')
rc, out, err = run([mm, 'convert', os.path.join(args.source, 'models/demo/ckpt.pt'), '-o', demo])
check('installed mmgpt converts the demo checkpoint', rc == 0 and os.path.isfile(demo), err)

# A nanoGPT checkpoint with GPT-2's vocabulary and no tokenizer files beside
# it takes the bundled GPT-2 tokenizer: the installed one, from the prefix.
V, D, CTX = 50257, 8, 8
g = torch.Generator().manual_seed(0)
sd = {'transformer.wte.weight': torch.randn(V, D, generator=g) * 0.3,
      'transformer.wpe.weight': torch.randn(CTX, D, generator=g) * 0.3,
      'transformer.h.0.ln_1.weight': torch.ones(D), 'transformer.h.0.attn.c_attn.weight': torch.randn(3 * D, D, generator=g),
      'transformer.h.0.attn.c_proj.weight': torch.randn(D, D, generator=g), 'transformer.h.0.ln_2.weight': torch.ones(D),
      'transformer.h.0.mlp.c_fc.weight': torch.randn(4 * D, D, generator=g),
      'transformer.h.0.mlp.c_proj.weight': torch.randn(D, 4 * D, generator=g), 'transformer.ln_f.weight': torch.ones(D)}
sd['lm_head.weight'] = sd['transformer.wte.weight']
os.makedirs(os.path.join(W, 'gpt2ck'))
torch.save({'model': sd, 'model_args': dict(n_layer=1, n_head=1, n_embd=D, block_size=CTX, bias=False, vocab_size=V,
                                            dropout=0.0)}, os.path.join(W, 'gpt2ck', 'ckpt.pt'))
rc, out, err = run([mm, 'convert', os.path.join(W, 'gpt2ck', 'ckpt.pt'), '-o', os.path.join(W, 'gpt2.mmgpt')])
share = os.path.join(prefix, 'share', 'mmgpt', 'gpt2', 'encoder.json')
check('installed mmgpt takes the bundled GPT-2 tokenizer from PREFIX/share/mmgpt', rc == 0 and share in err, err)
rc, out, err = run([mm, 'tokenize', '-m', os.path.join(W, 'gpt2.mmgpt'), '-p', 'Hello world'])
check('... and tokenizes with it', rc == 0 and out.split() == ['15496', '995'], f'{out!r} {err!r}')

# --- a program built against the installed package
want_rc, want, _ = run([os.path.join(args.build, 'mmgpt_embed_example'), demo, 'ROMEO:', '80'])
check('the in-tree example runs', want_rc == 0 and 'stopped by the callback' in want, want)

exbuild = os.path.join(W, 'example-build')
rc, out, err = run(['cmake', '-S', os.path.join(args.source, 'tools/example'), '-B', exbuild,
                    f'-DCMAKE_PREFIX_PATH={prefix}', f'-DCMAKE_CXX_COMPILER={args.cxx}', '-DCMAKE_BUILD_TYPE=Release'])
check('tools/example configures with find_package(mmgpt) against the prefix', rc == 0, (out + err)[-3000:])
rc, out, err = run(['cmake', '--build', exbuild])
check('... and builds', rc == 0, (out + err)[-3000:])
exe = os.path.join(exbuild, 'mmgpt_embed_example')
rc, out, err = run([exe, demo, 'ROMEO:', '80']) if os.path.isfile(exe) else (-1, '', 'not built')
check('... and runs, printing what the in-tree example prints', rc == 0 and out == want, f'{out!r} vs {want!r} {err!r}')

pc_env = {'PKG_CONFIG_PATH': os.path.join(libdir, 'pkgconfig')}
rc, flags, err = run(['pkg-config', '--cflags', '--libs', 'mmgpt'], env=pc_env)
check('pkg-config knows mmgpt', rc == 0 and '-lmmgpt' in flags, f'{flags!r} {err!r}')
pc_exe = os.path.join(W, 'pc_example')
rc, out, err = run([args.cxx, '-O2', os.path.join(args.source, 'tools/example/embed_example.cpp'), '-o', pc_exe,
                    *flags.split()])
check('the example builds with pkg-config\'s flags', rc == 0, (out + err)[-3000:])
rc, out, err = run([pc_exe, demo, 'ROMEO:', '80']) if os.path.isfile(pc_exe) else (-1, '', 'not built')
check('... and runs, printing what the in-tree example prints', rc == 0 and out == want, f'{out!r} vs {want!r} {err!r}')

finish()
