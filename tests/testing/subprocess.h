// Runs a piece of code in a forked child process with a time limit, so that a test can show
// that some call never returns (a hang is a finding, not a stuck test run).
#pragma once

#include <functional>

namespace gpumux::test {

// True when `fn` returned normally within `seconds` of wall time in a child process. A child
// that is killed (the alarm, an abort, running out of memory) gives false. Outside sanitizer
// builds the child's address space is capped at `max_mib`, so a runaway allocation ends quickly.
// Call only from a single-threaded test.
bool FinishesInChild(const std::function<void()>& fn, unsigned seconds, long max_mib = 1024);

// True in a build with AddressSanitizer: it keeps freed memory in quarantine (up to 256 MB) and
// reserves terabytes of address space, so a test of memory use measures ASan, not the code.
bool AddressSanitized();

}  // namespace gpumux::test
