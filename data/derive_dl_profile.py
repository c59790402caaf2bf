#!/usr/bin/env python3
"""Derives gpumux's deep-learning workload profiles.

Run:  python3 data/derive_dl_profile.py > data/dl_profile_iadeep5_assumed.json  (the first,
      assumed profile, embedded as iadeep5-assumed; the rest of this docstring describes it)
      python3 data/derive_dl_profile.py --out data/  (the IADeep-fitted belief and measured truth,
      the embedded defaults; see data/fit_interference.py)
      python3 data/derive_dl_profile.py --out data/   (the IADeep-fitted belief and measured
      truth: data/dl_profile_iadeep_fitted.json, data/dl_truth_iadeep_measured.json, and the
      fit report; see data/fit_interference.py, which reuses A1-A5 below with fitted busy
      fractions and its own memory table)

MEASURED inputs (IADeep's public repository, buzy-coder/IADeep,
iadeep-local-coordinator/csv/offline_info.csv; solo runs on an RTX 3090 by the IADeep authors):
  name, best batch size b0, epoch time (s) at b0, jct (s) to the target, samples per epoch.
  Two rows are placeholders in that table, not measurements: lstm's jct is alexnet's, and
  resnet50's epoch time and jct are resnet152's (data/README.md).
Everything else is DERIVED under the assumptions A1-A4 below; no co-located pair or triple was
measured (IADeep's repository publishes none and no GPU was available to us), so the profile
has no "measured" sets and the interference of every set comes from gpumux's busy-time
predictor (include/gpumux/policy/interference.h).

A1 solo step time at b0: t0 = epoch_time / ceil(samples / b0).
A2 target: target_epochs = jct / epoch_time (IADeep's jct at b0 over its epoch time).
A3 GPU busy fraction at b0 (u0), ASSUMED per class (no measurement available): convolutional
   networks with large batches keep the SMs busiest (resnet50 0.95, vgg16 0.90), squeezenet
   is smaller (0.60), the 2-layer LSTM and NeuMF spend more of each step on the host and in
   small kernels (0.55, 0.40).
   A step is a host phase h = (1 - u0) t0 (constant in b) plus a GPU phase g(b) = g0 + c b
   with g0 = 0.1 u0 t0 (fixed kernels) and c = 0.9 u0 t0 / b0, so t(b) = h + g0 + c b and
   busy(b) = g(b) / t(b).
A4 Statistical efficiency (Pollux): E(b) = (phi + b0) / (phi + b). phi is chosen so that solo
   goodput b / t(b) * E(b) peaks exactly at b0 (IADeep found b0 best): phi = c b0^2 / (h + g0).
A5 GPU memory, ASSUMED (IADeep's jobs request 3-7 GiB): m(b0) per class below, 40% fixed
   (weights, optimiser state, CUDA context) and 60% proportional to b.
Tabulated at b0 * {0.5, 1, 1.5, 2, 3}; the model is linear in b, so gpumux's linear
interpolation between the points reproduces it exactly.
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fit_interference as iadeep_fit  # noqa: E402  (beside this file)

MEASURED = [  # name, b0, epoch_time_s, jct_s, samples (offline_info.csv)
    ("vgg16", 512, 16.19, 259.08, 50000),
    ("resnet50", 1024, 16.54, 215.01, 50000),
    ("squeezenet", 512, 9.94, 357.81, 50000),
    ("neumf", 8192, 46.13, 507.47, 4972544),
    ("lstm", 256, 265.81, 2067.59, 37376),
]
BUSY = {"vgg16": 0.90, "resnet50": 0.95, "squeezenet": 0.60, "neumf": 0.40, "lstm": 0.55}
MEMORY_MIB = {"vgg16": 5120, "resnet50": 6144, "squeezenet": 3072, "neumf": 2560, "lstm": 3584}
FACTORS = [0.5, 1.0, 1.5, 2.0, 3.0]


def derive(name, b0, epoch_s, jct_s, samples, u0=None, m0=None, source=None):
    """One class's entry (A1-A5); u0 (busy at b0) and m0 (MiB at b0) default to the tables
    above."""
    t0 = epoch_s / math.ceil(samples / b0)
    u0 = BUSY[name] if u0 is None else u0
    h = (1 - u0) * t0
    g0 = 0.1 * u0 * t0
    c = 0.9 * u0 * t0 / b0
    phi = c * b0 * b0 / (h + g0)
    m0 = MEMORY_MIB[name] if m0 is None else m0
    solo = []
    for f in FACTORS:
        b = int(round(b0 * f))
        t = h + g0 + c * b
        solo.append({
            "batch": b,
            "step_s": round(t, 6),
            "memory_mib": int(math.ceil(0.4 * m0 + 0.6 * m0 * b / b0)),
            "gpu_busy": round((g0 + c * b) / t, 6),
        })
    return {
        "name": name,
        "default_batch": b0,
        "noise_scale": round(phi, 3),
        "dataset_samples": samples,
        "target_epochs": round(jct_s / epoch_s, 6),
        "solo": solo,
        "source": source or ("b0, epoch time, jct, samples: measured (IADeep offline_info.csv); "
                             "step times, busy fractions, memory, noise scale: derived (A1-A5 in "
                             "data/derive_dl_profile.py)"),
    }


def default_profile():
    return {
        "name": "iadeep-rtx3090-derived",
        "gpu": {"model": "NVIDIA GeForce RTX 3090", "memory_mib": 24576},
        "companion_overhead": 0.05,
        "provenance": ("Solo figures measured by the IADeep authors (offline_info.csv); "
                       "the rest derived by data/derive_dl_profile.py under stated "
                       "assumptions; companion_overhead 0.05 is assumed. No co-located "
                       "set has been measured."),
        "classes": [derive(*m) for m in MEASURED],
        "measured": [],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", metavar="DIR",
                        help="write the IADeep-fitted profile and the measured truth into DIR "
                             "(and print the fit report) instead of the default profile")
    args = parser.parse_args()
    if args.out is None:
        print(json.dumps(default_profile(), indent=2))
        return
    fitted, truth, lines = iadeep_fit.profiles(derive)
    for name, doc in ((iadeep_fit.FITTED_FILE, fitted), (iadeep_fit.TRUTH_FILE, truth)):
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            f.write(json.dumps(doc, indent=2) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
