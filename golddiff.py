import json, sys, shutil, tempfile, os
sys.path.insert(0, 'tests/golden')
from make_golden import commands
from typer.testing import CliRunner
from gpuledger.cli.main import app
ids = json.load(open('tests/golden/ids.json'))
d = tempfile.mkdtemp(); shutil.copy('tests/golden/store-v1.sqlite', d + '/s.sqlite')
os.environ['GPULEDGER_DB'] = f'sqlite:///{d}/s.sqlite'; os.environ['COLUMNS'] = '120'
def walk(a, b, path, out):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k in ('generated_at',): continue
            if k not in a: out.append(f"{path}.{k}: (new) {json.dumps(b[k])[:150]}")
            elif k not in b: out.append(f"{path}.{k}: (gone) was {json.dumps(a[k])[:150]}")
            else: walk(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)): walk(x, y, f"{path}[{i}]", out)
    elif isinstance(a, float) and isinstance(b, float) and abs(a - b) <= 1e-12 * max(abs(a), abs(b)):
        pass
    elif a != b:
        out.append(f"{path}: {json.dumps(a)[:150]} -> {json.dumps(b)[:150]}")
only = sys.argv[1:] 
for name, args in commands(ids).items():
    if only and name not in only: continue
    want = json.load(open(f'tests/golden/outputs/{name}.json'))
    r = CliRunner().invoke(app, list(args))
    got = json.loads(r.stdout) if r.stdout.strip() else None
    w, g = want['stdout'], got
    if args[0] == 'report':
        w = {k: w[k] for k in ('title','runs','numbers')}; g = {k: g[k] for k in ('title','runs','numbers')}
    out = []; walk(w, g, '', out)
    if out or r.exit_code != want['exit']:
        print(f"== {name} (exit {want['exit']} -> {r.exit_code})"); [print('  ', o) for o in out[:40]]
