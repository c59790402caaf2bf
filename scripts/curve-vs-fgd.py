#!/usr/bin/env python3
"""Allocation at every 5 % step of arrived demand (50..130 %) minus FGD's, and failed pods by
kind before 95 % and 100 %, mean over seeds, on the default list (issue 32's bars).

  scripts/curve-vs-fgd.py GPUMUX SEEDS NAME=POLICY[:VAR=VALUE,...] ...
  scripts/curve-vs-fgd.py build/gpumux 42-51 sat=fgd-sat reserve=fgd-sat-reserve

VAR=VALUE pairs are set in the simulator's environment for that entry (development builds that
read switches from it). Placement files go to the current folder (pl-NAME-SEED.csv)."""
import importlib.util, json, os, subprocess, sys, csv, collections
G = sys.argv[1]
seeds = sys.argv[2]
variants = sys.argv[3:]  # NAME=policy[:ENV=VAL,...]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pods = {p['name']: p for p in csv.DictReader(open(os.path.join(ROOT, 'data/openb_pod_list_default.csv')))}
# The kinds of pods as scripts/failures-by-kind.py counts them.
_spec = importlib.util.spec_from_file_location(
    'failures_by_kind', os.path.join(ROOT, 'scripts', 'failures-by-kind.py'))
_fbk = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fbk)
failed_before = _fbk.failed_before
def run(policy, env, seed, pl):
    e = dict(os.environ, **env)
    out = subprocess.run([G, 'simulate', '--policy', policy, '--seeds', str(seed), '--no-report', '-q',
                          '--format', 'json', '--placements', pl], capture_output=True, text=True, env=e, check=True).stdout
    doc = json.loads(out)
    curve = doc['runs'][0]['alloc_curve']
    cap = doc['config']['cluster_gpus'] * 1000
    return curve, failed_before(pl, pods, cap, (95, 100))
lo, hi = map(int, seeds.split('-'))
res = {}
for v in ['fgd=fgd'] + variants:
    name, spec = v.split('=', 1)
    policy, _, envs = spec.partition(':')
    env = dict(kv.split('=') for kv in envs.split(',') if kv)
    curves, fl = [], collections.defaultdict(collections.Counter)
    for s in range(lo, hi + 1):
        c, f = run(policy, env, s, f'pl-{name}-{s}.csv')
        curves.append(c)
        for x in f: fl[x].update(f[x])
    n = hi - lo + 1
    mean = [sum(c[i] for c in curves) / n for i in range(131)]
    res[name] = (mean, {x: {k: v / n for k, v in fl[x].items()} for x in fl})
steps = list(range(50, 131, 5))
base = res['fgd'][0]
print('policy ' + ' '.join(f'@{x}' for x in steps))
for name, (mean, fl) in res.items():
    if name == 'fgd':
        print('fgd    ' + ' '.join(f'{mean[x]:.2f}' for x in steps))
    else:
        print(f'{name} ' + ' '.join(f'{mean[x]-base[x]:+.2f}' for x in steps) + f'  (@130 {mean[130]:.2f})')
for name, (mean, fl) in res.items():
    for x in (95, 100):
        print(f'  {name} fails<= {x}%: ' + ', '.join(f'{k} {v:.1f}' for k, v in sorted(fl.get(x, {}).items())))
