#!/usr/bin/env python3
"""How shares pair on GPUs in a run's placements, and what GPU-only replays of the same share
sequence use (docs/SIMULATOR.md, "fgd-sat-pair"; a development tool).

  scripts/pairing-replay.py PLACEMENTS.csv            # GPUs holding shares; replays
  scripts/pairing-replay.py PLACEMENTS.csv --counts   # "milli:count ..." for cutting-stock.cc

PLACEMENTS.csv is what `gpumux simulate --placements` writes on the default list (the embedded
data/openb_pod_list_default.csv). The replays place the run's placed shares, in their arrival
order, on GPUs alone (no nodes, no CPU): best fit, and least loss with the LP's prices for the
default list (include/gpumux/policy/share_pairing.h; best fit between equal losses)."""
import collections
import csv
import functools
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRICES = {50: 0, 110: 0, 140: 0, 160: 0, 220: 1 / 12, 230: 1 / 4, 270: 1 / 4, 290: 1 / 4,
          320: 1 / 3, 330: 1 / 3, 350: 1 / 3, 370: 1 / 3, 440: 1 / 3, 460: 1 / 2, 470: 1 / 2,
          480: 1 / 2, 550: 2 / 3, 590: 2 / 3, 650: 2 / 3, 810: 1}


@functools.lru_cache(None)
def value(free):
    return max([0.0] + [p + value(free - s) for s, p in PRICES.items() if s <= free])


def replay(seq, choose):
    gaps, used = collections.Counter(), 0
    for s in seq:
        f = choose(s, [g for g in gaps if g >= s and gaps[g] > 0] + [1000])
        if f == 1000:
            used += 1
        else:
            gaps[f] -= 1
        if f > s:
            gaps[f - s] += 1
    return used


def main():
    pods = {p['name']: p for p in csv.DictReader(open(os.path.join(ROOT, 'data/openb_pod_list_default.csv')))}
    seq, gpus = [], set()
    for row in csv.DictReader(open(sys.argv[1])):
        p = pods[row['source_pod']]
        if not row['node'] or row['gpu_index'] == '' or p['num_gpu'] != '1' or int(p['gpu_milli']) >= 1000:
            continue
        seq.append(int(p['gpu_milli']))
        gpus.add((row['node'], row['gpu_index']))
    counts = collections.Counter(seq)
    if '--counts' in sys.argv[2:]:
        print(' '.join(f'{k}:{v}' for k, v in sorted(counts.items())))
        return
    print(f'{len(seq)} shares ({sum(seq) / 1000:.2f} GPUs of compute) on {len(gpus)} GPUs in the run')
    print('GPU-only replay, best fit:', replay(seq, lambda s, c: min(c, key=lambda f: f - s)), 'GPUs')
    loss = lambda s, f: round(value(f) - value(s) - value(f - s), 9)
    print('GPU-only replay, least loss:', replay(seq, lambda s, c: min(c, key=lambda f: (loss(s, f), f - s))), 'GPUs')


if __name__ == '__main__':
    main()
