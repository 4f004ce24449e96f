// A test hook for crash-consistency tests. When the environment variable NORMLAB_CRASH_AT is
// "NAME" or "NAME:K", the process kills itself with SIGKILL the first (the K-th) time it reaches
// crash_point("NAME"), so a test can stop a writer at an exact point of a multi-step write (see
// tests/train/crash_test.cpp). Without the variable it does nothing.
#pragma once

namespace normlab {

void crash_point(const char* name);

}  // namespace normlab
