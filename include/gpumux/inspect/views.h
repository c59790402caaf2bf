// What `kubectl gpumux` (`gpumux inspect`) shows, built from one snapshot of the API server's
// nodes and pods. Pure functions: no I/O; the command fetches the snapshot and renders.
//
// The views judge nothing themselves: `nodes` and `why` replay the snapshot into the extender's
// own sched::ClusterState (the ledger rebuilt from the pods' gpumux.io/grant annotations, the
// nodes' gpumux.io/gpus inventories), so "free" and the reasons a pod does not fit are the
// extender's, word for word, without the extender having to be reachable.
//
//   nodes  one row per GPU: model, memory and compute granted of total, health, tenants (of
//          every namespace: a node is cluster-wide)
//   pods   one row per container holding (or waiting for) gpumux resources: node, GPUs, share
//   why    one row per node: does the pending pod fit, and if not, the closest GPU and what it
//          lacks (core::ExplainMisfit through ClusterState::Evaluate)
//   top    one row per job the node coordinators report (node annotation gpumux.io/coordinator):
//          step time, samples/s, batch size, slowdown versus solo; a node without a report
//          shows its grants instead
//
// Every view is a Table: columns with a stable JSON key, rows of cells that carry both the text
// shown and a typed JSON value (so `-o json` prints values, not formatted strings), and notes
// (summary lines, problems found in the snapshot).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "gpumux/core/result.h"
#include "gpumux/kube/objects.h"
#include "gpumux/sched/cluster_state.h"

namespace gpumux::inspect {

enum class Style : std::uint8_t { kPlain, kGood, kWarn, kBad, kDim };

struct Cell {
  std::string text;      // as shown ("-" for nothing)
  nlohmann::json value;  // for -o json (null for nothing)
  Style style = Style::kPlain;
};

enum class Width : std::uint8_t { kNormal, kWideOnly };

struct Column {
  std::string header;  // "MEMORY"
  std::string key;     // "memory_mib"
  Width width = Width::kNormal;
};

struct Table {
  std::string kind;  // "nodes", "pods", "why", "top"
  std::vector<Column> columns;
  std::vector<std::vector<Cell>> rows;  // each row has one cell per column
  std::vector<std::string> notes;       // printed after the table
};

struct Snapshot {
  std::vector<nlohmann::json> nodes;  // node objects as the API server lists them
  std::vector<nlohmann::json> pods;   // pod objects (every namespace; the views filter)
  std::int64_t now = 0;               // unix seconds, for ages
};

struct ViewOptions {
  std::string ns;  // the namespace of pods, top and why; "" = every namespace
  // The extender's settings (policy and its context, profile, node defaults), as its flags
  // give them: `why` asks the same policy (a co-location policy may decline a node).
  // state.gpu_mem_unit_mib 0 = what the nodes publish (gpumux.io/gpu-mem-unit-mib, when they
  // agree), else kube::kDefaultGpuMemUnitMib.
  sched::ClusterStateOptions state;
};

// Error only for options the extender's state refuses (an unknown policy).
core::Result<Table> NodesView(const Snapshot& snapshot, const ViewOptions& options);
Table PodsView(const Snapshot& snapshot, const ViewOptions& options);
// `pod` is "NAME" (in options.ns) or "NAMESPACE/NAME". Error (kNotFound) when no such pod.
core::Result<Table> WhyView(const Snapshot& snapshot, const ViewOptions& options,
                            std::string_view pod);
Table TopView(const Snapshot& snapshot, const ViewOptions& options);

// Aligned columns separated by three spaces, as `kubectl get` prints them (wide columns only
// with `wide`), then the notes. ANSI colours by Style only with `colour`.
enum class Colour : std::uint8_t { kOff, kOn };
enum class Layout : std::uint8_t { kNormal, kWide };
std::string RenderText(const Table& table, Layout layout, Colour colour);
// {"kind": "gpumux.io/nodes", "items": [{key: value, ...}], "notes": [...]}: every column.
nlohmann::json RenderJson(const Table& table);

// "45s", "12m", "3h4m", "2d5h" as kubectl prints ages; "-" for a negative or zero start.
std::string Age(std::int64_t seconds);

}  // namespace gpumux::inspect
