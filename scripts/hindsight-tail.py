#!/usr/bin/env python3
"""A packing that follows a policy online up to curve column C0 and places the later arrivals with
hindsight (largest first), checked against FGD's curve in the true arrival order.

  scripts/hindsight-tail.py GPUMUX REPLAY_DIR C0[,C0...] POLICY[,POLICY...] [WORKDIR]
  scripts/hindsight-tail.py build/gpumux ../shared/traces/alibaba-gpu-v2023/replay-fgd-default-seed42 95,100 fgd-sat-keep

The arrivals up to C0 keep their order (so the curve up to C0 is the policy's own); the rest are
sorted by GPU milli (total, then per GPU), largest first, and the same policy places them
(`gpumux simulate --replay` of the reordered arrival.csv). Every placement is permanent, so the
final packing is reachable in the true order: its curve is recomputed there, each column the mean
over its arrivals as the simulator computes it, and compared with FGD's on the same arrivals.
Default pod list only (the replay's pods)."""
import csv, json, os, shutil, subprocess, sys, tempfile

G, R = sys.argv[1], sys.argv[2]
c0s = [int(c) for c in sys.argv[3].split(',')]
policies = sys.argv[4].split(',')
work = sys.argv[5] if len(sys.argv) > 5 else tempfile.mkdtemp(prefix='hindsight-tail-')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pods = {p['name']: p for p in csv.DictReader(open(os.path.join(ROOT, 'data/openb_pod_list_default.csv')))}
gpus = sum(int(n['gpu']) for n in csv.DictReader(open(os.path.join(ROOT, 'data/openb_node_list_gpu_node.csv'))))
cap = gpus * 1000
rows = list(csv.DictReader(open(os.path.join(R, 'arrival.csv'))))


def milli(r):
    p = pods[r['source_pod']]
    return int(p['num_gpu']) * int(p['gpu_milli'])


def size_key(r):
    return (-milli(r), -int(pods[r['source_pod']]['gpu_milli']))


cols, arrived = [], 0
for r in rows:
    arrived += milli(r)
    cols.append(round(arrived / cap * 100))  # Python's round: half to even, as the simulator


def simulate(policy, replay, placements):
    out = subprocess.run([G, 'simulate', '--policy', policy, '--replay', replay, '--no-report', '-q',
                          '--format', 'json', '--placements', placements],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)['runs'][0]


def curve(placed):
    a, by_col = 0, {}
    for r, c in zip(rows, cols):
        if r['pod'] in placed:
            a += milli(r)
        by_col.setdefault(c, []).append(round(a / cap * 100, 2))
    return {c: round(sum(v) / len(v), 2) for c, v in by_col.items()}


fgd = simulate('fgd', R, os.path.join(work, 'fgd.csv'))['alloc_curve']
for policy in policies:
    online = simulate(policy, R, os.path.join(work, f'{policy}.csv'))['alloc_curve']
    for c0 in c0s:
        d = os.path.join(work, f'{policy}-{c0}')
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(R, 'nodes.csv'), d)
        head = [r for r, c in zip(rows, cols) if c <= c0]
        tail = sorted((r for r, c in zip(rows, cols) if c > c0), key=size_key)
        with open(os.path.join(d, 'arrival.csv'), 'w', newline='') as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            for i, r in enumerate(head + tail):
                w.writerow(dict(r, seq=i))
        simulate(policy, d, os.path.join(d, 'placements.csv'))
        placed = {r['pod'] for r in csv.DictReader(open(os.path.join(d, 'placements.csv'))) if r['node']}
        cv = curve(placed)
        below = [x for x in range(50, 131, 5) if cv[x] < fgd[x]]
        print(f'{policy}, hindsight after column {c0}: @95 {cv[95]:.2f} @100 {cv[100]:.2f} '
              f'@130 {cv[130]:.2f} (online {online[130]:.2f}, fgd {fgd[130]:.2f}); '
              f'below FGD at {below if below else "no column"}')
