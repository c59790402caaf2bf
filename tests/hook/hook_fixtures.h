// Reservation builders shared by the hook tests.
#pragma once

#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "gpumux/hook/reservations.h"

namespace gpumux::hook::testing_fixtures {

// A running reservation since 2024-05-01T10:00:00Z, kept by `holder`.
inline Reservation Held(const std::string& container, std::vector<int> gpus, ProcessRef holder) {
  Reservation r;
  r.container = container;
  r.gpus = std::move(gpus);
  r.since = "2024-05-01T10:00:00Z";
  r.since_unix = 1714557600;
  r.state = "running";
  r.holder = holder;
  return r;
}

// Appends Held(container, gpus, <this test process>) to the ledger in `state_dir`.
inline void HoldForThisProcess(const std::string& state_dir, const std::string& container,
                               std::vector<int> gpus) {
  auto updated = ReservationStore(state_dir).Update([&](ReservationFile& f) -> core::Result<bool> {
    f.reservations.push_back(Held(container, gpus, CurrentProcess(::getpid())));
    return true;
  });
  ASSERT_TRUE(updated.has_value()) << updated.error().message;
}

}  // namespace gpumux::hook::testing_fixtures
