#!/usr/bin/env python3
"""Failed pods by kind before given points of arrived GPU demand, from `gpumux simulate
--placements` files (one policy and one seed each), averaged over the files of each policy.

  scripts/failures-by-kind.py --pods data/openb_pod_list_default.csv \
      --nodes data/openb_node_list_gpu_node.csv fgd=p-fgd-42.csv,p-fgd-43.csv fgd-sat=...

Kinds: CPU-only, shares (one GPU, under 1000 milli; 810-milli ones apart), whole GPUs, and
multi-GPU pods by GPU count. Arrived % is rounded as the simulator rounds its curve's columns.
"""
import argparse
import collections
import csv
import sys

KINDS = ['cpu', 'share', 'share-810', 'whole']  # then the multi-GPU kinds the lists have


def kind(pod):
    gpus, milli = int(pod['num_gpu']), int(pod['gpu_milli'])
    if gpus == 0 or milli == 0:
        return 'cpu'
    if gpus > 1:
        return f'{gpus}-gpu'
    if milli == 1000:
        return 'whole'
    return 'share-810' if milli == 810 else 'share'


def failed_before(placements, pods, capacity, points):
    """Failed pods by kind in one `--placements` file, counted from the first arrival until
    arrived demand reaches each point (%): {point: Counter(kind -> pods)}."""
    failed = collections.defaultdict(collections.Counter)
    arrived = 0
    for row in csv.DictReader(open(placements)):
        pod = pods[row['source_pod']]
        arrived += int(pod['num_gpu']) * int(pod['gpu_milli'])
        pct = round(arrived / capacity * 100)
        if row['node'] == '':
            for p in points:
                if pct <= p:
                    failed[p][kind(pod)] += 1
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--pods', required=True)
    ap.add_argument('--nodes', required=True)
    ap.add_argument('--at', default='90,95,100,130', help='arrived demand points, %%')
    ap.add_argument('runs', nargs='+', help='POLICY=FILE,FILE,...')
    a = ap.parse_args()
    capacity = sum(int(n['gpu']) for n in csv.DictReader(open(a.nodes))) * 1000
    pods = {p['name']: p for p in csv.DictReader(open(a.pods))}
    points = [int(x) for x in a.at.split(',')]
    multi = sorted({int(p['num_gpu']) for p in pods.values() if int(p['num_gpu']) > 1})
    kinds = KINDS + [f'{g}-gpu' for g in multi]
    print('| policy | failed before | ' + ' | '.join(kinds) + ' |')
    print('|---|---|' + '---|' * len(kinds))
    for run in a.runs:
        policy, _, files = run.partition('=')
        files = files.split(',')
        failed = collections.defaultdict(collections.Counter)
        for f in files:
            for p, counts in failed_before(f, pods, capacity, points).items():
                failed[p].update(counts)
        for p in points:
            cells = [f'{failed[p][k] / len(files):.1f}' for k in kinds]
            print(f'| {policy} | {p} % | ' + ' | '.join(cells) + ' |')


if __name__ == '__main__':
    sys.exit(main())
