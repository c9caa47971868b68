import json, sys, shutil, tempfile, os
sys.path.insert(0, 'tests/golden')
from make_golden import commands
from typer.testing import CliRunner
from gpuledger.cli.main import app
ids = json.load(open('tests/golden/ids.json'))
d = tempfile.mkdtemp(); shutil.copy('tests/golden/store-v1.sqlite', d + '/s.sqlite')
os.environ['GPULEDGER_DB'] = f'sqlite:///{d}/s.sqlite'; os.environ['COLUMNS'] = '120'
names = sys.argv[1:]
for name, args in commands(ids).items():  # in capture order (cost saves evaluations)
    r = CliRunner().invoke(app, list(args))
    if name not in names: continue
    path = f'tests/golden/outputs/{name}.json'
    doc = json.load(open(path))
    doc['stdout'] = json.loads(r.stdout) if r.stdout.strip() else None
    doc['exit'] = r.exit_code
    open(path, 'w').write(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print('accepted', name)
